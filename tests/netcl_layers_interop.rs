//! The transformer and extra layers move both ways between netcl 0.3.2 and this engine, within 1e-5.
//!
//! The fixtures were made by netcl 0.3.2 on PoCL with `tests/fixtures/netcl_layers.py make` (run in
//! tests/fixtures): two model files of layers netcl saves once they are registered (`PReLU`,
//! `AdaptiveAvgPool2d`, `RMSNorm`, `Identity`, `Softmax`, `Embedding`), and a `save_checkpoint` of a stack of
//! every composite layer (`PositionalEmbedding`, `TransformerBlock`, `MultiheadAttention`,
//! `CausalSelfAttention`, `TransformerEncoderLayer`, `DecoderBlock`, `SwiGLU`, `RotaryAttention`, `RMSNorm`,
//! `LayerNorm`, `TiedLinear`) whose sidecar holds the config. The reverse direction runs netcl 0.3.2 itself
//! (`netcl_layers.py check-model` / `check-ckpt`) when Python can import it, and says so loudly when not.
//!
//! netcl's `Embedding` returns (B·S, E) for (B, S) indices where this engine returns (B, S, E): outputs are
//! compared value by value in order.

mod common;

use std::path::{Path, PathBuf};

use netcl::io::npz::{NpyArray, read_npz, write_npz};
use netcl::nn::Module;
use netcl::optim::Optimizer;
use netcl::{Device, Tensor};

const DIR: &str = "tests/fixtures";

fn io() -> std::collections::BTreeMap<String, NpyArray> {
    read_npz(Path::new("tests/fixtures/netcl032_layers_io.npz")).expect("io fixture")
}

fn input(dev: &Device, a: &NpyArray) -> Tensor {
    match &a.data {
        netcl::io::npz::NpyData::I32(v) => Tensor::from_slice(dev, v, &a.shape).expect("x"),
        _ => Tensor::from_slice(dev, &a.to_f32().expect("x"), &a.shape).expect("x"),
    }
}

#[test]
fn model_files_of_the_extra_layers_saved_by_netcl_predict_the_same_here() {
    let io = io();
    for dev in common::devices() {
        for (name, kinds) in [
            (
                "a",
                &[
                    "Conv2d",
                    "PReLU",
                    "AdaptiveAvgPool2d",
                    "Flatten",
                    "Linear",
                    "RMSNorm",
                    "Identity",
                    "Softmax",
                ][..],
            ),
            ("b", &["Embedding", "RMSNorm", "Linear"][..]),
        ] {
            let path = format!("{DIR}/netcl032_layers_{name}.netcl");
            let mut model = netcl::io::load_model(&dev, Path::new(&path)).expect("load");
            let got_kinds: Vec<&str> = model.layers().iter().map(|l| l.type_name()).collect();
            assert_eq!(got_kinds, kinds);
            let x = input(&dev, &io[&format!("x_{name}")]);
            let y = model.predict(&x).expect("predict");
            let want = io[&format!("y_{name}")].to_f32().expect("y");
            common::assert_close(
                &y.to_vec::<f32>().expect("read"),
                &want,
                1e-5,
                0.0,
                &format!("netcl model {name} on {}", dev.name()),
            );
        }
    }
}

#[test]
fn a_checkpoint_of_every_composite_layer_saved_by_netcl_predicts_the_same_here() {
    let io = io();
    let path = Path::new("tests/fixtures/netcl032_gpt.ckpt.npz");
    for dev in common::devices() {
        let ck = netcl::io::read_checkpoint(&dev, path).expect("read");
        assert!(
            ck.optim.is_none(),
            "netcl's checkpoint holds no optimiser state of ours"
        );
        assert_eq!(ck.meta["optim_state"], serde_json::json!({}));
        let mut model = ck.model;
        assert_eq!(model.parameters().len(), 64);
        let y = model.predict(&input(&dev, &io["x_gpt"])).expect("predict");
        assert_eq!(y.shape(), [2, 9, 13]);
        common::assert_close(
            &y.to_vec::<f32>().expect("read"),
            &io["y_gpt"].to_f32().expect("y"),
            1e-5,
            0.0,
            &format!("netcl checkpoint on {}", dev.name()),
        );
        // Without optimiser state, load_checkpoint says what to use instead.
        let e = netcl::io::load_checkpoint(&dev, path)
            .map(|_| ())
            .expect_err("no optimiser state");
        assert!(e.to_string().contains("read_checkpoint"), "{e}");
    }
}

