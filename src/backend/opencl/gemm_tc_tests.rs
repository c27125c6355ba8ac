//! The tensor-core kernel's epilogue and addressing, which the ops do not reach (only `matmul` and `bmm`
//! follow the precision policy, without bias): bias per row, ReLU, offsets, padded row strides, batch strides,
//! unaligned (scalar) and aligned (vector) access. Emulated on every device; with the PTX mma too where the
//! device's tensor cores passed the probe.

use super::*;

fn device() -> Option<crate::Device> {
    let sel = std::env::var("NETCL_TEST_DEVICE").unwrap_or_else(|_| "auto".into());
    let d = crate::Device::select(Some(&sel))
        .ok()
        .filter(|d| d.is_opencl());
    if d.is_none() {
        eprintln!("SKIPPED: no OpenCL device");
    }
    d
}

/// The OpenCL backend of `dev`.
fn opencl(dev: &crate::Device) -> &ClDevice {
    dev.backend()
        .as_any()
        .downcast_ref::<ClDevice>()
        .expect("an OpenCL device has the OpenCL backend")
}

/// A small deterministic generator of values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// Runs `g` (f32 storage) with tile `t` and checks every output element against the f64 reference with the
/// bound of the precision, and every element of C the product must not write against its sentinel.
#[allow(clippy::needless_range_loop)]
fn check(cl: &ClDevice, g: &Gemm, t: &TcTile, ptx: bool, what: &str) {
    let (ea, eb) = (
        g.off_a + (g.batch - 1) * g.s_a + if g.trans_a { g.k * g.lda } else { g.m * g.lda },
        g.off_b + (g.batch - 1) * g.s_b + if g.trans_b { g.n * g.ldb } else { g.k * g.ldb },
    );
    let ec = g.off_c + (g.batch - 1) * g.s_c + g.m * g.ldc;
    let (a, b, bias) = (values(ea, 1), values(eb, 2), values(g.m, 3));
    const SENTINEL: f32 = 12345.0;
    let c0 = vec![SENTINEL; ec];
    let upload = |v: &[f32]| {
        let s = cl.alloc(v.len() * 4).unwrap();
        cl.write(&s, 0, bytemuck::cast_slice(v)).unwrap();
        s
    };
    let (sa, sb, sc, sbias) = (upload(&a), upload(&b), upload(&c0), upload(&bias));
    let with_bias = g.bias == BiasMode::Row;
    cl.launch_tc(g, t, [&sa, &sb, &sc], with_bias.then_some(&sbias), ptx)
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut got = vec![0f32; ec];
    cl.read(&sc, 0, bytemuck::cast_slice_mut(&mut got)).unwrap();
    let u = t.prec.operand_roundoff();
    let rel = 2.0 * u + u * u + g.k as f64 * 2f64.powi(-23);
    let mut written = vec![false; ec];
    for z in 0..g.batch {
        for i in 0..g.m {
            for j in 0..g.n {
                let (mut want, mut mag) = (0f64, 0f64);
                for p in 0..g.k {
                    let ai = g.off_a
                        + z * g.s_a
                        + if g.trans_a {
                            p * g.lda + i
                        } else {
                            i * g.lda + p
                        };
                    let bi = g.off_b
                        + z * g.s_b
                        + if g.trans_b {
                            j * g.ldb + p
                        } else {
                            p * g.ldb + j
                        };
                    want += a[ai] as f64 * b[bi] as f64;
                    mag += (a[ai] as f64 * b[bi] as f64).abs();
                }
                if with_bias {
                    want += bias[i] as f64;
                    mag += (bias[i] as f64).abs();
                }
                if g.relu {
                    want = want.max(0.0);
                }
                let at = g.off_c + z * g.s_c + i * g.ldc + j;
                written[at] = true;
                let err = (got[at] as f64 - want).abs();
                let bound = rel * mag + 2f64.powi(-23) * want.abs() + 1e-30;
                assert!(
                    err <= bound,
                    "{what}: C[{z}][{i}][{j}] = {} but the reference is {want} (error {err:e} > bound {bound:e})",
                    got[at]
                );
            }
        }
    }
    for (at, w) in written.iter().enumerate() {
        assert!(
            *w || got[at] == SENTINEL,
            "{what}: element {at} of C, outside the product, was overwritten with {}",
            got[at]
        );
    }
}

fn cases() -> Vec<(&'static str, Gemm)> {
    // Unaligned: offsets, padded strides not multiples of 4 (scalar loads), bias and ReLU, A shared.
    let mut unaligned = Gemm::dense(37, 45, 70, 2, false, true, true);
    unaligned.off_a = 3;
    unaligned.lda = 75;
    unaligned.off_b = 1;
    unaligned.ldb = 71;
    unaligned.s_b = 45 * 71 + 2;
    unaligned.off_c = 1;
    unaligned.ldc = 47;
    unaligned.s_c = 37 * 47 + 5;
    unaligned.bias = BiasMode::Row;
    unaligned.relu = true;
    // Aligned: every start a multiple of 4 (vector loads and stores), A transposed, bias without ReLU.
    let mut aligned = Gemm::dense(72, 68, 36, 3, true, false, false);
    aligned.off_b = 4;
    aligned.ldc = 72;
    aligned.s_c = 72 * 72;
    aligned.bias = BiasMode::Row;
    vec![("unaligned", unaligned), ("aligned", aligned)]
}

