//! Shape and index ops on OpenCL against the built-in device (exact: pure data movement, and pad2d's
//! backward as a gather against the reference's scatter), with analytic values and error cases.

mod common;
mod opsutil;

use common::{Lcg, assert_tensors_close};
use netcl::Tensor;
use netcl::ops::{self, PadMode};
use opsutil::{cpu, opencl_device, pair, with_specials};

fn same(a: &Tensor, b: &Tensor, what: &str) {
    assert_eq!(a.shape(), b.shape(), "{what}");
    assert_tensors_close(a, b, 0.0, 0.0, what);
}

#[test]
fn permute_narrow_cat_split_match_reference() {
    let Some(dev) = opencl_device() else { return };
    let mut r = Lcg(3);
    for case in 0..6 {
        let rank = r.range(1, 5);
        let shape: Vec<usize> = (0..rank).map(|_| r.range(1, 7)).collect();
        let (c, d) = with_specials(&dev, &shape, 10 + case);
        let mut dims: Vec<usize> = (0..rank).collect();
        dims.rotate_left(1);
        same(
            &ops::permute(&d, &dims).unwrap(),
            &ops::permute(&c, &dims).unwrap(),
            "permute",
        );
        same(
            &ops::transpose(&d, 0, -1).unwrap(),
            &ops::transpose(&c, 0, -1).unwrap(),
            "transpose",
        );
        let a = r.range(0, rank - 1);
        let n = shape[a];
        let start = r.range(0, n - 1);
        let len = n - start;
        same(
            &ops::narrow(&d, a as isize, start, len).unwrap(),
            &ops::narrow(&c, a as isize, start, len).unwrap(),
            "narrow",
        );
        let parts_d = ops::split(&d, a as isize, &[start, len]).unwrap();
        let parts_c = ops::split(&c, a as isize, &[start, len]).unwrap();
        for (pd, pc) in parts_d.iter().zip(&parts_c) {
            same(pd, pc, "split");
        }
        let back = ops::cat(&parts_d.iter().collect::<Vec<_>>(), a as isize).unwrap();
        same(&back, &c, "cat of split is the input");
    }
    let x = Tensor::from_slice(&dev, &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3]).unwrap();
    assert_eq!(
        ops::transpose(&x, 0, 1).unwrap().to_vec::<f32>().unwrap(),
        vec![1.0, 4.0, 2.0, 5.0, 3.0, 6.0]
    );
    assert!(ops::permute(&x, &[0, 0]).is_err());
    assert!(ops::narrow(&x, 1, 2, 2).is_err());
    assert!(ops::cat(&[&x, &Tensor::zeros(&dev, &[3, 3]).unwrap()], 1).is_err());
    assert_eq!(
        ops::cat(&[&x, &Tensor::zeros(&dev, &[3, 3]).unwrap()], 0)
            .unwrap()
            .shape(),
        &[5, 3]
    );
    assert!(ops::split(&x, 1, &[1, 1]).is_err());
}

