//! Attention at every head dimension the issue names (D = 40, 64, 128, 256) and sequence lengths that are not
//! multiples of any tile (S = 1, 7, 33, 100), causal and not, every kernel layout, against the built-in device.
//! (The layouts at D = 64, decode, finite differences and errors are in tests/attention.rs.)

mod attention_support;
mod common;
mod opsutil;

use attention_support::check;
use netcl::ops::{self, AttnAlgo, DecodeAlgo};
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

/// Decode at head dimensions 40 and 256 in the vector layout (lanes dividing D) against the built-in device,
/// cache lengths not a multiple of the key block; a width that does not divide D is refused and says why.
#[test]
fn decode_lanes_at_other_head_dims() {
    let Some(dev) = opencl_device() else { return };
    for (d, w) in [(40usize, 8usize), (256, 16), (40, 4)] {
        let (b, h, cap) = (1, 3, 50);
        let (kc, kd) = opsutil::pair(&dev, &[b, h, cap, d], 70);
        let (vc, vd) = opsutil::pair(&dev, &[b, h, cap, d], 71);
        let (qc, qd) = opsutil::pair(&dev, &[b, h, 1, d], 72);
        for len in [1usize, 13, 50] {
            let want =
                attention_support::v(&ops::attention_decode(&qc, &kc, &vc, len, None).unwrap());
            for c in [1usize, 4] {
                if c > len {
                    continue;
                }
                let algo = Some(DecodeAlgo::Lanes(w, c));
                let got = ops::attention_decode_with(&qd, &kd, &vd, len, None, algo).unwrap();
                common::assert_close(
                    &attention_support::v(&got),
                    &want,
                    2e-5,
                    1e-4,
                    &format!("decode d {d} len {len} {algo:?}"),
                );
            }
        }
    }
    let (_, k) = opsutil::pair(&dev, &[1, 1, 8, 40], 73);
    let (_, q) = opsutil::pair(&dev, &[1, 1, 1, 40], 74);
    let e = ops::attention_decode_with(&q, &k, &k, 8, None, Some(DecodeAlgo::Lanes(16, 1)))
        .unwrap_err()
        .to_string();
    assert!(e.contains("does not fit") && e.contains("40"), "{e}");
}
