//! Benchmark results: per-phase times, the rates and medians derived from
//! them, and their forms on paper: a table for the terminal, CSV and JSON for
//! `bench/results/`, plus the environment a result must be recorded with
//! (commit, build, target directory and its file system type).

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Map, Value};
use shoal_proto::error::{Result, ShoalError};

/// What a phase's amount counts, which also names its rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unit {
    Ops,
    MiB,
}

impl Unit {
    pub fn name(self) -> &'static str {
        match self {
            Unit::Ops => "ops",
            Unit::MiB => "MiB",
        }
    }
    pub fn rate_name(self) -> &'static str {
        match self {
            Unit::Ops => "ops/s",
            Unit::MiB => "MiB/s",
        }
    }
    /// The rate's name as a CSV column or JSON key.
    pub fn rate_key(self) -> &'static str {
        match self {
            Unit::Ops => "ops_per_s",
            Unit::MiB => "MiB_per_s",
        }
    }
}

/// The phase time of workers' (start, end) spans, each after the first
/// start: the last end.
pub fn phase_seconds(spans: &[(f64, f64)]) -> f64 {
    spans.iter().map(|s| s.1).fold(0.0, f64::max)
}

/// One phase of a benchmark over all its runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Phase {
    pub name: String,
    /// Work done by all processes together in one run (operations or MiB).
    pub amount: u64,
    /// Per run, each worker's start and end, in seconds after the first
    /// worker started (`workers.rs`).
    pub worker_spans: Vec<Vec<(f64, f64)>>,
    /// Per run, the CPU time the whole machine spent during the phase, in
    /// seconds (empty where it was not measured).
    pub cpu_seconds: Vec<f64>,
    /// Per run, the CPU time the watched processes (the servers, `--watch-pid`)
    /// spent during the phase, in seconds (empty where none were watched).
    pub watched_cpu_seconds: Vec<f64>,
    /// Per run, the CPU time the worker processes spent during the phase,
    /// in seconds (empty where it was not measured).
    pub worker_cpu_seconds: Vec<f64>,
}

impl Phase {
    pub fn new(name: &str, amount: u64) -> Phase {
        Phase {
            name: name.to_string(),
            amount,
            worker_spans: Vec::new(),
            cpu_seconds: Vec::new(),
            watched_cpu_seconds: Vec::new(),
            worker_cpu_seconds: Vec::new(),
        }
    }

    /// Per run, the phase time: from the first worker's start to the last
    /// one's end (the method of [Carns 2009], `workers.rs`).
    pub fn seconds(&self) -> Vec<f64> {
        let spans = self.worker_spans.iter();
        spans.map(|w| phase_seconds(w)).collect()
    }

    /// Per run, each worker's own time for the phase.
    pub fn worker_seconds(&self) -> Vec<Vec<f64>> {
        let own = |w: &Vec<(f64, f64)>| w.iter().map(|s| s.1 - s.0).collect();
        self.worker_spans.iter().map(own).collect()
    }

    /// Per run, the aggregate rate: total amount / phase time. None for a
    /// phase with nothing to time (amount 0: the native client's close),
    /// whose few nanoseconds would make an absurd rate.
    pub fn rates(&self) -> Vec<f64> {
        if self.amount == 0 {
            return Vec::new();
        }
        self.seconds()
            .into_iter()
            .map(|s| rate(self.amount, s))
            .collect()
    }

    pub fn median_seconds(&self) -> Option<f64> {
        median(&self.seconds())
    }

    /// The median of the per-run rates (with an even number of runs, the mean
    /// of the middle two, which is not amount / median_seconds).
    pub fn median_rate(&self) -> Option<f64> {
        median(&self.rates())
    }

    /// The median over runs of the machine's CPU time per unit of work, in
    /// microseconds: at this cost, `cores * 1e6 / it` units a second is the
    /// most the machine could do with every core busy.
    pub fn median_cpu_us_per_unit(&self) -> Option<f64> {
        if self.amount == 0 {
            return None;
        }
        let per: Vec<f64> = self
            .cpu_seconds
            .iter()
            .map(|s| s * 1e6 / self.amount as f64)
            .collect();
        median(&per)
    }
}

