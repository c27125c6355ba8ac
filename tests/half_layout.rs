//! f16 storage through the data-layout and transformer ops: max and average pooling (forward and backward,
//! global average pooling forward and backward), nearest and bilinear upsampling (forward and backward), permute,
//! transpose, narrow, split, cat, index_select, pad2d (zero and reflect, and its backward), dropout and its
//! backward, rope and its inverse, masked_fill (f32 and f16 masks), and embedding (forward, and the backward,
//! which reads an f16 gradient into an f32 table). Each case runs on f16 inputs of odd shapes on the OpenCL
//! device and on the built-in device, and is checked against the f32 result of the same values widened; topk (its
//! values keep the f16 dtype, its indices are i32) and one_hot_as with an f16 output are checked on their own.
//!
//! An f16 input must come out f16 (the table's `out` dtype): the op reads and writes halves itself, with no
//! cast to f32 and back around it.
//!
//! Tolerances. Data movement (`exact`) copies bits: the f16 output must equal the f32 result rounded to f16
//! exactly. Ops that compute (averages, interpolation, rotation, the dropout scale) compute in f32 on both sides
//! and round once; the f32 results differ by a few f32 ulps (the device's sin/cos, another summation order), which
//! can move a rounding by one f16 ulp (2^-11 ≈ 4.9e-4 relative): 1e-3 relative plus 1e-4 absolute for results
//! near zero. The embedding gradient is f32 on both sides: 1e-6.

mod common;
mod half_support;

use common::{assert_close, cpu, opencl_device};
use half_support::{halves, rounded};
use netcl::ops::{self, PadMode, Pool2d, Upsample};
use netcl::{DType, Device, Tensor};

type Op = fn(&[&Tensor]) -> Vec<Tensor>;

/// One table row: the input shapes (all f16 unless `f32_inputs` marks one), whether the op only moves values,
/// the dtype its outputs must have for f16 inputs, and the op.
struct Case {
    name: &'static str,
    shapes: &'static [&'static [usize]],
    f32_inputs: &'static [usize],
    exact: bool,
    out: DType,
    op: Op,
}

fn idx(dev: &Device, v: &[i32]) -> Tensor {
    Tensor::from_slice(dev, v, &[v.len()]).expect("indices")
}

fn pool() -> Pool2d {
    Pool2d::square(3, 2, 1)
}

fn maxpool_fwd(x: &[&Tensor]) -> Vec<Tensor> {
    let o = ops::max_pool2d(x[0], pool()).unwrap();
    vec![o.y, o.indices]
}

fn maxpool_bwd(x: &[&Tensor]) -> Vec<Tensor> {
    let o = ops::max_pool2d(x[0], pool()).unwrap();
    vec![ops::max_pool2d_backward(x[1], &o, x[0].shape(), pool()).unwrap()]
}

fn avgpool_fwd(x: &[&Tensor]) -> Vec<Tensor> {
    vec![
        ops::avg_pool2d(x[0], pool(), false).unwrap(),
        ops::avg_pool2d(x[0], Pool2d::square(2, 2, 0), true).unwrap(),
    ]
}

fn avgpool_bwd(x: &[&Tensor]) -> Vec<Tensor> {
    vec![ops::avg_pool2d_backward(x[1], x[0].shape(), pool(), false).unwrap()]
}

fn gap(x: &[&Tensor]) -> Vec<Tensor> {
    vec![
        ops::global_avg_pool2d(x[0]).unwrap(),
        ops::global_avg_pool2d_backward(x[1], x[0].shape()).unwrap(),
    ]
}

const BILINEAR: Upsample = Upsample::Bilinear {
    align_corners: false,
};

fn upsample_fwd(x: &[&Tensor]) -> Vec<Tensor> {
    vec![
        ops::upsample(x[0], (9, 11), Upsample::Nearest).unwrap(),
        ops::upsample(x[0], (9, 11), BILINEAR).unwrap(),
        ops::upsample(
            x[0],
            (8, 13),
            Upsample::Bilinear {
                align_corners: true,
            },
        )
        .unwrap(),
    ]
}

fn upsample_bwd(x: &[&Tensor]) -> Vec<Tensor> {
    vec![
        ops::upsample_backward(x[1], x[0].shape(), Upsample::Nearest).unwrap(),
        ops::upsample_backward(x[1], x[0].shape(), BILINEAR).unwrap(),
    ]
}

