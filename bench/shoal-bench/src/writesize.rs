//! `shoal bench writesize`: the write-size experiments of [Hildebrand 2006]
//! (its Figures 6, 7 and 8) on a fresh local cluster, through the native
//! client, for each of three data paths:
//!
//! - `direct`: every write straight to the servers holding its strips
//!   (`write_threshold = 0`);
//! - `gathering`: every write through the client's write-back buffer
//!   (`write_threshold` = `gather_buffer`, 4 MiB here, so even 1 MiB writes
//!   are kept), scattered buffers through the file's gathering server;
//! - `client gathering`: the same with `gather_on_server = false`,
//!   every kept extent straight to the servers holding it;
//! - `threshold`: the cluster's default, `write_threshold` = 128 KiB;
//! - `auto`: `write_threshold = "auto"`, the crossover the client finds.
//!
//! Experiments, each finished by an fsync inside the timing:
//! 1. `sequential`: one client writes WRITES consecutive writes of each size
//!    to a new file (Figure 6);
//! 2. `clients`: CLIENTS clients (each its own connections and buffer)
//!    write WRITES / CLIENTS consecutive writes each into disjoint parts of
//!    one file, as many bytes in all as experiment 1 (Figure 7);
//! 3. `random`: one client writes a RANDOM_FILE-byte file in writes of each
//!    size at shuffled offsets, covering it (Figure 8);
//! 4. `strided`: CLIENTS clients write as many bytes as experiment 1 into one
//!    file, interleaved: client k writes records k, k + CLIENTS, ... (the
//!    N-to-1 strided pattern of HPC codes, where server gathering joins
//!    what no client can).
//!
//! Throughput is bytes over time (MiB/s) and writes per second; medians of
//! the rounds, the paths alternating within a round. Results:
//! `writesize.{md,csv,png}`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::path::PathBuf;
use std::time::Instant;

use bytes::Bytes;
use shoal_client::Client;
use shoal_proto::cluster::{ClusterConfig, WriteThreshold, DEFAULT_WRITE_THRESHOLD};
use shoal_proto::error::{Result, ShoalError};
use shoal_proto::Handle;

use crate::fsops::at;
use crate::nometafile::{with_cluster, Protocol};
use crate::postmark;
use crate::report::median;

const MIB: f64 = (1 << 20) as f64;
/// The random experiment skips sizes that would take more writes than this
/// to cover its file (16-byte writes over 32 MiB would be two million).
const MAX_RANDOM_WRITES: u64 = 8192;
/// Writes of the mixed trace, and the file they land in.
const MIXED_WRITES: usize = 2000;
const MIXED_FILE: u64 = 64 << 20;
/// The gathering path's buffer in these runs: room for the largest write.
const GATHER_BUFFER: u32 = 4 << 20;

/// The data paths compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum DataPath {
    Direct,
    Gathering,
    ClientGathering,
    Threshold,
    Auto,
}

impl DataPath {
    const ALL: [DataPath; 5] = [
        DataPath::Direct,
        DataPath::Gathering,
        DataPath::ClientGathering,
        DataPath::Threshold,
        DataPath::Auto,
    ];

