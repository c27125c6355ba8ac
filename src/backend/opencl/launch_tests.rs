//! OpenCL failures met while finding and launching kernels stay OpenCL errors: they keep their code and name the
//! kernel (and, for a launch, its work sizes).

use super::{ClDevice, enumerate};
use crate::backend::opencl::program::Defines;
use crate::error::Error;

fn first_device() -> Option<ClDevice> {
    let found = enumerate().ok().and_then(|d| d.into_iter().next());
    if found.is_none() && std::env::var_os("CI").is_some() {
        panic!("CI is set but no OpenCL device was found");
    }
    let (id, info) = found?;
    ClDevice::new(id, info).ok()
}

#[test]
fn a_launch_without_its_arguments_is_an_opencl_error_with_its_code() {
    let Some(dev) = first_device() else { return };
    let k = dev
        .kernel("unary", &Defines::new(), "unary_fwd")
        .expect("the unary kernel builds");
    // Nothing was set on this fresh kernel, so the enqueue itself must refuse it.
    let e = dev
        .launch(&k, &[], &[64], Some(&[64]))
        .err()
        .expect("a launch with unset arguments fails");
    match &e {
        Error::OpenCl {
            call,
            code,
            name,
            context,
        } => {
            assert_eq!(*call, "clEnqueueNDRangeKernel");
            assert_eq!(*code, -52, "CL_INVALID_KERNEL_ARGS, got {name}");
            assert_eq!(*name, "CL_INVALID_KERNEL_ARGS");
            let context = context.as_deref().unwrap_or_default();
            assert!(
                context.contains("unary_fwd") && context.contains("[64]"),
                "{context}"
            );
        }
        other => panic!("expected Error::OpenCl, got {other:?}"),
    }
    assert_eq!(e.kind(), "opencl");
    assert_eq!(e.cl_code(), Some(-52));
    let text = e.to_string();
    assert!(
        text.contains("CL_INVALID_KERNEL_ARGS (-52)") && text.contains("kernel `unary_fwd`"),
        "{text}"
    );
}

#[test]
fn a_kernel_missing_from_its_family_is_refused_before_any_build_naming_it() {
    let Some(dev) = first_device() else { return };
    let e = dev
        .kernel("unary", &Defines::new(), "no_such_kernel")
        .err()
        .expect("no kernel of that name");
    let text = e.to_string();
    assert!(matches!(&e, Error::Invalid(_)), "{e:?}");
    assert!(
        text.contains("no_such_kernel") && text.contains("unary_fwd"),
        "the error names the kernel and what the family declares: {text}"
    );
}
