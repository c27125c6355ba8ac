//! Reading archives that NumPy wrote (stored with forced zip64 fields, and deflated), and writing ones it reads.

use std::path::Path;

use netcl::io::npz::{NpyArray, NpyData, read_npz, write_npz};

#[test]
fn reads_numpy_savez_and_savez_compressed() {
    let m = read_npz(Path::new("tests/fixtures/numpy_savez.npz")).expect("numpy savez");
    assert_eq!(
        m["0:weight"],
        NpyArray::f32(&[2, 3], vec![0.0, 1.0, 2.0, 3.0, 4.0, 5.0])
    );
    assert_eq!(m["1:running_var"].to_f32().expect("f32"), vec![1.0; 4]);
    let meta: serde_json::Value =
        serde_json::from_str(m["__netcl_meta__"].as_str().expect("string")).expect("json");
    assert_eq!(meta["type"], "Sequential");
    let c = read_npz(Path::new("tests/fixtures/numpy_savez_compressed.npz"))
        .expect("numpy savez_compressed");
    assert_eq!(c["a"].data, NpyData::I64((0..10).collect()));
}

#[test]
fn written_archives_read_back_and_bad_files_are_errors() {
    let dir = std::env::temp_dir().join(format!("netcl-io-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let path = dir.join("model.netcl");
    let members = vec![(
        "0:weight".to_owned(),
        NpyArray::f32(&[3], vec![1.0, 2.0, 3.0]),
    )];
    write_npz(&path, &members).expect("write");
    assert_eq!(read_npz(&path).expect("read")["0:weight"], members[0].1);
    let bytes = std::fs::read(&path).expect("bytes");
    std::fs::write(&path, &bytes[..bytes.len() / 2]).expect("truncate");
    let e = read_npz(&path).expect_err("truncated");
    assert!(matches!(e, netcl::Error::Format { .. }), "{e}");
    let e = read_npz(&dir.join("missing.npz")).expect_err("missing");
    assert!(matches!(e, netcl::Error::Io { .. }), "{e}");
}
