//! Devices, tensors, the buffer pool, kernel builds, and the first two ops against the built-in device.

mod common;

use common::{Lcg, assert_close, cpu, devices, opencl_device, pair};
use netcl::program::Defines;
use netcl::{DType, Device, Error, Tensor, ops};

#[test]
fn listing_ends_with_the_builtin_device_and_indices_select() {
    let list = netcl::list_devices().expect("list");
    let last = list.last().expect("at least the built-in device");
    assert_eq!(last.kind, "builtin");
    for (i, d) in list.iter().enumerate() {
        assert_eq!(d.index, i);
        assert!(!d.name.is_empty());
        assert!(d.max_work_group_size >= 1);
        let dev = Device::select(Some(&i.to_string())).expect("select by index");
        assert_eq!(dev.info(), d);
    }
    assert_eq!(
        Device::select(Some("builtin"))
            .expect("builtin")
            .info()
            .kind,
        "builtin"
    );
    assert_eq!(
        Device::select(Some("BUILT-IN"))
            .expect("name substring")
            .info()
            .kind,
        "builtin"
    );
    // Selecting twice yields the same handle (shared context, kernels and pool).
    assert_eq!(
        Device::select(Some("builtin")).ok(),
        Some(Device::builtin())
    );
}

#[test]
fn opencl_devices_are_listed_with_their_limits() {
    let Some(dev) = opencl_device() else { return };
    let i = dev.info();
    assert!(
        i.kind == "gpu" || i.kind == "cpu" || i.kind == "accelerator",
        "{}",
        i.kind
    );
    assert!(i.compute_units >= 1 && i.global_mem_bytes > 0 && i.max_alloc_bytes > 0);
    assert!(
        i.opencl_c_version.contains("OpenCL C"),
        "{}",
        i.opencl_c_version
    );
    assert_eq!(i.max_work_item_sizes.len(), 3);
    let by_name =
        Device::select(Some(&i.name[..i.name.len().min(8)])).expect("select by name substring");
    assert!(by_name.is_opencl());
}

#[test]
fn unknown_selectors_are_clear_errors() {
    let e = Device::select(Some("no-such-device-xyz")).expect_err("unknown selector");
    assert!(matches!(e, Error::Device(_)));
    assert!(e.to_string().contains("no-such-device-xyz"), "{e}");
    let e = Device::select(Some("999")).expect_err("index out of range");
    assert!(e.to_string().contains("out of range"), "{e}");
}

#[test]
fn round_trips_every_dtype_and_size() {
    for dev in devices() {
        for n in [0usize, 1, 3, 7, 1023, 4097] {
            let f: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 - 3.0).collect();
            let t = Tensor::from_slice(&dev, &f, &[n]).expect("f32");
            assert_eq!(t.to_vec::<f32>().expect("read"), f);
            let i: Vec<i32> = (0..n as i32).map(|i| i * 7 - 11).collect();
            let t = Tensor::from_slice(&dev, &i, &[n, 1]).expect("i32");
            assert_eq!(t.dtype(), DType::I32);
            assert_eq!(t.to_vec::<i32>().expect("read"), i);
            assert!(
                t.to_vec::<f32>().is_err(),
                "dtype mismatch on read is an error"
            );
            // f16 storage needs no cl_khr_fp16: every device holds it.
            let h = Tensor::from_slice(&dev, &f, &[n])
                .and_then(|t| t.cast(DType::F16))
                .expect("f16");
            assert_eq!(h.dtype(), DType::F16);
            assert_close(
                &h.to_f32_vec().expect("read"),
                &f,
                1e-3,
                1e-3,
                "f16 round trip",
            );
        }
        let z = Tensor::zeros(&dev, &[2, 0, 3]).expect("zero-size");
        assert_eq!((z.numel(), z.to_vec::<f32>().expect("read").len()), (0, 0));
        let s = Tensor::full(&dev, &[], 2.5).expect("scalar");
        assert_eq!(s.to_vec::<f32>().expect("read"), vec![2.5]);
    }
}