fn moves(x: &[&Tensor]) -> Vec<Tensor> {
    let mut v = vec![
        ops::permute(x[0], &[2, 0, 1]).unwrap(),
        ops::transpose(x[0], 0, 2).unwrap(),
        ops::narrow(x[0], 1, 1, 3).unwrap(),
        ops::cat(&[x[0], x[1]], 1).unwrap(),
        ops::index_select(x[0], 2, &idx(x[0].device(), &[6, 0, 3, 3])).unwrap(),
    ];
    v.extend(ops::split(x[0], 2, &[2, 5]).unwrap());
    v
}

fn cat_mixed(x: &[&Tensor]) -> Vec<Tensor> {
    vec![ops::cat(&[x[0], x[1]], 0).unwrap()]
}

fn pads(x: &[&Tensor]) -> Vec<Tensor> {
    vec![
        ops::pad2d(x[0], [1, 2, 0, 3], PadMode::Zero).unwrap(),
        ops::pad2d(x[0], [2, 1, 3, 2], PadMode::Reflect).unwrap(),
        ops::pad2d_backward(x[1], x[0].shape(), [2, 1, 3, 2], PadMode::Reflect).unwrap(),
    ]
}

fn dropouts(x: &[&Tensor]) -> Vec<Tensor> {
    vec![
        ops::dropout(x[0], 0.3, 11).unwrap(),
        ops::dropout_backward(x[0], 0.3, 11).unwrap(),
    ]
}

fn ropes(x: &[&Tensor]) -> Vec<Tensor> {
    let pos = idx(x[0].device(), &[4, 0, 9, 1, 2, 7, 3]);
    vec![
        ops::rope(x[0], None, 10000.0, false).unwrap(),
        ops::rope(x[0], Some(&pos), 500.0, true).unwrap(),
    ]
}

fn causal(x: &Tensor) -> Tensor {
    ops::causal_mask(&cpu(), 7)
        .and_then(|m| m.to_device(x.device()))
        .unwrap()
}

fn masked(x: &[&Tensor]) -> Vec<Tensor> {
    let m = causal(x[0]);
    let mh = m.cast(DType::F16).unwrap();
    vec![
        ops::masked_fill(x[0], &m, -1e4).unwrap(),
        ops::masked_fill(x[0], &mh, 0.5).unwrap(),
        ops::masked_fill_backward(x[0], &m).unwrap(),
    ]
}

fn embed(x: &[&Tensor]) -> Vec<Tensor> {
    let ids = idx(x[0].device(), &[3, 0, 10, 3, 7, 1, 1, 9, 2, 10]);
    let ids = ids.reshape(&[2, 5]).unwrap();
    vec![ops::embedding(x[0], &ids).unwrap()]
}

fn embed_bwd(x: &[&Tensor]) -> Vec<Tensor> {
    let ids = idx(x[0].device(), &[3, 0, 10, 3, 7, 1, 1, 9, 2, 10]);
    let ids = ids.reshape(&[2, 5]).unwrap();
    vec![ops::embedding_backward(&ids, x[0], 11).unwrap()]
}

