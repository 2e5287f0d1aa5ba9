//! Generates `pfa.h` from the crate's `extern "C"` items (`src/ffi.rs`) with
//! cbindgen, into OUT_DIR and into `<target>/<profile>/include/pfa.h`, where
//! C programs and the crate's C test find it.

use std::path::PathBuf;

fn main() {
    let crate_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    println!("cargo:rerun-if-changed=src/ffi.rs");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    let config =
        cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("pfa/cbindgen.toml");
    let header = cbindgen::Builder::new()
        .with_src(crate_dir.join("src/ffi.rs"))
        .with_config(config)
        .generate()
        .expect("cbindgen could not generate pfa.h");
    header.write_to_file(out_dir.join("pfa.h"));
    // OUT_DIR is <target>/<profile>/build/shoal-pfa-<hash>/out.
    if let Some(profile_dir) = out_dir.ancestors().nth(3) {
        let include = profile_dir.join("include");
        std::fs::create_dir_all(&include).expect("create include directory");
        header.write_to_file(include.join("pfa.h"));
    }
}
