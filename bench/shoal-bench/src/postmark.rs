//! Postmark (Debian `postmark`) on the mount, [Hildebrand 2006]'s Table 1:
//! small files created, read, appended to in 1 KiB writes and deleted, its
//! write throughput through mounts of one cluster that differ only in their
//! write threshold (`shoal mount -o write_threshold=...`), one after the
//! other within a round.

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use shoal_proto::error::{Result, ShoalError};

/// [Hildebrand 2006]'s configuration, but for the transactions (the paper
/// ran 2,000; fewer keep a round of the direct path under a minute here).
pub const FILES: u32 = 100;
pub const SIZE_MIN: u32 = 1000;
pub const SIZE_MAX: u32 = 500_000;
pub const BLOCK: u32 = 1024;

/// What one Postmark run wrote, in MB as it counts them (10^6 bytes), and
/// the wall time of the whole run.
pub struct Run {
    pub written_mb: f64,
    pub seconds: f64,
}

/// Mounts `cluster` on `mnt` with `options` (`-o`), runs Postmark in a new
/// directory there with `transactions`, unmounts.
pub fn run_on_mount(cluster: &Path, mnt: &Path, options: &str, transactions: u32) -> Result<Run> {
    std::fs::create_dir_all(mnt)?;
    let exe = std::env::current_exe()?;
    let mounted = Command::new(&exe)
        .arg("mount")
        .arg(cluster)
        .arg(mnt)
        .args(["-o", options])
        .stdout(Stdio::null())
        .status()?;
    if !mounted.success() {
        return Err(ShoalError::io(format!("shoal mount -o {options} failed")));
    }
    let result = run(&mnt.join("postmark"), transactions);
    let unmounted = Command::new("fusermount3").arg("-u").arg(mnt).status();
    let out = result?;
    if !unmounted.is_ok_and(|s| s.success()) {
        return Err(ShoalError::io(format!(
            "fusermount3 -u {} failed",
            mnt.display()
        )));
    }
    Ok(out)
}

/// One Postmark run in `dir` (made, and left empty by Postmark).
fn run(dir: &Path, transactions: u32) -> Result<Run> {
    std::fs::create_dir_all(dir)?;
    let script = format!(
        "set location {}\nset number {FILES}\nset transactions {transactions}\n\
         set size {SIZE_MIN} {SIZE_MAX}\nset read {BLOCK}\nset write {BLOCK}\n\
         set buffering false\nrun\nquit\n",
        dir.display()
    );
    let t0 = Instant::now();
    let mut child = Command::new("postmark")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| ShoalError::io(format!("postmark (apt-get install postmark): {e}")))?;
    child
        .stdin
        .take()
        .expect("piped")
        .write_all(script.as_bytes())?;
    let out = child.wait_with_output()?;
    let seconds = t0.elapsed().as_secs_f64();
    let text = String::from_utf8_lossy(&out.stdout);
    match (out.status.success(), parse_amount(&text, "written")) {
        (true, Some(written_mb)) => Ok(Run {
            written_mb,
            seconds,
        }),
        _ => Err(ShoalError::io(format!(
            "postmark in {} failed: {}{}",
            dir.display(),
            text,
            String::from_utf8_lossy(&out.stderr)
        ))),
    }
}

/// From Postmark's report, the megabytes `what` ("read" or "written"):
/// a line such as "345.15 megabytes written (345.15 megabytes per second)"
/// (kilobytes when small).
fn parse_amount(report: &str, what: &str) -> Option<f64> {
    report.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        let (n, unit, verb) = (w.next()?, w.next()?, w.next()?);
        if verb != what {
            return None;
        }
        let n: f64 = n.parse().ok()?;
        match unit {
            "megabytes" => Some(n),
            "kilobytes" => Some(n / 1000.0),
            "bytes" => Some(n / 1e6),
            _ => None,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_postmarks_report() {
        let report = "Data:\n\t307.05 megabytes read (307.05 megabytes per second)\n\
                      \t845.12 kilobytes written (845.12 kilobytes per second)\n";
        assert_eq!(parse_amount(report, "read"), Some(307.05));
        assert_eq!(parse_amount(report, "written"), Some(0.84512));
        assert_eq!(parse_amount("nothing", "read"), None);
    }
}
