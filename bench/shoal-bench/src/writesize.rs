//! `shoal bench writesize`: the write-size experiments of [Hildebrand 2006]
//! (its Figures 6, 7 and 8) on a fresh local cluster, through the native
//! client, for each of three data paths:
//!
//! - `direct`: every write straight to the servers holding its strips
//!   (`write_threshold = 0`);
//! - `gathering`: every write through the client's write-back buffer
//!   (`write_threshold` = `gather_buffer`, 4 MiB here, so even 1 MiB writes
//!   are kept);
//! - `threshold`: the cluster's default, `write_threshold` = 32 KiB.
//!
//! Experiments, each finished by an fsync inside the timing:
//! 1. `sequential`: one client writes WRITES consecutive writes of each size
//!    to a new file (Figure 6);
//! 2. `clients`: CLIENTS clients (each its own connections and buffer)
//!    write WRITES / CLIENTS consecutive writes each into disjoint parts of
//!    one file, as many bytes in all as experiment 1 (Figure 7);
//! 3. `random`: one client writes a RANDOM_FILE-byte file in writes of each
//!    size at shuffled offsets, covering it (Figure 8).
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
use shoal_proto::cluster::ClusterConfig;
use shoal_proto::error::{Result, ShoalError};
use shoal_proto::Handle;

use crate::fsops::at;
use crate::nometafile::{with_cluster, Protocol};
use crate::report::median;

const MIB: f64 = (1 << 20) as f64;
/// The random experiment skips sizes that would take more writes than this
/// to cover its file (16-byte writes over 32 MiB would be two million).
const MAX_RANDOM_WRITES: u64 = 8192;
/// The gathering path's buffer in these runs: room for the largest write.
const GATHER_BUFFER: u32 = 4 << 20;

/// The data paths compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Path3 {
    Direct,
    Gathering,
    Threshold,
}

impl Path3 {
    const ALL: [Path3; 3] = [Path3::Direct, Path3::Gathering, Path3::Threshold];

