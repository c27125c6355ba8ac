// The define sets that together compile every kernel of a family, shared by the ABI unit test
// (src/backend/opencl/abi.rs) and tests/kernel_abi.rs, which both `include!` this file with their own
// `Defines` in scope.

/// The builds that together compile every kernel of `family`: a family whose `#if` blocks hold different
/// kernels per define set is built once per set, with the defines its launches use.
fn builds(family: &str) -> Vec<Defines> {
    let d = Defines::new;
    match family {
        "depthwise" => vec![
            d(),
            d().set("RK", 3).set("RS", 1),
            d().set("KS", 3).set("SS", 2),
            d().set("BK", 3)
                .set("BS", 1)
                .set("VW", 4)
                .set("BY", 4)
                .set("XLOOP", 0),
            d().set("BK", 3)
                .set("BS", 2)
                .set("VW", 8)
                .set("BY", 2)
                .set("XLOOP", 1),
            d().set("GK", 3).set("GC", 2).set("GP", 1),
        ],
        "gemm" => {
            let base = || d().set("TRANS_A", 0).set("TRANS_B", 0);
            vec![
                base(),
                base()
                    .set("TM", 32)
                    .set("TN", 32)
                    .set("TK", 8)
                    .set("RM", 4)
                    .set("RN", 4)
                    .set("KS", 1)
                    .set("PAD", 1)
                    .set("VEC", 0)
                    .set("FLAT", 0),
                base().set("SK", 8).set("PX", 4).set("LS", 64),
                base().set("MR", 4).set("VW", 8).set("NB", 2),
            ]
        }
        "gemm_tc" => vec![d(), d().set("STAGES", 2)],
        "winograd" => vec![d().set("WM", 2), d().set("WM", 4).set("VT", 1)],
        _ => vec![d()],
    }
}
