//! `shoal bench ls`: Table I of [Carns 2009], listing one directory of 12,000 files
//! of 8 KiB with three tools, on a baseline cluster (`shoal up --baseline`)
//! and an all-on cluster:
//!
//! - `ls -al` on the FUSE mount (with readdirplus on, the mount answers the
//!   kernel's READDIRPLUS; off, the kernel does readdir + lookup + getattr),
//! - `shoal ls -l` (native client, readdir + one getattr per entry),
//! - `shoal lsplus -l` (native client, readdirplus).
//!
//! Each tool runs as a child process (bounded by `timeout`), its output sent
//! to /dev/null; tools alternate within a round and the median of the rounds
//! is reported. An untimed pass first checks every tool lists every file and
//! counts the messages the servers received for it. Writes `ls.md`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use shoal_client::Client;
use shoal_proto::cluster::ClusterConfig;
use shoal_proto::error::{Result, ShoalError};

use crate::report::median;
use crate::runtime::runtime;

/// Seconds any one child process may take.
const CHILD_TIMEOUT: &str = "900";
/// Creates and writes kept in flight while the directory is filled.
const FILL_CONCURRENCY: usize = 64;
/// Pause between timed runs, well past the kernel's and the client's 100 ms
/// attribute caches, so every run fetches every attribute.
const SETTLE: Duration = Duration::from_secs(1);
/// The listed directory, under the root of the file system.
const DIR: &str = "ls-bench";

pub struct LsOptions {
    /// Where ls.md goes.
    pub out: PathBuf,
    /// Scratch directory for the clusters' data and mounts.
    pub work: PathBuf,
    pub servers: u32,
    pub files: usize,
    pub size: usize,
    pub runs: usize,
}

/// The tools of the table, in its row order.
const TOOLS: [&str; 3] = ["ls -al (mount)", "shoal ls -l", "shoal lsplus -l"];

/// (cluster name, `shoal up` arguments that select it).
const CLUSTERS: [(&str, &[&str]); 2] = [("baseline", &["--baseline"]), ("all on", &[])];

/// One cluster's measurements, per tool: timed runs (s) and messages.
struct Measured {
    seconds: Vec<Vec<f64>>,
    messages: Vec<u64>,
    fill_seconds: f64,
}

impl Measured {
    fn median(&self, tool: usize) -> f64 {
        median(&self.seconds[tool]).unwrap_or(f64::NAN)
    }
}

