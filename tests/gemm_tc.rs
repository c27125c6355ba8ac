//! Tensor-core products (TF32, FP16) and the precision policy.
//!
//! On a device without tensor cores (PoCL) the tests turn on `NETCL_TC_EMULATE=1` for their process (unless the
//! variable is set), so the tensor-core kernel runs with each mma emulated cooperatively through local memory:
//! the tile loads, fragment layouts, edges and batches are what is checked. On an NVIDIA GPU
//! (`NETCL_TEST_DEVICE=gpu`) they run the PTX mma itself, and fail if the probe refused the tensor cores.
//!
//! Error bound, per element, against the f64 reference on the operands as given:
//! |C − C_ref| ≤ (2u + u² + K·2^-23)·(|A|·|B|)_ij + 2^-11·|C_ref| (f16 output only) + 1e-30,
//! u = 2^-11 (TF32 rounds to nearest, ties away, with 10 mantissa bits; f16 rounds to nearest even, normal
//! range: the test data are far from its subnormals). Each operand's rounding contributes u, their product u²;
//! the products of rounded operands are exact in f32 (11 + 11 significant bits), and a sum of K of them
//! loses at most one unit in the last place (2^-23 relative) per addition, since tensor cores are not bound to
//! round to nearest as they accumulate (round to nearest would give K·2^-24). A wrong fragment mapping or
//! tile load puts errors of the size of C itself, far past the bound; honest rounding stays well inside it.

mod common;

use std::sync::{Mutex, MutexGuard, Once};

use common::{Lcg, child_command, is_nvidia_gpu, opencl_device};
use netcl::autotune::{self, decisions_since, last_seq};
use netcl::precision::{self, Precision};
use netcl::{DType, Device, Tensor, ops};

/// The device, with emulation on where there are no tensor cores to test (see the module docs) and the
/// tuner off (each product takes its op's first choice: the first tensor-core tile under TF32 / FP16), and
/// the guard that runs this file's tests one at a time: several read the process's decision log, which the
/// products of a test running beside them would write to.
fn device() -> Option<(Device, MutexGuard<'static, ()>)> {
    static SERIAL: Mutex<()> = Mutex::new(());
    static INIT: Once = Once::new();
    INIT.call_once(|| {
        let dev = opencl_device();
        // SAFETY: every test calls this first; the other tests wait in `call_once` while the variables are set.
        unsafe {
            if std::env::var_os("NETCL_TC_EMULATE").is_none()
                && !dev.as_ref().is_some_and(is_nvidia_gpu)
            {
                std::env::set_var("NETCL_TC_EMULATE", "1");
            }
            if std::env::var_os("NETCL_AUTOTUNE").is_none() {
                std::env::set_var("NETCL_AUTOTUNE", "off");
            }
        }
        autotune::reload_config();
    });
    let dev = opencl_device()?;
    for p in [Precision::Tf32, Precision::Fp16] {
        if !precision::tensor_cores(&dev, p) {
            let seq = last_seq();
            let a = Tensor::ones(&dev, &[2, 2]).unwrap();
            let _ = ops::matmul_prec(&a, &a, false, false, p);
            let notes: Vec<String> = decisions_since(seq)
                .into_iter()
                .filter_map(|d| d.note)
                .collect();
            panic!("{p}: no tensor cores on {} ({notes:?})", dev.name());
        }
    }
    let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    Some((dev, serial))
}

/// Random operands on the host and the device.
fn operand(dev: &Device, shape: &[usize], seed: u64) -> (Vec<f32>, Tensor) {
    let t = Tensor::randn(dev, shape, 0.0, 1.0, seed).unwrap();
    (t.to_vec::<f32>().unwrap(), t)
}

