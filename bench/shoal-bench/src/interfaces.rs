//! `shoal bench interfaces`: the workloads of the PVFS POSIX-interface study
//! [Vilayannur 2004] and the small-file benchmark of [Carns 2009], each run
//! in one invocation through every way a program reaches Shoal:
//!
//! - `preload`: POSIX calls through `libshoal_preload.so` (LD_PRELOAD), no kernel;
//! - `preload-user`: the same as an unprivileged user (uid 65534, smallfile
//!   only), who cannot read the cluster secret: the library's connections
//!   carry a credential from the mount's broker;
//! - `preload-user-secret`: the same user with the secret made readable to it
//!   for its turn (a control: the same user's permission checks, no
//!   credential);
//! - `mount`: the same calls through the FUSE mount;
//! - `native`: the Rust client (smallfile and bandwidth only);
//! - `passthrough`: bindfs --multithreaded over tmpfs, the ceiling of any
//!   FUSE mount on this machine (nothing durable, no network).
//!
//! One local cluster (`shoal up --mount --detach`) and one bindfs are set up
//! for the whole run; targets alternate within each round, in another order
//! each round, and the median of the rounds is reported.
//! Every child runs under `timeout`. Writes `interfaces-<workload>.{csv,md}`
//! and a PNG chart (bench/plot.py).

use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs::{self, OpenOptions};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use shoal_client::{mounts, Client};
use shoal_proto::cluster::ClusterConfig;
use shoal_proto::error::{Result, ShoalError};

use crate::fsops::{self, at};
use crate::ls::shoal;
use crate::pattern;
use crate::report::{median, Phase};
use crate::runtime::runtime;
use crate::smallfile::{self, SmallfileOptions};
use crate::workers::{run_phases_with, Barrier};

/// Seconds any one child (tar, ls, find, bonnie++) may take.
const CHILD_TIMEOUT: &str = "1200";
/// Pause between steps: past the kernel's and the clients' 100 ms
/// attribute caches, so no step is answered from the previous one's.
const SETTLE: Duration = Duration::from_millis(300);

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Target {
    Preload,
    PreloadUser,
    PreloadUserSecret,
    Mount,
    Native,
    Passthrough,
}

impl Target {
    pub fn name(self) -> &'static str {
        match self {
            Target::Preload => "preload",
            Target::PreloadUser => "preload-user",
            Target::PreloadUserSecret => "preload-user-secret",
            Target::Mount => "mount",
            Target::Native => "native",
            Target::Passthrough => "passthrough",
        }
    }
}

#[derive(Clone, Debug)]
pub enum Workload {
    Smallfile {
        procs: usize,
        files: usize,
        size: usize,
        reopen: bool,
    },
    Tree {
        source: PathBuf,
    },
    Bandwidth {
        procs: usize,
        size_mib: u64,
        blocks_kib: Vec<u64>,
    },
    Bonnie {
        size_mib: u64,
        files_k: u32,
    },
}

/// The tree `shoal bench interfaces tree` untars unless told another.
pub const DEFAULT_TREE: &str = "/usr/include";

impl Workload {
    /// What the results are named by (`interfaces-NAME.*`): a tree other
    /// than the default adds the first word of its file name
    /// (`linux-source-6.1.tar.xz`: `tree-linux`), so that its results do
    /// not replace the default tree's.
    fn name(&self) -> String {
        match self {
            Workload::Smallfile { reopen: false, .. } => "smallfile".into(),
            Workload::Smallfile { reopen: true, .. } => "smallfile-reopen".into(),
            Workload::Tree { source } if source != Path::new(DEFAULT_TREE) => {
                let file = source.file_name().unwrap_or_default().to_string_lossy();
                let word = file.split(['-', '.', '_']).next().unwrap_or_default();
                format!("tree-{word}")
            }
            Workload::Tree { .. } => "tree".into(),
            Workload::Bandwidth { .. } => "bandwidth".into(),
            Workload::Bonnie { .. } => "bonnie".into(),
        }
    }