#[test]
fn creation_helpers_agree_across_devices() {
    for dev in devices() {
        let a = Tensor::arange(&dev, 0.0, 5.0, 1.5).expect("arange");
        assert_eq!(a.to_vec::<f32>().expect("read"), vec![0.0, 1.5, 3.0, 4.5]);
        assert_eq!(
            Tensor::ones(&dev, &[3])
                .and_then(|t| t.to_vec::<f32>())
                .expect("ones"),
            vec![1.0; 3]
        );
        let r1 = Tensor::randn(&dev, &[5, 3], 1.0, 2.0, 42)
            .and_then(|t| t.to_vec::<f32>())
            .expect("randn");
        let r2 = Tensor::randn(&cpu(), &[5, 3], 1.0, 2.0, 42)
            .and_then(|t| t.to_vec::<f32>())
            .expect("randn");
        assert_eq!(r1, r2, "a seed gives the same values on every device");
        let u = Tensor::rand_uniform(&dev, &[1000], -1.0, 1.0, 9)
            .and_then(|t| t.to_vec::<f32>())
            .expect("uniform");
        assert!(u.iter().all(|v| (-1.0..1.0).contains(v)));
    }
}

#[test]
fn reshape_is_a_view_and_copies_are_independent() {
    for dev in devices() {
        let t = Tensor::arange(&dev, 0.0, 12.0, 1.0).expect("arange");
        let v = t
            .reshape(&[3, usize::MAX])
            .expect("reshape with inferred dim");
        assert_eq!(v.shape(), &[3, 4]);
        assert!(v.shares_storage(&t));
        assert!(t.reshape(&[5, 3]).is_err());
        let c = t.deep_clone().expect("clone");
        assert!(!c.shares_storage(&t));
        assert_eq!(
            c.to_vec::<f32>().expect("read"),
            t.to_vec::<f32>().expect("read")
        );
        let back = t.to_device(&cpu()).expect("to cpu");
        assert_eq!(
            back.to_vec::<f32>().expect("read"),
            t.to_vec::<f32>().expect("read")
        );
    }
}

#[test]
fn bad_input_is_rejected_with_clear_errors() {
    let dev = cpu();
    let e = Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0], &[2, 2]).expect_err("count mismatch");
    assert!(
        matches!(e, Error::Shape(_)) && e.to_string().contains("[2, 2]"),
        "{e}"
    );
    let e = Tensor::randn(&dev, &[2], f32::NAN, 1.0, 0).expect_err("non-finite mean");
    assert!(matches!(e, Error::Invalid(_)), "{e}");
    let e = Tensor::rand_uniform(&dev, &[2], 0.0, f32::INFINITY, 0).expect_err("non-finite bound");
    assert!(matches!(e, Error::Invalid(_)), "{e}");
    for d in devices() {
        let e = Tensor::zeros(&d, &[1 << 20, 1 << 20]).expect_err("oversized");
        assert!(matches!(e, Error::Limit(_)), "{e}");
        assert!(e.to_string().contains("largest allocation"), "{e}");
        let e = Tensor::zeros(&d, &[usize::MAX / 2, 4]).expect_err("overflow");
        assert!(matches!(e, Error::Shape(_) | Error::Limit(_)), "{e}");
    }
    let a = Tensor::zeros(&dev, &[2, 3]).expect("a");
    let b = Tensor::zeros(&dev, &[4, 3]).expect("b");
    let e = ops::add(&a, &b).expect_err("incompatible broadcast");
    assert!(
        matches!(e, Error::Shape(_))
            && e.to_string().contains("[2, 3]")
            && e.to_string().contains("[4, 3]"),
        "{e}"
    );
    let i = Tensor::from_slice(&dev, &[1i32, 2, 3], &[3]).expect("i32");
    assert!(
        matches!(
            ops::add(&i, &i),
            Err(Error::DTypeMismatch {
                expected: "f32",
                got: "i32",
                ..
            })
        ),
        "add of i32 tensors is a dtype mismatch"
    );
    if let Some(cl) = opencl_device() {
        let x = Tensor::zeros(&cl, &[3]).expect("x");
        let y = Tensor::zeros(&dev, &[3]).expect("y");
        assert!(matches!(
            ops::add(&x, &y),
            Err(Error::DeviceMismatch { ref op, .. }) if op == "add"
        ));
    }
}

