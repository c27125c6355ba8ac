//! Op outputs are charged against a run's limits before they are allocated: for each op family an oversized
//! call fails with the `limit` error in the words of the check made before the op ("would make …"), and the
//! device's memory pool asked the device for no memory the size of the output. An engine allocation no memory
//! holds is a `limit` error too, never an abort of the process.

mod common;

use std::sync::Mutex;

use netcl::script::{Limits, run};
use netcl::{Device, Tensor};

/// The pool's counters are per device and the tests of this file share it: one test at a time.
static DEVICE: Mutex<()> = Mutex::new(());

fn dev() -> Device {
    common::opencl_device().unwrap_or_else(Device::builtin)
}

/// A million elements per tensor, four million for the whole run.
fn tight() -> Limits {
    Limits {
        max_tensor_elements: 1 << 20,
        max_run_elements: 1 << 22,
        ..Limits::default()
    }
}

/// Runs `code` under `limits`; asserts it failed with the check made before the op and that the device was
/// asked for fewer than `out_bytes` bytes of new memory (the output's size: it was never made).
fn refused_before(code: &str, limits: &Limits, out_bytes: u64) {
    refused_after_prelude("", code, limits, out_bytes);
}

/// New device memory of a run of `code`, from an empty pool.
fn grown(d: &Device, code: &str, limits: &Limits) -> (u64, netcl::script::RunResult) {
    d.pool_clear();
    let before = d.pool_stats().bytes_allocated;
    let r = run(d, code, limits);
    (d.pool_stats().bytes_allocated - before, r)
}

/// As [`refused_before`], with the memory that `prelude` (which runs) makes not counted.
fn refused_after_prelude(prelude: &str, op: &str, limits: &Limits, out_bytes: u64) {
    let _one = DEVICE.lock().unwrap_or_else(|p| p.into_inner());
    let d = dev();
    let (base, r) = grown(&d, prelude, limits);
    assert!(r.ok, "`{prelude}`: {:?}", r.error);
    let code = format!("{prelude} {op}");
    let (all, r) = grown(&d, &code, limits);
    assert!(!r.ok, "`{code}` ran");
    let e = r.error.expect("an error");
    assert_eq!(e.kind, "limit", "`{code}`: {}", e.message);
    assert!(
        e.message.contains("would make"),
        "`{code}` was refused only after the op: {}",
        e.message
    );
    let grown = all.saturating_sub(base);
    assert!(
        grown < out_bytes,
        "`{code}`: the device was asked for {grown} bytes beyond the prelude's; the output alone is {out_bytes}"
    );
}

const MIB16: u64 = 16 << 20;

#[test]
fn broadcast_binary_ops() {
    refused_before("ones([4096, 1]) + ones([1, 4096])", &tight(), MIB16);
    refused_before("maximum(ones([4096, 1]), ones([1, 4096]))", &tight(), MIB16);
    refused_before(
        r#"fused("x0 * x1", [ones([4096, 1]), ones([1, 4096])])"#,
        &tight(),
        MIB16,
    );
    // With a number: the output is as large as the tensor, which the run's budget no longer holds.
    refused_after_prelude(
        "let a = ones([1000, 1000]); let b = a * 2.0; let c = b - 1; let d = 3.0 / c;",
        "a + 1",
        &tight(),
        4 << 20,
    );
}

#[test]
fn matrix_products() {
    refused_before("matmul(ones([4096, 1]), ones([1, 4096]))", &tight(), MIB16);
    refused_before(
        "bmm(ones([4, 2048, 1]), ones([4, 1, 2048]))",
        &tight(),
        MIB16,
    );
}