/// Checks `got` (batch × m × n) against the f64 product of the host operands with the bound of the module
/// docs; `out16` adds the rounding of an f16 output.
#[allow(clippy::too_many_arguments)]
fn check(
    got: &[f32],
    a: &[f32],
    b: &[f32],
    dims: (usize, usize, usize, usize),
    trans: (bool, bool),
    shared: (bool, bool),
    p: Precision,
    out16: bool,
    what: &str,
) {
    let (batch, m, n, k) = dims;
    assert_eq!(got.len(), batch * m * n, "{what}: output size");
    let u = p.operand_roundoff();
    let rel = 2.0 * u + u * u + k as f64 * 2f64.powi(-23);
    let out = if out16 { 2f64.powi(-11) } else { 0.0 };
    for z in 0..batch {
        let (za, zb) = (if shared.0 { 0 } else { z }, if shared.1 { 0 } else { z });
        for i in 0..m {
            for j in 0..n {
                let (mut want, mut mag) = (0f64, 0f64);
                for q in 0..k {
                    let x = a[za * m * k + if trans.0 { q * m + i } else { i * k + q }] as f64;
                    let y = b[zb * k * n + if trans.1 { j * k + q } else { q * n + j }] as f64;
                    want += x * y;
                    mag += (x * y).abs();
                }
                let g = got[(z * m + i) * n + j] as f64;
                let bound = rel * mag + out * want.abs() + 1e-30;
                assert!(
                    (g - want).abs() <= bound,
                    "{what}: C[{z}][{i}][{j}] = {g}, reference {want}, error {:e} > bound {bound:e}",
                    (g - want).abs()
                );
            }
        }
    }
}

/// The label of the smallest tensor-core tile for this product at this thread's precision.
fn smallest_tc_label(a: &Tensor, b: &Tensor, ta: bool, tb: bool) -> String {
    let labels = ops::matmul_candidates(a, b, ta, tb).unwrap();
    labels
        .iter()
        .rev()
        .find(|l| l.contains("\"tc_"))
        .unwrap_or_else(|| panic!("no tensor-core candidate among {labels:?}"))
        .clone()
}

#[test]
fn odd_shapes_and_every_transpose_within_the_bound() {
    let Some((dev, _serial)) = device() else {
        return;
    };
    let shapes = [(1, 7, 33), (33, 1, 7), (100, 45, 257), (65, 130, 1)];
    for p in [Precision::Tf32, Precision::Fp16] {
        for (s, &(m, n, k)) in shapes.iter().enumerate() {
            for case in 0..4 {
                let (ta, tb) = (case & 1 == 1, case & 2 == 2);
                let (av, a) = operand(&dev, &if ta { [k, m] } else { [m, k] }, 10 + s as u64);
                let (bv, b) = operand(&dev, &if tb { [n, k] } else { [k, n] }, 20 + case);
                let what = format!("{p} {m}x{n}x{k} ta={ta} tb={tb}");
                // The smallest tile, forced (it fits every shape), ...
                let label = precision::with(p, || smallest_tc_label(&a, &b, ta, tb));
                let got = precision::with(p, || ops::matmul_with(&a, &b, ta, tb, &label)).unwrap();
                let got = got.to_vec::<f32>().unwrap();
                check(
                    &got,
                    &av,
                    &bv,
                    (1, m, n, k),
                    (ta, tb),
                    (false, false),
                    p,
                    false,
                    &what,
                );
                // ... and the per-call precision, through the tuner's first choice (a tensor-core tile).
                if case == 0 {
                    let got = ops::matmul_prec(&a, &b, ta, tb, p).unwrap();
                    let got = got.to_vec::<f32>().unwrap();
                    check(
                        &got,
                        &av,
                        &bv,
                        (1, m, n, k),
                        (ta, tb),
                        (false, false),
                        p,
                        false,
                        &what,
                    );
                }
            }
        }
    }
}

#[test]
fn every_tile_configuration_within_the_bound() {
    let Some((dev, _serial)) = device() else {
        return;
    };
    let (m, n, k) = (130, 150, 70);
    let (av, a) = operand(&dev, &[m, k], 1);
    let (bv, b) = operand(&dev, &[k, n], 2);
    for p in [Precision::Tf32, Precision::Fp16] {
        let labels = precision::with(p, || ops::matmul_candidates(&a, &b, false, false)).unwrap();
        let tc: Vec<&String> = labels.iter().filter(|l| l.contains("\"tc_")).collect();
        let tiles = 4;
        assert_eq!(
            tc.len(),
            tiles,
            "{p}: {tiles} tensor-core tiles for {m}x{n}x{k}: {labels:?}"
        );
        assert!(
            tc.iter().all(|l| l.contains(&format!("\"tc_{p}\""))),
            "{tc:?}"
        );
        for label in tc {
            let got = precision::with(p, || ops::matmul_with(&a, &b, false, false, label)).unwrap();
            let got = got.to_vec::<f32>().unwrap();
            check(
                &got,
                &av,
                &bv,
                (1, m, n, k),
                (false, false),
                (false, false),
                p,
                false,
                label,
            );
        }
    }
}

