//! The register-blocked attention layout (`AttnAlgo::Block`), forward and backward, forced on an OpenCL device
//! and checked against the built-in device: sequence lengths that are not multiples of any tile (S = 1, 7, 33,
//! 100, 257), head dimensions 40, 64 and 128, causal and not, B·H > 1; the backward also from another layout's
//! forward and the other way round; and the errors of a layout that does not fit.
//!
//! Every run here is forced: the tuner offers the block layout to GPU devices only, so on a CPU OpenCL device
//! nothing else exercises it. A forced layout that does not fit is an error, never a silent fallback.
//!
//! Tolerances as `attention_support::check`: outputs and lse 2e-5 absolute + 1e-4 relative, gradients 1e-4 +
//! 1e-3 relative.

mod attention_support;
mod common;
mod opsutil;

use attention_support::v;
use common::{assert_close, is_nvidia_gpu};
use netcl::Device;
use netcl::ops::{self, AttnAlgo};
use opsutil::{opencl_device, pair};

/// The block layout whose backward fits the local memory of every device the tests run on.
const SMALL: AttnAlgo = AttnAlgo::Block(32, 32, 4, 4);

/// Forward of `shape` with `algo` forced on `dev` against the reference (output and lse), then the backward
/// with `algo` forced, from that forward, against the reference gradients.
fn check_block(dev: &Device, shape: [usize; 4], causal: bool, algo: AttnAlgo, seed: u64) {
    let (qc, qd) = pair(dev, &shape, seed);
    let (kc, kd) = pair(dev, &shape, seed + 1);
    let (vc, vd) = pair(dev, &shape, seed + 2);
    let what = format!("{shape:?} causal {causal} {algo:?}");
    let fc = ops::flash_attention(&qc, &kc, &vc, causal, None).unwrap();
    // A layout this device's local memory cannot hold (48 KiB on NVIDIA GPUs) is refused by name and never
    // offered by the tuner there; the device's own choice is checked in its place.
    let fd = match ops::flash_attention_with(&qd, &kd, &vd, causal, None, Some(algo)) {
        Ok(f) => f,
        Err(e) if e.to_string().contains("does not fit") => {
            ops::flash_attention_with(&qd, &kd, &vd, causal, None, None)
                .unwrap_or_else(|e| panic!("{what}, the device's own layout: {e}"))
        }
        Err(e) => panic!("{what}: {e}"),
    };
    assert_close(&v(&fd.out), &v(&fc.out), 2e-5, 1e-4, &format!("out {what}"));
    assert_close(&v(&fd.lse), &v(&fc.lse), 2e-5, 1e-4, &format!("lse {what}"));
    let (gc, gd) = pair(dev, &shape, seed + 3);
    let bc = ops::flash_attention_backward(&qc, &kc, &vc, &fc, &gc, causal, None).unwrap();
    // The backward holds twice the tiles of the forward: a layout whose backward does not fit this device's
    // local memory (48 KiB on NVIDIA GPUs) is refused there, and the forward's output is checked with the
    // 32 × 32 block backward, or, where that does not fit either (D = 128 on NVIDIA), the device's own choice.
    let backward = |layout: Option<AttnAlgo>| {
        ops::flash_attention_backward_with(&qd, &kd, &vd, &fd, &gd, causal, None, layout)
    };
    let fits = |e: &netcl::Error| e.to_string().contains("does not fit");
    let bd = match backward(Some(algo)) {
        Ok(b) => b,
        Err(e) if fits(&e) => match backward(Some(SMALL)) {
            Ok(b) => b,
            Err(e) if fits(&e) => backward(None)
                .unwrap_or_else(|e| panic!("backward {what}, the device's own layout: {e}")),
            Err(e) => panic!("backward {what} with {SMALL:?}: {e}"),
        },
        Err(e) => panic!("backward {what}: {e}"),
    };
    assert_close(&v(&bd.dq), &v(&bc.dq), 1e-4, 1e-3, &format!("dq {what}"));
    assert_close(&v(&bd.dk), &v(&bc.dk), 1e-4, 1e-3, &format!("dk {what}"));
    assert_close(&v(&bd.dv), &v(&bc.dv), 1e-4, 1e-3, &format!("dv {what}"));
}