#[test]
fn index_select_and_one_hot_match_reference() {
    let Some(dev) = opencl_device() else { return };
    let (c, d) = pair(&dev, &[6, 5, 3], 7);
    let idx: Vec<i32> = vec![4, 0, 0, 2];
    let ic = Tensor::from_slice(&cpu(), &idx, &[4]).unwrap();
    let id = ic.to_device(&dev).unwrap();
    for axis in [0isize, 1] {
        same(
            &ops::index_select(&d, axis, &id).unwrap(),
            &ops::index_select(&c, axis, &ic).unwrap(),
            "index_select",
        );
    }
    let bad = Tensor::from_slice(&dev, &[5i32], &[1]).unwrap();
    assert!(
        ops::index_select(&d, 1, &bad)
            .unwrap_err()
            .to_string()
            .contains("index 5")
    );
    let oh = ops::one_hot(&id, 6).unwrap();
    same(&oh, &ops::one_hot(&ic, 6).unwrap(), "one_hot");
    assert_eq!(
        &oh.to_vec::<f32>().unwrap()[..6],
        &[0.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    );
    assert!(
        ops::one_hot(&id, 4)
            .unwrap_err()
            .to_string()
            .contains("label 4")
    );
}

#[test]
fn pad2d_forward_and_backward_match_reference() {
    let Some(dev) = opencl_device() else { return };
    for (k, (shape, pads)) in [
        ([2, 3, 5, 4], [1, 2, 3, 0]),
        ([1, 1, 3, 3], [2, 2, 2, 2]),
        ([1, 2, 1, 6], [0, 0, 5, 1]),
    ]
    .into_iter()
    .enumerate()
    {
        let (c, d) = pair(&dev, &shape, 20 + k as u64);
        for mode in [PadMode::Zero, PadMode::Reflect] {
            let yd = match ops::pad2d(&d, pads, mode) {
                Ok(y) => y,
                Err(e) => {
                    assert!(mode == PadMode::Reflect, "{e}");
                    continue;
                }
            };
            let yc = ops::pad2d(&c, pads, mode).unwrap();
            same(&yd, &yc, &format!("pad2d {mode:?} {shape:?} {pads:?}"));
            let (gc, gd) = pair(&dev, yd.shape(), 30 + k as u64);
            let bd = ops::pad2d_backward(&gd, &shape, pads, mode).unwrap();
            let bc = ops::pad2d_backward(&gc, &shape, pads, mode).unwrap();
            assert_tensors_close(
                &bd,
                &bc,
                1e-6,
                1e-6,
                &format!("pad2d bwd {mode:?} {shape:?}"),
            );
        }
    }
    let x = Tensor::from_slice(&cpu(), &[1.0f32, 2.0, 3.0], &[1, 1, 1, 3]).unwrap();
    let y = ops::pad2d(&x, [0, 0, 2, 2], PadMode::Reflect)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(y, vec![3.0, 2.0, 1.0, 2.0, 3.0, 2.0, 1.0]);
    assert!(ops::pad2d(&x, [0, 0, 3, 0], PadMode::Reflect).is_err());
}

#[test]
fn upsample_matches_reference_forward_and_backward() {
    // 1e-5 absolute + 1e-5 relative: bilinear weights are computed in f32 on the device, f64 in the reference.
    let Some(dev) = opencl_device() else { return };
    for (k, (shape, size)) in [
        ([2, 3, 4, 5], (8, 10)),
        ([1, 2, 3, 3], (7, 5)),
        ([1, 1, 5, 4], (2, 3)),
        ([1, 1, 1, 1], (3, 2)),
    ]
    .into_iter()
    .enumerate()
    {
        let (c, d) = pair(&dev, &shape, 40 + k as u64);
        let (gc, gd) = pair(&dev, &[shape[0], shape[1], size.0, size.1], 50 + k as u64);
        for mode in [
            ops::Upsample::Nearest,
            ops::Upsample::Bilinear {
                align_corners: false,
            },
            ops::Upsample::Bilinear {
                align_corners: true,
            },
        ] {
            let what = format!("{mode:?} {shape:?} -> {size:?}");
            let yd = ops::upsample(&d, size, mode).unwrap();
            let yc = ops::upsample(&c, size, mode).unwrap();
            assert_tensors_close(&yd, &yc, 1e-5, 1e-5, &what);
            let bd = ops::upsample_backward(&gd, &shape, mode).unwrap();
            let bc = ops::upsample_backward(&gc, &shape, mode).unwrap();
            assert_tensors_close(&bd, &bc, 1e-5, 1e-5, &format!("backward {what}"));
        }
    }
    let x = Tensor::from_slice(&cpu(), &[1.0f32, 2.0], &[1, 1, 1, 2]).unwrap();
    let y = ops::upsample(&x, (1, 4), ops::Upsample::Nearest)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(y, vec![1.0, 1.0, 2.0, 2.0]);
    let y = ops::upsample(
        &x,
        (1, 3),
        ops::Upsample::Bilinear {
            align_corners: true,
        },
    )
    .unwrap()
    .to_vec::<f32>()
    .unwrap();
    assert_eq!(y, vec![1.0, 1.5, 2.0]);
}

#[test]
fn topk_matches_reference() {
    let Some(dev) = opencl_device() else { return };
    let (c, d) = with_specials(&dev, &[4, 9, 3], 60);
    for axis in [0isize, 1, 2] {
        for largest in [true, false] {
            let n = c.shape()[axis as usize];
            for k in [0, 1, n] {
                let (vd, id) = ops::topk(&d, k, axis, largest).unwrap();
                let (vc, ic) = ops::topk(&c, k, axis, largest).unwrap();
                same(
                    &vd,
                    &vc,
                    &format!("topk values axis {axis} k {k} largest {largest}"),
                );
                assert_eq!(id.to_vec::<i32>().unwrap(), ic.to_vec::<i32>().unwrap());
            }
        }
    }
    let x = Tensor::from_slice(&dev, &[3.0f32, 1.0, 3.0, 2.0], &[4]).unwrap();
    let (v, i) = ops::topk(&x, 3, 0, true).unwrap();
    assert_eq!(
        (v.to_vec::<f32>().unwrap(), i.to_vec::<i32>().unwrap()),
        (vec![3.0, 3.0, 2.0], vec![0, 2, 3])
    );
    assert!(ops::topk(&x, 5, 0, true).is_err());
}

#[test]
fn grid_striding_builds_of_every_3d_family_compile() {
    // Launches whose y or z extent exceeds 65535 groups use the GRID_LOOP build; make sure it compiles.
    let Some(dev) = opencl_device() else { return };
    for family in ["elementwise", "fused", "reduce", "pool", "shape", "resize"] {
        let src = netcl::program::kernel_source(family).unwrap();
        let defines = netcl::program::Defines::new().set("GRID_LOOP", 1);
        let names = netcl::program::build_check(&dev, src, &defines).unwrap();
        assert!(!names.is_empty(), "{family}");
    }
}
