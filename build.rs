//! Embeds every `kernels/*.cl` file into the binary as `(family, source)` pairs.
use std::{env, fs, path::Path};

fn main() {
    let dir = Path::new(&env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR")).join("kernels");
    println!("cargo:rerun-if-changed={}", dir.display());
    let mut names: Vec<String> = fs::read_dir(&dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "cl"))
                .filter_map(|p| p.file_stem().map(|s| s.to_string_lossy().into_owned()))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    let mut out = String::from("/// Every kernel family under `kernels/`, as (name, OpenCL C source).\npub(crate) const KERNEL_SOURCES: &[(&str, &str)] = &[\n");
    for n in &names {
        let p = dir.join(format!("{n}.cl"));
        println!("cargo:rerun-if-changed={}", p.display());
        out.push_str(&format!("    ({n:?}, include_str!({:?})),\n", p.display().to_string()));
    }
    out.push_str("];\n");
    let dest = Path::new(&env::var("OUT_DIR").expect("cargo sets OUT_DIR")).join("kernel_sources.rs");
    fs::write(dest, out).expect("write kernel_sources.rs");
}