    fn targets(&self) -> &'static [Target] {
        match self {
            Workload::Smallfile { .. } => &[
                Target::Preload,
                Target::PreloadUser,
                Target::PreloadUserSecret,
                Target::Mount,
                Target::Native,
                Target::Passthrough,
            ],
            Workload::Bandwidth { .. } => &[
                Target::Preload,
                Target::Mount,
                Target::Native,
                Target::Passthrough,
            ],
            _ => &[Target::Preload, Target::Mount, Target::Passthrough],
        }
    }
}

pub struct InterfacesOptions {
    pub out: PathBuf,
    pub work: PathBuf,
    pub servers: u32,
    pub rounds: usize,
    pub preload: Option<PathBuf>,
    /// `shoal up --set` settings (e.g. sync=none).
    pub settings: Vec<String>,
    pub workload: Workload,
    /// The command line, for the report.
    pub command: String,
}

/// What one round measured: (metric, unit, value) per target.
type Sample = (String, &'static str, f64);

/// The cluster with its mount, and the passthrough, for one run.
struct Setup {
    data: PathBuf,
    mnt: PathBuf,
    pass: PathBuf,
    pass_src: PathBuf,
    preload: PathBuf,
}

impl Setup {
    fn up(opts: &InterfacesOptions) -> Result<Setup> {
        let preload = match &opts.preload {
            Some(p) => p.clone(),
            None => std::env::current_exe()?
                .parent()
                .map(|d| d.join("libshoal_preload.so"))
                .unwrap_or_default(),
        };
        if !preload.is_file() {
            return Err(ShoalError::invalid(format!(
                "{}: no libshoal_preload.so (cargo build --release -p shoal-preload, or --preload LIB)",
                preload.display()
            )));
        }
        // Never empty a work directory with something still mounted in it
        // (a previous run's cluster or passthrough): that would delete
        // through the mount.
        if let Ok(work) = fs::canonicalize(&opts.work) {
            let mounts = fs::read_to_string("/proc/self/mounts").unwrap_or_default();
            let prefix = format!("{}/", work.display());
            if mounts
                .lines()
                .filter_map(|l| l.split_whitespace().nth(1))
                .any(|m| m.starts_with(&prefix))
            {
                return Err(ShoalError::invalid(format!(
                    "{}: something is still mounted in it (a previous run?): \
                     shoal down --data {0}/data; fusermount3 -u {0}/pass",
                    work.display()
                )));
            }
        }
        let _ = fs::remove_dir_all(&opts.work);
        fs::create_dir_all(&opts.work)?;
        let work = fs::canonicalize(&opts.work)?;
        let (data, mnt, pass) = (work.join("data"), work.join("mnt"), work.join("pass"));
        let pass_src = PathBuf::from(format!("/dev/shm/shoal-interfaces.{}", std::process::id()));
        fs::create_dir_all(&pass)?;
        fs::create_dir_all(&pass_src)?;
        let mut setup = Setup {
            data,
            mnt,
            pass,
            pass_src,
            preload: fs::canonicalize(preload)?,
        };
        let ok = Command::new("bindfs")
            .arg("--multithreaded")
            .arg(&setup.pass_src)
            .arg(&setup.pass)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        if !ok {
            let _ = fs::remove_dir_all(&setup.pass_src);
            setup.pass_src = PathBuf::new();
            return Err(ShoalError::io(
                "bindfs --multithreaded failed (is bindfs installed? scripts/install-deps)",
            ));
        }
        let servers = opts.servers.to_string();
        let (d, m) = (
            setup.data.display().to_string(),
            setup.mnt.display().to_string(),
        );
        let mut up: Vec<&str> = vec![
            "up",
            "--servers",
            &servers,
            "--data",
            &d,
            "--mount",
            &m,
            "--detach",
        ];
        for s in &opts.settings {
            up.push("--set");
            up.push(s);
        }
        shoal(&up)?;
        Ok(setup)
    }

    /// Connections the servers have seen opened with a user credential.
    fn user_connections(&self) -> Result<u64> {
        let config = ClusterConfig::load(&self.data.join("cluster.toml"))?;
        let servers = config.num_servers();
        let client = Client::new(config);
        runtime()?.block_on(async {
            let mut n = 0;
            for s in 0..servers {
                n += client.server_stats(s).await?.user_connections;
            }
            Ok(n)
        })
    }

    /// Where `target` works, and the environment its programs get.
    fn dir(&self, t: Target) -> &Path {
        match t {
            Target::Passthrough => &self.pass,
            _ => &self.mnt,
        }
    }

    fn env(&self, t: Target) -> Vec<(String, OsString)> {
        match t {
            Target::Preload | Target::PreloadUser | Target::PreloadUserSecret => {
                vec![("LD_PRELOAD".into(), self.preload.clone().into())]
            }
            _ => Vec::new(),
        }
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        if !self.pass_src.as_os_str().is_empty() {
            let _ = Command::new("fusermount3")
                .arg("-u")
                .arg(&self.pass)
                .status();
            let _ = fs::remove_dir_all(&self.pass_src);
        }
        let _ = shoal(&["down", "--data", &self.data.display().to_string()]);
    }
}

pub fn interfaces(opts: &InterfacesOptions) -> Result<()> {
    fs::create_dir_all(&opts.out)?;
    let setup = Setup::up(opts)?;
    let targets = opts.workload.targets();
    let mut samples: Vec<Vec<Vec<Sample>>> = vec![Vec::new(); targets.len()];
    let tarball = match &opts.workload {
        Workload::Tree { source } => Some(make_tarball(source, &opts.work)?),
        _ => None,
    };
    for round in 0..opts.rounds {
        // A target's leftovers on the shared cluster (its deletes still
        // settling, the store's compaction) land on the next one: each round
        // takes the targets in another order (the same for a given round
        // number, run to run), so that no target always follows the same one,
        // as a rotation of one fixed order would have it (the target after
        // the only one that leaves the cluster alone always ran on a quiet
        // cluster).
        for i in round_order(targets.len(), round) {
            let t = targets[i];
            eprintln!(
                "bench interfaces {}: round {} of {}: {}",
                opts.workload.name(),
                round + 1,
                opts.rounds,
                t.name()
            );
            let got = match &opts.workload {
                Workload::Smallfile {
                    procs,
                    files,
                    size,
                    reopen,
                } => run_smallfile(&setup, t, *procs, *files, *size, *reopen)?,
                Workload::Tree { .. } => run_tree(
                    &setup,
                    t,
                    tarball
                        .as_ref()
                        .map(|(p, _)| p.as_path())
                        .unwrap_or(Path::new("")),
                    tarball.as_ref().map(|(_, n)| *n).unwrap_or(0),
                    round,
                )?,
                Workload::Bandwidth {
                    procs,
                    size_mib,
                    blocks_kib,
                } => run_bandwidth(&setup, t, *procs, *size_mib, blocks_kib, round)?,
                Workload::Bonnie { size_mib, files_k } => {
                    run_bonnie(&setup, t, *size_mib, *files_k, round)?
                }
            };
            samples[i].push(got);
        }
    }
    drop(setup);
    let rows = medians(targets, &samples);
    let name = opts.workload.name();
    let csv_path = opts.out.join(format!("interfaces-{name}.csv"));
    let mut csv = String::from("workload,target,metric,unit,median,rounds\n");
    for (t, metric, unit, v, all) in &rows {
        let all: Vec<String> = all.iter().map(|x| format!("{x:.3}")).collect();
        let _ = writeln!(csv, "{name},{t},{metric},{unit},{v:.3},{}", all.join(" "));
    }
    fs::write(&csv_path, &csv)?;
    let md = markdown(opts, targets, &rows, tarball.as_ref().map(|(_, n)| *n));
    fs::write(opts.out.join(format!("interfaces-{name}.md")), &md)?;
    print!("{md}");
    let png = opts.out.join(format!("interfaces-{name}.png"));
    crate::ablation::plot("interfaces", &csv_path, &png);
    Ok(())
}

/// The order of `n` targets in round `round`: a shuffle seeded by the
/// round's number (Fisher-Yates over a 64-bit LCG).
fn round_order(n: usize, round: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut state = (round as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for i in (1..n).rev() {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        let j = ((state >> 33) % (i as u64 + 1)) as usize;
        order.swap(i, j);
    }
    order
}

/// (target, metric, unit, median, every round) in metric order.
type Row = (&'static str, String, &'static str, f64, Vec<f64>);

fn medians(targets: &[Target], samples: &[Vec<Vec<Sample>>]) -> Vec<Row> {
    let mut rows = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        let Some(first) = samples[i].first() else {
            continue;
        };
        for (k, (metric, unit, _)) in first.iter().enumerate() {
            let all: Vec<f64> = samples[i]
                .iter()
                .filter_map(|r| r.get(k))
                .map(|s| s.2)
                .collect();
            let m = median(&all).unwrap_or(f64::NAN);
            rows.push((t.name(), metric.clone(), *unit, m, all));
        }
    }
    rows
}

fn markdown(
    opts: &InterfacesOptions,
    targets: &[Target],
    rows: &[Row],
    tree_files: Option<usize>,
) -> String {
    let mut md = String::new();
    let name = opts.workload.name();
    let _ = writeln!(md, "# `shoal bench interfaces {name}`\n");
    let what = match &opts.workload {
        Workload::Smallfile {
            procs,
            files,
            size,
            reopen,
        } => format!(
            "smallfile of [Carns 2009]: {procs} processes x {files} files x {size} bytes, {}; \
             rates in operations/s (higher is better)",
            if *reopen {
                "each phase opening and closing every file (the native client, which opens \
                 nothing, flushes each file's writes where the others close it)"
            } else {
                "files kept open from create to close"
            }
        ),
        Workload::Tree { source } => format!(
            "the source-tree workload of [Vilayannur 2004]: a tar of {} ({} entries) \
             untarred, `ls -aR`, `find -exec stat {{}} +`, `rm -rf`; seconds (lower is better)",
            source.display(),
            tree_files.unwrap_or(0)
        ),
        Workload::Bandwidth {
            procs, size_mib, ..
        } => format!(
            "the aggregate bandwidth test of [Vilayannur 2004]: {procs} processes write \
             disjoint blocks (block i of process k at (i*{procs}+k)*B) of one shared file, \
             {size_mib} MiB each, close, reopen, read back and verify (each process drops \
             its blocks' cached pages before the reads, untimed: posix_fadvise DONTNEED); \
             MiB/s over all processes (higher is better)"
        ),
        Workload::Bonnie { size_mib, files_k } => format!(
            "Bonnie++ -f ({size_mib} MiB file, {files_k}x1024 files; no per-character tests: \
             bonnie++ 2.0 makes a system call per character): block I/O in KiB/s, \
             file tests in operations/s (higher is better; NaN: too fast for bonnie++ to time)"
        ),
    };
    let _ = writeln!(
        md,
        "{what}. {}-server local cluster{} and its FUSE mount; `preload`: the same POSIX \
         programs with LD_PRELOAD=libshoal_preload.so (`preload-user`: as uid 65534, \
         through a user credential from the mount's broker; `preload-user-secret`: the same \
         user with the secret made readable to it, a control without credentials); `native`: the Rust client; \
         `passthrough`: bindfs --multithreaded over tmpfs (the ceiling of a FUSE mount). \
         Median of {} round{}, targets alternating within a round, in another order each round. {} build.\n",
        opts.servers,
        if opts.settings.is_empty() {
            " (defaults: metadata durable)".to_string()
        } else {
            format!(" ({})", opts.settings.join(", "))
        },
        opts.rounds,
        if opts.rounds == 1 { "" } else { "s" },
        if cfg!(debug_assertions) {
            "Debug"
        } else {
            "Release"
        }
    );
    let metrics: Vec<(String, &str)> = {
        let mut m: Vec<(String, &str)> = Vec::new();
        for (_, metric, unit, _, _) in rows {
            if !m.iter().any(|(x, _)| x == metric) {
                m.push((metric.clone(), unit));
            }
        }
        m
    };
    let value =
        |t: &str, metric: &str| rows.iter().find(|r| r.0 == t && r.1 == metric).map(|r| r.3);
    let higher_better = !matches!(opts.workload, Workload::Tree { .. });
    let _ = write!(md, "| metric | unit |");
    for t in targets {
        let _ = write!(md, " {} |", t.name());
    }
    let has_native = targets.contains(&Target::Native);
    let has_user = targets.contains(&Target::PreloadUser);
    let _ = write!(md, " preload/mount |");
    if has_native {
        let _ = write!(md, " preload/native |");
    }
    if has_user {
        let _ = write!(md, " preload-user/preload |");
    }
    let _ = writeln!(md);
    let _ = write!(md, "|---|---|");
    for _ in targets {
        let _ = write!(md, "---:|");
    }
    let extra = 1 + usize::from(has_native) + usize::from(has_user);
    let _ = writeln!(md, "{}", "---:|".repeat(extra));
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if a > 0.0 && b > 0.0 && a.is_finite() && b.is_finite() => {
            // As a speed-up: >1 means the preload library is faster.
            let r = if higher_better { a / b } else { b / a };
            format!("{r:.2}x")
        }
        _ => "-".into(),
    };
    for (metric, unit) in &metrics {
        let _ = write!(md, "| {metric} | {unit} |");
        for t in targets {
            let v = value(t.name(), metric);
            let _ = write!(
                md,
                " {} |",
                v.map(|v| if v >= 100.0 {
                    format!("{v:.0}")
                } else {
                    format!("{v:.2}")
                })
                .unwrap_or("-".into())
            );
        }
        let p = value("preload", metric);
        let _ = write!(md, " {} |", ratio(p, value("mount", metric)));
        if has_native {
            let _ = write!(md, " {} |", ratio(p, value("native", metric)));
        }
        if has_user {
            let _ = write!(md, " {} |", ratio(value("preload-user", metric), p));
        }
        let _ = writeln!(md);
    }
    let _ = writeln!(
        md,
        "\nRatios are speed-ups of the preload library (>1: it is faster); \
         preload-user/preload: of the unprivileged user's library over root's.\n"
    );
    let _ = writeln!(md, "Every round:\n");
    for (t, metric, _, _, all) in rows {
        let all: Vec<String> = all.iter().map(|x| format!("{x:.2}")).collect();
        let _ = writeln!(md, "- {t}, {metric}: {}", all.join(", "));
    }
    let _ = writeln!(md, "\nCommand:\n\n```sh\n{}\n```", opts.command);
    md
}

