//! `shoal bench ablation`: the comparison of [Carns 2009]. The smallfile workload runs
//! on a fresh local cluster per configuration, each configuration adding one
//! technique to the one before: baseline, +precreate, +stuffing, +coalescing,
//! +eager, +readdirplus (the paper's five), then +colocate (Shoal's default,
//! beyond the paper). Configurations alternate within each round
//! (the machine is shared and noisy: ratios from one invocation hold).
//! Writes `ablation.csv`, `ablation.md` and, with matplotlib, `ablation.png`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;

use shoal_proto::cluster::Settings;
use shoal_proto::error::{Result, ShoalError};

use crate::report::{fmt_rate, median, Report};
use crate::smallfile::{smallfile, SmallfileOptions};

/// (name, switches on, in `Settings::switches()` order), cumulative as in
/// Figure 3 of [Carns 2009].
const CONFIGS: [(&str, usize); 7] = [
    ("baseline", 0),
    ("+precreate", 1),
    ("+stuffing", 2),
    ("+coalescing", 3),
    ("+eager", 4),
    ("+readdirplus", 5),
    ("+colocate", 6),
];

pub struct AblationOptions {
    /// Where ablation.{csv,md,png} go.
    pub out: PathBuf,
    /// Scratch space for the clusters (data directories and mounts).
    pub work: PathBuf,
    pub servers: u32,
    pub procs: usize,
    pub files: usize,
    pub size: usize,
    pub rounds: usize,
}

/// One configuration's results: per round, the smallfile report.
struct Results {
    name: &'static str,
    reports: Vec<Report>,
}

impl Results {
    /// Median over rounds of each phase's rate, by phase name.
    fn median_rates(&self) -> Vec<(String, f64)> {
        let Some(first) = self.reports.first() else {
            return Vec::new();
        };
        first
            .phases
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let rates: Vec<f64> = self
                    .reports
                    .iter()
                    .filter_map(|r| r.phases.get(i)?.median_rate())
                    .collect();
                (p.name.clone(), median(&rates).unwrap_or(0.0))
            })
            .collect()
    }
}

fn techniques_on(count: usize) -> Vec<String> {
    Settings::switches()
        .enumerate()
        .map(|(i, t)| format!("{t}={}", i < count))
        .collect()
}

fn shoal(args: &[String]) -> Result<()> {
    let exe = std::env::current_exe()?;
    let status = Command::new(exe).args(args).status()?;
    if status.success() {
        Ok(())
    } else {
        Err(ShoalError::io(format!(
            "shoal {} failed ({status})",
            args.join(" ")
        )))
    }
}

/// Runs smallfile once on a fresh cluster with the first `count` techniques on.
fn one(opts: &AblationOptions, name: &str, count: usize, round: usize) -> Result<Report> {
    let base = opts
        .work
        .join(format!("{}-{round}", name.replace(['+', ' '], "")));
    // Fresh: whatever a failed earlier run left here goes first.
    let _ = std::fs::remove_dir_all(&base);
    let data = base.join("data");
    let mnt = base.join("mnt");
    let mut up = vec![
        "up".to_string(),
        "--servers".into(),
        opts.servers.to_string(),
        "--data".into(),
        data.display().to_string(),
        "--mount".into(),
        mnt.display().to_string(),
        "--detach".into(),
        // The paper's techniques in the mode they were made for: every
        // change durable before its reply (coalescing shares those syncs).
        "--set".into(),
        "sync=full".into(),
    ];
    for s in techniques_on(count) {
        up.push("--set".into());
        up.push(s);
    }
    shoal(&up)?;
    let result = smallfile(&SmallfileOptions {
        dir: mnt,
        procs: opts.procs,
        files: opts.files,
        size: opts.size,
        runs: 1,
        native: false,
        reopen: false,
        create_batch: 1,
        preload: None,
        uid: None,
        watch: Vec::new(),
        shared: false,
    });
    let down = shoal(&["down".into(), "--data".into(), data.display().to_string()]);
    let _ = std::fs::remove_dir_all(&base);
    let report = result?;
    down?;
    Ok(report)
}

