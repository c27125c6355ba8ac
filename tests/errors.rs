//! The engine's errors as a caller sees them: mismatches are structured variants that carry the operation and
//! the shapes, dtypes or devices, OpenCL build failures carry the log, and the wiki's errors are its own.

mod common;

use common::{cpu, opencl_device};
use netcl::program::Defines;
use netcl::wiki::error::WikiError;
use netcl::{DType, Error, Tensor, ops};

#[test]
fn a_gradient_of_the_wrong_shape_is_a_shape_mismatch_with_both_shapes() {
    let dev = cpu();
    let x = Tensor::zeros(&dev, &[2, 3]).expect("x");
    let g = Tensor::zeros(&dev, &[3, 2]).expect("g");
    let e = ops::unary_backward(ops::UnaryOp::Relu, &x, &g).expect_err("shapes differ");
    match &e {
        Error::ShapeMismatch { op, expected, got } => {
            assert_eq!(op, "relu backward gradient");
            assert_eq!(expected, &[2, 3]);
            assert_eq!(got, &[3, 2]);
        }
        other => panic!("expected ShapeMismatch, got {other:?}"),
    }
    assert_eq!(e.kind(), "shape");
    assert_eq!(
        e.to_string(),
        "relu backward gradient: expected shape [2, 3], got [3, 2]"
    );
}

#[test]
fn a_bias_of_the_wrong_length_names_the_op_and_the_shapes() {
    let dev = cpu();
    let x = Tensor::zeros(&dev, &[1, 2, 5, 5]).expect("x");
    let w = Tensor::zeros(&dev, &[4, 2, 3, 3]).expect("w");
    let b = Tensor::zeros(&dev, &[3]).expect("b");
    let e = ops::conv2d(&x, &w, Some(&b), &ops::Conv2dOptions::default()).expect_err("bias of 3");
    assert!(
        matches!(&e, Error::ShapeMismatch { expected, got, .. } if expected == &[4] && got == &[3]),
        "{e:?}"
    );
    assert!(e.to_string().starts_with("conv2d bias"), "{e}");
}

#[test]
fn a_dtype_mismatch_names_what_was_needed_and_what_came() {
    let dev = cpu();
    let t = Tensor::zeros(&dev, &[2]).expect("t");
    let e = t.to_vec::<i32>().expect_err("f32 read as i32");
    assert!(
        matches!(
            &e,
            Error::DTypeMismatch {
                expected: "i32",
                got: "f32",
                ..
            }
        ),
        "{e:?}"
    );
    assert_eq!(e.kind(), "dtype");
    let labels = Tensor::from_slice(&dev, &[1i32, 2], &[2]).expect("labels");
    assert_eq!(labels.dtype(), DType::I32);
    let e = ops::add(&labels, &labels).expect_err("i32 add");
    assert!(
        matches!(&e, Error::DTypeMismatch { op, expected: "f32", got: "i32" } if op == "add"),
        "{e:?}"
    );
    assert_eq!(e.to_string(), "add needs a tensor of dtype f32, got i32");
}

#[test]
fn tensors_on_two_devices_are_a_device_mismatch_naming_both() {
    let Some(cl) = opencl_device() else { return };
    let host = cpu();
    let a = Tensor::zeros(&cl, &[3]).expect("a");
    let b = Tensor::zeros(&host, &[3]).expect("b");
    let e = ops::mul(&a, &b).expect_err("two devices");
    match &e {
        Error::DeviceMismatch { op, left, right } => {
            assert_eq!(op, "mul");
            assert_eq!(left, cl.name());
            assert_eq!(right, host.name());
        }
        other => panic!("expected DeviceMismatch, got {other:?}"),
    }
    assert_eq!(e.kind(), "device_mismatch");
    assert!(e.to_string().contains("to_device"), "{e}");
}

#[test]
fn a_kernel_that_does_not_compile_is_a_build_error_with_the_log() {
    let Some(cl) = opencl_device() else { return };
    let src = "__kernel void k(__global float* o) { o[0] = undeclared_name; }";
    let e = netcl::program::build_check(&cl, src, &Defines::new()).expect_err("bad source");
    match &e {
        Error::Build { log, .. } => assert!(log.contains("undeclared_name"), "{log}"),
        other => panic!("expected Error::Build, got {other:?}"),
    }
    assert_eq!(e.kind(), "build");
    assert_eq!(e.cl_code(), None);
}

#[test]
fn the_wiki_error_is_its_own_and_keeps_an_engine_error_inside() {
    let own = WikiError::Site("content directory missing".into());
    assert_eq!(own.kind(), "wiki");
    assert_eq!(own.to_string(), "wiki: content directory missing");
    let engine: WikiError = Error::Device("no OpenCL platform".into()).into();
    assert_eq!(engine.kind(), "device");
    assert!(matches!(engine, WikiError::Engine(Error::Device(_))));
    assert_eq!(engine.to_string(), "device: no OpenCL platform");
}