// ---------------------------------------------------------------- smallfile

fn run_smallfile(
    s: &Setup,
    t: Target,
    procs: usize,
    files: usize,
    size: usize,
    reopen: bool,
) -> Result<Vec<Sample>> {
    // Counted for the credentials' target only: each count is a client
    // and a round to every server.
    let users_before = match t {
        Target::PreloadUser => s.user_connections()?,
        _ => 0,
    };
    let as_user = matches!(t, Target::PreloadUser | Target::PreloadUserSecret);
    let secret = s.data.join("secret");
    let secret_mode = |mode| {
        use std::os::unix::fs::PermissionsExt;
        fs::set_permissions(&secret, fs::Permissions::from_mode(mode)).map_err(|e| at(&secret, e))
    };
    if t == Target::PreloadUserSecret {
        secret_mode(0o644)?;
    }
    let report = smallfile::smallfile(&SmallfileOptions {
        dir: s.dir(t).to_path_buf(),
        procs,
        files,
        size,
        runs: 1,
        native: t == Target::Native,
        reopen,
        create_batch: 1,
        watch: Vec::new(),
        preload: (t == Target::Preload || as_user).then(|| s.preload.clone()),
        uid: as_user.then_some(shoal_proto::cred::NOBODY),
        shared: false,
    });
    if t == Target::PreloadUserSecret {
        secret_mode(0o600)?;
    }
    let report = report?;
    // The user's workers were served directly, with credentials, not left
    // to the mount (which would time the mount under another name).
    if t == Target::PreloadUser && s.user_connections()? == users_before {
        return Err(ShoalError::io(
            "preload-user: no connection was opened with a user credential",
        ));
    }
    Ok(report
        .phases
        .iter()
        .filter(|p| !matches!(p.name.as_str(), "mkdir" | "rmdir" | "close"))
        .map(|p: &Phase| (p.name.clone(), "ops/s", p.median_rate().unwrap_or(f64::NAN)))
        .collect())
}