    fn name(self) -> &'static str {
        match self {
            DataPath::Direct => "direct",
            DataPath::Gathering => "gathering",
            DataPath::ClientGathering => "client gathering",
            DataPath::Threshold => "threshold 128K",
            DataPath::Auto => "auto",
        }
    }

    /// This path as `shoal mount -o` options.
    fn mount_options(self) -> String {
        match self {
            DataPath::Direct => "write_threshold=0".into(),
            DataPath::Gathering => {
                format!("gather_buffer={GATHER_BUFFER},write_threshold={GATHER_BUFFER}")
            }
            DataPath::ClientGathering => format!(
                "gather_buffer={GATHER_BUFFER},write_threshold={GATHER_BUFFER},gather_on_server=false"
            ),
            DataPath::Threshold => format!("write_threshold={DEFAULT_WRITE_THRESHOLD}"),
            DataPath::Auto => "write_threshold=auto".into(),
        }
    }

    /// The cluster's settings as this path's client sees them.
    fn config(self, base: &ClusterConfig) -> ClusterConfig {
        let mut c = base.clone();
        c.settings.gather_buffer = GATHER_BUFFER;
        c.settings.write_threshold = match self {
            DataPath::Direct => WriteThreshold::Bytes(0),
            DataPath::Gathering | DataPath::ClientGathering => WriteThreshold::Bytes(GATHER_BUFFER),
            DataPath::Threshold => WriteThreshold::Bytes(DEFAULT_WRITE_THRESHOLD),
            DataPath::Auto => WriteThreshold::AUTO,
        };
        c.settings.gather_on_server = self != DataPath::ClientGathering;
        c
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Experiment {
    Sequential,
    Clients,
    Random,
    Strided,
    /// Not per size: the mixed trace.
    Mixed,
    /// Postmark on the mount (`postmark`), not per size.
    Postmark,
}

impl Experiment {
    /// Through the native client.
    const NATIVE: [Experiment; 5] = [
        Experiment::Sequential,
        Experiment::Clients,
        Experiment::Random,
        Experiment::Strided,
        Experiment::Mixed,
    ];
    const ALL: [Experiment; 6] = [
        Experiment::Sequential,
        Experiment::Clients,
        Experiment::Random,
        Experiment::Strided,
        Experiment::Mixed,
        Experiment::Postmark,
    ];

    fn name(self) -> &'static str {
        match self {
            Experiment::Sequential => "sequential",
            Experiment::Clients => "clients",
            Experiment::Random => "random",
            Experiment::Strided => "strided",
            Experiment::Mixed => "mixed",
            Experiment::Postmark => "postmark",
        }
    }
}

pub struct WritesizeOptions {
    pub work: PathBuf,
    pub out: PathBuf,
    pub servers: u32,
    pub rounds: usize,
    /// Consecutive writes per client and size (sequential, clients).
    pub writes: u64,
    pub clients: usize,
    /// Bytes of the file the random experiment covers.
    pub random_file: u64,
    /// Write sizes, in bytes.
    pub sizes: Vec<usize>,
    /// Postmark's transactions per run on the mount (0: no Postmark).
    pub postmark_transactions: u32,
    pub command: String,
}

/// Per (experiment, size, path): every round's seconds, and the writes and
/// bytes one run makes.
type Measured = BTreeMap<(Experiment, usize, DataPath), (Vec<f64>, u64, u64)>;

