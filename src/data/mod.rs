//! Data: datasets held in memory, the real digits data set, and a batching loader with a prefetch thread.

mod digits;
mod loader;

pub use digits::Digits;
pub use loader::{Batch, BatchIter, DataLoader, Dataset, InMemory, Transform};
