//! Attention at every head dimension the issue names (D = 40, 64, 128, 256) and sequence lengths that are not
//! multiples of any tile (S = 1, 7, 33, 100), causal and not, every kernel layout, against the built-in device.
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

/// The CPU lane layouts (the tuner's candidates on CPU devices, and a narrow one with an odd block) at every
/// head dimension, with sequence lengths below, across and not a multiple of their lanes and blocks.
#[test]
fn lane_layouts_match_the_reference_at_every_head_dim() {
    let Some(dev) = opencl_device() else { return };
    let layouts = [
        AttnAlgo::Lanes(16, 8),
        AttnAlgo::Lanes(16, 4),
        AttnAlgo::Lanes(8, 8),
        AttnAlgo::Lanes(4, 5),
    ];
    for (i, algo) in layouts.into_iter().enumerate() {
        for (j, d) in [40, 64, 128, 256].into_iter().enumerate() {
            for (k, s) in [1, 7, 33, 100].into_iter().enumerate() {
                let b = if s < 10 { 2 } else { 1 };
                for causal in [false, true] {
                    let seed = 200 + (i * 16 + j * 4 + k) as u64 * 4;
                    check(&dev, [b, 1, s, d], causal, None, Some(algo), seed);
                }
            }
        }
    }
}
