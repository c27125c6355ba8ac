//! Attention at every head dimension the issue names (D = 40, 64, 128, 256) and sequence lengths that are not
//! multiples of any tile (S = 1, 7, 33, 100), causal and not, both kernel layouts, against the built-in device.
//! (The layouts at D = 64, decode, finite differences and errors are in tests/attention.rs.)

mod attention_support;
mod common;
mod opsutil;

use attention_support::check;
use netcl::ops::AttnAlgo;
use opsutil::opencl_device;

#[test]
fn odd_shapes_and_head_dims_match_the_reference() {
    let Some(dev) = opencl_device() else { return };
    let cases: &[([usize; 4], AttnAlgo)] = &[
        ([1, 1, 1, 40], AttnAlgo::Tile(16, 16, 4)),
        ([1, 2, 7, 40], AttnAlgo::Tile(16, 16, 4)),
        ([1, 1, 100, 40], AttnAlgo::Tile(16, 16, 4)),
        ([1, 2, 33, 128], AttnAlgo::Rows(2)),
        ([1, 1, 100, 128], AttnAlgo::Rows(2)),
        ([1, 1, 7, 256], AttnAlgo::Tile(8, 16, 16)),
        ([1, 1, 33, 256], AttnAlgo::Tile(8, 16, 16)),
        ([1, 1, 100, 256], AttnAlgo::Rows(1)),
        ([1, 1, 1, 256], AttnAlgo::Rows(1)),
    ];
    for (i, &(shape, algo)) in cases.iter().enumerate() {
        for causal in [false, true] {
            check(&dev, shape, causal, None, Some(algo), 100 + i as u64);
        }
    }
}
