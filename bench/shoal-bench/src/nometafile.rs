//! `shoal bench nometafile`: the evaluation of [Kuhn 2008]. Client processes each
//! create DIRS directories x FILES empty files, list them with attributes
//! and remove them, with and without the `no_metafile` hint on their
//! directory; 1 and 5 concurrent clients; the servers' storage on disk and
//! on a tmpfs of its own; on the baseline protocol (the paper's PVFS) and
//! with every technique on (Shoal's default).
//!
//! Each round brings up a fresh local cluster per storage and protocol and
//! runs every client count with and without the hint on it, the two
//! alternating which goes first from round to round (the machine is shared
//! and noisy: ratios from one invocation hold). The servers' request counts
//! around each phase give its messages. Results: `no_metafile.{csv,md,png}`
//! (`nometafile_report`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use shoal_client::Client;
use shoal_proto::cluster::ClusterConfig;
use shoal_proto::error::{Result, ShoalError};
use shoal_proto::handle::ROOT;
use shoal_proto::hints::Hint;

use crate::ls::{requests, settled_requests, shoal};
use crate::nometafile_worker::PHASES;
use crate::report::mount_of;
use crate::runtime::runtime;
use crate::workers::Workers;

/// The timed operations (phases of the worker).
pub const OPS: [&str; 3] = ["create", "list", "remove"];

/// Where the servers keep their data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Storage {
    /// A directory under --work (on this machine's disk).
    Disk,
    /// A tmpfs mounted for the run under --work (needs root).
    Tmpfs,
}

/// What the cluster speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum)]
pub enum Protocol {
    /// Every switch off: the baseline protocol of [Carns 2009].
    Baseline,
    /// Every technique on: Shoal's default.
    AllOn,
}

impl Storage {
    pub fn name(self) -> &'static str {
        match self {
            Storage::Disk => "disk",
            Storage::Tmpfs => "tmpfs",
        }
    }
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Baseline => "baseline",
            Protocol::AllOn => "all-on",
        }
    }
}

pub struct NometafileOptions {
    /// Where no_metafile.{csv,md,png} go.
    pub out: PathBuf,
    /// Scratch directory for the clusters' data (the disk case) and the
    /// tmpfs mount point.
    pub work: PathBuf,
    pub servers: u32,
    /// Directories each client makes.
    pub dirs: usize,
    /// Files in each directory.
    pub files: usize,
    /// Client counts to run.
    pub clients: Vec<usize>,
    pub storage: Vec<Storage>,
    pub protocols: Vec<Protocol>,
    pub rounds: usize,
    /// Size of the tmpfs, MiB.
    pub tmpfs_mib: u64,
}

/// One measured case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Case {
    pub storage: Storage,
    pub protocol: Protocol,
    pub clients: usize,
    pub hint: bool,
}

/// One run of a case: per operation (`OPS`), the seconds from the first
/// client's start to the last one's end, and the messages the servers
/// received.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Run {
    pub seconds: [f64; 3],
    pub messages: [u64; 3],
}

/// Every run of every case, and where they ran.
pub struct Results {
    pub runs: BTreeMap<Case, Vec<Run>>,
    /// File system type under each storage.
    pub fs_types: BTreeMap<Storage, String>,
}

/// A tmpfs of our own, unmounted on drop.
struct Tmpfs {
    dir: PathBuf,
}

impl Tmpfs {
    fn mount(dir: &Path, mib: u64) -> Result<Tmpfs> {
        std::fs::create_dir_all(dir)?;
        let dir = std::fs::canonicalize(dir)?;
        let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
        if mount_of(&mounts, &dir).is_some_and(|m| m.mount_point == dir) {
            return Err(ShoalError::invalid(format!(
                "{} is a mount point already (left by an earlier run?): umount it first",
                dir.display()
            )));
        }
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(&dir)
            .status()?;
        if !status.success() {
            return Err(ShoalError::io(format!(
                "mounting a tmpfs on {} failed ({status}); it needs root \
                 (--storage disk measures without it)",
                dir.display()
            )));
        }
        Ok(Tmpfs { dir })
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        match Command::new("umount").arg(&self.dir).status() {
            Ok(s) if s.success() => {}
            other => eprintln!(
                "bench nometafile: could not unmount the tmpfs on {} ({other:?}): umount it",
                self.dir.display()
            ),
        }
    }
}

/// The file system type of directory `dir`.
fn fs_type(dir: &Path) -> String {
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
    std::fs::canonicalize(dir)
        .ok()
        .and_then(|d| mount_of(&mounts, &d))
        .map(|m| m.fs_type)
        .unwrap_or_else(|| "unknown".into())
}

