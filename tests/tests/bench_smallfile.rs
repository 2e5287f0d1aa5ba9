//! `shoal bench smallfile --shared` on a real mounted cluster: every
//! process's files in one directory. Times are not checked (benchmarks never
//! assert durations); what is checked is that the run did what it says: the
//! processes' files met in one directory (the workers check each listing's
//! count, so a run that made them elsewhere fails), the mkdir and rmdir
//! phases counted one operation, and the run left nothing behind.

use std::process::Command;

use shoal_tests::{shoal_bin, Cluster};

fn smallfile(mnt: &std::path::Path, extra: &[&str]) -> serde_json::Value {
    let json = tempfile::NamedTempFile::new().unwrap();
    let out = Command::new("timeout")
        .arg("300")
        .arg(shoal_bin())
        .args(["bench", "smallfile", "-p", "3", "-n", "20", "--size", "100"])
        .args(["--runs", "1", "--dir"])
        .arg(mnt)
        .arg("--json")
        .arg(json.path())
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{extra:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&std::fs::read(json.path()).unwrap()).unwrap()
}

fn ops_of(report: &serde_json::Value, phase: &str) -> u64 {
    report["phases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["phase"] == phase)
        .unwrap_or_else(|| panic!("no phase {phase} in {report}"))["ops"]
        .as_u64()
        .unwrap()
}

#[test]
fn a_shared_run_puts_every_process_in_one_directory_through_the_mount_and_the_native_client() {
    let mut c = Cluster::builder().servers(2).start();
    let mnt = c.mount();
    for extra in [
        &["--shared"][..],
        &["--shared", "--native"],
        &["--shared", "--reopen"],
    ] {
        let report = smallfile(&mnt, extra);
        assert_eq!(ops_of(&report, "mkdir"), 1, "{extra:?}");
        assert_eq!(ops_of(&report, "rmdir"), 1, "{extra:?}");
        assert_eq!(ops_of(&report, "create"), 60, "{extra:?}");
        assert_eq!(report["directory"], "one shared", "{extra:?}");
    }
    // And the study's form still gives each process its own.
    let report = smallfile(&mnt, &["--native"]);
    assert_eq!(ops_of(&report, "mkdir"), 3);
    assert_eq!(report["directory"], "one per process");
    let left: Vec<_> = std::fs::read_dir(&mnt).unwrap().collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