/// Every block layout the tuner offers, at D = 64, over sequence lengths below, across and not a multiple of
/// its tiles.
#[test]
fn block_layouts_match_the_reference_at_d64() {
    let Some(dev) = opencl_device() else { return };
    let layouts = [
        AttnAlgo::Block(32, 32, 4, 4),
        AttnAlgo::Block(64, 32, 4, 4),
        AttnAlgo::Block(32, 64, 4, 4),
        AttnAlgo::Block(64, 64, 4, 4),
    ];
    for (i, algo) in layouts.into_iter().enumerate() {
        for (j, s) in [1usize, 7, 33, 100, 257].into_iter().enumerate() {
            let (b, h) = if s < 40 { (2, 3) } else { (1, 2) };
            for causal in [false, true] {
                let seed = 500 + (i * 8 + j) as u64 * 4;
                check_block(&dev, [b, h, s, 64], causal, algo, seed);
            }
        }
    }
}

/// The forward-only register blocks of 8 rows or 8 keys per work-item, at D = 40, 64 and 128, over lengths
/// that leave partial tiles, causal and not (output and lse against the reference); their backward is refused.
#[test]
fn wide_register_blocks_match_the_reference_forward() {
    let Some(dev) = opencl_device() else { return };
    let cases: &[(usize, AttnAlgo)] = &[
        (64, AttnAlgo::Block(64, 32, 8, 4)),
        (64, AttnAlgo::Block(32, 32, 8, 4)),
        (64, AttnAlgo::Block(64, 32, 8, 8)),
        (64, AttnAlgo::Block(32, 64, 4, 8)),
        (40, AttnAlgo::Block(64, 32, 8, 8)),
        (128, AttnAlgo::Block(32, 32, 8, 4)),
    ];
    for (i, &(d, algo)) in cases.iter().enumerate() {
        for (j, s) in [1usize, 7, 100, 257].into_iter().enumerate() {
            let shape = if s < 40 { [2, 3, s, d] } else { [1, 2, s, d] };
            for causal in [false, true] {
                let seed = 1200 + (i * 8 + j) as u64 * 4;
                let (qc, qd) = pair(&dev, &shape, seed);
                let (kc, kd) = pair(&dev, &shape, seed + 1);
                let (vc, vd) = pair(&dev, &shape, seed + 2);
                let what = format!("{shape:?} causal {causal} {algo:?}");
                let fc = ops::flash_attention(&qc, &kc, &vc, causal, None).unwrap();
                let fd = ops::flash_attention_with(&qd, &kd, &vd, causal, None, Some(algo))
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_close(&v(&fd.out), &v(&fc.out), 2e-5, 1e-4, &format!("out {what}"));
                assert_close(&v(&fd.lse), &v(&fc.lse), 2e-5, 1e-4, &format!("lse {what}"));
            }
        }
    }
    let shape = [1, 1, 9, 64];
    let (_, q) = pair(&dev, &shape, 1290);
    let f = ops::flash_attention(&q, &q, &q, false, None).unwrap();
    let e = ops::flash_attention_backward_with(
        &q,
        &q,
        &q,
        &f,
        &q,
        false,
        None,
        Some(AttnAlgo::Block(32, 32, 8, 4)),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("does not fit") && e.contains("4 × 4 in the backward"),
        "{e}"
    );
}

/// Head dimensions 40 (10 float4 groups: some items own fewer than others) and 128, and one of each with an
/// uneven layout (bq ≠ bk) on lengths that leave partial row and key tiles.
#[test]
fn block_layouts_match_the_reference_at_d40_and_d128() {
    let Some(dev) = opencl_device() else { return };
    let cases: &[(usize, AttnAlgo)] = &[
        (40, AttnAlgo::Block(32, 32, 4, 4)),
        (40, AttnAlgo::Block(64, 64, 4, 4)),
        (128, AttnAlgo::Block(32, 32, 4, 4)),
        (128, AttnAlgo::Block(64, 32, 4, 4)),
    ];
    for (i, &(d, algo)) in cases.iter().enumerate() {
        for (j, s) in [1usize, 7, 33, 100, 257].into_iter().enumerate() {
            let (b, h) = if s < 40 { (1, 3) } else { (2, 1) };
            for causal in [false, true] {
                let seed = 700 + (i * 8 + j) as u64 * 4;
                check_block(&dev, [b, h, s, d], causal, algo, seed);
            }
        }
    }
}

/// A scale other than 1/√D, and large scores, where a row's maximum must be the one all its items agree on.
#[test]
fn block_layout_keeps_the_online_softmax_stable() {
    let Some(dev) = opencl_device() else { return };
    let shape = [1, 2, 100, 64];
    let (qc, qd) = pair(&dev, &shape, 900);
    let (kc, kd) = pair(&dev, &shape, 901);
    let (vc, vd) = pair(&dev, &shape, 902);
    for (causal, scale) in [(false, 3.0f32), (true, 0.5)] {
        let want = ops::flash_attention(&qc, &kc, &vc, causal, Some(scale)).unwrap();
        let got = ops::flash_attention_with(
            &qd,
            &kd,
            &vd,
            causal,
            Some(scale),
            Some(AttnAlgo::Block(32, 32, 4, 4)),
        )
        .unwrap();
        let what = format!("scale {scale} causal {causal}");
        assert!(v(&got.out).iter().all(|x| x.is_finite()), "{what}");
        assert_close(
            &v(&got.out),
            &v(&want.out),
            2e-5,
            1e-4,
            &format!("out {what}"),
        );
        assert_close(
            &v(&got.lse),
            &v(&want.lse),
            2e-5,
            1e-4,
            &format!("lse {what}"),
        );
    }
}

