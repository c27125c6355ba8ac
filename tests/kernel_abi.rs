//! The kernel ABI generated from `kernels/`: every kernel name the build read from a family's source is a kernel
//! of that family as the device compiles it, and the shared prelude begins every family exactly once.

mod common;

use std::collections::BTreeSet;

use common::opencl_device;
use netcl::program::{self, Defines};

include!("../src/backend/opencl/abi_builds.rs");

#[test]
fn every_kernel_name_constant_is_a_kernel_of_its_built_family() {
    let Some(dev) = opencl_device() else { return };
    let mut families = 0;
    for family in program::kernel_families() {
        families += 1;
        let declared = program::kernel_names(family).expect("a listed family has kernel names");
        let unique: BTreeSet<&str> = declared.iter().copied().collect();
        assert_eq!(
            unique.len(),
            declared.len(),
            "{family}: a kernel name listed twice"
        );
        assert!(
            !declared.is_empty(),
            "{family}: no kernel read from its source"
        );
        let src = program::kernel_source(family).expect("a listed family has a source");
        let mut built = BTreeSet::new();
        for defines in builds(family) {
            let names = program::build_check(&dev, src, &defines)
                .unwrap_or_else(|e| panic!("{family} with {defines:?}: {e}"));
            built.extend(names);
        }
        let built: BTreeSet<&str> = built.iter().map(String::as_str).collect();
        assert_eq!(
            built, unique,
            "{family}: kernels built (left) against kernels read at build time (right)"
        );
    }
    assert!(families >= 15, "only {families} kernel families embedded");
    assert!(program::kernel_names("no_such_family").is_none());
}

#[test]
fn the_prelude_begins_every_family_once_and_no_family_file_repeats_it() {
    let prelude = program::kernel_prelude();
    assert!(
        prelude.contains("#define YZ_BEGIN"),
        "the prelude holds the shared grid macros"
    );
    let prelude_defines: Vec<&str> = prelude
        .lines()
        .filter(|l| l.trim_start().starts_with("#define"))
        .collect();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("kernels");
    for family in program::kernel_families() {
        let src = program::kernel_source(family).expect("a listed family has a source");
        assert!(
            src.starts_with(prelude),
            "{family} does not begin with the prelude"
        );
        assert_eq!(
            src.matches(prelude).count(),
            1,
            "{family}: prelude more than once"
        );
        for line in &prelude_defines {
            assert_eq!(
                src.matches(line).count(),
                1,
                "{family} repeats the prelude's `{line}`"
            );
        }
        let file = std::fs::read_to_string(dir.join(format!("{family}.cl")))
            .expect("read the family's file");
        assert!(
            src.ends_with(&file),
            "{family}: the source ends with kernels/{family}.cl as written"
        );
    }
    assert!(
        program::kernel_families().all(|f| f != "prelude"),
        "the prelude is no family of its own"
    );
}