/// `amount` per second; infinite for a zero time (a clock too coarse for the
/// phase), which JSON records as null.
pub fn rate(amount: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        amount as f64 / seconds
    } else {
        f64::INFINITY
    }
}

/// The median, or None for no values.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2]),
        _ => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// A finished benchmark.
#[derive(Clone, Debug)]
pub struct Report {
    pub benchmark: String,
    /// One line saying what ran where, printed above the table.
    pub title: String,
    pub unit: Unit,
    /// Parameters and environment, recorded with the result.
    pub context: Map<String, Value>,
    pub phases: Vec<Phase>,
    /// Caveats printed under the table and kept in the JSON.
    pub notes: Vec<String>,
}

impl Report {
    /// The table for the terminal: one row per phase, medians then each run.
    pub fn table(&self) -> String {
        let unit = self.unit;
        let mut rows = vec![vec![
            "#".to_string(),
            "phase".to_string(),
            unit.name().to_string(),
            "median s".to_string(),
            format!("median {}", unit.rate_name()),
            format!("per-run {}", unit.rate_name()),
        ]];
        for (i, p) in self.phases.iter().enumerate() {
            let runs: Vec<String> = p.rates().into_iter().map(fmt_rate).collect();
            rows.push(vec![
                (i + 1).to_string(),
                p.name.clone(),
                p.amount.to_string(),
                p.median_seconds().map(fmt_seconds).unwrap_or_default(),
                p.median_rate().map_or(NO_RATE.to_string(), fmt_rate),
                if runs.is_empty() {
                    NO_RATE.to_string()
                } else {
                    runs.join(" ")
                },
            ]);
        }
        let mut widths = vec![0; rows[0].len()];
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.len());
            }
        }
        let mut out = format!("{}\n", self.title);
        for row in &rows {
            let mut line = String::new();
            for (c, (cell, w)) in row.iter().zip(&widths).enumerate() {
                // Text columns (#, phase, per-run list) to the left, numbers right.
                let left = c == 1 || c == row.len() - 1;
                let cell = if left {
                    format!("{cell:<w$}")
                } else {
                    format!("{cell:>w$}")
                };
                if c > 0 {
                    line.push_str("  ");
                }
                line.push_str(&cell);
            }
            out.push_str(line.trim_end());
            out.push('\n');
        }
        for note in &self.notes {
            out.push_str(&format!("note: {note}\n"));
        }
        out
    }

    /// CSV, one row per phase: medians, then one rate column per run.
    pub fn csv(&self) -> String {
        let rate = self.unit.rate_key();
        let runs = self
            .phases
            .iter()
            .map(|p| p.worker_spans.len())
            .max()
            .unwrap_or(0);
        let mut out = format!(
            "benchmark,phase_index,phase,{},median_seconds,median_{rate}",
            self.unit.name()
        );
        for r in 1..=runs {
            out.push_str(&format!(",run{r}_{rate}"));
        }
        out.push('\n');
        for (i, p) in self.phases.iter().enumerate() {
            out.push_str(&format!(
                "{},{},{},{},{},{}",
                self.benchmark,
                i + 1,
                p.name,
                p.amount,
                p.median_seconds()
                    .map(|s| s.to_string())
                    .unwrap_or_default(),
                p.median_rate().map(|r| r.to_string()).unwrap_or_default(),
            ));
            let rates = p.rates();
            for r in 0..runs {
                // An empty cell where a phase has no rate, so every row has
                // as many columns as the header.
                match rates.get(r) {
                    Some(rate) => out.push_str(&format!(",{rate}")),
                    None => out.push(','),
                }
            }
            out.push('\n');
        }
        out
    }

    /// Everything: context, notes, and per phase the medians, per-run times
    /// and rates, and each worker's own time.
    pub fn json(&self) -> Value {
        let phases: Vec<Value> = self
            .phases
            .iter()
            .map(|p| {
                json!({
                    "phase": p.name,
                    self.unit.name(): p.amount,
                    "median_seconds": p.median_seconds(),
                    format!("median_{}", self.unit.rate_key()): p.median_rate(),
                    "seconds": p.seconds(),
                    self.unit.rate_key(): p.rates(),
                    "worker_seconds": p.worker_seconds(),
                    "worker_spans": p.worker_spans,
                    "cpu_seconds": p.cpu_seconds,
                    "watched_cpu_seconds": p.watched_cpu_seconds,
                    "worker_cpu_seconds": p.worker_cpu_seconds,
                    "median_cpu_us_per_unit": p.median_cpu_us_per_unit(),
                })
            })
            .collect();
        let mut v = Map::new();
        v.insert("benchmark".into(), json!(self.benchmark));
        v.extend(self.context.clone());
        v.insert("notes".into(), json!(self.notes));
        v.insert("phases".into(), Value::Array(phases));
        Value::Object(v)
    }

    /// Prints the table and writes the files asked for.
    pub fn emit(&self, json_file: Option<&Path>, csv_file: Option<&Path>) -> Result<()> {
        print!("{}", self.table());
        if let Some(path) = json_file {
            let text = serde_json::to_string_pretty(&self.json())
                .map_err(|e| ShoalError::io(format!("encoding JSON: {e}")))?;
            write_file(path, &(text + "\n"))?;
        }
        if let Some(path) = csv_file {
            write_file(path, &self.csv())?;
        }
        Ok(())
    }
}