/// The block backward from a forward of another layout (its lse is the same quantity), and the tile backward
/// from a block forward.
#[test]
fn block_and_other_layouts_share_the_log_sum_exp() {
    let Some(dev) = opencl_device() else { return };
    let shape = [2, 1, 45, 64];
    let (qc, qd) = pair(&dev, &shape, 920);
    let (kc, kd) = pair(&dev, &shape, 921);
    let (vc, vd) = pair(&dev, &shape, 922);
    let (gc, gd) = pair(&dev, &shape, 923);
    let tile = AttnAlgo::Tile(16, 16, 4);
    let block = AttnAlgo::Block(32, 32, 4, 4);
    for causal in [false, true] {
        let fc = ops::flash_attention(&qc, &kc, &vc, causal, None).unwrap();
        let want = ops::flash_attention_backward(&qc, &kc, &vc, &fc, &gc, causal, None).unwrap();
        for (fwd, bwd) in [(tile, block), (block, tile)] {
            let what = format!("forward {fwd:?} backward {bwd:?} causal {causal}");
            let f = ops::flash_attention_with(&qd, &kd, &vd, causal, None, Some(fwd)).unwrap();
            let b =
                ops::flash_attention_backward_with(&qd, &kd, &vd, &f, &gd, causal, None, Some(bwd))
                    .unwrap();
            assert_close(&v(&b.dq), &v(&want.dq), 1e-4, 1e-3, &format!("dq {what}"));
            assert_close(&v(&b.dk), &v(&want.dk), 1e-4, 1e-3, &format!("dk {what}"));
            assert_close(&v(&b.dv), &v(&want.dv), 1e-4, 1e-3, &format!("dv {what}"));
        }
    }
}

/// A forced block layout that does not fit is refused and says why, in the forward and in the backward.
#[test]
fn block_layouts_that_do_not_fit_are_clear_errors() {
    let Some(dev) = opencl_device() else { return };
    let fwd = |shape: [usize; 4], algo: AttnAlgo| {
        let (_, q) = pair(&dev, &shape, 950);
        ops::flash_attention_with(&q, &q, &q, false, None, Some(algo))
            .unwrap_err()
            .to_string()
    };
    for (d, why) in [
        (256, "above 128"),
        (42, "not a multiple of 4"),
        (130, "both"),
    ] {
        let e = fwd([1, 1, 8, d], AttnAlgo::Block(32, 32, 4, 4));
        assert!(
            e.contains("does not fit") && e.contains(&d.to_string()) && e.contains("multiple of 4"),
            "D {d} ({why}): {e}"
        );
    }
    for algo in [AttnAlgo::Block(30, 32, 4, 4), AttnAlgo::Block(32, 0, 4, 4)] {
        let e = fwd([1, 1, 8, 64], algo);
        assert!(
            e.contains("does not fit") && e.contains("Block"),
            "{algo:?}: {e}"
        );
    }
    let bwd = |shape: [usize; 4], algo: AttnAlgo| {
        let (_, q) = pair(&dev, &shape, 960);
        let f = ops::flash_attention(&q, &q, &q, true, None).unwrap();
        ops::flash_attention_backward_with(&q, &q, &q, &f, &q, true, None, Some(algo))
            .unwrap_err()
            .to_string()
    };
    for d in [256, 42] {
        let e = bwd([1, 2, 9, d], AttnAlgo::Block(32, 32, 4, 4));
        assert!(
            e.contains("attention backward")
                && e.contains("does not fit")
                && e.contains(&d.to_string()),
            "D {d}: {e}"
        );
    }
    // bk = 8 at D = 64: 8 float4 groups per item, beyond the backward's 4 (the forward takes it).
    let e = bwd([1, 2, 9, 64], AttnAlgo::Block(32, 8, 4, 4));
    assert!(
        e.contains("does not fit") && e.contains("at most 4 float4"),
        "{e}"
    );
    let (_, q) = pair(&dev, &[1, 2, 9, 64], 970);
    ops::flash_attention_with(&q, &q, &q, true, None, Some(AttnAlgo::Block(32, 8, 4, 4))).unwrap();
}