pub fn writesize(opts: &WritesizeOptions) -> Result<()> {
    if opts.sizes.is_empty()
        || opts
            .sizes
            .iter()
            .any(|s| *s == 0 || *s > GATHER_BUFFER as usize)
    {
        return Err(ShoalError::invalid(format!(
            "writesize: sizes must be 1 to {GATHER_BUFFER} bytes"
        )));
    }
    if opts.writes == 0 || opts.clients == 0 || opts.rounds == 0 {
        return Err(ShoalError::invalid(
            "writesize: --writes, --clients and --rounds must be positive",
        ));
    }
    let data = opts.work.join("data");
    let measured = with_cluster(&data, opts.servers, Protocol::AllOn, |cluster| {
        let base = ClusterConfig::load(cluster)?;
        let rt = tokio::runtime::Runtime::new()?;
        let mut measured = Measured::new();
        let mut n = 0u64;
        for round in 0..opts.rounds {
            for e in Experiment::NATIVE {
                // The mixed trace has sizes of its own: one run, keyed 0.
                let sizes = match e {
                    Experiment::Mixed => vec![0],
                    _ => opts.sizes.clone(),
                };
                for &size in &sizes {
                    if e == Experiment::Random
                        && opts.random_file.div_ceil(size as u64) > MAX_RANDOM_WRITES
                    {
                        continue;
                    }
                    for k in 0..DataPath::ALL.len() {
                        let p = DataPath::ALL[(k + round) % DataPath::ALL.len()];
                        n += 1;
                        let cfg = p.config(&base);
                        let (secs, writes, bytes) =
                            rt.block_on(one_run(&cfg, &plan(opts, e, size), &format!("f{n}")))?;
                        eprintln!(
                            "bench writesize: round {}: {} {size} B {}: {:.1} MiB/s",
                            round + 1,
                            e.name(),
                            p.name(),
                            bytes as f64 / MIB / secs
                        );
                        let m = measured.entry((e, size, p)).or_default();
                        m.0.push(secs);
                        (m.1, m.2) = (writes, bytes);
                    }
                }
            }
        }
        let postmark_rounds = if opts.postmark_transactions > 0 {
            opts.rounds
        } else {
            0
        };
        for round in 0..postmark_rounds {
            for k in 0..DataPath::ALL.len() {
                let p = DataPath::ALL[(k + round) % DataPath::ALL.len()];
                let mnt = opts.work.join("mnt");
                let run = postmark::run_on_mount(
                    cluster,
                    &mnt,
                    &p.mount_options(),
                    opts.postmark_transactions,
                )?;
                eprintln!(
                    "bench writesize: round {}: postmark {}: {:.1} MB written in {:.1} s",
                    round + 1,
                    p.name(),
                    run.written_mb,
                    run.seconds
                );
                let m = measured.entry((Experiment::Postmark, 0, p)).or_default();
                m.0.push(run.seconds);
                m.2 = (run.written_mb * 1e6) as u64;
            }
        }
        Ok(measured)
    })?;
    let md = markdown(opts, &measured);
    fs::create_dir_all(&opts.out).map_err(|e| at(&opts.out, e))?;
    let csv_path = opts.out.join("writesize.csv");
    fs::write(&csv_path, csv(&measured)).map_err(|e| at(&csv_path, e))?;
    let md_path = opts.out.join("writesize.md");
    fs::write(&md_path, &md).map_err(|e| at(&md_path, e))?;
    print!("{md}");
    crate::ablation::plot("writesize", &csv_path, &opts.out.join("writesize.png"));
    Ok(())
}

/// The writes of one run: per client, (offset, length) in order.
type Plan = Vec<Vec<(u64, usize)>>;

/// What each client writes in experiment `e` at write size `size`.
fn plan(opts: &WritesizeOptions, e: Experiment, size: usize) -> Plan {
    let s = size as u64;
    match e {
        Experiment::Sequential => vec![(0..opts.writes).map(|i| (i * s, size)).collect()],
        Experiment::Clients => {
            let per = (opts.writes / opts.clients as u64).max(1);
            (0..opts.clients as u64)
                .map(|k| (0..per).map(|i| ((k * per + i) * s, size)).collect())
                .collect()
        }
        Experiment::Random => {
            let count = opts.random_file.div_ceil(s);
            let offsets = shuffled((0..count).map(|i| i * s).collect());
            vec![offsets.into_iter().map(|o| (o, size)).collect()]
        }
        Experiment::Strided => {
            let n = opts.clients as u64;
            let per = (opts.writes / n).max(1);
            (0..n)
                .map(|k| (0..per).map(|i| ((i * n + k) * s, size)).collect())
                .collect()
        }
        Experiment::Mixed => vec![mixed_trace()],
        // Not through the native client (`postmark`).
        Experiment::Postmark => Vec::new(),
    }
}

/// [Hildebrand 2006]'s mix (its Figure 9, the ATLAS digitization trace):
/// one file, random offsets, 96% of the writes under 32 KiB carrying about
/// 5% of the bytes, 4% of 275 KiB to 1 MiB carrying about 95%.
fn mixed_trace() -> Vec<(u64, usize)> {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move |n: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % n
    };
    (0..MIXED_WRITES)
        .map(|_| {
            let len = if next(100) < 4 {
                (275 << 10) + next((1 << 20) - (275 << 10)) as usize
            } else {
                16 + next(2800) as usize
            };
            (next(MIXED_FILE - len as u64), len)
        })
        .collect()
}