    fn name(self) -> &'static str {
        match self {
            Path3::Direct => "direct",
            Path3::Gathering => "gathering",
            Path3::Threshold => "threshold 32K",
        }
    }

    /// The cluster's settings as this path's client sees them.
    fn config(self, base: &ClusterConfig) -> ClusterConfig {
        let mut c = base.clone();
        c.settings.gather_buffer = GATHER_BUFFER;
        c.settings.write_threshold = match self {
            Path3::Direct => 0,
            Path3::Gathering => GATHER_BUFFER,
            Path3::Threshold => 32 << 10,
        };
        c
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Experiment {
    Sequential,
    Clients,
    Random,
}

impl Experiment {
    const ALL: [Experiment; 3] = [
        Experiment::Sequential,
        Experiment::Clients,
        Experiment::Random,
    ];

    fn name(self) -> &'static str {
        match self {
            Experiment::Sequential => "sequential",
            Experiment::Clients => "clients",
            Experiment::Random => "random",
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
    pub command: String,
}

/// Per (experiment, size, path): every round's seconds, and the writes and
/// bytes one run makes.
type Measured = BTreeMap<(Experiment, usize, Path3), (Vec<f64>, u64, u64)>;

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
            for e in Experiment::ALL {
                for &size in &opts.sizes {
                    if e == Experiment::Random
                        && opts.random_file.div_ceil(size as u64) > MAX_RANDOM_WRITES
                    {
                        continue;
                    }
                    for k in 0..Path3::ALL.len() {
                        let p = Path3::ALL[(k + round) % Path3::ALL.len()];
                        n += 1;
                        let cfg = p.config(&base);
                        let (secs, writes, bytes) =
                            rt.block_on(one_run(&cfg, opts, e, size, &format!("f{n}")))?;
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

/// One experiment at one size through one path, on a new file `name`:
/// (seconds, writes, bytes), the clients made and connected before the clock
/// starts.
async fn one_run(
    cfg: &ClusterConfig,
    opts: &WritesizeOptions,
    e: Experiment,
    size: usize,
    name: &str,
) -> Result<(f64, u64, u64)> {
    let clients: Vec<Client> = (0..match e {
        Experiment::Clients => opts.clients,
        _ => 1,
    })
        .map(|_| Client::new(cfg.clone()))
        .collect();
    for c in &clients {
        c.ping_all().await?;
    }
    let f = clients[0]
        .create(clients[0].root(), name, 0o644)
        .await?
        .handle;
    let block = Bytes::from(vec![0x5a; size]);
    let per_client = match e {
        Experiment::Clients => (opts.writes / opts.clients as u64).max(1),
        _ => opts.writes,
    };
    let offsets: Vec<u64> = match e {
        Experiment::Random => {
            let count = opts.random_file.div_ceil(size as u64);
            shuffled((0..count).map(|i| i * size as u64).collect())
        }
        _ => (0..per_client).map(|i| i * size as u64).collect(),
    };
    let t0 = Instant::now();
    let done = futures::future::try_join_all(clients.iter().enumerate().map(|(i, c)| {
        let base = i as u64 * per_client * size as u64;
        let (block, offsets) = (&block, &offsets);
        async move {
            for off in offsets {
                c.write(f, base + off, block.clone()).await?;
            }
            c.fsync(f).await
        }
    }))
    .await;
    let secs = t0.elapsed().as_secs_f64();
    done?;
    let writes = offsets.len() as u64 * clients.len() as u64;
    let bytes = writes * size as u64;
    check_size(&clients[0], f, bytes).await?;
    clients[0].unlink(clients[0].root(), name).await?;
    Ok((secs, writes, bytes))
}

/// The file is as long as what was written: a path that lost writes must
/// not be timed as a success.
async fn check_size(c: &Client, f: Handle, bytes: u64) -> Result<()> {
    c.forget(f);
    let size = c.getattr(f).await?.size;
    if size != bytes {
        return Err(ShoalError::io(format!(
            "writesize: the file is {size} bytes after {bytes} were written"
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
         client's write-back buffer, gather_buffer 4 MiB), `threshold 32K` (the default). \
         Each run ends with an fsync inside the timing. sequential: {} consecutive writes \
         from one client; clients: {} clients, {} consecutive writes each into disjoint \
         parts of one file; random: one client covers a {}-byte file at shuffled offsets \
         (sizes that need at most {MAX_RANDOM_WRITES} writes). \
         MiB/s, median of {} rounds (paths alternating). Release build.\n",
        opts.servers, opts.writes, opts.clients, opts.writes, opts.random_file, opts.rounds
    );
    for e in Experiment::ALL {
        let _ = writeln!(md, "## {}\n", e.name());
        md.push_str(
            "| size | direct | gathering | threshold 32K | gathering/direct | threshold/best |\n\
             |---:|---:|---:|---:|---:|---:|\n",
        );
        for &size in &opts.sizes {
            if !measured.contains_key(&(e, size, Path3::Direct)) {
                continue;
            }
            let get = |p| measured.get(&(e, size, p)).map_or(0.0, mib_s);
            let (d, g, t) = (
                get(Path3::Direct),
                get(Path3::Gathering),
                get(Path3::Threshold),
            );
            let _ = writeln!(
                md,
                "| {} | {d:.2} | {g:.2} | {t:.2} | {:.1}x | {:.2} |",
                size_name(size),
                g / d.max(1e-9),
                t / d.max(g).max(1e-9)
            );
        }
        md.push('\n');
    }
    let _ = writeln!(md, "Command: `{}`", opts.command);
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shuffled_is_a_permutation() {
        let v: Vec<u64> = (0..1000).collect();
        let mut s = shuffled(v.clone());
        assert_ne!(s, v);
        s.sort_unstable();
        assert_eq!(s, v);
    }
}
