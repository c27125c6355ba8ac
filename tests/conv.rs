//! conv2d and conv_transpose2d: every OpenCL algorithm against the built-in device, forward and backward.
//!
//! Tolerance: |got − want| ≤ 2e-4 + 1e-4·|want| for unit-variance inputs and reductions of at most a few
//! hundred terms (f32 kernels against an f64 reference; Winograd adds O(1e-6) relative transform error).

mod common;
mod opsutil;

use common::{Lcg, assert_tensors_close};
use opsutil::{assert_conv_grads_close, cpu, opencl_device, pair};

use netcl::ops::{self, Conv2dOptions, ConvAlgo, ConvTranspose2dOptions};
use netcl::{Device, Error, Tensor};

const ATOL: f32 = 2e-4;
const RTOL: f32 = 1e-4;

fn v(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

/// Checks forward (with bias and ReLU) and backward of one configuration on `dev` against the reference.
fn check(dev: &Device, x: [usize; 4], f: usize, k: [usize; 2], o: &Conv2dOptions, seed: u64) {
    let what = format!("x {x:?} f {f} k {k:?} {o:?}");
    let (xc, xd) = pair(dev, &x, seed);
    let (wc, wd) = pair(dev, &[f, x[1] / o.groups, k[0], k[1]], seed + 1);
    let (bc, bd) = pair(dev, &[f], seed + 2);
    let want = ops::conv2d(&xc, &wc, Some(&bc), o).unwrap();
    let got = ops::conv2d(&xd, &wd, Some(&bd), o).unwrap();
    assert_eq!(got.shape(), want.shape(), "{what}");
    assert_tensors_close(&got, &want, ATOL, RTOL, &format!("forward {what}"));
    let (gc, gd) = pair(dev, want.shape(), seed + 3);
    let want = ops::conv2d_backward(&xc, &wc, &gc, true, true, o).unwrap();
    let got = ops::conv2d_backward(&xd, &wd, &gd, true, true, o).unwrap();
    // grad_w and grad_b sum over N·OH·OW (up to ~600 terms): a looser absolute bound.
    assert_conv_grads_close(&got, &want, ATOL, 1e-3, RTOL, &what);
}

#[test]
fn direct_and_im2col_on_random_shapes() {
    let Some(dev) = opencl_device() else { return };
    let mut rng = Lcg(11);
    for case in 0..8u64 {
        let groups = [1, 1, 2, 3][case as usize % 4];
        let c = groups * rng.range(1, 4);
        let f = groups * rng.range(1, 5);
        let k = [rng.range(1, 4), rng.range(1, 4)];
        let stride = rng.range(1, 2);
        let pad = rng.range(0, 2);
        let dil = 1 + (case as usize % 3 == 2) as usize;
        let h = (k[0] - 1) * dil + 1 + rng.range(0, 9);
        let w = (k[1] - 1) * dil + 1 + rng.range(0, 9);
        let n = rng.range(1, 3);
        for algo in [ConvAlgo::Direct, ConvAlgo::Im2col] {
            let o = Conv2dOptions::new()
                .stride(stride)
                .padding(pad)
                .dilation(dil)
                .groups(groups)
                .algo(algo)
                .fuse_relu(case % 2 == 0);
            check(&dev, [n, c, h, w], f, k, &o, 10 * case);
        }
    }
}

/// Checks `algo` with a K×K filter on each (n, c, h, w, filters, padding) of `cases`, fusing ReLU into case
/// `relu_case`; case i is seeded `seed + i`.
fn odd_sizes(algo: ConvAlgo, k: usize, relu_case: usize, seed: u64, cases: &[[usize; 6]]) {
    let Some(dev) = opencl_device() else { return };
    for (i, &[n, c, h, w, f, p]) in cases.iter().enumerate() {
        let o = Conv2dOptions::new()
            .padding(p)
            .algo(algo)
            .fuse_relu(i == relu_case);
        check(&dev, [n, c, h, w], f, [k, k], &o, seed + i as u64);
    }
}

#[test]
fn winograd_and_pointwise_on_odd_sizes_and_paddings() {
    let winograd = [
        [1, 3, 7, 9, 5, 1],
        [2, 17, 6, 5, 9, 0],
        [1, 4, 5, 5, 3, 2],
        [3, 8, 10, 11, 16, 1],
    ];
    odd_sizes(ConvAlgo::Winograd, 3, 1, 100, &winograd);
    let pointwise = [
        [1, 3, 7, 9, 5, 0],
        [3, 33, 5, 5, 17, 0],
        [2, 8, 1, 1, 70, 0],
    ];
    odd_sizes(ConvAlgo::Pointwise, 1, 0, 200, &pointwise);
}

#[test]
fn measured_choice_matches() {
    // No algo: the pointwise dispatch, the general-path choice and the GEMM tuning all run.
    let Some(dev) = opencl_device() else { return };
    check(&dev, [2, 6, 9, 9], 10, [1, 1], &Conv2dOptions::new(), 300);
    check(
        &dev,
        [2, 5, 8, 7],
        6,
        [3, 3],
        &Conv2dOptions::new().padding(1),
        301,
    );
    check(
        &dev,
        [1, 4, 9, 9],
        4,
        [3, 3],
        &Conv2dOptions::new().stride(2).padding(1).groups(2),
        302,
    );
}

#[test]
fn conv_transpose_matches_reference() {
    let Some(dev) = opencl_device() else { return };
    for (i, &(n, cin, h, w, cout, k, s, p, op, g)) in [
        (1, 4, 5, 6, 3, 3, 2, 1, 1, 1),
        (2, 6, 4, 4, 4, 2, 2, 0, 0, 2),
        (1, 3, 7, 5, 2, 3, 1, 1, 0, 1),
    ]
    .iter()
    .enumerate()
    {
        let seed = 400 + 10 * i as u64;
        let o = ConvTranspose2dOptions {
            conv: Conv2dOptions::new().stride(s).padding(p).groups(g),
            output_padding: [op, op],
        };
        let (xc, xd) = pair(&dev, &[n, cin, h, w], seed);
        let (wc, wd) = pair(&dev, &[cin, cout / g, k, k], seed + 1);
        let (bc, bd) = pair(&dev, &[cout], seed + 2);
        let want = ops::conv_transpose2d(&xc, &wc, Some(&bc), &o).unwrap();
        let got = ops::conv_transpose2d(&xd, &wd, Some(&bd), &o).unwrap();
        assert_eq!(
            want.shape(),
            &[
                n,
                cout,
                (h - 1) * s + k - 2 * p + op,
                (w - 1) * s + k - 2 * p + op
            ]
        );
        assert_tensors_close(
            &got,
            &want,
            ATOL,
            RTOL,
            &format!("conv_transpose2d case {i}"),
        );
        let (gc, gd) = pair(&dev, want.shape(), seed + 3);
        let want = ops::conv_transpose2d_backward(&xc, &wc, &gc, true, true, &o).unwrap();
        let got = ops::conv_transpose2d_backward(&xd, &wd, &gd, true, true, &o).unwrap();
        assert_conv_grads_close(
            &got,
            &want,
            ATOL,
            1e-3,
            RTOL,
            &format!("conv_transpose2d case {i}"),
        );
    }
}

#[test]
fn reference_conv_small_example() {
    let d = cpu();
    let x = Tensor::arange(&d, 0.0, 9.0, 1.0)
        .unwrap()
        .reshape(&[1, 1, 3, 3])
        .unwrap();
    let w = Tensor::ones(&d, &[1, 1, 2, 2]).unwrap();
    let y = ops::conv2d(&x, &w, None, &Conv2dOptions::new()).unwrap();
    assert_eq!(v(&y), vec![8.0, 12.0, 20.0, 24.0]);
    // conv_transpose2d is the adjoint: <conv(x), y> == <x, conv_t(y)>.
    let yt = Tensor::from_slice(&d, &[1.0f32, 2.0, 3.0, 4.0], &[1, 1, 2, 2]).unwrap();
    let xt = ops::conv_transpose2d(&yt, &w, None, &ConvTranspose2dOptions::default()).unwrap();
    let lhs: f32 = v(&y).iter().zip(v(&yt)).map(|(a, b)| a * b).sum();
    let rhs: f32 = v(&x).iter().zip(v(&xt)).map(|(a, b)| a * b).sum();
    assert_eq!(lhs, rhs);
}

#[test]
fn bad_input_gives_clear_errors() {
    let d = cpu();
    let x = Tensor::zeros(&d, &[1, 4, 5, 5]).unwrap();
    let w = Tensor::zeros(&d, &[2, 3, 3, 3]).unwrap();
    let e = ops::conv2d(&x, &w, None, &Conv2dOptions::new()).unwrap_err();
    assert!(
        matches!(e, Error::Shape(_)) && e.to_string().contains("mismatched channels"),
        "{e}"
    );
    let w = Tensor::zeros(&d, &[2, 4, 7, 7]).unwrap();
    let e = ops::conv2d(&x, &w, None, &Conv2dOptions::new()).unwrap_err();
    assert!(
        e.to_string().contains("larger than the padded input"),
        "{e}"
    );
    assert!(ops::conv2d(&x, &w, None, &Conv2dOptions::new().padding(1)).is_ok());
    let w = Tensor::zeros(&d, &[2, 4, 3, 3]).unwrap();
    let e = ops::conv2d(&x, &w, None, &Conv2dOptions::new().stride(0)).unwrap_err();
    assert!(
        matches!(e, Error::Invalid(_)) && e.to_string().contains("stride"),
        "{e}"
    );
    let w = Tensor::zeros(&d, &[3, 4, 3, 3]).unwrap();
    let e = ops::conv2d(&x, &w, None, &Conv2dOptions::new().groups(3)).unwrap_err();
    assert!(e.to_string().contains("groups = 3 must divide"), "{e}");
    let w = Tensor::zeros(&d, &[2, 4, 5, 5]).unwrap();
    let e = ops::conv2d(&x, &w, None, &Conv2dOptions::new().algo(ConvAlgo::Winograd)).unwrap_err();
    assert!(e.to_string().contains("winograd"), "{e}");
    let b = Tensor::zeros(&d, &[3]).unwrap();
    let w = Tensor::zeros(&d, &[2, 4, 3, 3]).unwrap();
    assert!(
        ops::conv2d(&x, &w, Some(&b), &Conv2dOptions::new())
            .unwrap_err()
            .to_string()
            .contains("bias")
    );
}

/// Runs the ignored test `name` of this binary in a child process with `NETCL_AUTOTUNE_FORCE=force`; asserts
/// that it passed and returns its output.
fn run_forced_child(name: &str, force: &str) -> String {
    let out = common::child_command(name)
        .env("NETCL_AUTOTUNE_FORCE", force)
        .output()
        .unwrap();
    common::child_test_output(name, force, &out)
}

/// Both Winograd tile sizes, F(2×2, 3×3) and F(4×4, 3×3), each with both layouts of grad_w's transformed
/// input, forced through `NETCL_AUTOTUNE_FORCE` in a child process each: forward, backward, and the weight
/// gradient alone (no grad_x).
#[test]
fn winograd_tile_sizes() {
    if opencl_device().is_none() {
        return;
    }
    for (tile, layout) in [
        ("2", "ct"),
        ("2", "tc"),
        ("4", "ct"),
        ("4", "tc"),
        ("3", "ct"),
    ] {
        let text = run_forced_child(
            "winograd_tile_child",
            &format!("wino_tile={tile};wino_grad_w_tile={tile};wino_grad_w_layout={layout}"),
        );
        assert!(
            text.contains("1 passed"),
            "tile {tile}: child did not run:\n{text}"
        );
        assert!(
            text.contains(&format!("forced tile {tile}")),
            "tile {tile}: {text}"
        );
    }
}

#[test]
#[ignore = "run by winograd_tile_sizes with NETCL_AUTOTUNE_FORCE set"]
fn winograd_tile_child() {
    let dev = opencl_device().expect("an OpenCL device");
    let forced = |kernel: &str| common::forced_label(kernel).unwrap();
    let (tile, layout) = (forced("wino_tile"), forced("wino_grad_w_layout"));
    if tile != "2" && tile != "4" {
        // A label that is not a candidate: a clear error naming the candidates, and no output.
        let x = Tensor::randn(&dev, &[1, 2, 6, 6], 0.0, 1.0, 1).unwrap();
        let w = Tensor::randn(&dev, &[3, 2, 3, 3], 0.0, 1.0, 2).unwrap();
        let o = Conv2dOptions::new().padding(1).algo(ConvAlgo::Winograd);
        let e = ops::conv2d(&x, &w, None, &o).unwrap_err().to_string();
        assert!(
            e.contains("NETCL_AUTOTUNE_FORCE") && e.contains("[\"2\", \"4\"]"),
            "{e}"
        );
        println!("forced tile {tile} rejected");
        return;
    }
    let seq = netcl::autotune::last_seq();
    for (i, &(n, c, h, w, f, p)) in [
        (2, 5, 7, 6, 3, 1),
        (1, 9, 4, 9, 6, 0),
        (3, 4, 5, 5, 7, 2),
        (2, 16, 13, 10, 8, 1),
    ]
    .iter()
    .enumerate()
    {
        let o = Conv2dOptions::new().padding(p).algo(ConvAlgo::Winograd);
        check(&dev, [n, c, h, w], f, [3, 3], &o, 600 + i as u64);
        // The weight gradient without grad_x (a first layer).
        let (xc, xd) = pair(&dev, &[n, c, h, w], 700 + i as u64);
        let (wc, wd) = pair(&dev, &[f, c, 3, 3], 710 + i as u64);
        let y = ops::conv2d(&xc, &wc, None, &o).unwrap();
        let (gc, gd) = pair(&dev, y.shape(), 720 + i as u64);
        let want = ops::conv2d_backward(&xc, &wc, &gc, false, false, &o).unwrap();
        let got = ops::conv2d_backward(&xd, &wd, &gd, false, false, &o).unwrap();
        assert!(got.grad_x.is_none());
        assert_tensors_close(
            &got.grad_w,
            &want.grad_w,
            1e-3,
            RTOL,
            &format!("grad_w only, case {i}"),
        );
    }
    let used: Vec<_> = netcl::autotune::decisions_since(seq)
        .into_iter()
        .filter(|d| {
            ["wino_tile", "wino_grad_w_tile", "wino_grad_w_layout"].contains(&d.kernel.as_str())
        })
        .collect();
    for kernel in ["wino_tile", "wino_grad_w_tile", "wino_grad_w_layout"] {
        assert!(
            used.iter().any(|d| d.kernel == kernel),
            "the decision {kernel} was not logged: {used:?}"
        );
    }
    for d in &used {
        assert_eq!(d.source, netcl::autotune::Source::Forced, "{d:?}");
        let want = if d.kernel == "wino_grad_w_layout" {
            &layout
        } else {
            &tile
        };
        assert_eq!(&d.winner_label, want, "{d:?}");
    }
    println!("forced tile {tile}");
}

/// The pointwise GEMM with the small-K kernel forced (bias and ReLU in its epilogue, batch > 1, more filters
/// than one local-memory chunk), in a child process.
#[test]
fn pointwise_small_k_kernel() {
    if opencl_device().is_none() {
        return;
    }
    for label in [
        r#"["smallk",1,128,1]"#,
        r#"["smallk",2,128,1]"#,
        r#"["smallk",4,64,1]"#,
    ] {
        let text = run_forced_child(
            "pointwise_small_k_child",
            &format!("conv2d_pointwise_gemm={label};conv2d_pointwise_fwd_select=pointwise"),
        );
        assert!(text.contains("small-K kernel used"), "{label}: {text}");
    }
}

#[test]
#[ignore = "run by pointwise_small_k_kernel with NETCL_AUTOTUNE_FORCE set"]
fn pointwise_small_k_child() {
    let dev = opencl_device().expect("an OpenCL device");
    let seq = netcl::autotune::last_seq();
    // Forward only: the forced label names a kernel for non-transposed products, and the backward's grad_x
    // product is transposed (forcing a label that is not a candidate is an error).
    for (i, &(x, f, relu)) in [([3, 24, 5, 7], 70, true), ([1, 30, 9, 9], 5, false)]
        .iter()
        .enumerate()
    {
        let o = Conv2dOptions::new().fuse_relu(relu);
        let seed = 800 + 10 * i as u64;
        let (xc, xd) = pair(&dev, &x, seed);
        let (wc, wd) = pair(&dev, &[f, x[1], 1, 1], seed + 1);
        let (bc, bd) = pair(&dev, &[f], seed + 2);
        let want = ops::conv2d(&xc, &wc, Some(&bc), &o).unwrap();
        let got = ops::conv2d(&xd, &wd, Some(&bd), &o).unwrap();
        assert_tensors_close(&got, &want, ATOL, RTOL, &format!("small-K case {i}"));
    }
    let used: Vec<_> = netcl::autotune::decisions_since(seq)
        .into_iter()
        .filter(|d| d.kernel == "conv2d_pointwise_gemm")
        .collect();
    assert!(!used.is_empty());
    for d in &used {
        assert_eq!(d.source, netcl::autotune::Source::Forced, "{d:?}");
        assert!(d.winner_label.contains("smallk"), "{d:?}");
    }
    println!("small-K kernel used");
}

/// Both im2col / col2im layouts (one col row per work-item, as CPUs run it, and one element per work-item, as
/// GPUs run it), each forced in a child process, on strided, padded, dilated and grouped shapes whose sizes
/// are not multiples of the work-group: forward and both gradients against the reference. A layout that does
/// not exist is refused with an error naming the layouts.
#[test]
fn im2col_layouts() {
    if opencl_device().is_none() {
        return;
    }
    for layout in ["row", "element"] {
        let text = run_forced_child("im2col_layout_child", &format!("conv_col_layout={layout}"));
        assert!(
            text.contains(&format!("layout {layout} checked")),
            "{layout}: {text}"
        );
    }
    let text = run_forced_child("im2col_layout_child", "conv_col_layout=diagonal");
    assert!(text.contains("layout diagonal refused"), "{text}");
}

#[test]
#[ignore = "run by im2col_layouts with NETCL_AUTOTUNE_FORCE set"]
fn im2col_layout_child() {
    let dev = opencl_device().expect("an OpenCL device");
    let layout = common::forced_label("conv_col_layout").unwrap();
    let o = |s: usize, p: usize, d: usize, g: usize| {
        Conv2dOptions::new()
            .stride(s)
            .padding(p)
            .dilation(d)
            .groups(g)
            .algo(ConvAlgo::Im2col)
    };
    if layout != "row" && layout != "element" {
        let x = Tensor::randn(&dev, &[1, 2, 6, 6], 0.0, 1.0, 1).unwrap();
        let w = Tensor::randn(&dev, &[3, 2, 3, 3], 0.0, 1.0, 2).unwrap();
        let e = ops::conv2d(&x, &w, None, &o(1, 1, 1, 1))
            .unwrap_err()
            .to_string();
        assert!(e.contains("conv_col_layout") && e.contains("`row`"), "{e}");
        println!("layout {layout} refused");
        return;
    }
    // (n, c, h, w, f, k, stride, padding, dilation, groups)
    let cases: [[usize; 10]; 6] = [
        [2, 3, 13, 11, 5, 3, 2, 1, 1, 1],
        [1, 4, 9, 17, 6, 3, 1, 1, 1, 2],
        [3, 2, 8, 8, 3, 1, 2, 0, 1, 1],
        [1, 3, 15, 7, 4, 3, 2, 2, 2, 1],
        [2, 2, 70, 67, 3, 3, 2, 1, 1, 1],
        [1, 6, 5, 5, 6, 5, 1, 2, 1, 3],
    ];
    for (i, c) in cases.iter().enumerate() {
        let [n, ch, h, w, f, k, s, p, d, g] = *c;
        check(
            &dev,
            [n, ch, h, w],
            f,
            [k, k],
            &o(s, p, d, g),
            500 + 10 * i as u64,
        );
    }
    println!("layout {layout} checked");
}

/// Every candidate of the bias gradient (one work-group per (n, f) row and a second pass over n, one
/// work-group per f, one work-item per f), each forced in a child process, on rows shorter than a warp,
/// rows that are not a multiple of the work-group, and several samples: against the reference.
#[test]
fn bias_grad_candidates() {
    if opencl_device().is_none() {
        return;
    }
    for cand in ["rows", "wg", "serial"] {
        let text = run_forced_child("bias_grad_child", &format!("conv2d_grad_bias={cand}"));
        assert!(
            text.contains(&format!("bias gradient {cand} checked")),
            "{cand}: {text}"
        );
    }
}

#[test]
#[ignore = "run by bias_grad_candidates with NETCL_AUTOTUNE_FORCE set"]
fn bias_grad_child() {
    let dev = opencl_device().expect("an OpenCL device");
    let cand = common::forced_label("conv2d_grad_bias").unwrap();
    // (n, c, h, w, f): P = 25, 299 and 1,089 output positions per row.
    for (i, [n, c, h, w, f]) in [[3, 2, 5, 5, 7], [2, 3, 13, 23, 5], [1, 2, 33, 33, 3]]
        .into_iter()
        .enumerate()
    {
        let o = Conv2dOptions::new().padding(1).algo(ConvAlgo::Im2col);
        check(&dev, [n, c, h, w], f, [3, 3], &o, 700 + 10 * i as u64);
    }
    println!("bias gradient {cand} checked");
}