/// One run of `plan` through one path, on a new file `name`: (seconds,
/// writes, bytes), the clients made and connected before the clock starts.
async fn one_run(cfg: &ClusterConfig, plan: &Plan, name: &str) -> Result<(f64, u64, u64)> {
    if plan.is_empty() {
        return Err(ShoalError::invalid("writesize: a run without clients"));
    }
    let clients: Vec<Client> = plan.iter().map(|_| Client::new(cfg.clone())).collect();
    for c in &clients {
        c.ping_all().await?;
    }
    let f = clients[0]
        .create(clients[0].root(), name, 0o644)
        .await?
        .handle;
    let longest = plan.iter().flatten().map(|w| w.1).max().unwrap_or(0);
    let block = Bytes::from(vec![0x5a; longest]);
    let t0 = Instant::now();
    let done = futures::future::try_join_all(clients.iter().zip(plan).map(|(c, writes)| {
        let block = &block;
        async move {
            for &(offset, len) in writes {
                c.write(f, offset, block.slice(..len)).await?;
            }
            c.fsync(f).await
        }
    }))
    .await;
    let secs = t0.elapsed().as_secs_f64();
    done?;
    let writes = plan.iter().map(|w| w.len() as u64).sum();
    let bytes = plan.iter().flatten().map(|w| w.1 as u64).sum();
    let end = plan
        .iter()
        .flatten()
        .map(|&(o, l)| o + l as u64)
        .max()
        .unwrap_or(0);
    check_size(&clients[0], f, end).await?;
    clients[0].unlink(clients[0].root(), name).await?;
    Ok((secs, writes, bytes))
}

/// The file ends where the furthest write ended: a path that lost writes
/// must not be timed as a success.
async fn check_size(c: &Client, f: Handle, bytes: u64) -> Result<()> {
    c.forget(f);
    let size = c.getattr(f).await?.size;
    if size != bytes {
        return Err(ShoalError::io(format!(
            "writesize: the file is {size} bytes after writes up to byte {bytes}"
        )));
    }
    Ok(())
}

/// `v` in a fixed pseudo-random order (the same every run).
fn shuffled(mut v: Vec<u64>) -> Vec<u64> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in (1..v.len()).rev() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.swap(i, (x % (i as u64 + 1)) as usize);
    }
    v
}

fn mib_s(m: &(Vec<f64>, u64, u64)) -> f64 {
    median(&m.0).map_or(0.0, |s| m.2 as f64 / MIB / s)
}

fn csv(measured: &Measured) -> String {
    let mut out = String::from("experiment,size,path,writes,bytes,median_mib_s,seconds\n");
    for ((e, size, p), m) in measured {
        let secs: Vec<String> = m.0.iter().map(|s| format!("{s:.4}")).collect();
        let _ = writeln!(
            out,
            "{},{size},{},{},{},{:.3},{}",
            e.name(),
            p.name(),
            m.1,
            m.2,
            mib_s(m),
            secs.join(" ")
        );
    }
    out
}

fn size_name(s: usize) -> String {
    match s {
        s if s >= 1 << 20 && s % (1 << 20) == 0 => format!("{} MiB", s >> 20),
        s if s >= 1 << 10 && s % (1 << 10) == 0 => format!("{} KiB", s >> 10),
        s => format!("{s} B"),
    }
}

