//! The `netcl` command-line interface.
fn main() {}