/// Operands as the pipelined kernel at a precision reads them (f32 for TF32, f16 for FP16), their values as
/// stored, and how the check bounds the product: f16 operands are exact as stored, so only the sums and the
/// f16 output round.
struct Stored {
    a: Tensor,
    b: Tensor,
    av: Vec<f32>,
    bv: Vec<f32>,
    bound: Precision,
    out16: bool,
}

fn stored(p: Precision, (av, a): (Vec<f32>, Tensor), (bv, b): (Vec<f32>, Tensor)) -> Stored {
    if p != Precision::Fp16 {
        return Stored {
            a,
            b,
            av,
            bv,
            bound: p,
            out16: false,
        };
    }
    let (a, b) = (a.cast(DType::F16).unwrap(), b.cast(DType::F16).unwrap());
    let av = a.cast(DType::F32).unwrap().to_vec::<f32>().unwrap();
    let bv = b.cast(DType::F32).unwrap().to_vec::<f32>().unwrap();
    Stored {
        a,
        b,
        av,
        bv,
        bound: Precision::Fp32,
        out16: true,
    }
}

/// The pipelined candidates of a product at `p`.
fn pipe_labels(a: &Tensor, b: &Tensor, ta: bool, tb: bool, p: Precision) -> Vec<String> {
    precision::with(p, || ops::matmul_candidates(a, b, ta, tb))
        .unwrap()
        .into_iter()
        .filter(|l| l.contains("_async\""))
        .collect()
}

/// Runs `label` on `s` (op(A) m×k, op(B) k×n) and checks it within the bound.
fn check_label(
    s: &Stored,
    p: Precision,
    (m, n, k): (usize, usize, usize),
    (ta, tb): (bool, bool),
    label: &str,
) {
    let got = precision::with(p, || ops::matmul_with(&s.a, &s.b, ta, tb, label)).unwrap();
    let got = got.cast(DType::F32).unwrap().to_vec::<f32>().unwrap();
    let what = format!("{label} {m}x{n}x{k} ta={ta} tb={tb}");
    check(
        &got,
        &s.av,
        &s.bv,
        (1, m, n, k),
        (ta, tb),
        (false, false),
        s.bound,
        s.out16,
        &what,
    );
}