fn write_file(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(|e| ShoalError::from(e).context(path.display()))
}

/// What the table shows for a phase with nothing to time.
pub const NO_RATE: &str = "-";

/// Rates: whole numbers once they are large enough that decimals are noise.
pub fn fmt_rate(r: f64) -> String {
    if !r.is_finite() {
        "inf".to_string()
    } else if r >= 100.0 {
        format!("{r:.0}")
    } else {
        format!("{r:.1}")
    }
}

/// Seconds to the microsecond: mkdir and rmdir phases take that little.
pub fn fmt_seconds(s: f64) -> String {
    format!("{s:.6}")
}

/// The mount holding a path, as /proc/mounts describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MountInfo {
    pub source: String,
    pub mount_point: PathBuf,
    pub fs_type: String,
}

/// /proc/mounts escapes space, tab, newline and backslash as \ooo.
fn unescape_mount_field(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let code = bytes.get(i + 1..i + 4).and_then(|d| {
            let s = std::str::from_utf8(d).ok()?;
            u8::from_str_radix(s, 8).ok()
        });
        match (bytes[i], code) {
            (b'\\', Some(b)) => {
                out.push(b);
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The mount of `path` (absolute, canonical) in a /proc/mounts text: the
/// longest mount point that is a prefix of it, the last such line winning
/// because a later mount on the same point hides the earlier ones.
pub fn mount_of(mounts: &str, path: &Path) -> Option<MountInfo> {
    let mut best: Option<MountInfo> = None;
    for line in mounts.lines() {
        let mut f = line.split(' ');
        let (Some(source), Some(point), Some(fs_type)) = (f.next(), f.next(), f.next()) else {
            continue;
        };
        let point = PathBuf::from(unescape_mount_field(point));
        // Component-wise: /mnt does not hold /mnt2.
        if !path.starts_with(&point) {
            continue;
        }
        let longer = best
            .as_ref()
            .is_none_or(|b| point.components().count() >= b.mount_point.components().count());
        if longer {
            best = Some(MountInfo {
                source: unescape_mount_field(source),
                mount_point: point,
                fs_type: fs_type.to_string(),
            });
        }
    }
    best
}

/// The commit of the Shoal source the running binary was built in, if the
/// binary lives in a git checkout (as target/*/shoal does), else of the
/// current directory; and whether that checkout had uncommitted changes.
pub(super) fn git_commit() -> (Option<String>, Option<bool>) {
    let exe_dir = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf));
    let dirs = exe_dir.into_iter().chain(std::env::current_dir().ok());
    for dir in dirs {
        let git = |args: &[&str]| {
            Command::new("git")
                .arg("-C")
                .arg(&dir)
                .args(args)
                .stderr(std::process::Stdio::null())
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        };
        if let Some(commit) = git(&["rev-parse", "HEAD"]) {
            let dirty =
                git(&["status", "--porcelain", "--untracked-files=no"]).map(|s| !s.is_empty());
            return (Some(commit), dirty);
        }
    }
    (None, None)
}

/// What every result records about where and how it ran. `dir` must be
/// canonical (mount points are matched against it).
pub fn environment(dir: &Path) -> Map<String, Value> {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    let mount = mount_of(&mounts, dir);
    let (commit, dirty) = git_commit();
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .ok()
            .map(|s| s.trim().to_string())
    };
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let mut m = Map::new();
    m.insert("commit".into(), json!(commit));
    m.insert("dirty".into(), json!(dirty));
    m.insert(
        "build".into(),
        json!(if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }),
    );
    m.insert("dir".into(), json!(dir.display().to_string()));
    m.insert("fs_type".into(), json!(mount.as_ref().map(|m| &m.fs_type)));
    m.insert(
        "mount_point".into(),
        json!(mount.as_ref().map(|m| m.mount_point.display().to_string())),
    );
    // For a Shoal mount this is its cluster file, whose settings the result depends on.
    m.insert(
        "mount_source".into(),
        json!(mount.as_ref().map(|m| &m.source)),
    );
    m.insert("host".into(), json!(read("/proc/sys/kernel/hostname")));
    m.insert("kernel".into(), json!(read("/proc/sys/kernel/osrelease")));
    m.insert(
        "cpus".into(),
        json!(std::thread::available_parallelism().map(|n| n.get()).ok()),
    );
    m.insert("started_unix".into(), json!(started));
    m
}