#[test]
fn pool_reuses_buffers_and_counts() {
    for dev in devices() {
        dev.pool_clear();
        let before = dev.pool_stats();
        let shape = [777, 13];
        drop(Tensor::zeros(&dev, &shape).expect("first"));
        let mid = dev.pool_stats();
        assert!(mid.bytes_cached >= netcl::memory::size_class(777 * 13 * 4) as u64);
        let t = Tensor::zeros(&dev, &shape).expect("second");
        let after = dev.pool_stats();
        assert!(
            after.hits > before.hits,
            "the second allocation of one size class is a pool hit: {before:?} → {after:?}"
        );
        assert!(after.bytes_in_use >= netcl::memory::size_class(777 * 13 * 4) as u64);
        assert_eq!(
            t.to_vec::<f32>().expect("read"),
            vec![0.0; 777 * 13],
            "a recycled buffer is filled when asked"
        );
        drop(t);
        dev.pool_clear();
        assert_eq!(dev.pool_stats().bytes_cached, 0);
    }
    assert_eq!(netcl::memory::size_class(1), 1024);
    assert_eq!(netcl::memory::size_class(1025), 4096);
    assert_eq!(netcl::memory::size_class(300 << 20), 512 << 20);
}

#[test]
fn a_kernel_build_failure_carries_the_build_log() {
    let Some(dev) = opencl_device() else { return };
    let names = netcl::program::build_check(
        &dev,
        "__kernel void ok(__global float* x) { x[0] = 1.0f; }",
        &Defines::new(),
    )
    .expect("valid source builds");
    assert_eq!(names, vec!["ok".to_string()]);
    let bad = "__kernel void broken(__global float* x) { x[0] = undefined_name_q; }";
    let e = netcl::program::build_check(&dev, bad, &Defines::new().set("TILE", 16))
        .expect_err("must fail");
    match &e {
        Error::Build { log, options, .. } => {
            assert!(
                log.contains("undefined_name_q"),
                "the log names the bad identifier: {log}"
            );
            assert!(options.contains("-D TILE=16"), "{options}");
        }
        other => panic!("expected a build error, got {other}"),
    }
    assert!(netcl::program::kernel_source("elementwise").is_some());
    assert!(netcl::program::kernel_families().any(|f| f == "reduce"));
}

fn check_add(dev: &Device, sa: &[usize], sb: &[usize], seed: u64) {
    let (ca, da) = pair(dev, sa, seed);
    let (cb, db) = pair(dev, sb, seed + 1);
    let want = ops::add(&ca, &cb).expect("cpu add");
    let got = ops::add(&da, &db).expect("device add");
    assert_eq!(got.shape(), want.shape(), "{sa:?}+{sb:?}");
    // Addition is exact in f32 on both sides.
    assert_eq!(
        got.to_vec::<f32>().expect("read"),
        want.to_vec::<f32>().expect("read"),
        "{sa:?}+{sb:?}"
    );
}

#[test]
fn add_broadcasts_like_the_reference() {
    let Some(dev) = opencl_device() else { return };
    let cases: &[(&[usize], &[usize])] = &[
        (&[7], &[7]),
        (&[1023], &[1023]),
        (&[5, 3], &[3]),
        (&[5, 3], &[5, 1]),
        (&[1], &[4, 5]),
        (&[2, 1, 3], &[4, 1]),
        (&[3, 1, 2, 1, 5, 1], &[1, 4, 1, 3, 1, 2]),
        (&[2, 3, 1, 2, 3, 1, 2], &[3, 2, 1, 3, 2, 1]),
        (&[0, 3], &[1, 3]),
        (&[], &[6]),
    ];
    for (i, (a, b)) in cases.iter().enumerate() {
        check_add(&dev, a, b, 100 + i as u64);
    }
    let mut r = Lcg(7);
    for i in 0..20 {
        let rank = r.range(1, 5);
        let out: Vec<usize> = (0..rank).map(|_| r.range(1, 6)).collect();
        let a: Vec<usize> = out
            .iter()
            .map(|&d| if r.range(0, 2) == 0 { 1 } else { d })
            .collect();
        let b: Vec<usize> = out[r.range(0, rank - 1)..]
            .iter()
            .map(|&d| if r.range(0, 2) == 0 { 1 } else { d })
            .collect();
        check_add(&dev, &a, &b, 200 + i);
    }
}