/// The pipelined kernel (`cp.async` copies, `ldmatrix` fragments): offered exactly where its copies fit (TF32
/// on f32 tensors, FP16 on f16 tensors, rows on 16 bytes); every tile on ragged edges (M, N, K not multiples of
/// any tile) and every transpose, the widest tile, many block rows, and a batch with strides, within the bound.
/// Emulated on PoCL with the lane addressing of `ldmatrix`, so a wrong matrix order or row address fails here
/// too.
#[test]
fn pipelined_tiles_where_the_copies_fit_within_the_bound() {
    let Some((dev, _serial)) = device() else {
        return;
    };
    // Rows of 70 elements are not on 16 bytes (f32 or f16): no pipelined tile.
    let (_, a) = operand(&dev, &[40, 70], 60);
    let (_, b) = operand(&dev, &[70, 24], 61);
    assert!(pipe_labels(&a, &b, false, false, Precision::Tf32).is_empty());
    let (a16, b16) = (a.cast(DType::F16).unwrap(), b.cast(DType::F16).unwrap());
    assert!(pipe_labels(&a16, &b16, false, false, Precision::Fp16).is_empty());
    // f32 tensors at FP16 precision are rounded as they are staged, which the copies cannot do.
    let (_, a) = operand(&dev, &[72, 40], 62);
    let (_, b) = operand(&dev, &[40, 24], 63);
    assert!(pipe_labels(&a, &b, false, false, Precision::Fp16).is_empty());

    // M = 72 and N = 40 cut every block tile; K = 40 leaves a partial K tile at every K tile size (8 to 32).
    let dims = (72, 40, 40);
    let (m, n, k) = dims;
    for p in [Precision::Tf32, Precision::Fp16] {
        for case in 0..4 {
            let (ta, tb) = (case & 1 == 1, case & 2 == 2);
            let a = operand(&dev, &if ta { [k, m] } else { [m, k] }, 70 + case);
            let b = operand(&dev, &if tb { [n, k] } else { [k, n] }, 80 + case);
            let s = stored(p, a, b);
            let labels = pipe_labels(&s.a, &s.b, ta, tb, p);
            assert_eq!(
                labels.len(),
                5,
                "{p} ta={ta} tb={tb}: {labels:?} (none: the device's probe refused the pipelined kernel; \
                 NETCL_LOG=info netcl --device gpu bench matmul_4096_fp16 logs why)"
            );
            // Every tile untransposed, the smallest (four stages) in the other layouts.
            let run = if case == 0 { &labels[..] } else { &labels[4..] };
            for label in run {
                check_label(&s, p, dims, (ta, tb), label);
            }
        }
    }
    // The 128 × 256 tile (64 × 64 warp tiles), on a product wide enough to be offered it, ragged on every side,
    // with B as stored and transposed (its four swizzled buffers take 48 KiB either way).
    let dims = (136, 264, 40);
    let (m, n, k) = dims;
    for p in [Precision::Tf32, Precision::Fp16] {
        for tb in [false, true] {
            let b = operand(&dev, &if tb { [n, k] } else { [k, n] }, 98);
            let s = stored(p, operand(&dev, &[m, k], 97), b);
            let wide: Vec<String> = pipe_labels(&s.a, &s.b, false, tb, p)
                .into_iter()
                .filter(|l| l.contains(",128,256,"))
                .collect();
            assert_eq!(
                wide.len(),
                1,
                "{p}: the 128×256 tile is offered for a {m}x{n}x{k} product: {wide:?}"
            );
            check_label(&s, p, dims, (false, tb), &wide[0]);
        }
    }
    // Ten rows of three block tiles (64 × 64): the grouped launch order (eight block rows a group) with a
    // partial last group, checked element by element.
    let dims = (600, 136, 24);
    let (m, n, k) = dims;
    for p in [Precision::Tf32, Precision::Fp16] {
        let s = stored(p, operand(&dev, &[m, k], 95), operand(&dev, &[k, n], 96));
        let label = pipe_labels(&s.a, &s.b, false, false, p)
            .pop()
            .expect("a pipelined tile");
        assert!(label.contains(",64,64,"), "{label}");
        check_label(&s, p, dims, (false, false), &label);
    }
    // Batched with strides: a batch of 3 f16 products with one B shared, every pipelined tile.
    let s = stored(
        Precision::Fp16,
        operand(&dev, &[3, 24, 48], 90),
        operand(&dev, &[1, 48, 32], 91),
    );
    let labels: Vec<String> = precision::with(Precision::Fp16, || {
        ops::bmm_candidates(&s.a, &s.b, false, false)
    })
    .unwrap()
    .into_iter()
    .filter(|l| l.contains("_async\""))
    .collect();
    assert!(
        !labels.is_empty(),
        "the batch's products fit the pipelined kernel"
    );
    for label in &labels {
        let got = precision::with(Precision::Fp16, || {
            ops::bmm_with(&s.a, &s.b, false, false, label)
        })
        .unwrap();
        let got = got.cast(DType::F32).unwrap().to_vec::<f32>().unwrap();
        let what = format!("f16 bmm {label}");
        check(
            &got,
            &s.av,
            &s.bv,
            (3, 24, 32, 48),
            (false, false),
            (false, true),
            s.bound,
            s.out16,
            &what,
        );
    }
}