const CASES: &[Case] = &[
    Case {
        name: "max_pool2d",
        shapes: &[&[2, 3, 7, 9]],
        f32_inputs: &[],
        exact: true,
        out: DType::F16,
        op: maxpool_fwd,
    },
    Case {
        name: "max_pool2d_backward",
        shapes: &[&[2, 3, 7, 9], &[2, 3, 4, 5]],
        f32_inputs: &[],
        exact: false,
        out: DType::F16,
        op: maxpool_bwd,
    },
    Case {
        name: "avg_pool2d",
        shapes: &[&[2, 3, 7, 9]],
        f32_inputs: &[],
        exact: false,
        out: DType::F16,
        op: avgpool_fwd,
    },
    Case {
        name: "avg_pool2d_backward",
        shapes: &[&[2, 3, 7, 9], &[2, 3, 4, 5]],
        f32_inputs: &[],
        exact: false,
        out: DType::F16,
        op: avgpool_bwd,
    },
    Case {
        name: "global_avg_pool2d and its backward",
        shapes: &[&[2, 3, 5, 7], &[2, 3, 1, 1]],
        f32_inputs: &[],
        exact: false,
        out: DType::F16,
        op: gap,
    },
    Case {
        name: "upsample",
        shapes: &[&[1, 3, 5, 7]],
        f32_inputs: &[],
        exact: false,
        out: DType::F16,
        op: upsample_fwd,
    },
    Case {
        name: "upsample_backward",
        shapes: &[&[1, 3, 5, 7], &[1, 3, 9, 11]],
        f32_inputs: &[],
        exact: false,
        out: DType::F16,
        op: upsample_bwd,
    },
    Case {
        name: "permute, transpose, narrow, cat, index_select, split",
        shapes: &[&[3, 5, 7], &[3, 2, 7]],
        f32_inputs: &[],
        exact: true,
        out: DType::F16,
        op: moves,
    },
    Case {
        name: "cat of f16 and f32 (promoted to f32)",
        shapes: &[&[2, 5, 3], &[3, 5, 3]],
        f32_inputs: &[1],
        exact: true,
        out: DType::F32,
        op: cat_mixed,
    },
    Case {
        name: "pad2d",
        shapes: &[&[2, 3, 5, 7], &[2, 3, 8, 12]],
        f32_inputs: &[],
        exact: false,
        out: DType::F16,
        op: pads,
    },
    Case {
        name: "dropout",
        shapes: &[&[3, 37, 5]],
        f32_inputs: &[],
        exact: false,
        out: DType::F16,
        op: dropouts,
    },
    Case {
        name: "rope",
        shapes: &[&[2, 3, 7, 10]],
        f32_inputs: &[],
        exact: false,
        out: DType::F16,
        op: ropes,
    },
    Case {
        name: "masked_fill",
        shapes: &[&[2, 3, 7, 7]],
        f32_inputs: &[],
        exact: true,
        out: DType::F16,
        op: masked,
    },
    Case {
        name: "embedding",
        shapes: &[&[11, 6]],
        f32_inputs: &[],
        exact: true,
        out: DType::F16,
        op: embed,
    },
    Case {
        name: "embedding_backward",
        shapes: &[&[2, 5, 6]],
        f32_inputs: &[],
        exact: false,
        out: DType::F32,
        op: embed_bwd,
    },
];

/// Index outputs (max pooling's) are compared as they are; float outputs as described at the top.
fn compare(case: &Case, k: usize, got: &Tensor, want: &Tensor, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    if got.dtype() == DType::I32 {
        assert_eq!(
            got.to_vec::<i32>().unwrap(),
            want.to_vec::<i32>().unwrap(),
            "{what}: indices"
        );
        return;
    }
    assert_eq!(got.dtype(), case.out, "{what}: output {k} dtype");
    let g = got.to_f32_vec().unwrap();
    match (case.out, case.exact) {
        (DType::F16, true) => assert_close(&g, &rounded(want), 0.0, 0.0, what),
        (DType::F16, false) => assert_close(&g, &rounded(want), 1e-4, 1e-3, what),
        _ => assert_close(&g, &want.to_f32_vec().unwrap(), 1e-6, 1e-6, what),
    }
}

#[test]
fn f16_goes_through_layout_and_transformer_ops_like_f32() {
    let Some(dev) = opencl_device() else { return };
    for (ci, case) in CASES.iter().enumerate() {
        let mut on_dev = Vec::new();
        let mut on_cpu = Vec::new();
        let mut wide = Vec::new();
        for (i, shape) in case.shapes.iter().enumerate() {
            let (h, w) = halves(&dev, shape, 900 + (ci * 4 + i) as u64);
            let h = if case.f32_inputs.contains(&i) {
                h.cast(DType::F32).unwrap()
            } else {
                h
            };
            on_cpu.push(h.to_device(&cpu()).unwrap());
            on_dev.push(h);
            wide.push(w);
        }
        let refs = |v: &[Tensor]| -> Vec<Tensor> {
            let r: Vec<&Tensor> = v.iter().collect();
            (case.op)(&r)
        };
        let want = refs(&wide);
        for (where_, got) in [("OpenCL", refs(&on_dev)), ("built-in", refs(&on_cpu))] {
            assert_eq!(got.len(), want.len(), "{}: outputs", case.name);
            for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                let what = format!("{} output {k} on the {where_} device", case.name);
                compare(case, k, g, w, &what);
            }
        }
    }
}

