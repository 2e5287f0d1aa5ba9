//! A smoke run of `shoal bench pfa` with tiny counts, on a Shoal mount and a
//! local directory: every pattern's records are read back and verified by
//! the workers (a mismatch fails the run), and the CSV says what the issue
//! asks of PFA that is not a duration: one file instead of a file per rank
//! per step, and an incremental checkpoint that stores the changed pages and
//! nothing more. Times are not checked (benchmarks never assert durations).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use shoal_tests::{shoal_bin, Cluster};

/// Runs `shoal bench pfa` on `dirs` with `args`, small records and one
/// round, its results written under `scratch`; returns its CSV.
fn bench_pfa(scratch: &Path, dirs: &[&Path], args: &[&str], checkpoint_steps: u32) -> String {
    let out = scratch.join("out");
    let mut cmd = Command::new("timeout");
    cmd.arg("300").arg(shoal_bin()).args(["bench", "pfa"]);
    for d in dirs {
        cmd.arg("--dir").arg(d);
    }
    let run = cmd
        .args(args)
        .args(["--record", "70000", "--rounds", "1"])
        .args(["--checkpoint-steps", &checkpoint_steps.to_string()])
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    std::fs::read_to_string(out.join("pfa.csv")).unwrap()
}

#[test]
fn a_tiny_run_verifies_every_pattern_and_counts_files_and_checkpoint_bytes() {
    let mut cluster = Cluster::builder().servers(4).start();
    let mnt = cluster.mount();
    let local = tempfile::Builder::new()
        .prefix("shoal-bench-pfa-")
        .tempdir()
        .unwrap();
    let (ranks, steps) = (3, 4);
    let csv = bench_pfa(
        local.path(),
        &[&mnt, local.path()],
        &["-p", &ranks.to_string(), "--steps", &steps.to_string()],
        4,
    );
    let value: BTreeMap<(String, String), f64> = csv
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            ((f[1].to_string(), f[2].to_string()), f[4].parse().unwrap())
        })
        .collect();
    for dir in ["shoal", "local"] {
        let label = if dir == "shoal" {
            "shoal".to_string()
        } else {
            // The local directory is labelled with its file system's type.
            value
                .keys()
                .map(|(_, m)| m.split(' ').next().unwrap().to_string())
                .find(|l| l != "shoal")
                .expect("a second directory")
        };
        let get =
            |target: &str, metric: &str| value[&(target.to_string(), format!("{label} {metric}"))];
        assert_eq!(get("n-n", "files"), (ranks * steps) as f64, "{csv}");
        assert_eq!(get("n-1-locked", "files"), 1.0, "{csv}");
        assert_eq!(get("pfa", "files"), 1.0, "{csv}");
        for p in ["n-n", "n-1-locked", "pfa"] {
            assert!(get(p, "write") > 0.0 && get(p, "read") > 0.0, "{csv}");
            assert_eq!(get(p, "records"), (ranks * steps) as f64, "{p}: {csv}");
        }
        let changed = get("changed pages", "checkpoint");
        assert_eq!(get("incremental", "checkpoint"), changed, "{csv}");
        assert!(get("full stores", "checkpoint") > 2.0 * changed, "{csv}");
    }
    assert!(local.path().join("out/pfa.md").exists());
}

/// The paper's form: each rank writes for a fixed time, and the run counts
/// what was written and read back; here PFA alone, on the mount.
#[test]
fn a_timed_run_counts_the_records_each_pattern_wrote() {
    let mut cluster = Cluster::builder().servers(2).start();
    let mnt = cluster.mount();
    let local = tempfile::Builder::new()
        .prefix("shoal-bench-pfa-timed-")
        .tempdir()
        .unwrap();
    let csv = bench_pfa(
        local.path(),
        &[&mnt],
        &["-p", "2", "--seconds", "0.3", "--pattern", "pfa"],
        2,
    );
    let records: Vec<f64> = csv
        .lines()
        .filter(|l| l.starts_with("pfa,pfa,shoal records,"))
        .map(|l| l.split(',').nth(4).unwrap().parse().unwrap())
        .collect();
    assert_eq!(records.len(), 1, "{csv}");
    assert!(records[0] >= 2.0, "{csv}");
    assert!(
        !csv.contains("pfa,n-n,"),
        "only the pattern asked for runs: {csv}"
    );
}
