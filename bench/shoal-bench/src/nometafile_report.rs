//! The results of `shoal bench nometafile` on paper, in the form of
//! Figures 1 to 4 of [Kuhn 2008]: per operation, each client's time with and without
//! the hint, on disk and on tmpfs, for 1 and 5 clients, and the time with
//! the hint as a percentage of the time without it. Writes
//! `no_metafile.csv`, `no_metafile.md` and, with matplotlib,
//! `no_metafile.png` (`bench/plot.py no_metafile`).

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use shoal_proto::error::Result;

use crate::nometafile::{Case, NometafileOptions, Protocol, Results, Run, OPS};
use crate::report::{git_commit, median};

/// [Kuhn 2008]'s targets for the baseline protocol on disk with 5 clients:
/// the time with the hint at most this percentage of the time without.
const TARGETS: [(&str, f64); 3] = [("create", 50.0), ("list", 60.0), ("remove", 50.0)];

/// One row: an operation of a (storage, protocol, clients) case, both ways.
struct Row {
    case: Case,
    op: usize,
    without: Vec<Run>,
    with: Vec<Run>,
}

impl Row {
    fn seconds(runs: &[Run], op: usize) -> Vec<f64> {
        runs.iter().map(|r| r.seconds[op]).collect()
    }
    fn median_seconds(runs: &[Run], op: usize) -> f64 {
        median(&Self::seconds(runs, op)).unwrap_or(f64::NAN)
    }
    /// The time with the hint as a percentage of the time without.
    fn pct(&self) -> f64 {
        100.0 * Self::median_seconds(&self.with, self.op)
            / Self::median_seconds(&self.without, self.op)
    }
    fn messages_per_file(runs: &[Run], op: usize, files: usize) -> f64 {
        let m: Vec<f64> = runs
            .iter()
            .map(|r| r.messages[op] as f64 / files as f64)
            .collect();
        median(&m).unwrap_or(f64::NAN)
    }
}

/// Every (case without the hint, operation) with both sides measured.
fn rows(results: &Results) -> Vec<Row> {
    let mut rows = Vec::new();
    for (case, without) in results.runs.iter().filter(|(c, _)| !c.hint) {
        let Some(with) = results.runs.get(&Case {
            hint: true,
            ..*case
        }) else {
            continue;
        };
        for op in 0..OPS.len() {
            rows.push(Row {
                case: *case,
                op,
                without: without.clone(),
                with: with.clone(),
            });
        }
    }
    rows
}

fn list(values: &[f64]) -> String {
    values
        .iter()
        .map(|v| format!("{v:.3}"))
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn csv(results: &Results, opts: &NometafileOptions) -> String {
    let mut out = String::from(
        "storage,protocol,clients,operation,without_hint_s,with_hint_s,with_pct_of_without,\
         without_msgs_per_file,with_msgs_per_file,without_runs_s,with_runs_s\n",
    );
    for r in rows(results) {
        let files = r.case.clients * opts.dirs * opts.files;
        let _ = writeln!(
            out,
            "{},{},{},{},{:.4},{:.4},{:.1},{:.2},{:.2},{},{}",
            r.case.storage.name(),
            r.case.protocol.name(),
            r.case.clients,
            OPS[r.op],
            Row::median_seconds(&r.without, r.op),
            Row::median_seconds(&r.with, r.op),
            r.pct(),
            Row::messages_per_file(&r.without, r.op, files),
            Row::messages_per_file(&r.with, r.op, files),
            list(&Row::seconds(&r.without, r.op)),
            list(&Row::seconds(&r.with, r.op)),
        );
    }
    out
}

/// The commit the running binary was built from, marked when its checkout
/// had uncommitted changes.
fn commit() -> String {
    match git_commit() {
        (Some(c), Some(true)) => format!("{} with uncommitted changes", &c[..c.len().min(7)]),
        (Some(c), _) => c[..c.len().min(7)].to_string(),
        (None, _) => "unknown".into(),
    }
}

pub fn markdown(results: &Results, opts: &NometafileOptions) -> String {
    let rows = rows(results);
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# The no_metafile hint: create, list and remove ([Kuhn 2008])\n"
    );
    let storages: Vec<String> = results
        .fs_types
        .iter()
        .map(|(s, t)| format!("{} ({t})", s.name()))
        .collect();
    let _ = writeln!(
        md,
        "`shoal bench nometafile` (commit {}; {} build): each client process creates {} \
         directories x {} empty files in its own directory, lists them with their \
         attributes (readdir, then readdirplus or a getattr per entry), and removes them; \
         one operation at a time, through the native client with its caches off. With the \
         hint, `no_metafile=1` is set on the clients' parent directory, and the directories \
         they make inherit it. {}-server local cluster, metadata durable; server storage: \
         {}. Times run from the first client's start to the last one's end, median of {} \
         rounds; with and without the hint alternate within each round, on a fresh cluster \
         per round, storage and protocol. \
         Messages: requests the servers received per file.\n",
        commit(),
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        opts.dirs,
        opts.files,
        opts.servers,
        storages.join(", "),
        opts.rounds,
    );
    for protocol in [Protocol::Baseline, Protocol::AllOn] {
        let mine: Vec<&Row> = rows
            .iter()
            .filter(|r| r.case.protocol == protocol)
            .collect();
        if mine.is_empty() {
            continue;
        }
        let _ = writeln!(
            md,
            "## {}\n",
            match protocol {
                Protocol::Baseline =>
                    "Baseline protocol (every switch off, as the PVFS of [Kuhn 2008])",
                Protocol::AllOn => "Every technique on (Shoal's default)",
            }
        );
        let _ = writeln!(
            md,
            "| operation | clients | storage | without hint, s | with hint, s | with / without \
             | messages per file, without → with |"
        );
        let _ = writeln!(md, "|---|---:|---|---:|---:|---:|---:|");
        let mut sorted = mine.clone();
        sorted.sort_by_key(|r| (r.op, r.case.clients, r.case.storage));
        for r in sorted {
            let files = r.case.clients * opts.dirs * opts.files;
            let _ = writeln!(
                md,
                "| {} | {} | {} | {:.3} | {:.3} | **{:.0}%** | {:.2} → {:.2} |",
                OPS[r.op],
                r.case.clients,
                r.case.storage.name(),
                Row::median_seconds(&r.without, r.op),
                Row::median_seconds(&r.with, r.op),
                r.pct(),
                Row::messages_per_file(&r.without, r.op, files),
                Row::messages_per_file(&r.with, r.op, files),
            );
        }
        let _ = writeln!(md);
    }
    targets(&mut md, &rows);
    let _ = writeln!(md, "Every round, seconds (without | with the hint):\n");
    for r in &rows {
        let _ = writeln!(
            md,
            "- {} {}, {} client(s), {}: {} | {}",
            r.case.protocol.name(),
            r.case.storage.name(),
            r.case.clients,
            OPS[r.op],
            list(&Row::seconds(&r.without, r.op)),
            list(&Row::seconds(&r.with, r.op)),
        );
    }
    let _ = writeln!(md, "\nCommand:\n\n```sh");
    let _ = writeln!(
        md,
        "shoal bench nometafile --dirs {} --files {} --servers {} --rounds {} --clients {} \
         --work {}",
        opts.dirs,
        opts.files,
        opts.servers,
        opts.rounds,
        opts.clients
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(","),
        opts.work.display()
    );
    let _ = writeln!(md, "```");
    md
}