// ---------------------------------------------------------------- tree

/// A plain tar of `source` in `work` (untimed), and how many entries it has.
fn make_tarball(source: &Path, work: &Path) -> Result<(PathBuf, usize)> {
    let source = fs::canonicalize(source).map_err(|e| at(source, e))?;
    let tar = work.join("tree.tar");
    if source.is_file() {
        // A tarball given as is (e.g. /usr/src/linux-source-*.tar.xz): unpack
        // its compression once, so the untar times the file system, not xz.
        let out = fs::File::create(&tar)?;
        let status = Command::new("sh")
            .arg("-c")
            .arg("case \"$1\" in *.xz) xz -dc \"$1\";; *.gz) gzip -dc \"$1\";; *.bz2) bzip2 -dc \"$1\";; *) cat \"$1\";; esac")
            .arg("sh")
            .arg(&source)
            .stdout(out)
            .status()?;
        if !status.success() {
            return Err(ShoalError::io(format!(
                "cannot decompress {}",
                source.display()
            )));
        }
    } else {
        let parent = source.parent().unwrap_or(Path::new("/"));
        let name = source.file_name().unwrap_or_default();
        run(
            Command::new("tar")
                .arg("-cf")
                .arg(&tar)
                .arg("-C")
                .arg(parent)
                .arg(name),
            "making the tarball",
        )?;
    }
    let listing = Command::new("tar").arg("-tf").arg(&tar).output()?;
    let entries = listing
        .stdout
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .count();
    Ok((tar, entries))
}