#[test]
fn elementwise_propagates_non_finite_values() {
    let vals = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1.0, -0.0, 0.0];
    for dev in devices() {
        let a = Tensor::from_slice(&dev, &vals, &[6, 1]).expect("a");
        let b = Tensor::from_slice(&dev, &vals, &[1, 6]).expect("b");
        for op in [
            ops::BinaryOp::Add,
            ops::BinaryOp::Sub,
            ops::BinaryOp::Mul,
            ops::BinaryOp::Div,
            ops::BinaryOp::Max,
            ops::BinaryOp::Min,
        ] {
            let got = ops::binary(op, &a, &b)
                .and_then(|t| t.to_vec::<f32>())
                .expect("op");
            let want: Vec<f32> = vals
                .iter()
                .flat_map(|&x| vals.iter().map(move |&y| op.apply(x, y)))
                .collect();
            assert_close(&got, &want, 0.0, 0.0, op.name());
        }
    }
}

#[test]
fn sum_all_matches_the_reference() {
    let Some(dev) = opencl_device() else { return };
    for (i, n) in [
        0usize, 1, 2, 3, 7, 8, 9, 255, 256, 257, 4099, 65_537, 1_000_003,
    ]
    .into_iter()
    .enumerate()
    {
        let (c, d) = pair(&dev, &[n], 300 + i as u64);
        let want = ops::sum_all(&c)
            .and_then(|t| t.to_vec::<f32>())
            .expect("cpu");
        let got = ops::sum_all(&d)
            .and_then(|t| t.to_vec::<f32>())
            .expect("device");
        let scale = c
            .to_vec::<f32>()
            .expect("read")
            .iter()
            .map(|v| v.abs())
            .sum::<f32>();
        // f32 partial sums against an f64 reference: error bounded relative to Σ|x|.
        assert!(
            (got[0] - want[0]).abs() <= 1e-5 * scale + 1e-6,
            "n={n}: {} vs {}",
            got[0],
            want[0]
        );
    }
    let special = Tensor::from_slice(&dev, &[1.0f32, f32::INFINITY, 2.0], &[3]).expect("inf");
    assert_eq!(
        ops::sum_all(&special)
            .and_then(|t| t.to_vec::<f32>())
            .expect("sum"),
        vec![f32::INFINITY]
    );
    let nan = Tensor::from_slice(&dev, &[1.0f32, f32::NAN, 2.0], &[3]).expect("nan");
    assert!(
        ops::sum_all(&nan)
            .and_then(|t| t.to_vec::<f32>())
            .expect("sum")[0]
            .is_nan()
    );
}

#[test]
fn launches_are_recorded_with_device_times() {
    let Some(dev) = opencl_device() else { return };
    let a = Tensor::ones(&dev, &[64, 64]).expect("a");
    dev.record_launches(true);
    let s = ops::add(&a, &a)
        .and_then(|t| ops::sum_all(&t))
        .expect("ops");
    let launches = dev.take_launches().expect("take");
    dev.record_launches(false);
    assert_eq!(s.to_vec::<f32>().expect("read"), vec![8192.0]);
    assert!(
        launches.iter().any(|l| l.kernel == "binary_same"),
        "{launches:?}"
    );
    assert!(
        launches.iter().any(|l| l.kernel.starts_with("red_")),
        "{launches:?}"
    );
    assert!(launches.iter().all(|l| l.ms >= 0.0));
}