#[test]
fn batches_with_strides_and_shared_operands() {
    let Some((dev, _serial)) = device() else {
        return;
    };
    for (i, &(ba, bb, m, n, k, ta, tb)) in [
        (3, 3, 17, 9, 40, false, false),
        (1, 4, 33, 70, 20, true, false),
        (2, 1, 9, 40, 65, false, true),
        (2, 2, 64, 64, 64, true, true),
    ]
    .iter()
    .enumerate()
    {
        let p = if i % 2 == 0 {
            Precision::Tf32
        } else {
            Precision::Fp16
        };
        let (av, a) = operand(
            &dev,
            &if ta { [ba, k, m] } else { [ba, m, k] },
            30 + i as u64,
        );
        let (bv, b) = operand(
            &dev,
            &if tb { [bb, n, k] } else { [bb, k, n] },
            40 + i as u64,
        );
        let got = precision::with(p, || ops::bmm(&a, &b, ta, tb)).unwrap();
        let batch = ba.max(bb);
        assert_eq!(got.shape(), &[batch, m, n]);
        let what = format!("{p} bmm case {i}");
        let got = got.to_vec::<f32>().unwrap();
        check(
            &got,
            &av,
            &bv,
            (batch, m, n, k),
            (ta, tb),
            (ba == 1, bb == 1),
            p,
            false,
            &what,
        );
    }
}

#[test]
fn f16_tensors_multiply_as_stored_into_f16() {
    let Some((dev, _serial)) = device() else {
        return;
    };
    for &(m, n, k, ta, tb) in &[(37, 45, 70, false, false), (64, 20, 33, true, true)] {
        let (_, a) = operand(&dev, &if ta { [k, m] } else { [m, k] }, 50);
        let (_, b) = operand(&dev, &if tb { [n, k] } else { [k, n] }, 51);
        let (a16, b16) = (a.cast(DType::F16).unwrap(), b.cast(DType::F16).unwrap());
        // The operands as stored (exact in f32).
        let av = a16.cast(DType::F32).unwrap().to_vec::<f32>().unwrap();
        let bv = b16.cast(DType::F32).unwrap().to_vec::<f32>().unwrap();
        let seq = last_seq();
        let got = ops::matmul_prec(&a16, &b16, ta, tb, Precision::Fp16).unwrap();
        assert_eq!(got.dtype(), DType::F16, "f16 in, f16 out");
        let kernels: Vec<String> = decisions_since(seq).into_iter().map(|d| d.kernel).collect();
        assert!(
            kernels.iter().any(|k| k.starts_with("matmul_fp16_f16io")),
            "the f16 product is tuned under its own key: {kernels:?}"
        );
        let got = got.cast(DType::F32).unwrap().to_vec::<f32>().unwrap();
        // The operands are exact in f16: no operand rounding, only the sums and the f16 output.
        let what = format!("f16 storage {m}x{n}x{k} ta={ta} tb={tb}");
        check(
            &got,
            &av,
            &bv,
            (1, m, n, k),
            (ta, tb),
            (false, false),
            Precision::Fp32,
            true,
            &what,
        );
    }
}

#[test]
fn fp32_stays_the_default_and_bitwise_unchanged() {
    let Some((dev, _serial)) = device() else {
        return;
    };
    let mut rng = Lcg(3);
    for case in 0..3 {
        let (m, n, k) = (rng.range(1, 90), rng.range(1, 90), rng.range(1, 200));
        let (_, a) = operand(&dev, &[m, k], 60 + case);
        let (_, b) = operand(&dev, &[k, n], 70 + case);
        assert_eq!(precision::current().unwrap(), Precision::Fp32);
        let seq = last_seq();
        let default = ops::matmul(&a, &b).unwrap().to_vec::<f32>().unwrap();
        let kernels: Vec<String> = decisions_since(seq).into_iter().map(|d| d.kernel).collect();
        assert!(kernels.iter().all(|k| k == "matmul"), "{kernels:?}");
        let labels = ops::matmul_candidates(&a, &b, false, false).unwrap();
        assert!(labels.iter().all(|l| !l.contains("tc_")), "{labels:?}");
        let explicit = ops::matmul_prec(&a, &b, false, false, Precision::Fp32).unwrap();
        let scoped = precision::with(Precision::Fp32, || ops::matmul(&a, &b)).unwrap();
        // Under TF32 a scope turns FP32 back on for its inner products.
        let nested = precision::with(Precision::Tf32, || {
            precision::with(Precision::Fp32, || ops::matmul(&a, &b))
        })
        .unwrap();
        for (name, t) in [
            ("explicit", explicit),
            ("scoped", scoped),
            ("nested", nested),
        ] {
            let v = t.to_vec::<f32>().unwrap();
            assert!(
                v.iter()
                    .zip(&default)
                    .all(|(x, y)| x.to_bits() == y.to_bits()),
                "{name} FP32 differs from the default"
            );
        }
        // TF32 is another arithmetic: on data not representable in TF32 some element differs.
        if k >= 8 && m * n >= 16 {
            let tf = ops::matmul_prec(&a, &b, false, false, Precision::Tf32).unwrap();
            let tf = tf.to_vec::<f32>().unwrap();
            assert!(
                tf.iter().zip(&default).any(|(x, y)| x != y),
                "TF32 gave FP32's bits"
            );
        }
    }
}

