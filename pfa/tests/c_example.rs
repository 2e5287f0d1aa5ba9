//! The C API: `examples/pfa_ranks.c` (four forked ranks writing and reading
//! one container through the generated pfa.h) built with cc against this
//! crate's static library and run.

use std::path::PathBuf;
use std::process::Command;

#[test]
fn c_example_builds_and_runs() {
    let crate_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    // Test executables live in target/<profile>/deps/; the library beside.
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().unwrap().parent().unwrap();
    let lib = profile_dir.join("libshoal_pfa.a");
    assert!(
        lib.exists(),
        "{} not built: cargo build -p shoal-pfa first (scripts/test does)",
        lib.display()
    );
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("pfa_ranks");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let out = Command::new(&cc)
        .args(["-Wall", "-Werror", "-O1", "-I"])
        .arg(profile_dir.join("include"))
        .arg(crate_dir.join("examples/pfa_ranks.c"))
        .arg(&lib)
        .args(["-lpthread", "-ldl", "-lm", "-o"])
        .arg(&bin)
        .output()
        .unwrap_or_else(|e| panic!("{cc}: {e}"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let container = dir.path().join("out.pfa");
    let out = Command::new(&bin).arg(&container).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains(": ok"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = shoal_pfa::tools::check(&container).unwrap();
    assert!(r.problems.is_empty() && r.cut.is_empty(), "{r:?}");
    assert_eq!(r.steps, 4 * 5 * 2);
}