/// Runs `f` with the cluster file of a fresh local cluster in `data`, then
/// takes the cluster down and removes its data, whatever `f` returned.
pub(crate) fn with_cluster<T>(
    data: &Path,
    servers: u32,
    protocol: Protocol,
    f: impl FnOnce(&Path) -> Result<T>,
) -> Result<T> {
    let _ = std::fs::remove_dir_all(data);
    let data_s = data.display().to_string();
    let servers = servers.to_string();
    let mut up = vec!["up", "--servers", &servers, "--data", &data_s, "--detach"];
    if protocol == Protocol::Baseline {
        up.push("--baseline");
    }
    shoal(&up)?;
    let result = f(&data.join("cluster.toml"));
    let down = shoal(&["down", "--data", &data_s]);
    let _ = std::fs::remove_dir_all(data);
    let out = result?;
    down?;
    Ok(out)
}

/// One run: `clients` worker processes, each in its own directory
/// `/r{id}/c{k}`; the hint, when asked for, is set on `/r{id}` before those
/// are made, so they and the workers' subdirectories inherit it. `client`
/// lives in `rt` (its connections die with the runtime that opened them).
fn one_run(
    rt: &tokio::runtime::Runtime,
    client: &Client,
    config: &Path,
    id: usize,
    clients: usize,
    hint: bool,
    opts: &NometafileOptions,
) -> Result<Run> {
    let top = format!("r{id}");
    let t = rt.block_on(async {
        let t = client.mkdir(ROOT, &top, 0o755).await?.handle;
        if hint {
            client.set_hint(t, Hint::NoMetafile, "1").await?;
        }
        for k in 0..clients {
            client.mkdir(t, &format!("c{k}"), 0o755).await?;
        }
        Ok::<_, ShoalError>(t)
    })?;
    let (dirs, files) = (opts.dirs.to_string(), opts.files.to_string());
    let mut workers = Workers::spawn(clients, |k| {
        [
            "bench",
            "nometafile",
            "--worker",
            &k.to_string(),
            "--config",
            &config.display().to_string(),
            "--dir",
            &format!("/{top}"),
            "--dirs",
            &dirs,
            "--files",
            &files,
        ]
        .iter()
        .map(Into::into)
        .collect()
    })?;
    let mut run = Run::default();
    for phase in PHASES {
        let before = rt.block_on(settled_requests(client))?;
        let timed = workers.phase(phase)?;
        let after = rt.block_on(requests(client))?;
        if let Some(i) = OPS.iter().position(|op| *op == phase) {
            run.seconds[i] = timed.seconds();
            run.messages[i] = after - before;
        }
    }
    workers.finish()?;
    rt.block_on(async {
        for k in 0..clients {
            client.rmdir(t, &format!("c{k}")).await?;
        }
        client.rmdir(ROOT, &top).await
    })?;
    Ok(run)
}

/// Runs every case `opts.rounds` times.
pub fn measure(opts: &NometafileOptions) -> Result<Results> {
    let disk = opts.work.join("disk");
    std::fs::create_dir_all(&disk)?;
    let tmpfs = match opts.storage.contains(&Storage::Tmpfs) {
        true => Some(Tmpfs::mount(&opts.work.join("tmpfs"), opts.tmpfs_mib)?),
        false => None,
    };
    let mut results = Results {
        runs: BTreeMap::new(),
        fs_types: BTreeMap::new(),
    };
    let mut id = 0;
    for round in 0..opts.rounds {
        for &storage in &opts.storage {
            let root = match (&tmpfs, storage) {
                (Some(t), Storage::Tmpfs) => t.dir.clone(),
                _ => disk.clone(),
            };
            results.fs_types.insert(storage, fs_type(&root));
            for &protocol in &opts.protocols {
                let data = root.join(format!("{}-{round}", protocol.name()));
                with_cluster(&data, opts.servers, protocol, |config| {
                    let rt = runtime()?;
                    let client = Client::new(ClusterConfig::load(config)?);
                    for &clients in &opts.clients {
                        // Which goes first alternates from round to round.
                        for hint in [round % 2 == 1, round % 2 == 0] {
                            eprintln!(
                                "bench nometafile: round {} of {}: {}, {}, {clients} \
                                 client(s), {} the hint",
                                round + 1,
                                opts.rounds,
                                storage.name(),
                                protocol.name(),
                                if hint { "with" } else { "without" }
                            );
                            let run = one_run(&rt, &client, config, id, clients, hint, opts)?;
                            id += 1;
                            let case = Case {
                                storage,
                                protocol,
                                clients,
                                hint,
                            };
                            results.runs.entry(case).or_default().push(run);
                        }
                    }
                    Ok(())
                })?;
            }
        }
    }
    Ok(results)
}