#[test]
fn precision_enters_the_tune_key() {
    let Some((dev, _serial)) = device() else {
        return;
    };
    let (_, a) = operand(&dev, &[48, 40], 80);
    let (_, b) = operand(&dev, &[40, 56], 81);
    let mut keys = Vec::new();
    for p in Precision::ALL {
        let seq = last_seq();
        ops::matmul_prec(&a, &b, false, false, p).unwrap();
        let d = decisions_since(seq);
        let d = d
            .last()
            .unwrap_or_else(|| panic!("{p}: no decision logged"));
        match p {
            Precision::Fp32 => assert_eq!(d.kernel, "matmul"),
            _ => {
                assert!(
                    d.kernel.starts_with(&format!("matmul_{p}")),
                    "{p}: {}",
                    d.kernel
                );
                assert!(
                    d.winner_label.contains(&format!("tc_{p}")),
                    "{p}: {}",
                    d.winner_label
                );
            }
        }
        keys.push(d.key.clone());
    }
    assert!(
        keys[0] != keys[1] && keys[1] != keys[2] && keys[0] != keys[2],
        "{keys:?}"
    );
}

/// Runs the ignored test `name` in a child process with the given variables; returns its output.
fn child(name: &str, vars: &[(&str, &str)]) -> String {
    let mut cmd = child_command(name);
    for (k, v) in vars {
        cmd.env(k, v);
    }
    cmd.env("NETCL_AUTOTUNE", "off");
    let out = cmd.output().expect("run the child test");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.contains("1 passed"),
        "{name}:\n{text}"
    );
    text
}

#[test]
fn without_tensor_cores_tf32_and_fp16_fall_back_with_a_note() {
    let Some(dev) = opencl_device() else { return };
    let text = child("fallback_child", &[("NETCL_TC_EMULATE", "0")]);
    if is_nvidia_gpu(&dev) {
        assert!(
            text.contains("TENSOR_CORES") || text.contains("FELL_BACK"),
            "{text}"
        );
    } else {
        assert!(
            text.contains("FELL_BACK"),
            "{} has no tensor cores:\n{text}",
            dev.name()
        );
    }
}

