//! Files: NumPy `.npy`/`.npz` arrays (the container of netcl's model files and checkpoints).

pub mod npz;
