//! Model files move both ways between netcl 0.3.2 and this engine.
//!
//! `tests/fixtures/netcl032_model.netcl` and its input/output were made by netcl 0.3.2 with
//! `tests/fixtures/make_netcl_model.py`. The reverse direction runs netcl 0.3.2 itself
//! (`tests/fixtures/check_netcl_loads.py`) when Python can import it, and says so loudly when it cannot.

mod common;

use std::path::Path;

use netcl::Device;
use netcl::io::npz::read_npz;
use netcl::nn::Module;

fn io_pair(dev: &Device) -> (netcl::Tensor, Vec<f32>) {
    let io = read_npz(Path::new("tests/fixtures/netcl032_io.npz")).expect("io fixture");
    let x =
        netcl::Tensor::from_slice(dev, &io["x"].to_f32().expect("x"), &io["x"].shape).expect("x");
    (x, io["y"].to_f32().expect("y"))
}

#[test]
fn a_model_saved_by_netcl_032_predicts_the_same_here() {
    let mut devs = vec![Device::builtin()];
    devs.extend(common::opencl_device());
    for dev in devs {
        let mut model =
            netcl::io::load_model(&dev, Path::new("tests/fixtures/netcl032_model.netcl"))
                .expect("load");
        assert_eq!(
            model
                .layers()
                .iter()
                .map(|l| l.type_name())
                .collect::<Vec<_>>(),
            [
                "Conv2d",
                "BatchNorm2d",
                "ReLU",
                "MaxPool2d",
                "Flatten",
                "Dropout",
                "Linear"
            ]
        );
        let (x, want) = io_pair(&dev);
        let got = model
            .predict(&x)
            .expect("predict")
            .to_vec::<f32>()
            .expect("read");
        common::assert_close(
            &got,
            &want,
            1e-4,
            1e-4,
            &format!("netcl 0.3.2 model on {}", dev.name()),
        );
    }
}

#[test]
fn a_model_saved_here_loads_in_netcl_032() {
    if !common::has_netcl() {
        return;
    }
    let dev = Device::builtin();
    let mut model = netcl::io::load_model(&dev, Path::new("tests/fixtures/netcl032_model.netcl"))
        .expect("load");
    // Change the weights so the file written here differs from the fixture.
    for p in model.parameters() {
        let v: Vec<f32> = p
            .value()
            .to_vec::<f32>()
            .expect("read")
            .iter()
            .map(|w| w * 0.5 + 0.01)
            .collect();
        p.value()
            .assign(&netcl::Tensor::from_slice(&dev, &v, p.shape()).expect("t"))
            .expect("assign");
    }
    let dir = std::env::temp_dir().join(format!("netcl-interop-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("ours.netcl");
    netcl::io::save_model(&model, &path).expect("save");
    let (x, _) = io_pair(&dev);
    let y = model.predict(&x).expect("predict");
    let io = dir.join("io.npz");
    netcl::io::npz::write_npz(
        &io,
        &[
            (
                "x".into(),
                netcl::io::npz::NpyArray::f32(x.shape(), x.to_vec().expect("x")),
            ),
            (
                "y".into(),
                netcl::io::npz::NpyArray::f32(y.shape(), y.to_vec().expect("y")),
            ),
        ],
    )
    .expect("io");
    common::python_check_passes("tests/fixtures/check_netcl_loads.py", [&path, &io]);
}