#[test]
fn convolutions() {
    refused_before(
        "conv2d(ones([1, 1, 64, 64]), ones([1024, 1, 1, 1]))",
        &tight(),
        MIB16,
    );
    refused_before(
        "conv2d(ones([1, 1, 8, 8]), ones([1, 1, 1, 1]), #{padding: 1000})",
        &tight(),
        MIB16,
    );
    refused_before(
        "depthwise_conv2d(ones([1, 1, 8, 8]), ones([1, 1, 1, 1]), #{padding: 1000})",
        &tight(),
        MIB16,
    );
    refused_before(
        "conv_transpose2d(ones([1, 1, 8, 8]), ones([1, 1, 3, 3]), #{stride: 1000})",
        &tight(),
        MIB16,
    );
    // Sizes whose product overflows are refused, not wrapped around.
    refused_before(
        "conv_transpose2d(ones([1, 1, 8, 8]), ones([1, 1, 3, 3]), #{stride: 4611686018427387904})",
        &tight(),
        MIB16,
    );
}

#[test]
fn pooling() {
    // A pool's output is at most about its input's size (the op bounds the padding), so the run's budget is
    // what a pool can overrun.
    let prelude = "let a = ones([1, 1, 1000, 1000]); let b = ones([1000, 1000]); let c = ones([1000, 1000]); \
                   let d = ones([1000, 1000]);";
    for op in [
        "max_pool2d(a, #{kernel: 1})",
        "avg_pool2d(a, #{kernel: 2, stride: 1, padding: 1})",
    ] {
        refused_after_prelude(prelude, op, &tight(), 4 << 20);
    }
}

#[test]
fn shape_ops() {
    refused_before(
        "let a = ones([1, 1000]); let xs = []; for i in 0..2000 { xs.push(a) } cat(xs, 0)",
        &tight(),
        8 << 20,
    );
    refused_before(
        r#"upsample(ones([1, 1, 8, 8]), 1000, "nearest")"#,
        &tight(),
        MIB16,
    );
    refused_before(
        r#"upsample(ones([1, 1, 8, 8]), 9223372036854775807, "nearest")"#,
        &tight(),
        MIB16,
    );
    refused_before("one_hot(full_int([1000], 0), 10000)", &tight(), MIB16);
    // Same-sized outputs count against the run's budget: four tensors of a million fit, a fifth does not.
    for op in [
        "relu(a)",
        "softmax(a, 1)",
        "transpose(a)",
        "permute(a, [1, 0])",
        "dropout(a, 0.5, 1)",
        r#"a.cast("f16")"#,
    ] {
        refused_after_prelude(
            "let a = ones([1000, 1000]); let b = ones([1000, 1000]); let c = ones([1000, 1000]); \
             let d = ones([1000, 1000]);",
            op,
            &tight(),
            4 << 20,
        );
    }
}

#[test]
fn creation_functions_count_against_the_run() {
    let prelude = "let a = zeros([1000, 1000]); let b = ones([1000, 1000]); let c = full([1000, 1000], 2.0); \
                   let d = randn([1000, 1000], 1);";
    for op in [
        "rand([1000, 1000], 2)",
        "arange(1000000)",
        "zeros([1000, 1000])",
        "full_int([1000, 1000], 3)",
    ] {
        refused_after_prelude(prelude, op, &tight(), 4 << 20);
    }
}

#[test]
fn an_allocation_no_memory_holds_is_a_limit_error() {
    let _one = DEVICE.lock().unwrap_or_else(|p| p.into_inner());
    let d = dev();
    // No limits of the script layer: the engine itself must refuse (it aborted the process before).
    let open = Limits {
        max_tensor_elements: usize::MAX,
        max_run_elements: usize::MAX,
        ..Limits::default()
    };
    for code in [
        "randn([1099511627776], 1)",
        "rand([1099511627776], 1)",
        "arange(0, 1000000000000000)",
        "zeros([4611686018427387904, 4])",
    ] {
        let r = run(&d, code, &open);
        let e = r.error.unwrap_or_else(|| panic!("`{code}` ran"));
        assert_eq!(e.kind, "limit", "`{code}`: {}", e.message);
    }
    for device in [Device::builtin(), d] {
        let e = Tensor::randn(&device, &[1 << 40], 0.0, 1.0, 1).unwrap_err();
        assert_eq!(e.kind(), "limit", "{e}");
        let e = Tensor::arange(&device, 0.0, 1e15, 1.0).unwrap_err();
        assert_eq!(e.kind(), "limit", "{e}");
    }
}