/// The f32 path of the same ops is unchanged by the f16 switches: f32 inputs give f32 outputs equal to the
/// built-in device's.
#[test]
fn f32_inputs_still_give_f32_outputs() {
    let Some(dev) = opencl_device() else { return };
    for (ci, case) in CASES.iter().enumerate() {
        let mut on_dev = Vec::new();
        let mut on_cpu = Vec::new();
        for (i, shape) in case.shapes.iter().enumerate() {
            let (_, w) = halves(&dev, shape, 700 + (ci * 4 + i) as u64);
            on_dev.push(w.to_device(&dev).unwrap());
            on_cpu.push(w);
        }
        let r: Vec<&Tensor> = on_dev.iter().collect();
        let got = (case.op)(&r);
        let r: Vec<&Tensor> = on_cpu.iter().collect();
        let want = (case.op)(&r);
        for (k, (g, w)) in got.iter().zip(&want).enumerate() {
            let what = format!("{} f32 output {k}", case.name);
            assert_eq!(g.dtype(), w.dtype(), "{what}: dtype");
            if g.dtype() == DType::F32 {
                assert_close(
                    &g.to_vec::<f32>().unwrap(),
                    &w.to_vec::<f32>().unwrap(),
                    1e-5,
                    1e-5,
                    &what,
                );
            }
        }
    }
}

/// topk keeps an f16 input's dtype for its values: the values and indices are those of the widened f32 input
/// (widening is exact, so the ranks and the ties are the same), on the OpenCL and the built-in device. The
/// input is quantised to a few levels so that many values tie and the lower-index rule is exercised.
#[test]
fn topk_and_one_hot_store_f16() {
    let Some(dev) = opencl_device() else { return };
    let raw = Tensor::randn(&cpu(), &[3, 37, 5], 0.0, 2.0, 77).unwrap();
    let q: Vec<f32> = raw
        .to_vec::<f32>()
        .unwrap()
        .into_iter()
        .map(|v| (v * 2.0).round() / 2.0)
        .collect();
    let wide = Tensor::from_slice(&cpu(), &q, &[3, 37, 5]).unwrap();
    let half = wide.cast(DType::F16).unwrap();
    for (axis, k, largest) in [
        (1isize, 6usize, true),
        (1, 37, false),
        (2, 3, true),
        (0, 2, false),
    ] {
        let (wv, wi) = ops::topk(&wide, k, axis, largest).unwrap();
        for (where_, x) in [
            ("OpenCL", half.to_device(&dev).unwrap()),
            ("built-in", half.clone()),
        ] {
            let what = format!("topk axis {axis} k {k} largest {largest} on the {where_} device");
            let (v, i) = ops::topk(&x, k, axis, largest).unwrap();
            assert_eq!(v.dtype(), DType::F16, "{what}: values dtype");
            assert_eq!(i.dtype(), DType::I32, "{what}: indices dtype");
            assert_close(
                &v.to_f32_vec().unwrap(),
                &wv.to_vec::<f32>().unwrap(),
                0.0,
                0.0,
                &what,
            );
            assert_eq!(
                i.to_vec::<i32>().unwrap(),
                wi.to_vec::<i32>().unwrap(),
                "{what}: indices"
            );
        }
    }
    let labels = [3, 0, 6, 6, 1];
    let want = ops::one_hot(&idx(&cpu(), &labels), 7).unwrap();
    for (where_, d) in [("OpenCL", dev.clone()), ("built-in", cpu())] {
        let got = ops::one_hot_as(&idx(&d, &labels), 7, DType::F16).unwrap();
        assert_eq!(got.dtype(), DType::F16, "one_hot_as on the {where_} device");
        assert_close(
            &got.to_f32_vec().unwrap(),
            &want.to_vec::<f32>().unwrap(),
            0.0,
            0.0,
            &format!("one_hot_as f16 on the {where_} device"),
        );
    }
    let err = ops::one_hot_as(&idx(&dev, &labels), 7, DType::I32).unwrap_err();
    assert!(err.to_string().contains("f32 or f16"), "{err}");
}