#[test]
#[ignore = "run by without_tensor_cores_tf32_and_fp16_fall_back_with_a_note"]
fn fallback_child() {
    let Some(dev) = opencl_device() else { return };
    if precision::tensor_cores(&dev, Precision::Tf32) {
        println!("TENSOR_CORES");
        return;
    }
    let (_, a) = operand(&dev, &[33, 70], 90);
    let (_, b) = operand(&dev, &[70, 21], 91);
    let fp32 = ops::matmul_prec(&a, &b, false, false, Precision::Fp32).unwrap();
    let fp32 = fp32.to_vec::<f32>().unwrap();
    for p in [Precision::Tf32, Precision::Fp16] {
        let seq = last_seq();
        let got = ops::matmul_prec(&a, &b, false, false, p).unwrap();
        let got = got.to_vec::<f32>().unwrap();
        assert!(
            got.iter()
                .zip(&fp32)
                .all(|(x, y)| x.to_bits() == y.to_bits()),
            "{p} without tensor cores is not the FP32 product"
        );
        let notes: Vec<(String, String)> = decisions_since(seq)
            .into_iter()
            .map(|d| (d.kernel, d.note.unwrap_or_default()))
            .collect();
        assert!(
            notes.iter().any(|(k, n)| *k == format!("matmul_{p}")
                && n.contains("tensor cores not available on this device")
                && n.contains("FP32 kernels")),
            "{p}: {notes:?}"
        );
    }
    // f16 tensors under FP16 go through f32 and come back f16, as without a policy.
    let (a16, b16) = (a.cast(DType::F16).unwrap(), b.cast(DType::F16).unwrap());
    let got = ops::matmul_prec(&a16, &b16, false, false, Precision::Fp16).unwrap();
    let want = ops::matmul_prec(&a16, &b16, false, false, Precision::Fp32).unwrap();
    assert_eq!(got.dtype(), DType::F16);
    let (got, want) = (
        got.cast(DType::F32).unwrap().to_vec::<f32>().unwrap(),
        want.cast(DType::F32).unwrap().to_vec::<f32>().unwrap(),
    );
    assert_eq!(got, want);
    println!("FELL_BACK");
}

#[test]
fn bad_settings_are_clear_errors() {
    if opencl_device().is_none() {
        return;
    }
    let text = child(
        "setting_error_child",
        &[
            ("NETCL_PRECISION", "bf16"),
            ("EXPECT_ERROR", "NETCL_PRECISION=`bf16`"),
        ],
    );
    assert!(text.contains("REFUSED"), "{text}");
    let text = child(
        "setting_error_child",
        &[
            ("NETCL_PRECISION", "tf32"),
            ("NETCL_TC_EMULATE", "maybe"),
            ("EXPECT_ERROR", "NETCL_TC_EMULATE=`maybe`"),
        ],
    );
    assert!(text.contains("REFUSED"), "{text}");
}

#[test]
#[ignore = "run by bad_settings_are_clear_errors"]
fn setting_error_child() {
    let Some(dev) = opencl_device() else { return };
    let want = std::env::var("EXPECT_ERROR").expect("EXPECT_ERROR names the expected message");
    let a = Tensor::ones(&dev, &[4, 4]).unwrap();
    let e = ops::matmul(&a, &a).expect_err("a bad setting refuses the product");
    let msg = e.to_string();
    assert!(msg.contains(&want), "{msg}");
    assert!(
        msg.contains("use "),
        "the message names the accepted values: {msg}"
    );
    println!("REFUSED");
}

/// `|t|` as a tensor on the host (the magnitudes whose convolution bounds the rounding error).
fn abs_on_host(t: &[f32], shape: &[usize]) -> Tensor {
    let v: Vec<f32> = t.iter().map(|x| x.abs()).collect();
    Tensor::from_slice(&Device::builtin(), &v, shape).unwrap()
}

/// Checks `got` against the host's FP32 `want`, element by element, within the bound of the module docs for
/// sums of `k` products whose magnitudes sum to `mag` (the host's FP32 sums add their own rounding, which the
/// bound's `k · 2^-23` term covers twice over).
fn check_bound(got: &Tensor, want: &Tensor, mag: &Tensor, k: usize, p: Precision, what: &str) {
    let (g, w, m) = (
        got.to_vec::<f32>().unwrap(),
        want.to_vec::<f32>().unwrap(),
        mag.to_vec::<f32>().unwrap(),
    );
    assert_eq!(g.len(), w.len(), "{what}: size");
    let u = p.operand_roundoff();
    let rel = 2.0 * u + u * u + k as f64 * 2f64.powi(-23);
    for (i, ((&g, &w), &m)) in g.iter().zip(&w).zip(&m).enumerate() {
        let bound = rel * m as f64 + 1e-30;
        let err = (g as f64 - w as f64).abs();
        assert!(
            err <= bound,
            "{what}: element {i} = {g}, FP32 reference {w}, error {err:e} > bound {bound:e}"
        );
    }
}