/// The fused backward (`AttnAlgo::Fused`: dk and dv as the block layout, dq added atomically) against the
/// reference at D = 40, 64 and 128 over lengths below, across and not a multiple of its 32 rows, causal and
/// not; with adds of one float everywhere and of four on NVIDIA GPUs. Each case runs three times in a row on
/// the same forward: a dq that were not cleared before its adds would carry the last run's sums (the pool hands
/// the same buffers back).
#[test]
fn fused_backward_matches_the_reference() {
    let Some(dev) = opencl_device() else { return };
    let mut widths = vec![1usize];
    if is_nvidia_gpu(&dev) {
        widths.push(4);
    }
    let mut ran = 0;
    for (i, d) in [40usize, 64, 128].into_iter().enumerate() {
        for (j, s) in [1usize, 7, 33, 100, 257].into_iter().enumerate() {
            let shape = if s < 40 { [2, 3, s, d] } else { [1, 2, s, d] };
            for causal in [false, true] {
                let seed = 1500 + (i * 8 + j) as u64 * 4;
                let (qc, qd) = pair(&dev, &shape, seed);
                let (kc, kd) = pair(&dev, &shape, seed + 1);
                let (vc, vd) = pair(&dev, &shape, seed + 2);
                let (gc, gd) = pair(&dev, &shape, seed + 3);
                let fc = ops::flash_attention(&qc, &kc, &vc, causal, None).unwrap();
                let want =
                    ops::flash_attention_backward(&qc, &kc, &vc, &fc, &gc, causal, None).unwrap();
                let fd = ops::flash_attention(&qd, &kd, &vd, causal, None).unwrap();
                for &vw in &widths {
                    let algo = AttnAlgo::Fused(32, vw);
                    for run in 0..3 {
                        let what = format!("{shape:?} causal {causal} {algo:?} run {run}");
                        let got = match ops::flash_attention_backward_with(
                            &qd,
                            &kd,
                            &vd,
                            &fd,
                            &gd,
                            causal,
                            None,
                            Some(algo),
                        ) {
                            Ok(b) => b,
                            // D = 128 needs 80 KiB of local memory: NVIDIA's 48 KiB refuse it by name.
                            Err(e) if d == 128 && e.to_string().contains("does not fit") => break,
                            Err(e) => panic!("{what}: {e}"),
                        };
                        assert_close(&v(&got.dq), &v(&want.dq), 1e-4, 1e-3, &format!("dq {what}"));
                        assert_close(&v(&got.dk), &v(&want.dk), 1e-4, 1e-3, &format!("dk {what}"));
                        assert_close(&v(&got.dv), &v(&want.dv), 1e-4, 1e-3, &format!("dv {what}"));
                        ran += 1;
                    }
                }
            }
        }
    }
    assert!(ran >= 2 * 10 * 3, "only {ran} fused runs were checked");
}

/// A forced fused layout that cannot run is refused and says why: in the forward, with adds of other than 1
/// or 4 floats, four-float adds off NVIDIA GPUs, and a block the backward cannot hold.
#[test]
fn fused_backward_refusals_say_why() {
    let Some(dev) = opencl_device() else { return };
    let shape = [1, 2, 9, 64];
    let (_, q) = pair(&dev, &shape, 1600);
    let e = ops::flash_attention_with(&q, &q, &q, false, None, Some(AttnAlgo::Fused(32, 1)))
        .unwrap_err()
        .to_string();
    assert!(e.contains("backward layout"), "{e}");
    let bwd = |algo: AttnAlgo, d: usize| {
        let (_, q) = pair(&dev, &[1, 2, 9, d], 1601);
        let f = ops::flash_attention(&q, &q, &q, false, None).unwrap();
        ops::flash_attention_backward_with(&q, &q, &q, &f, &q, false, None, Some(algo))
    };
    let e = bwd(AttnAlgo::Fused(32, 2), 64).unwrap_err().to_string();
    assert!(
        e.contains("does not fit") && e.contains("1 or 4 floats"),
        "{e}"
    );
    if !is_nvidia_gpu(&dev) {
        let e = bwd(AttnAlgo::Fused(32, 4), 64).unwrap_err().to_string();
        assert!(e.contains("NVIDIA"), "{e}");
    }
    for (algo, d) in [(AttnAlgo::Fused(30, 1), 64), (AttnAlgo::Fused(32, 1), 42)] {
        let e = bwd(algo, d).unwrap_err().to_string();
        assert!(
            e.contains("does not fit") && e.contains(&d.to_string()),
            "{algo:?} D {d}: {e}"
        );
    }
}