fn run(c: &mut Command, what: &str) -> Result<()> {
    let out = c.stderr(Stdio::piped()).output()?;
    if !out.status.success() {
        return Err(ShoalError::io(format!(
            "{what}: {:?} failed ({}): {}",
            c,
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(())
}

/// A shell step under `timeout`, with `env`; its wall time in seconds.
fn timed_sh(script: &str, env: &[(String, OsString)]) -> Result<f64> {
    let mut c = Command::new("timeout");
    c.arg(CHILD_TIMEOUT)
        .arg("sh")
        .arg("-c")
        .arg(script)
        .env("LC_ALL", "C")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    let t0 = Instant::now();
    run(&mut c, script)?;
    Ok(t0.elapsed().as_secs_f64())
}

fn run_tree(s: &Setup, t: Target, tar: &Path, entries: usize, round: usize) -> Result<Vec<Sample>> {
    let dir = s.dir(t).join(format!("tree.{round}"));
    fs::create_dir(&dir).map_err(|e| at(&dir, e))?;
    let env = s.env(t);
    let q = |p: &Path| format!("'{}'", p.display().to_string().replace('\'', "'\\''"));
    let (d, tarq) = (q(&dir), q(tar));
    let mut out = Vec::new();
    // The shell itself runs with LD_PRELOAD too, as a user's would; only the
    // programs touch the tree.
    out.push((
        "untar".into(),
        "s",
        timed_sh(&format!("tar -xf {tarq} -C {d}"), &env)?,
    ));
    // Untimed, through the kernel: everything arrived.
    let listed = Command::new("find")
        .arg(&dir)
        .arg("-mindepth")
        .arg("1")
        .output()?;
    let found = listed
        .stdout
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .count();
    if found != entries {
        return Err(ShoalError::io(format!(
            "{}: untar made {found} entries, the tarball has {entries}",
            t.name()
        )));
    }
    std::thread::sleep(SETTLE);
    out.push((
        "ls -aR".into(),
        "s",
        timed_sh(&format!("ls -aR {d}"), &env)?,
    ));
    std::thread::sleep(SETTLE);
    out.push((
        "find -exec stat".into(),
        "s",
        timed_sh(&format!("find {d} -exec stat {{}} +"), &env)?,
    ));
    std::thread::sleep(SETTLE);
    out.push((
        "rm -rf".into(),
        "s",
        timed_sh(&format!("rm -rf {d}"), &env)?,
    ));
    if dir.exists() {
        return Err(ShoalError::io(format!(
            "{}: rm -rf left {}",
            t.name(),
            dir.display()
        )));
    }
    Ok(out)
}

// ---------------------------------------------------------------- bandwidth

const BW_PHASES: [&str; 2] = ["write", "read"];

fn run_bandwidth(
    s: &Setup,
    t: Target,
    procs: usize,
    size_mib: u64,
    blocks_kib: &[u64],
    round: usize,
) -> Result<Vec<Sample>> {
    let mut out = Vec::new();
    for &b in blocks_kib {
        let file = s.dir(t).join(format!("bw.{round}.{b}"));
        // Made (empty) before the processes start: each opens it, as the
        // study's processes open their common file.
        fs::File::create(&file).map_err(|e| at(&file, e))?;
        let mut phases: Vec<Phase> = BW_PHASES
            .iter()
            .map(|n| Phase::new(n, procs as u64 * size_mib))
            .collect();
        let mut extra = vec![
            "--procs".to_string(),
            procs.to_string(),
            "--size-mib".into(),
            size_mib.to_string(),
            "--block-kib".into(),
            b.to_string(),
        ];
        if t == Target::Native {
            extra.push("--native".into());
        }
        let launch = crate::workers::Launch {
            env: s.env(t),
            uid: None,
            watch: Vec::new(),
        };
        run_phases_with(
            "bandwidth-worker",
            procs,
            &file,
            &extra,
            &launch,
            &mut phases,
        )?;
        fs::remove_file(&file).map_err(|e| at(&file, e))?;
        let label = if b >= 1024 {
            format!("{} MiB", b / 1024)
        } else {
            format!("{b} KiB")
        };
        for p in &phases {
            out.push((
                format!("{} {label}", p.name),
                "MiB/s",
                p.median_rate().unwrap_or(f64::NAN),
            ));
        }
    }
    Ok(out)
}

/// One process of the bandwidth test: writes its blocks of the shared
/// `file` (block i at (i*procs+k)*B), closes, reopens, reads them back.
pub fn bandwidth_worker(
    file: &Path,
    k: usize,
    procs: usize,
    size_mib: u64,
    block_kib: u64,
    native: bool,
) -> Result<()> {
    let b = (block_kib << 10) as usize;
    let blocks = ((size_mib << 20) as usize).div_ceil(b).max(1) as u64;
    let offset = |i: u64| (i * procs as u64 + k as u64) * b as u64;
    let mut buf = pattern::base(b, k);
    let mut got = vec![0u8; b];
    let mut barrier = Barrier::new();
    let check = |got: &[u8], want: &[u8], off: u64| match pattern::first_mismatch(got, want, true) {
        None => Ok(()),
        Some(pos) => Err(ShoalError::io(format!(
            "{}: block at {off} differs from what was written, {}",
            file.display(),
            pattern::describe_mismatch(got, want, pos)
        ))),
    };
    if native {
        let (mount, path) = mounts::containing(file).ok_or_else(|| {
            ShoalError::invalid(format!("{}: not under a Shoal mount", file.display()))
        })?;
        let rt = runtime()?;
        let client = Client::new(ClusterConfig::load(&mount.cluster_file)?);
        barrier.phase(BW_PHASES[0], || {
            let (h, _) = rt.block_on(client.resolve(&path))?;
            for i in 0..blocks {
                pattern::stamp(&mut buf, pattern::tag(k, i), 0);
                rt.block_on(client.write(h, offset(i), Bytes::copy_from_slice(&buf)))?;
            }
            Ok(())
        })?;
        return barrier.phase(BW_PHASES[1], || {
            let (h, _) = rt.block_on(client.resolve(&path))?;
            for i in 0..blocks {
                let data = rt.block_on(client.read(h, offset(i), b))?;
                pattern::stamp(&mut buf, pattern::tag(k, i), 0);
                check(&data, &buf, offset(i))?;
            }
            Ok(())
        });
    }
    barrier.phase(BW_PHASES[0], || {
        let f = OpenOptions::new()
            .write(true)
            .custom_flags(0)
            .open(file)
            .map_err(|e| at(file, e))?;
        for i in 0..blocks {
            pattern::stamp(&mut buf, pattern::tag(k, i), 0);
            f.write_all_at(&buf, offset(i)).map_err(|e| at(file, e))?;
        }
        fsops::close(f, file)
    })?;
    // Untimed, before the barrier, as smallfile does: so that the reads
    // reach the file system rather than the pages the writes left in the
    // kernel's cache (the mount keeps them across close and open while it
    // holds the file's lease: 9-12 GB/s, memory's speed). Length 0: to the
    // end of the file.
    fsops::drop_cached_range(file, 0, 0);
    barrier.phase(BW_PHASES[1], || {
        let f = fs::File::open(file).map_err(|e| at(file, e))?;
        for i in 0..blocks {
            fsops::read_full_at(&f, &mut got, offset(i), file)?;
            pattern::stamp(&mut buf, pattern::tag(k, i), 0);
            check(&got, &buf, offset(i))?;
        }
        fsops::close(f, file)
    })
}

// ---------------------------------------------------------------- bonnie++

/// Bonnie++'s CSV fields (format 1.98) this report keeps: (index, name, unit).
const BONNIE_FIELDS: [(usize, &str, &str); 9] = [
    (11, "write", "KiB/s"),
    (13, "rewrite", "KiB/s"),
    (17, "read", "KiB/s"),
    (19, "seeks", "ops/s"),
    (26, "seq create", "ops/s"),
    (28, "seq stat", "ops/s"),
    (30, "seq delete", "ops/s"),
    (32, "rand create", "ops/s"),
    (36, "rand delete", "ops/s"),
];

fn run_bonnie(
    s: &Setup,
    t: Target,
    size_mib: u64,
    files_k: u32,
    round: usize,
) -> Result<Vec<Sample>> {
    let dir = s.dir(t).join(format!("bonnie.{round}"));
    fs::create_dir(&dir).map_err(|e| at(&dir, e))?;
    // SAFETY: plain queries of this process's ids.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let mut c = Command::new("timeout");
    c.arg(CHILD_TIMEOUT)
        .arg("bonnie++")
        .arg("-d")
        .arg(&dir)
        .arg("-s")
        .arg(size_mib.to_string())
        .arg("-r")
        .arg((size_mib / 2).to_string())
        .arg("-n")
        .arg(format!("{files_k}:0:0:1"))
        .arg("-u")
        .arg(format!("{uid}:{gid}"))
        // -f: no per-character tests. bonnie++ 2.0 makes them with a system
        // call per character (3 million for 8 MiB, strace -c): through a
        // client without a write-back cache, a message each.
        .args(["-f", "-q", "-x", "1", "-m", t.name()])
        .envs(s.env(t).iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null());
    let out = c.stderr(Stdio::piped()).output()?;
    if !out.status.success() {
        return Err(ShoalError::io(format!(
            "bonnie++ on {} failed ({}): {}",
            t.name(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    let _ = fs::remove_dir_all(&dir);
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with("1.9"))
        .ok_or_else(|| ShoalError::io(format!("bonnie++ printed no CSV line: {text}")))?;
    let f: Vec<&str> = line.split(',').collect();
    Ok(BONNIE_FIELDS
        .iter()
        .map(|&(i, name, unit)| {
            let v = f
                .get(i)
                .and_then(|v| v.parse::<f64>().ok())
                .unwrap_or(f64::NAN);
            (name.to_string(), unit, v)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_round_takes_every_target_once_and_predecessors_vary() {
        let mut after = std::collections::BTreeSet::new();
        for round in 0..20 {
            let mut o = round_order(6, round);
            assert_eq!(round_order(6, round), o, "the same for a round number");
            if let Some(k) = o.iter().position(|&t| t == 1) {
                after.insert(if k == 0 { None } else { Some(o[k - 1]) });
            }
            o.sort();
            assert_eq!(o, (0..6).collect::<Vec<_>>());
        }
        assert!(after.len() >= 4, "target 1 follows many others: {after:?}");
    }

    #[test]
    fn a_tree_other_than_the_default_names_its_results_apart() {
        let tree = |p: &str| Workload::Tree { source: p.into() }.name();
        assert_eq!(tree(DEFAULT_TREE), "tree");
        assert_eq!(tree("/usr/src/linux-source-6.1.tar.xz"), "tree-linux");
        assert_eq!(tree("/srv/src/project"), "tree-project");
    }
}