#[test]
fn convolutions_follow_the_precision_policy() {
    let Some((dev, _serial)) = device() else {
        return;
    };
    let host = Device::builtin();
    for (p, algo, ks, pad) in [
        (Precision::Tf32, ops::ConvAlgo::Im2col, 3, 1),
        (Precision::Tf32, ops::ConvAlgo::Pointwise, 1, 0),
        (Precision::Fp16, ops::ConvAlgo::Im2col, 3, 1),
        (Precision::Fp16, ops::ConvAlgo::Pointwise, 1, 0),
    ] {
        let (n, c, h, w, f) = (2, 5, 9, 7, 6);
        let (xv, x) = operand(&dev, &[n, c, h, w], 60);
        let (wv, wt) = operand(&dev, &[f, c, ks, ks], 61);
        let opts = ops::Conv2dOptions {
            padding: [pad, pad],
            algo: Some(algo),
            ..Default::default()
        };
        let seq = last_seq();
        let y = precision::with(p, || ops::conv2d(&x, &wt, None, &opts)).unwrap();
        let (oh, ow) = (y.shape()[2], y.shape()[3]);
        let (gov, go) = operand(&dev, &[n, f, oh, ow], 62);
        let grads =
            precision::with(p, || ops::conv2d_backward(&x, &wt, &go, false, true, &opts)).unwrap();
        let at_p = decisions_since(seq)
            .into_iter()
            .filter(|d| d.kernel.contains(&format!("_{p}")))
            .count();
        assert!(
            at_p > 0,
            "{p} {algo:?}: no product of the convolution ran at {p}"
        );
        // The host computes FP32; the magnitudes come from the same convolutions of |x|, |w| and |g|.
        let plain = ops::Conv2dOptions {
            algo: None,
            ..opts.clone()
        };
        let (xh, wh, goh) = (
            x.to_device(&host).unwrap(),
            wt.to_device(&host).unwrap(),
            go.to_device(&host).unwrap(),
        );
        let (xa, wa, goa) = (
            abs_on_host(&xv, x.shape()),
            abs_on_host(&wv, wt.shape()),
            abs_on_host(&gov, go.shape()),
        );
        let want = ops::conv2d(&xh, &wh, None, &plain).unwrap();
        let mag = ops::conv2d(&xa, &wa, None, &plain).unwrap();
        check_bound(
            &y,
            &want,
            &mag,
            c * ks * ks,
            p,
            &format!("{p} {algo:?} forward"),
        );
        let want = ops::conv2d_backward(&xh, &wh, &goh, false, true, &plain).unwrap();
        let mag = ops::conv2d_backward(&xa, &wa, &goa, false, true, &plain).unwrap();
        check_bound(
            grads.grad_x.as_ref().unwrap(),
            want.grad_x.as_ref().unwrap(),
            mag.grad_x.as_ref().unwrap(),
            f * ks * ks,
            p,
            &format!("{p} {algo:?} grad_x"),
        );
        check_bound(
            &grads.grad_w,
            &want.grad_w,
            &mag.grad_w,
            n * oh * ow,
            p,
            &format!("{p} {algo:?} grad_w"),
        );
        // The operands really were rounded: the forward differs from the FP32 one somewhere.
        let y32 = ops::conv2d(&x, &wt, None, &opts)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        let yt = y.to_vec::<f32>().unwrap();
        assert!(
            y32.iter().zip(&yt).any(|(a, b)| a != b),
            "{p} {algo:?}: the forward equals the FP32 one bit for bit"
        );
    }
    // Winograd keeps FP32 products under TF32: the same bits as under FP32.
    let (_, x) = operand(&dev, &[2, 5, 9, 7], 63);
    let (_, wt) = operand(&dev, &[6, 5, 3, 3], 64);
    let opts = ops::Conv2dOptions {
        padding: [1, 1],
        algo: Some(ops::ConvAlgo::Winograd),
        ..Default::default()
    };
    let y32 = ops::conv2d(&x, &wt, None, &opts)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let yt = precision::with(Precision::Tf32, || ops::conv2d(&x, &wt, None, &opts))
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(y32, yt, "Winograd under TF32");
}
