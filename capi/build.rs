//! Generates `shoal.h` from the crate's `extern "C"` items with cbindgen,
//! into OUT_DIR and into `<target>/<profile>/include/shoal.h`, where
//! scripts/install-libshoal picks it up. Also gives libshoal.so its soname.

use std::path::{Path, PathBuf};

fn main() {
    let crate_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let out_dir = PathBuf::from(std::env::var("OUT_DIR").unwrap());
    println!("cargo:rerun-if-changed=src");
    println!("cargo:rerun-if-changed=cbindgen.toml");
    let major = std::env::var("CARGO_PKG_VERSION_MAJOR").unwrap();
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libshoal.so.{major}");

    let config =
        cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).expect("capi/cbindgen.toml");
    let header = cbindgen::Builder::new()
        .with_crate(&crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen could not generate shoal.h");
    header.write_to_file(out_dir.join("shoal.h"));
    // OUT_DIR is <target>/<profile>/build/shoal-capi-<hash>/out.
    if let Some(profile_dir) = out_dir.ancestors().nth(3) {
        let include = profile_dir.join("include");
        std::fs::create_dir_all(&include).expect("create include directory");
        header.write_to_file(Path::new(&include).join("shoal.h"));
    }
}
