//! Compiles `shoal.proto`, the one place the wire messages are defined.
fn main() {
    println!("cargo:rerun-if-changed=shoal.proto");
    if std::env::var_os("PROTOC").is_none() && which_protoc().is_none() {
        panic!(
            "protoc not found: run ./scripts/install-deps (Debian package protobuf-compiler) \
             or set PROTOC to its path"
        );
    }
    prost_build::Config::new()
        .bytes(["."])
        .compile_protos(&["shoal.proto"], &["."])
        .expect("compile shoal.proto");
}

fn which_protoc() -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|p| p.join("protoc"))
            .find(|p| p.is_file())
    })
}
