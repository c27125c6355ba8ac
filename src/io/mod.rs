//! Files: NumPy `.npy`/`.npz` arrays, netcl's model files, parameter files and training checkpoints.

pub mod checkpoint;
pub mod model;
pub mod npz;

pub use checkpoint::{
    Checkpoint, load_checkpoint, load_params, read_checkpoint, save_checkpoint, save_params,
};
pub use model::{ModelBytes, load_model, model_to_bytes, save_model};