/// `timeout N <this shoal> args...`, succeeding or an error with its stderr.
pub(super) fn shoal(args: &[&str]) -> Result<()> {
    let exe = std::env::current_exe()?;
    let out = Command::new("timeout")
        .arg(CHILD_TIMEOUT)
        .arg(&exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(ShoalError::io(format!(
            "shoal {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// The command line of `tool` on the cluster whose file is `config`.
fn tool_command(tool: usize, config: &Path, mnt: &Path) -> Result<Command> {
    let mut c = Command::new("timeout");
    c.arg(CHILD_TIMEOUT)
        .env("LC_ALL", "C")
        .env("TZ", "UTC")
        .stdin(Stdio::null());
    match tool {
        0 => {
            c.args(["ls", "-al"]).arg(mnt.join(DIR));
        }
        _ => {
            c.arg(std::env::current_exe()?)
                .arg(if tool == 1 { "ls" } else { "lsplus" })
                .arg("-l")
                .arg("--config")
                .arg(config)
                .arg(format!("/{DIR}"));
        }
    }
    Ok(c)
}

/// Runs `c` with its output to /dev/null; its wall time in seconds.
fn time(mut c: Command) -> Result<f64> {
    let started = Instant::now();
    let out = c.stdout(Stdio::null()).stderr(Stdio::piped()).output()?;
    let secs = started.elapsed().as_secs_f64();
    if !out.status.success() {
        return Err(ShoalError::io(format!(
            "{:?} failed ({}): {}",
            c,
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(secs)
}

/// Runs `c` and returns its stdout.
fn capture(mut c: Command) -> Result<String> {
    let out = c.stderr(Stdio::piped()).output()?;
    if !out.status.success() {
        return Err(ShoalError::io(format!(
            "{:?} failed ({}): {}",
            c,
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Requests all servers received so far (not counting `stats`).
pub(super) async fn requests(client: &Client) -> Result<u64> {
    let mut total = 0;
    for s in 0..client.num_servers() {
        let stats = client.server_stats(s).await?;
        total += stats
            .ops
            .iter()
            .filter(|o| o.op != "stats")
            .map(|o| o.requests)
            .sum::<u64>();
    }
    Ok(total)
}

/// Requests all servers received so far, once they have stopped coming in:
/// the servers' own background work (the precreate pools' first fill after
/// a start, their refills) is over, so the next phase's count is its own.
/// Gives up waiting after a few seconds.
pub(super) async fn settled_requests(client: &Client) -> Result<u64> {
    let mut seen = requests(client).await?;
    for _ in 0..50 {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let now = requests(client).await?;
        if now == seen {
            break;
        }
        seen = now;
    }
    Ok(seen)
}

/// Creates the directory and its files of `size` bytes, `FILL_CONCURRENCY`
/// at a time, through the native client.
async fn fill(client: &Client, files: usize, size: usize) -> Result<()> {
    let dir = client.mkdir(client.root(), DIR, 0o755).await?.handle;
    let data = Bytes::from(vec![b's'; size]);
    let mut made = futures::stream::iter((0..files).map(|i| {
        let (c, data) = (client.clone(), data.clone());
        async move {
            let h = c.create(dir, &format!("file{i:06}"), 0o644).await?.handle;
            if !data.is_empty() {
                c.write(h, 0, data).await?;
            }
            Ok::<_, ShoalError>(())
        }
    }))
    .buffer_unordered(FILL_CONCURRENCY);
    while let Some(r) = made.next().await {
        r?;
    }
    Ok(())
}

/// Checks that a tool's output lists every file with its size.
fn check_listing(tool: usize, text: &str, files: usize, size: usize) -> Result<()> {
    let lines: Vec<&str> = text.lines().filter(|l| l.contains(" file")).collect();
    let sized = lines
        .iter()
        .filter(|l| l.split_whitespace().nth(4) == Some(&size.to_string()))
        .count();
    if lines.len() != files || sized != files {
        return Err(ShoalError::io(format!(
            "{} listed {} of {files} files, {sized} with size {size}",
            TOOLS[tool],
            lines.len()
        )));
    }
    Ok(())
}

/// Brings up one cluster, fills it, measures every tool, takes it down.
fn measure(opts: &LsOptions, name: &str, up_args: &[&str]) -> Result<Measured> {
    let base = opts.work.join(name.replace(' ', "-"));
    let _ = std::fs::remove_dir_all(&base);
    let (data, mnt) = (base.join("data"), base.join("mnt"));
    let (data_s, mnt_s) = (data.display().to_string(), mnt.display().to_string());
    let servers = opts.servers.to_string();
    let mut up = vec![
        "up",
        "--servers",
        &servers,
        "--data",
        &data_s,
        "--mount",
        &mnt_s,
        "--detach",
    ];
    up.extend_from_slice(up_args);
    shoal(&up)?;
    let result = measure_up(opts, name, &data.join("cluster.toml"), &mnt);
    let down = shoal(&["down", "--data", &data_s]);
    let _ = std::fs::remove_dir_all(&base);
    let m = result?;
    down?;
    Ok(m)
}

fn measure_up(opts: &LsOptions, name: &str, config: &Path, mnt: &Path) -> Result<Measured> {
    let rt = runtime()?;
    let client = Client::new(ClusterConfig::load(config)?);
    rt.block_on(client.ping_all())?;
    eprintln!(
        "bench ls: {name}: creating {} files of {} bytes",
        opts.files, opts.size
    );
    let started = Instant::now();
    rt.block_on(fill(&client, opts.files, opts.size))?;
    let fill_seconds = started.elapsed().as_secs_f64();
    let mut m = Measured {
        seconds: vec![Vec::new(); TOOLS.len()],
        messages: Vec::new(),
        fill_seconds,
    };
    // Untimed: every tool lists every file; messages each one costs.
    for tool in 0..TOOLS.len() {
        std::thread::sleep(SETTLE);
        let before = rt.block_on(requests(&client))?;
        let text = capture(tool_command(tool, config, mnt)?)?;
        let after = rt.block_on(requests(&client))?;
        check_listing(tool, &text, opts.files, opts.size)?;
        m.messages.push(after - before);
    }
    for run in 0..opts.runs {
        for (tool, label) in TOOLS.iter().enumerate() {
            std::thread::sleep(SETTLE);
            let secs = time(tool_command(tool, config, mnt)?)?;
            eprintln!(
                "bench ls: {name}, run {} of {}: {label}: {secs:.2} s",
                run + 1,
                opts.runs
            );
            m.seconds[tool].push(secs);
        }
    }
    Ok(m)
}

pub fn ls(opts: &LsOptions) -> Result<()> {
    std::fs::create_dir_all(&opts.work)?;
    std::fs::create_dir_all(&opts.out)?;
    let mut all = Vec::new();
    for (name, args) in CLUSTERS {
        all.push(measure(opts, name, args)?);
    }
    let md = markdown(opts, &all);
    std::fs::write(opts.out.join("ls.md"), &md)?;
    print!("{md}");
    Ok(())
}

/// The checked-out commit, marked when tracked files differ from it.
fn commit() -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    };
    let Some(head) = git(&["rev-parse", "--short", "HEAD"]) else {
        return "unknown".into();
    };
    match git(&["status", "--porcelain", "--untracked-files=no"]) {
        Some(changes) if !changes.is_empty() => format!("{head} with uncommitted changes"),
        _ => head,
    }
}

fn markdown(opts: &LsOptions, all: &[Measured]) -> String {
    let mut md = String::new();
    let _ = writeln!(
        md,
        "# Listing a directory of {} files ([Carns 2009], Table I)\n",
        opts.files
    );
    let _ = writeln!(
        md,
        "`shoal bench ls` (commit {}; {} build): one directory of {} files of {} bytes \
         on a {}-server local cluster, metadata durable, mounted through FUSE; each tool's \
         output goes to /dev/null. Median of {} runs, tools alternating within a run, one \
         second apart (past the 100 ms attribute caches, so every run fetches every \
         attribute). Messages: requests the servers received during one listing.\n",
        commit(),
        if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        },
        opts.files,
        opts.size,
        opts.servers,
        opts.runs
    );
    let _ = writeln!(
        md,
        "| tool | baseline, s | all on, s | baseline, messages | all on, messages |"
    );
    let _ = writeln!(md, "|---|---:|---:|---:|---:|");
    for (tool, label) in TOOLS.iter().enumerate() {
        let _ = writeln!(
            md,
            "| `{label}` | {:.2} | {:.2} | {} | {} |",
            all[0].median(tool),
            all[1].median(tool),
            all[0].messages[tool],
            all[1].messages[tool]
        );
    }
    let _ = writeln!(md);
    let _ = writeln!(md, "Every run, seconds:\n");
    for ((name, _), m) in CLUSTERS.iter().zip(all) {
        for (tool, label) in TOOLS.iter().enumerate() {
            let runs: Vec<String> = m.seconds[tool].iter().map(|s| format!("{s:.2}")).collect();
            let _ = writeln!(md, "- {name}, `{label}`: {}", runs.join(", "));
        }
        let _ = writeln!(
            md,
            "- {name}: filling the directory took {:.1} s",
            m.fill_seconds
        );
    }
    let _ = writeln!(md);
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
    let speedup = ratio(all[0].median(0), all[1].median(2));
    let mount_gap = ratio(all[1].median(0), all[1].median(2));
    let _ = writeln!(md, "Targets:\n");
    let _ = writeln!(
        md,
        "- `shoal lsplus -l` (all on) vs `ls -al` on the baseline mount: {speedup:.1}x faster \
         (target >= 3x): {}",
        if speedup >= 3.0 { "met" } else { "NOT met" }
    );
    let _ = writeln!(
        md,
        "- `ls -al` on the all-on mount vs `shoal lsplus -l`: {mount_gap:.2}x its time \
         (target <= 1.5x): {}",
        if mount_gap <= 1.5 { "met" } else { "NOT met" }
    );
    let _ = writeln!(md);
    let _ = writeln!(
        md,
        "Table I of [Carns 2009] (PVFS, 12,000 files, Linux cluster): `/bin/ls -al` 9.65 s \
         baseline / 8.53 s with stuffing, `pvfs2-ls -al` 6.19 / 4.85, `pvfs2-lsplus -al` \
         2.72 / 2.65.\n"
    );
    let _ = writeln!(md, "Commands:\n");
    let _ = writeln!(md, "```sh");
    let _ = writeln!(
        md,
        "CARGO_TARGET_DIR=/tmp/shoal-release cargo build --release -p shoal-cli"
    );
    let _ = writeln!(
        md,
        "/tmp/shoal-release/release/shoal bench ls --files {} --size {} --servers {} --runs {}",
        opts.files, opts.size, opts.servers, opts.runs
    );
    let _ = writeln!(
        md,
        "# each cluster: shoal up --servers {} --data D --mount M --detach [--baseline]",
        opts.servers
    );
    let _ = writeln!(md, "# timed: ls -al M/{DIR} > /dev/null");
    let _ = writeln!(
        md,
        "#        shoal ls -l --config D/cluster.toml /{DIR} > /dev/null"
    );
    let _ = writeln!(
        md,
        "#        shoal lsplus -l --config D/cluster.toml /{DIR} > /dev/null"
    );
    let _ = writeln!(md, "```");
    md
}
