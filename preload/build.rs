//! Compiles the variadic entry points (src/c/varargs.c) into the library.

fn main() {
    println!("cargo:rerun-if-changed=src/c/varargs.c");
    cc::Build::new()
        .file("src/c/varargs.c")
        .warnings_into_errors(true)
        .compile("shoal_preload_varargs");
}