/// The file system type of a canonical directory, for titles.
pub fn fs_type_of(context: &Map<String, Value>) -> String {
    context
        .get("fs_type")
        .and_then(Value::as_str)
        .unwrap_or("unknown file system")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn phase() -> Phase {
        Phase {
            name: "create".into(),
            amount: 800,
            // Three runs of two workers: phase time is from the first start
            // to the last end (2, 1 and 4 s), though in the second run no
            // worker took more than 0.75 s of its own.
            worker_spans: vec![
                vec![(0.0, 0.5), (0.0, 2.0)],
                vec![(0.0, 0.75), (0.75, 1.0)],
                vec![(0.0, 4.0), (0.0, 4.0)],
            ],
            cpu_seconds: vec![0.8, 0.4, 1.6],
            watched_cpu_seconds: Vec::new(),
            worker_cpu_seconds: Vec::new(),
        }
    }

    #[test]
    fn cpu_per_unit_is_the_median_over_runs() {
        assert_eq!(phase().median_cpu_us_per_unit(), Some(1000.0));
        let mut none = phase();
        none.cpu_seconds.clear();
        assert_eq!(none.median_cpu_us_per_unit(), None);
    }

    #[test]
    fn median_odd_even_empty() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), Some(2.5));
        assert_eq!(median(&[7.0]), Some(7.0));
    }

    #[test]
    fn phase_time_runs_from_first_start_to_last_end_and_rate_is_total_over_it() {
        let p = phase();
        assert_eq!(p.seconds(), vec![2.0, 1.0, 4.0]);
        assert_eq!(p.rates(), vec![400.0, 800.0, 200.0]);
        assert_eq!(p.median_seconds(), Some(2.0));
        assert_eq!(p.median_rate(), Some(400.0));
        assert_eq!(rate(10, 0.0), f64::INFINITY);
    }

    fn report() -> Report {
        let mut context = Map::new();
        context.insert("procs".into(), json!(2));
        Report {
            benchmark: "smallfile".into(),
            title: "smallfile on /x".into(),
            unit: Unit::Ops,
            context,
            phases: vec![Phase::new("mkdir", 2), phase()],
            notes: vec!["a caveat".into()],
        }
    }

    #[test]
    fn table_has_header_rows_and_notes() {
        let mut r = report();
        r.phases[0].worker_spans = vec![vec![(0.0, 0.001), (0.0, 0.002)]; 3];
        let t = r.table();
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "smallfile on /x");
        assert!(lines[1].contains("median ops/s"));
        assert!(lines[2].contains("mkdir") && lines[2].contains("0.002000"));
        assert!(lines[3].contains("create") && lines[3].contains("400 800 200"));
        assert_eq!(lines[4], "note: a caveat");
    }

    #[test]
    fn a_phase_with_nothing_to_time_has_no_rate() {
        // The native client's close: no operations, a few nanoseconds each run.
        let mut r = report();
        r.phases[0] = Phase {
            name: "close".into(),
            amount: 0,
            worker_spans: vec![vec![(0.0, 1e-8), (0.0, 2e-8)]; 3],
            cpu_seconds: Vec::new(),
            watched_cpu_seconds: Vec::new(),
            worker_cpu_seconds: Vec::new(),
        };
        assert_eq!(r.phases[0].rates(), Vec::<f64>::new());
        assert_eq!(r.phases[0].median_rate(), None);
        let t = r.table();
        let close = t.lines().find(|l| l.contains("close")).unwrap();
        assert!(close.ends_with(&format!("{NO_RATE}  {NO_RATE}")), "{close}");
        let csv = r.csv();
        assert_eq!(
            csv.lines().nth(1).unwrap(),
            "smallfile,1,close,0,0.00000002,,,,"
        );
        assert!(r.json()["phases"][0]["median_ops_per_s"].is_null());
    }

    #[test]
    fn csv_has_one_column_per_run() {
        let mut r = report();
        r.phases.remove(0);
        let csv = r.csv();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(
            lines[0],
            "benchmark,phase_index,phase,ops,median_seconds,median_ops_per_s,\
             run1_ops_per_s,run2_ops_per_s,run3_ops_per_s"
        );
        assert_eq!(lines[1], "smallfile,1,create,800,2,400,400,800,200");
    }

    #[test]
    fn json_carries_context_and_phases() {
        let v = report().json();
        assert_eq!(v["benchmark"], "smallfile");
        assert_eq!(v["procs"], 2);
        assert_eq!(v["notes"][0], "a caveat");
        assert_eq!(v["phases"][1]["median_ops_per_s"], 400.0);
        assert_eq!(v["phases"][1]["worker_seconds"][0][1], 2.0);
        assert_eq!(v["phases"][1]["worker_seconds"][1][1], 0.25, "its own time");
        assert_eq!(
            v["phases"][1]["seconds"][1], 1.0,
            "the first start to the last end"
        );
        // No runs: medians are null, not a crash.
        assert!(v["phases"][0]["median_seconds"].is_null());
    }

    #[test]
    fn number_formats() {
        assert_eq!(fmt_rate(12345.67), "12346");
        assert_eq!(fmt_rate(12.34), "12.3");
        assert_eq!(fmt_rate(f64::INFINITY), "inf");
        assert_eq!(fmt_seconds(0.0001234), "0.000123");
    }

    #[test]
    fn mount_lookup_takes_longest_prefix_and_last_line() {
        let mounts = "\
/dev/sda1 / ext4 rw 0 0
tmpfs /dev/shm tmpfs rw 0 0
/srv/c.toml /mnt/sh\\040oal fuse.shoal rw 0 0
/dev/sdb1 /mnt ext4 rw 0 0
other /dev/shm xfs rw 0 0
";
        let m = mount_of(mounts, Path::new("/dev/shm/bench")).unwrap();
        assert_eq!(m.fs_type, "xfs");
        let m = mount_of(mounts, Path::new("/mnt/sh oal/d")).unwrap();
        assert_eq!(m.fs_type, "fuse.shoal");
        assert_eq!(m.source, "/srv/c.toml");
        assert_eq!(m.mount_point, PathBuf::from("/mnt/sh oal"));
        // Component-wise prefix: /mnt2 is on /, not /mnt.
        assert_eq!(
            mount_of(mounts, Path::new("/mnt2")).unwrap().fs_type,
            "ext4"
        );
        assert_eq!(
            mount_of(mounts, Path::new("/mnt2")).unwrap().mount_point,
            PathBuf::from("/")
        );
        assert_eq!(mount_of("", Path::new("/x")), None);
    }
}