/// The paper's targets on the baseline protocol, on disk, with the most
/// clients measured; and what the hint buys with everything on.
fn targets(md: &mut String, rows: &[Row]) {
    let most = rows.iter().map(|r| r.case.clients).max().unwrap_or(0);
    let pick = |protocol: Protocol| {
        rows.iter().filter(move |r| {
            r.case.protocol == protocol
                && r.case.clients == most
                && r.case.storage == crate::nometafile::Storage::Disk
        })
    };
    let baseline: Vec<&Row> = pick(Protocol::Baseline).collect();
    if !baseline.is_empty() {
        let _ = writeln!(
            md,
            "Targets (baseline protocol, on disk, {most} clients; time with the hint as a \
             percentage of the time without):\n"
        );
        for r in baseline {
            let (_, target) = TARGETS[r.op];
            let pct = r.pct();
            let _ = writeln!(
                md,
                "- {}: {pct:.0}% (target at most {target:.0}%): {}",
                OPS[r.op],
                if pct <= target { "met" } else { "NOT met" }
            );
        }
        let _ = writeln!(md);
    }
    let all_on: Vec<&Row> = pick(Protocol::AllOn).collect();
    if !all_on.is_empty() {
        let _ = writeln!(
            md,
            "What the hint still buys with every technique on (on disk, {most} clients):\n"
        );
        for r in all_on {
            let _ = writeln!(
                md,
                "- {}: {:.0}% of the time without it",
                OPS[r.op],
                r.pct()
            );
        }
        let _ = writeln!(md);
    }
}

/// Writes the CSV and Markdown, prints the Markdown, and draws the chart
/// when the system Python has matplotlib.
pub fn write(results: &Results, opts: &NometafileOptions) -> Result<()> {
    // Before any file is written: the commit recorded must not count the
    // results it replaces as uncommitted changes.
    let md = markdown(results, opts);
    std::fs::create_dir_all(&opts.out)?;
    let csv_path = opts.out.join("no_metafile.csv");
    std::fs::write(&csv_path, csv(results, opts))?;
    std::fs::write(opts.out.join("no_metafile.md"), &md)?;
    print!("{md}");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../plot.py");
    let drawn = Command::new("/usr/bin/python3")
        .arg(&script)
        .arg("no_metafile")
        .arg(&csv_path)
        .arg(opts.out.join("no_metafile.png"))
        .status()
        .is_ok_and(|s| s.success());
    if !drawn {
        eprintln!(
            "bench nometafile: no chart drawn (needs python3-matplotlib: \
             ./scripts/install-deps); the CSV and Markdown are complete"
        );
    }
    Ok(())
}