fn scratch() -> PathBuf {
    let d = std::env::temp_dir().join(format!("netcl-layers-interop-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("dir");
    d
}

/// Changes every parameter, so a file written here differs from the fixture it was read from.
fn perturb(dev: &Device, params: &[netcl::autograd::Var]) {
    for (i, p) in params.iter().enumerate() {
        let v: Vec<f32> = p
            .value()
            .to_vec::<f32>()
            .expect("read")
            .iter()
            .enumerate()
            .map(|(j, w)| w * 0.8 + 0.01 * ((i + j) % 7) as f32)
            .collect();
        p.value()
            .assign(&Tensor::from_slice(dev, &v, p.shape()).expect("t"))
            .expect("assign");
    }
}

fn write_io(path: &Path, x: &NpyArray, y: &Tensor) {
    let y = NpyArray::f32(y.shape(), y.to_vec().expect("y"));
    write_npz(path, &[("x".into(), x.clone()), ("y".into(), y)]).expect("io");
}

fn netcl_agrees(args: &[&str]) {
    common::python_check_passes("tests/fixtures/netcl_layers.py", args);
}

#[test]
fn model_files_and_checkpoints_saved_here_load_in_netcl_032() {
    if !common::has_netcl() {
        return;
    }
    let dev = Device::builtin();
    let dir = scratch();
    let io = io();
    for name in ["a", "b"] {
        let mut model = netcl::io::load_model(
            &dev,
            Path::new(&format!("{DIR}/netcl032_layers_{name}.netcl")),
        )
        .expect("load");
        perturb(&dev, &model.parameters());
        let path = dir.join(format!("ours_{name}.netcl"));
        netcl::io::save_model(&model, &path).expect("save");
        let x = &io[&format!("x_{name}")];
        let y = model.predict(&input(&dev, x)).expect("predict");
        let iop = dir.join(format!("io_{name}.npz"));
        write_io(&iop, x, &y);
        netcl_agrees(&[
            "check-model",
            path.to_str().expect("utf-8"),
            iop.to_str().expect("utf-8"),
        ]);
    }
    let mut model =
        netcl::io::read_checkpoint(&dev, Path::new("tests/fixtures/netcl032_gpt.ckpt.npz"))
            .expect("read")
            .model;
    perturb(&dev, &model.parameters());
    let opt = Optimizer::adamw(model.parameters(), 1e-3, 0.01).expect("opt");
    let path = dir.join("ours_gpt.ckpt.npz");
    netcl::io::save_checkpoint(&model, &opt, &path).expect("save");
    let y = model.predict(&input(&dev, &io["x_gpt"])).expect("predict");
    let iop = dir.join("io_gpt.npz");
    write_io(&iop, &io["x_gpt"], &y);
    netcl_agrees(&[
        "check-ckpt",
        path.to_str().expect("utf-8"),
        iop.to_str().expect("utf-8"),
    ]);
    // And back here, whole, with the optimiser's state.
    let (mut m2, st) = netcl::io::load_checkpoint(&dev, &path).expect("load");
    assert_eq!(st.t, 0);
    let y2 = m2.predict(&input(&dev, &io["x_gpt"])).expect("predict");
    assert_eq!(
        y2.to_vec::<f32>().expect("y2"),
        y.to_vec::<f32>().expect("y")
    );
}
