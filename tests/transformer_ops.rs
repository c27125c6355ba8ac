//! The transformer ops on OpenCL against the built-in device: rope (netcl's pair layout, default and given
//! positions, the inverse, its gradient as the adjoint), masked_fill and causal_mask (and attention composed
//! from them equal to causal flash attention), embedding and its gradient with repeated indices, RMS norm
//! through autograd against finite differences, and the errors of bad input.
//!
//! Tolerances: rope 1e-5 absolute + 1e-5 relative (f32 sin/cos at angles up to 100 rad); masked_fill exact;
//! embedding gradient 1e-5 (atomic adds in any order); finite differences 2e-3 + 2e-2 relative.

mod common;
mod opsutil;

use common::assert_close;
use netcl::autograd::{self, Var};
use netcl::{DType, Tensor, ops};
use opsutil::{cpu, opencl_device, pair};

fn v(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

#[test]
fn rope_matches_the_reference_and_its_layout() {
    let Some(dev) = opencl_device() else { return };
    for (shape, seed) in [
        (vec![1, 1, 1, 40], 1u64),
        (vec![2, 3, 7, 64], 2),
        (vec![33, 128], 3),
        (vec![1, 100, 256], 4),
    ] {
        let (xc, xd) = pair(&dev, &shape, seed);
        for inverse in [false, true] {
            let yc = ops::rope(&xc, None, 10000.0, inverse).unwrap();
            let yd = ops::rope(&xd, None, 10000.0, inverse).unwrap();
            // The angle p·base^(−2t/D) is an f32 on the device: at position 99 its rounding alone is up to
            // 99·2⁻²⁴ ≈ 6e-6 rad, and the device's cos/sin add a few ulp (2e-5 seen on an NVIDIA H200).
            assert_close(
                &v(&yd),
                &v(&yc),
                5e-5,
                1e-5,
                &format!("rope {shape:?} inverse {inverse}"),
            );
        }
        // The inverse undoes the rotation.
        let back = ops::rope(
            &ops::rope(&xd, None, 10000.0, false).unwrap(),
            None,
            10000.0,
            true,
        )
        .unwrap();
        assert_close(&v(&back), &v(&xd), 5e-5, 1e-5, "rope then inverse");
    }
    // netcl's layout: pair (2t, 2t+1) at position p turns by p·base^(−2t/D).
    let c = cpu();
    let x = Tensor::from_slice(&c, &[1.0f32, 0.0, 1.0, 0.0], &[1, 4]).unwrap();
    let pos = Tensor::from_slice(&c, &[3i32], &[1]).unwrap();
    let y = v(&ops::rope(&x, Some(&pos), 100.0, false).unwrap());
    let (a0, a1) = (3.0f32, 3.0f32 * 100f32.powf(-0.5));
    assert_close(
        &y,
        &[a0.cos(), a0.sin(), a1.cos(), a1.sin()],
        1e-6,
        1e-6,
        "rope layout",
    );
    // Given positions on the device.
    let (xc, xd) = pair(&dev, &[2, 5, 8], 5);
    let p: Vec<i32> = vec![4, 0, 9, 2, 7];
    let pc = Tensor::from_slice(&c, &p, &[5]).unwrap();
    let pd = Tensor::from_slice(&dev, &p, &[5]).unwrap();
    assert_close(
        &v(&ops::rope(&xd, Some(&pd), 500.0, false).unwrap()),
        &v(&ops::rope(&xc, Some(&pc), 500.0, false).unwrap()),
        1e-5,
        1e-5,
        "rope with positions",
    );
}

#[test]
fn rope_gradient_is_the_adjoint() {
    let Some(dev) = opencl_device() else { return };
    let shape = [2, 7, 40];
    let (_, x) = pair(&dev, &shape, 11);
    let (_, g) = pair(&dev, &shape, 12);
    let xv = Var::param(x.clone());
    let y = autograd::attention::rope(&xv, None, 10000.0).unwrap();
    let w = Var::constant(g.clone());
    autograd::ops::sum_all(&autograd::ops::mul(&y, &w).unwrap())
        .unwrap()
        .backward()
        .unwrap();
    let grad = v(&xv.grad().unwrap());
    // <rope(x), g> = <x, grad> for a linear map and its adjoint.
    let lhs: f64 = v(&y.value().clone())
        .iter()
        .zip(v(&g))
        .map(|(a, b)| (*a * b) as f64)
        .sum();
    let rhs: f64 = v(&x).iter().zip(&grad).map(|(a, b)| (*a * *b) as f64).sum();
    assert!((lhs - rhs).abs() < 1e-3, "{lhs} vs {rhs}");
}

#[test]
fn masked_fill_and_causal_mask_compose_causal_attention() {
    let Some(dev) = opencl_device() else { return };
    let m = ops::causal_mask(&dev, 4).unwrap();
    assert_eq!(
        v(&m),
        vec![
            0., 1., 1., 1., 0., 0., 1., 1., 0., 0., 0., 1., 0., 0., 0., 0.
        ]
    );
    let (xc, xd) = pair(&dev, &[2, 3, 7, 7], 21);
    let mc = ops::causal_mask(&cpu(), 7)
        .unwrap()
        .reshape(&[1, 1, 7, 7])
        .unwrap();
    let md = ops::causal_mask(&dev, 7).unwrap();
    let yc = ops::masked_fill(&xc, &mc, -1e9).unwrap();
    let yd = ops::masked_fill(&xd, &md, -1e9).unwrap();
    assert_eq!(v(&yd), v(&yc));
    let gb = ops::masked_fill_backward(&xd, &md).unwrap();
    for (i, (g, x)) in v(&gb).iter().zip(v(&xd)).enumerate() {
        let (r, c) = ((i / 7) % 7, i % 7);
        assert_eq!(*g, if c > r { 0.0 } else { x }, "backward [{i}]");
    }
    // softmax(masked_fill(q·kᵀ/√D, causal, -inf))·v = causal flash attention.
    let (_, q) = pair(&dev, &[1, 2, 7, 40], 22);
    let (_, k) = pair(&dev, &[1, 2, 7, 40], 23);
    let (_, vv) = pair(&dev, &[1, 2, 7, 40], 24);
    let (q3, k3, v3) = (
        q.reshape(&[2, 7, 40]).unwrap(),
        k.reshape(&[2, 7, 40]).unwrap(),
        vv.reshape(&[2, 7, 40]).unwrap(),
    );
    let s = ops::mul_scalar(
        &ops::bmm(&q3, &k3, false, true).unwrap(),
        1.0 / 40f32.sqrt(),
    )
    .unwrap();
    let p = ops::softmax(&ops::masked_fill(&s, &md, f32::NEG_INFINITY).unwrap(), -1).unwrap();
    let o = ops::bmm(&p, &v3, false, false).unwrap();
    let f = ops::flash_attention(&q, &k, &vv, true, None).unwrap();
    assert_close(&v(&f.out), &v(&o), 2e-5, 1e-4, "composed vs flash");
}

#[test]
fn embedding_and_its_gradient_with_repeated_indices() {
    let Some(dev) = opencl_device() else { return };
    let (wc, wd) = pair(&dev, &[11, 40], 31);
    let idx: Vec<i32> = vec![3, 0, 3, 10, 3, 7, 0, 3, 3, 1, 10, 3];
    let ic = Tensor::from_slice(&cpu(), &idx, &[3, 4]).unwrap();
    let id = Tensor::from_slice(&dev, &idx, &[3, 4]).unwrap();
    let yd = ops::embedding(&wd, &id).unwrap();
    assert_eq!(yd.shape(), &[3, 4, 40]);
    assert_eq!(v(&yd), v(&ops::embedding(&wc, &ic).unwrap()));
    let (gc, gd) = pair(&dev, &[3, 4, 40], 32);
    let dwc = ops::embedding_backward(&ic, &gc, 11).unwrap();
    let dwd = ops::embedding_backward(&id, &gd, 11).unwrap();
    assert_close(&v(&dwd), &v(&dwc), 1e-5, 1e-5, "embedding gradient");
    // Row 3 gathers six gradient rows, rows never indexed stay zero.
    let g = v(&gc);
    let want3: f32 = [0usize, 2, 4, 7, 8, 11]
        .iter()
        .map(|&n| g[n * 40 + 5])
        .sum();
    let dw = v(&dwd);
    assert!((dw[3 * 40 + 5] - want3).abs() < 1e-5);
    assert!(dw[2 * 40..3 * 40].iter().all(|&x| x == 0.0));
    // Many repeats of one row: every work-item adds into the same 40 floats.
    let n = 4096;
    let same = Tensor::from_slice(&dev, &vec![5i32; n], &[n]).unwrap();
    let ones = Tensor::full(&dev, &[n, 40], 0.5).unwrap();
    let dw = v(&ops::embedding_backward(&same, &ones, 8).unwrap());
    assert!(
        dw[5 * 40..6 * 40].iter().all(|&x| x == 2048.0),
        "{:?}",
        &dw[200..204]
    );
    // Through autograd.
    let wv = Var::param(wd.clone());
    let y = autograd::attention::embedding(&wv, &id).unwrap();
    autograd::ops::sum_all(&autograd::ops::mul(&y, &Var::constant(gd.clone())).unwrap())
        .unwrap()
        .backward()
        .unwrap();
    assert_close(
        &v(&wv.grad().unwrap()),
        &v(&dwc),
        1e-5,
        1e-5,
        "autograd embedding",
    );
}

#[test]
fn rms_norm_gradients_match_finite_differences() {
    let c = cpu();
    let x = Tensor::randn(&c, &[3, 7, 40], 0.0, 1.0, 41).unwrap();
    let gamma = Tensor::randn(&c, &[40], 1.0, 0.1, 42).unwrap();
    let w = Tensor::randn(&c, &[3, 7, 40], 0.0, 1.0, 43).unwrap();
    let loss = |x: &Tensor, g: &Tensor| -> f64 {
        let y = v(&ops::rms_norm(x, Some(g), 1e-6).unwrap().y);
        y.iter().zip(v(&w)).map(|(a, b)| (*a * b) as f64).sum()
    };
    let (xv, gv) = (Var::param(x.clone()), Var::param(gamma.clone()));
    let y = autograd::attention::rms_norm(&xv, &gv, 1e-6).unwrap();
    autograd::ops::sum_all(&autograd::ops::mul(&y, &Var::constant(w.clone())).unwrap())
        .unwrap()
        .backward()
        .unwrap();
    let (dx, dg) = (v(&xv.grad().unwrap()), v(&gv.grad().unwrap()));
    let h = 1e-2f32;
    for i in [0usize, 41, 400, 839] {
        let mut p = v(&x);
        p[i] += h;
        let mut m = v(&x);
        m[i] -= h;
        let t = |d: &[f32]| Tensor::from_slice(&c, d, &[3, 7, 40]).unwrap();
        let fd = ((loss(&t(&p), &gamma) - loss(&t(&m), &gamma)) / (2.0 * h as f64)) as f32;
        assert_close(&[dx[i]], &[fd], 2e-3, 2e-2, &format!("dx[{i}]"));
    }
    for i in [0usize, 17, 39] {
        let mut p = v(&gamma);
        p[i] += h;
        let mut m = v(&gamma);
        m[i] -= h;
        let t = |d: &[f32]| Tensor::from_slice(&c, d, &[40]).unwrap();
        let fd = ((loss(&x, &t(&p)) - loss(&x, &t(&m))) / (2.0 * h as f64)) as f32;
        assert_close(&[dg[i]], &[fd], 2e-3, 2e-2, &format!("dgamma[{i}]"));
    }
}

#[test]
fn bad_input_is_a_clear_error() {
    let Some(dev) = opencl_device() else { return };
    let x = Tensor::zeros(&dev, &[2, 7, 5]).unwrap();
    let e = ops::rope(&x, None, 10000.0, false).unwrap_err().to_string();
    assert!(e.contains("even") && e.contains('5'), "{e}");
    let x = Tensor::zeros(&dev, &[2, 7, 8]).unwrap();
    let p = Tensor::from_slice(&dev, &[0i32, 1, 2], &[3]).unwrap();
    let e = ops::rope(&x, Some(&p), 10000.0, false)
        .unwrap_err()
        .to_string();
    assert!(e.contains("[7]") && e.contains("[3]"), "{e}");
    let pf = Tensor::zeros(&dev, &[7]).unwrap();
    assert!(ops::rope(&x, Some(&pf), 10000.0, false).is_err());
    let e = ops::masked_fill(&x, &Tensor::zeros(&dev, &[7, 7]).unwrap(), 0.0)
        .unwrap_err()
        .to_string();
    assert!(e.contains("[7, 7]") && e.contains("[2, 7, 8]"), "{e}");
    let w = Tensor::zeros(&dev, &[4, 3]).unwrap();
    let bad = Tensor::from_slice(&dev, &[1i32, 4], &[2]).unwrap();
    let e = ops::embedding(&w, &bad).unwrap_err().to_string();
    assert!(e.contains("index 4") && e.contains("0..4"), "{e}");
    let fidx = Tensor::zeros_dtype(&dev, &[2], DType::F32).unwrap();
    assert!(ops::embedding(&w, &fidx).is_err());
    let g = Tensor::zeros(&dev, &[3, 3]).unwrap();
    let ok = Tensor::from_slice(&dev, &[1i32, 2], &[2]).unwrap();
    let e = ops::embedding_backward(&ok, &g, 4).unwrap_err().to_string();
    assert!(e.contains("[3, 3]"), "{e}");
}