fn markdown(opts: &WritesizeOptions, measured: &Measured) -> String {
    let mut md = String::from("# `shoal bench writesize`\n\n");
    let _ = writeln!(
        md,
        "The write-size experiments of [Hildebrand 2006] through the native client of a \
         {}-server local cluster (defaults: metadata durable, strips of 1 MiB over every \
         server). Paths: `direct` (write_threshold 0), `gathering` (every write kept in the \
         client's write-back buffer, gather_buffer 4 MiB; a buffer of scattered extents goes \
         through the file's gathering server), `client gathering` (the same with \
         gather_on_server = false: every kept extent straight to the strips' servers), \
         `threshold 128K` (the default), `auto` (write_threshold = \"auto\"). \
         Each run ends with an fsync inside the timing. sequential: {} consecutive writes \
         from one client; clients: {} clients, {} consecutive writes each into disjoint \
         parts of one file; random: one client covers a {}-byte file at shuffled offsets \
         (sizes that need at most {MAX_RANDOM_WRITES} writes); strided: {} clients, {} writes \
         each, interleaved (client k writes records k, k + {}, ...); mixed: {}; postmark: \
         Postmark through a mount of the cluster with each path's settings (`-o`), {} \
         files of {}-{} bytes, {}-byte reads and writes, {} transactions, MiB/s written \
         over the whole run. \
         MiB/s, median of {} rounds (paths alternating). Release build.\n",
        opts.servers,
        opts.writes,
        opts.clients,
        (opts.writes / opts.clients as u64).max(1),
        opts.random_file,
        opts.clients,
        (opts.writes / opts.clients as u64).max(1),
        opts.clients,
        mixed_summary(),
        postmark::FILES,
        postmark::SIZE_MIN,
        postmark::SIZE_MAX,
        postmark::BLOCK,
        opts.postmark_transactions,
        opts.rounds
    );
    for e in Experiment::ALL {
        let _ = writeln!(md, "## {}\n", e.name());
        md.push_str(
            "| size | direct | gathering | client gathering | threshold 128K | auto | gathering/direct | gathering/client gathering | threshold/best | auto/best |\n\
             |---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        let sizes = match e {
            Experiment::Mixed | Experiment::Postmark => vec![0],
            _ => opts.sizes.clone(),
        };
        for size in sizes {
            if !measured.contains_key(&(e, size, DataPath::Direct)) {
                continue;
            }
            let get = |p| measured.get(&(e, size, p)).map_or(0.0, mib_s);
            let (d, g, c, t, a) = (
                get(DataPath::Direct),
                get(DataPath::Gathering),
                get(DataPath::ClientGathering),
                get(DataPath::Threshold),
                get(DataPath::Auto),
            );
            let best = d.max(g).max(1e-9);
            let _ = writeln!(
                md,
                "| {} | {d:.2} | {g:.2} | {c:.2} | {t:.2} | {a:.2} | {:.1}x | {:.2} | {:.2} | {:.2} |",
                match e {
                    Experiment::Mixed => "the trace".into(),
                    Experiment::Postmark => "Postmark".into(),
                    _ => size_name(size),
                },
                g / d.max(1e-9),
                g / c.max(1e-9),
                t / best,
                a / best
            );
        }
        md.push('\n');
    }
    let _ = writeln!(md, "Command: `{}`", opts.command);
    md
}

/// Of the mixed trace: the share of its writes under 32 KiB, the share of
/// its bytes they carry, and its bytes.
fn mixed_shares() -> (f64, f64, usize) {
    let trace = mixed_trace();
    let total: usize = trace.iter().map(|w| w.1).sum();
    let small: Vec<usize> = trace
        .iter()
        .map(|w| w.1)
        .filter(|l| *l < 32 << 10)
        .collect();
    (
        small.len() as f64 / trace.len() as f64,
        small.iter().sum::<usize>() as f64 / total as f64,
        total,
    )
}

/// What the mixed trace is, measured from it.
fn mixed_summary() -> String {
    let (writes, bytes, total) = mixed_shares();
    format!(
        "{MIXED_WRITES} writes at random offsets of a {} MiB file, {:.1}% of them under \
         32 KiB carrying {:.1}% of the {:.1} MiB, the rest 275 KiB to 1 MiB",
        MIXED_FILE >> 20,
        100.0 * writes,
        100.0 * bytes,
        total as f64 / MIB
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mixed_trace_is_the_papers_mix() {
        let (share, bytes, _) = mixed_shares();
        assert!((0.94..0.98).contains(&share), "{share}");
        assert!((0.03..0.08).contains(&bytes), "{bytes}");
        assert!(mixed_trace()
            .iter()
            .all(|&(o, l)| o + l as u64 <= MIXED_FILE));
    }

    #[test]
    fn the_threshold_paths_name_says_the_default() {
        let kib = DEFAULT_WRITE_THRESHOLD >> 10;
        assert_eq!(DataPath::Threshold.name(), format!("threshold {kib}K"));
    }

    #[test]
    fn shuffled_is_a_permutation() {
        let v: Vec<u64> = (0..1000).collect();
        let mut s = shuffled(v.clone());
        assert_ne!(s, v);
        s.sort_unstable();
        assert_eq!(s, v);
    }
}
