//! One vocabulary of elementwise ops: every op of `ops::OPS` gives the same values on the built-in device and
//! on OpenCL, through its unary or binary kernel and through a fused expression, and both match the table's
//! reference maths.

mod common;

use common::{assert_close, cpu, opencl_device};
use netcl::ops::{self, BinaryOp, OPS, OpDef, UnaryOp};
use netcl::{Device, Tensor};

const X: [f32; 12] = [
    -4.0,
    -2.6,
    -1.0,
    -0.5,
    -0.0,
    0.0,
    0.25,
    0.7,
    1.0,
    2.4,
    3.5,
    f32::NAN,
];
const ATOL: f32 = 2e-6;
const RTOL: f32 = 2e-5;

/// The operands of `def` for each sample: x from `X`; a parameter-like second and third operand that keep the
/// op in its domain (a slope, a clamp range with lo ≤ hi, a where condition).
fn operands(def: &OpDef) -> Vec<Vec<f32>> {
    let n = X.len();
    let second: Vec<f32> = (0..n).map(|i| [0.1, 1.5, -0.75, 2.0][i % 4]).collect();
    let third: Vec<f32> = (0..n).map(|i| [0.5, 2.0, 1.0, 3.0][i % 4]).collect();
    match (def.name, def.arity) {
        ("clamp", _) => vec![X.to_vec(), second.iter().map(|v| v - 1.0).collect(), third],
        ("where", _) => vec![
            (0..n).map(|i| (i % 3) as f32 - 1.0).collect(),
            X.to_vec(),
            second,
        ],
        (_, 1) => vec![X.to_vec()],
        (_, 2) => vec![X.to_vec(), second],
        _ => vec![X.to_vec(), second, third],
    }
}

fn reference(def: &OpDef, args: &[Vec<f32>]) -> Vec<f32> {
    (0..X.len())
        .map(|i| {
            let a: Vec<f32> = args.iter().map(|v| v[i]).collect();
            def.apply(&a)
        })
        .collect()
}

fn run_fused(dev: &Device, def: &OpDef, args: &[Vec<f32>]) -> Vec<f32> {
    let ts: Vec<Tensor> = args
        .iter()
        .map(|v| Tensor::from_slice(dev, v, &[v.len()]).expect("input"))
        .collect();
    let refs: Vec<&Tensor> = ts.iter().collect();
    let names: Vec<String> = (0..def.arity).map(|k| format!("x{k}")).collect();
    let expr = format!("{}({})", def.name, names.join(", "));
    ops::fused(&expr, &refs)
        .and_then(|t| t.to_f32_vec())
        .unwrap_or_else(|e| panic!("{expr} on {}: {e}", dev.name()))
}

#[test]
fn every_op_through_a_fused_expression_matches_the_reference_on_both_devices() {
    let host = cpu();
    let cl = opencl_device();
    for def in OPS {
        let args = operands(def);
        let want = reference(def, &args);
        let got = run_fused(&host, def, &args);
        assert_close(
            &got,
            &want,
            0.0,
            0.0,
            &format!("{} fused on the built-in device", def.name),
        );
        if let Some(cl) = &cl {
            let got = run_fused(cl, def, &args);
            assert_close(
                &got,
                &want,
                ATOL,
                RTOL,
                &format!("{} fused on {}", def.name, cl.name()),
            );
        }
    }
}

#[test]
fn every_unary_op_forward_and_backward_agrees_between_devices() {
    let host = cpu();
    let Some(cl) = opencl_device() else { return };
    let g: Vec<f32> = (0..X.len()).map(|i| 0.5 + i as f32 * 0.25).collect();
    for op in UnaryOp::all() {
        let on = |dev: &Device| {
            let x = Tensor::from_slice(dev, &X, &[X.len()]).expect("x");
            let gt = Tensor::from_slice(dev, &g, &[g.len()]).expect("g");
            let y = ops::unary(op, &x).and_then(|t| t.to_f32_vec());
            let dx = ops::unary_backward(op, &x, &gt).and_then(|t| t.to_f32_vec());
            (y.expect("forward"), dx.expect("backward"))
        };
        let (y_host, dx_host) = on(&host);
        let want: Vec<f32> = X.iter().map(|&v| op.forward_ref(v)).collect();
        assert_close(
            &y_host,
            &want,
            0.0,
            0.0,
            &format!("{} reference", op.name()),
        );
        let (y_cl, dx_cl) = on(&cl);
        assert_close(
            &y_cl,
            &y_host,
            ATOL,
            RTOL,
            &format!("{} forward", op.name()),
        );
        assert_close(
            &dx_cl,
            &dx_host,
            ATOL,
            RTOL,
            &format!("{} backward", op.name()),
        );
    }
}

#[test]
fn every_binary_op_agrees_between_devices_and_with_its_fused_form() {
    let host = cpu();
    let cl = opencl_device();
    let b: Vec<f32> = X.iter().rev().map(|v| v * 0.5 + 0.25).collect();
    for op in BinaryOp::all() {
        let on = |dev: &Device| {
            let x = Tensor::from_slice(dev, &X, &[X.len()]).expect("a");
            let y = Tensor::from_slice(dev, &b, &[b.len()]).expect("b");
            ops::binary(op, &x, &y)
                .and_then(|t| t.to_f32_vec())
                .expect("binary")
        };
        let want: Vec<f32> = X.iter().zip(&b).map(|(&x, &y)| op.apply(x, y)).collect();
        assert_close(&on(&host), &want, 0.0, 0.0, op.name());
        let fused = run_fused(&host, op.def(), &[X.to_vec(), b.clone()]);
        assert_close(&fused, &want, 0.0, 0.0, &format!("{} fused", op.name()));
        if let Some(cl) = &cl {
            assert_close(
                &on(cl),
                &want,
                ATOL,
                RTOL,
                &format!("{} on {}", op.name(), cl.name()),
            );
        }
    }
}

#[test]
fn nested_expressions_of_activations_agree_between_devices() {
    let host = cpu();
    let Some(cl) = opencl_device() else { return };
    let expr =
        "hard_swish(clamp(x0, -3, 3)) + max(silu(x1), gelu_erf(x0)) * leaky_relu(x1 - x0, 0.2)";
    let a: Vec<f32> = (0..64).map(|i| (i as f32 - 32.0) * 0.17).collect();
    let b: Vec<f32> = (0..64)
        .map(|i| ((i * 7) % 64) as f32 * 0.11 - 3.0)
        .collect();
    let on = |dev: &Device| {
        let x = Tensor::from_slice(dev, &a, &[8, 8]).expect("x0");
        let y = Tensor::from_slice(dev, &b, &[8, 8]).expect("x1");
        ops::fused(expr, &[&x, &y])
            .and_then(|t| t.to_f32_vec())
            .expect("fused")
    };
    assert_close(&on(&cl), &on(&host), 1e-5, 1e-4, expr);
}
