//! Files: NumPy `.npy`/`.npz` arrays, netcl's model files and training checkpoints.

pub mod model;
pub mod npz;

pub use model::{load_checkpoint, load_model, save_checkpoint, save_model};
