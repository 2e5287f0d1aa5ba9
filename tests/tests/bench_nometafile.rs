//! A smoke run of `shoal bench nometafile` with tiny counts: it brings up its
//! own clusters (baseline and all-on, on disk and, as root, on its own
//! tmpfs), runs 1 and 2 client processes with and without the hint, and
//! writes its CSV and Markdown. Times are not checked (benchmarks never
//! assert durations); the messages per file each case cost are, since they
//! are what the hint removes.

use std::collections::BTreeMap;
use std::process::Command;

use shoal_tests::shoal_bin;

#[test]
fn a_tiny_run_measures_every_case_and_counts_the_messages_the_hint_saves() {
    let dir = tempfile::Builder::new()
        .prefix("shoal-bench-nm-")
        .tempdir()
        .unwrap();
    // SAFETY: geteuid cannot fail.
    let root = unsafe { libc::geteuid() } == 0;
    let storage = if root { "disk,tmpfs" } else { "disk" };
    let out = Command::new("timeout")
        .arg("600")
        .arg(shoal_bin())
        .args(["bench", "nometafile", "--dirs", "2", "--files", "3"])
        .args(["--rounds", "1", "--clients", "1,2", "--storage", storage])
        .args(["--tmpfs-mib", "256", "--out"])
        .arg(dir.path().join("out"))
        .arg("--work")
        .arg(dir.path().join("work"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let csv = std::fs::read_to_string(dir.path().join("out/no_metafile.csv")).unwrap();
    let mut lines = csv.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let rows: Vec<BTreeMap<&str, &str>> = lines
        .map(|l| header.iter().copied().zip(l.split(',')).collect())
        .collect();
    let storages = if root { 2 } else { 1 };
    assert_eq!(rows.len(), storages * 2 * 2 * 3, "{csv}");
    for r in &rows {
        let pct: f64 = r["with_pct_of_without"].parse().unwrap();
        assert!(pct > 0.0 && pct.is_finite(), "{r:?}");
        let messages = (r["without_msgs_per_file"], r["with_msgs_per_file"]);
        // Baseline on 4 servers: create n+3 -> 2, remove n+2 -> 2; all on:
        // create and remove are one message either way.
        let expected = match (r["protocol"], r["operation"]) {
            ("baseline", "create") => Some(("7.00", "2.00")),
            ("baseline", "remove") => Some(("6.00", "2.00")),
            ("all-on", "create" | "remove") => Some(("1.00", "1.00")),
            _ => None,
        };
        if let Some(expected) = expected {
            assert_eq!(messages, expected, "{r:?}");
        }
    }
    let md = std::fs::read_to_string(dir.path().join("out/no_metafile.md")).unwrap();
    assert!(
        md.contains("Targets (baseline protocol, on disk, 2 clients"),
        "{md}"
    );
    assert!(md.contains("What the hint still buys"), "{md}");
    assert!(
        !std::fs::read_to_string("/proc/mounts")
            .unwrap()
            .contains(&*dir.path().to_string_lossy()),
        "the tmpfs is unmounted"
    );
}