pub fn ablation(opts: &AblationOptions) -> Result<()> {
    std::fs::create_dir_all(&opts.work)?;
    std::fs::create_dir_all(&opts.out)?;
    let mut results: Vec<Results> = CONFIGS
        .iter()
        .map(|(name, _)| Results {
            name,
            reports: Vec::new(),
        })
        .collect();
    for round in 0..opts.rounds {
        for (i, (name, count)) in CONFIGS.iter().enumerate() {
            eprintln!("ablation: round {} of {}, {name}", round + 1, opts.rounds);
            results[i].reports.push(one(opts, name, *count, round)?);
        }
    }
    let csv = csv(&results);
    let md = markdown(opts, &results);
    let csv_path = opts.out.join("ablation.csv");
    std::fs::write(&csv_path, &csv)?;
    std::fs::write(opts.out.join("ablation.md"), &md)?;
    print!("{md}");
    plot("ablation", &csv_path, &opts.out.join("ablation.png"));
    Ok(())
}

/// Improvement of `rate` over `base`, in percent.
fn improvement(rate: f64, base: f64) -> f64 {
    if base > 0.0 {
        (rate / base - 1.0) * 100.0
    } else {
        0.0
    }
}

fn csv(results: &[Results]) -> String {
    let mut out = String::from("config,phase,median_ops_per_s,improvement_pct,rounds_ops_per_s\n");
    let base = results[0].median_rates();
    for r in results {
        for (i, (phase, rate)) in r.median_rates().iter().enumerate() {
            let per_round: Vec<String> = r
                .reports
                .iter()
                .filter_map(|rep| rep.phases.get(i)?.median_rate())
                .map(|x| format!("{x:.1}"))
                .collect();
            let _ = writeln!(
                out,
                "{},{phase},{rate:.1},{:.1},{}",
                r.name,
                improvement(*rate, base[i].1),
                per_round.join(" ")
            );
        }
    }
    out
}

fn markdown(opts: &AblationOptions, results: &[Results]) -> String {
    let commit = Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Ablation: the five small-file techniques, one at a time\n"
    );
    let _ = writeln!(
        md,
        "`shoal bench ablation` (commit {commit}): smallfile, {} processes x {} files x {} \
         bytes, on a fresh {}-server local cluster per configuration, through the FUSE mount, \
         metadata durable. Each configuration adds one technique to the previous one. \
         Median of {} rounds; configurations alternate within a round.\n",
        opts.procs, opts.files, opts.size, opts.servers, opts.rounds
    );
    let base = results[0].median_rates();
    let header: Vec<&str> = results.iter().map(|r| r.name).collect();
    for (title, as_improvement) in [
        ("Rates, operations/s", false),
        ("Improvement over baseline, %", true),
    ] {
        let _ = writeln!(md, "## {title}\n");
        let _ = writeln!(md, "| phase | {} |", header.join(" | "));
        let _ = writeln!(md, "|---|{}", "---:|".repeat(header.len()));
        for (i, (phase, _)) in base.iter().enumerate() {
            let cells: Vec<String> = results
                .iter()
                .map(|r| {
                    let rate = r.median_rates().get(i).map(|x| x.1).unwrap_or(0.0);
                    if as_improvement {
                        format!("{:+.0}", improvement(rate, base[i].1))
                    } else {
                        fmt_rate(rate)
                    }
                })
                .collect();
            let _ = writeln!(md, "| {phase} | {} |", cells.join(" | "));
        }
        let _ = writeln!(md);
    }
    md
}

/// Draws ablation.png with bench/plot.py when the system Python has matplotlib.
/// Draws `png` from `csv` with `bench/plot.py KIND` (needs matplotlib, which
/// /usr/bin/python3 has after scripts/install-deps); says so if it cannot.
pub(crate) fn plot(kind: &str, csv: &Path, png: &Path) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plot.py");
    let ok = Command::new("/usr/bin/python3")
        .arg(&script)
        .arg(kind)
        .arg(csv)
        .arg(png)
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        eprintln!(
            "{kind}: no chart drawn (needs python3-matplotlib: ./scripts/install-deps); \
             the CSV and Markdown are complete"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn configurations_add_one_technique_each() {
        assert_eq!(
            techniques_on(0)
                .iter()
                .filter(|s| s.ends_with("=true"))
                .count(),
            0
        );
        assert_eq!(
            techniques_on(6)
                .iter()
                .filter(|s| s.ends_with("=true"))
                .count(),
            6
        );
        assert_eq!(techniques_on(2)[1], "stuffing=true");
        assert_eq!(techniques_on(2)[2], "coalescing=false");
        assert_eq!(improvement(200.0, 100.0), 100.0);
        assert_eq!(improvement(5.0, 0.0), 0.0);
    }
}