#[test]
fn epilogue_offsets_and_strides_match_the_reference() {
    let Some(dev) = device() else { return };
    let cl = opencl(&dev);
    for p in [Precision::Tf32, Precision::Fp16] {
        let all: Vec<TcTile> = tiles(p).collect();
        for (i, (name, g)) in cases().into_iter().enumerate() {
            let mut g = g;
            g.math = Math::f32_at(p);
            // The smallest tile on the first case, the largest on the second.
            let t = if i == 0 { all[all.len() - 1] } else { all[0] };
            check(cl, &g, &t, false, &format!("{p} {name} emulated"));
            if cl.tc_capable(p) && !emulated().unwrap_or(false) {
                check(cl, &g, &t, true, &format!("{p} {name} PTX"));
            }
        }
    }
}

/// The pipelined kernel on f32 operands (TF32) whose rows lie on 16 bytes: every tile, emulated, with its
/// copies, `ldmatrix` addressing and stages, on the aligned case (A transposed, bias, batch strides); with the
/// PTX too where the device passed the probe. A product it does not fit is refused by name.
#[test]
fn pipelined_tf32_tiles_match_the_reference() {
    let Some(dev) = device() else { return };
    let cl = opencl(&dev);
    let (_, mut g) = cases().remove(1);
    g.math = Math::f32_at(Precision::Tf32);
    for t in pipe_tiles(Precision::Tf32) {
        assert!(pipe_fits(&g, &t), "{t:?}");
        check(cl, &g, &t, false, &format!("{t:?} emulated"));
        if cl.tc_pipe_status(Precision::Tf32).is_ok() && !emulated().unwrap_or(false) {
            check(cl, &g, &t, true, &format!("{t:?} PTX"));
        }
    }
    let (_, mut unaligned) = cases().remove(0);
    unaligned.math = Math::f32_at(Precision::Tf32);
    let t = pipe_tiles(Precision::Tf32).last().unwrap();
    assert!(!pipe_fits(&unaligned, &t));
    let s = cl.alloc(1 << 16).unwrap();
    let err = cl
        .launch_tc(&unaligned, &t, [&s, &s, &s], None, false)
        .err()
        .expect("an unaligned product is refused");
    assert!(err.to_string().contains("16 bytes"), "{err}");
}

#[test]
fn tile_configurations_split_the_block_among_eight_warps() {
    for t in pipe_tiles(Precision::Tf32).chain(pipe_tiles(Precision::Fp16)) {
        assert_eq!((t.bm / t.wm) * (t.bn / t.wn), 8, "{t:?}");
        assert!(
            t.wm % 16 == 0 && t.wn % 16 == 0,
            "{t:?}: B fragments come two n8 tiles a read"
        );
        assert!((2..=4).contains(&t.stages), "{t:?}");
        let kstep = if t.prec == Precision::Fp16 { 16 } else { 8 };
        assert_eq!(t.bk % kstep, 0, "{t:?}");
        // Whole 16-byte copies per work-item, and 48 KiB in every transpose (the swizzled buffers are unpadded).
        assert_eq!((t.bm * t.bk) % (t.chunk() * THREADS), 0, "{t:?}");
        assert_eq!((t.bn * t.bk) % (t.chunk() * THREADS), 0, "{t:?}");
        for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
            let g = Gemm::dense(t.bm, t.bn, t.bk, 1, ta, tb, false);
            assert!(local_bytes(&g, &t, false) <= 48 * 1024, "{t:?} {ta} {tb}");
        }
    }
    for p in [Precision::Tf32, Precision::Fp16] {
        for t in tiles(p) {
            assert_eq!((t.bm / t.wm) * (t.bn / t.wn), 8, "{t:?}");
            assert!(t.wm % 16 == 0 && t.wn % 8 == 0, "{t:?}");
            let kstep = if p == Precision::Fp16 { 16 } else { 8 };
            assert_eq!(t.bk % kstep, 0, "{t:?}");
            // Every tile stages whole quads per work-item and fits 48 KiB (NVIDIA's local memory) in every
            // transpose combination without emulation.
            assert_eq!((t.bm * t.bk) % (4 * THREADS), 0, "{t:?}");
            assert_eq!((t.bn * t.bk) % (4 * THREADS), 0, "{t:?}");
            for (ta, tb) in [(false, false), (true, false), (false, true), (true, true)] {
                let g = Gemm::dense(t.bm, t.bn, t.bk, 1, ta, tb, false);
                assert!(local_bytes(&g, &t, false) <= 48 * 1024, "{t:?} {ta} {tb}");
            }
        }
    }
}

#[test]
fn pipelined_tiles_wait_for_their_probe_and_leave_after_it_fails() {
    // A device id no OpenCL device has, so that no other test's probe results are touched.
    let id = usize::MAX;
    let at = slot(Precision::Fp16) + 2;
    assert_eq!(probed(id, at), None);
    assert!(
        pipe_offered(probed(id, at)),
        "offered before the probe has run"
    );
    let put = |r: std::result::Result<(), String>| {
        let mut m = PROBES.lock().unwrap();
        m.get_or_insert_with(HashMap::new).entry(id).or_default()[at] = Some(r);
    };
    put(Ok(()));
    assert!(pipe_offered(probed(id, at)), "offered after a passed probe");
    put(Err("the probe product is wrong".into()));
    assert!(
        !pipe_offered(probed(id, at)),
        "left out after a failed probe"
    );
    assert_eq!(
        probed(id, slot(Precision::Tf32) + 2),
        None,
        "one kernel's result is not another's"
    );
}
