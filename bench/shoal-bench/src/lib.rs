//! `shoal bench`: the benchmarks of bench/README.md, runnable on any POSIX
//! directory (a Shoal mount, tmpfs, a local disk) so Shoal can be compared
//! with its peers by the same code.
//!
//! The `shoal` binary flattens [`BenchArgs`] into its `bench` subcommand and
//! calls [`run`]; workers and local clusters are started by running that
//! binary again (`std::env::current_exe`), so this crate is a library only.

mod ablation;
mod fsops;
mod interfaces;
mod ls;
mod machine_cpu;
mod nometafile;
mod nometafile_report;
mod nometafile_worker;
mod pattern;
mod pfa;
mod pfa_worker;
mod postmark;
mod report;
mod runtime;
mod smallfile;
mod smallfile_layout;
mod smallfile_native;
mod streaming;
mod workers;
mod writesize;

use std::path::PathBuf;

use clap::Subcommand;
use shoal_proto::error::Result;

#[derive(clap::Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub workload: Workload,
}

#[derive(Subcommand)]
pub enum Workload {
    /// The 9-phase small-file microbenchmark of [Carns 2009]: mkdir, create,
    /// readdir+stat, write, read (verified), readdir+stat, close, unlink, rmdir.
    Smallfile(SmallfileArgs),
    /// Write then read (verified) SIZE per process in BLOCK transfers, a file
    /// per process or one shared file.
    Streaming(StreamingArgs),
    /// The comparison of [Carns 2009]: smallfile on fresh local clusters, adding one
    /// technique at a time; writes ablation.{csv,md,png}.
    Ablation(AblationArgs),
    /// Table I of [Carns 2009]: `ls -al` on the mount, `shoal ls -l` and `shoal
    /// lsplus -l` on a directory of 12,000 files, on a baseline and an all-on
    /// local cluster; writes ls.md.
    Ls(LsArgs),
    /// The evaluation of [Kuhn 2008]: create, list (with attributes) and remove
    /// empty files with and without the no_metafile hint, 1 and 5 client
    /// processes, storage on disk and on tmpfs, baseline and all-on local
    /// clusters; writes no_metafile.{csv,md,png}.
    Nometafile(NometafileArgs),
    /// The workloads of the PVFS POSIX-interface study [Vilayannur 2004] and
    /// smallfile of [Carns 2009], each through libshoal_preload.so, the FUSE
    /// mount, the native client (where it applies) and a FUSE passthrough
    /// over tmpfs (bindfs), in one run on a fresh local cluster; writes
    /// interfaces-<workload>.{csv,md,png}.
    Interfaces(InterfacesArgs),
    /// The experiments of the parallel file aggregation paper [Kato 2011]:
    /// P ranks write records a file per rank per step, into one shared file
    /// under record locks, and into a PFA container; and the checkpoint
    /// workload with and without incremental logging; writes pfa.{md,csv,png}.
    Pfa(PfaArgs),
    /// The write-size experiments of [Hildebrand 2006] (its Figures 6, 7 and
    /// 8): sequential writes from one client, several clients into one
    /// file, random writes covering a file, at each write size, through the
    /// direct path, the gathering path and the write threshold, on a fresh
    /// local cluster; writes writesize.{md,csv,png}.
    Writesize(WritesizeArgs),
    /// Internal: one process of `shoal bench interfaces bandwidth`.
    #[command(hide = true)]
    BandwidthWorker(BandwidthWorkerArgs),
}

#[derive(clap::Args)]
pub struct InterfacesArgs {
    #[command(subcommand)]
    pub workload: InterfacesWorkload,
    /// Where interfaces-<workload>.{csv,md,png} go.
    #[arg(long, default_value = "bench/results", global = true)]
    pub out: PathBuf,
    /// Scratch directory for the cluster's data and the mounts (emptied first).
    #[arg(long, default_value = "/tmp/shoal-bench-interfaces", global = true)]
    pub work: PathBuf,
    #[arg(long, default_value_t = 4, global = true)]
    pub servers: u32,
    /// Rounds; each runs every target once, and medians are reported.
    #[arg(long, default_value_t = 3, global = true)]
    pub rounds: usize,
    /// libshoal_preload.so (default: next to this shoal binary).
    #[arg(long, value_name = "LIB", global = true)]
    pub preload: Option<PathBuf>,
    /// A cluster setting for `shoal up --set` (repeatable), e.g. sync=none.
    #[arg(long = "set", value_name = "KEY=VALUE", global = true)]
    pub settings: Vec<String>,
}

#[derive(Subcommand)]
pub enum InterfacesWorkload {
    /// smallfile (P processes x N files x SIZE bytes); --reopen: each phase
    /// opens and closes every file instead of keeping them open.
    Smallfile {
        #[arg(short = 'p', long = "procs", default_value_t = 4)]
        procs: usize,
        #[arg(short = 'n', long = "files", default_value_t = 2000)]
        files: usize,
        #[arg(long, default_value_t = 8192)]
        size: usize,
        #[arg(long)]
        reopen: bool,
    },
    /// Untar a source tree, `ls -aR`, `find -exec stat {} +`, `rm -rf`.
    Tree {
        /// A directory to tar (untimed) or a tarball (.tar, .tar.xz, .tar.gz):
        /// e.g. /usr/src/linux-source-6.1.tar.xz.
        #[arg(long, default_value = interfaces::DEFAULT_TREE)]
        source: PathBuf,
    },
    /// P processes write disjoint blocks of one shared file, close, reopen,
    /// read back; once per block size.
    Bandwidth {
        #[arg(short = 'p', long = "procs", default_value_t = 4)]
        procs: usize,
        /// Data per process, MiB.
        #[arg(long, default_value_t = 64)]
        size_mib: u64,
        /// Block sizes, KiB.
        #[arg(long, value_delimiter = ',', default_value = "4,16,64,256,1024,4096")]
        blocks_kib: Vec<u64>,
    },
    /// Bonnie++ (Debian bonnie++) in a directory of the target.
    Bonnie {
        /// Its file size, MiB (its RAM figure is set to half).
        #[arg(long, default_value_t = 512)]
        size_mib: u64,
        /// Files for the file tests, in multiples of 1024.
        #[arg(long, default_value_t = 4)]
        files_k: u32,
    },
}

#[derive(clap::Args)]
pub struct PfaArgs {
    /// A directory to run in (repeatable): a Shoal mount, the local disk,
    /// tmpfs; each run works in a fresh subdirectory, removed after.
    #[arg(long = "dir", required = true)]
    pub dirs: Vec<PathBuf>,
    /// Ranks (processes).
    #[arg(short = 'p', long = "procs", default_value_t = 8)]
    pub procs: usize,
    /// Write for this many seconds per rank, as [Kato 2011] did (a minute):
    /// each rank writes records until its time is up, then makes them
    /// durable.
    #[arg(long, default_value_t = 10.0, conflicts_with = "steps")]
    pub seconds: f64,
    /// Write exactly this many records per rank (one per step) instead of
    /// for a fixed time.
    #[arg(long)]
    pub steps: Option<u64>,
    /// Bytes per record ([Kato 2011]'s: 272,383).
    #[arg(long, default_value_t = pfa::RECORD)]
    pub record: usize,
    /// Steps of the checkpoint workload.
    #[arg(long, default_value_t = 20)]
    pub checkpoint_steps: u64,
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Where pfa.{md,csv,png} go.
    #[arg(long, default_value = "bench/results")]
    pub out: PathBuf,
    /// Internal: run as rank K in the run directory given as --dir.
    #[arg(long, hide = true, value_name = "K")]
    pub worker: Option<usize>,
    /// Run only this pattern (repeatable; default all three). A worker
    /// gets exactly one.
    #[arg(long, value_enum)]
    pub pattern: Vec<pfa_worker::Pattern>,
}

#[derive(clap::Args)]
pub struct WritesizeArgs {
    /// Scratch directory for the cluster's data (emptied first).
    #[arg(long, default_value = "/tmp/shoal-bench-writesize")]
    pub work: PathBuf,
    /// Where writesize.{md,csv,png} go.
    #[arg(long, default_value = "bench/results")]
    pub out: PathBuf,
    #[arg(long, default_value_t = 4)]
    pub servers: u32,
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Consecutive writes per size from one client (the clients experiment
    /// splits them among its clients).
    #[arg(long, default_value_t = 1000)]
    pub writes: u64,
    /// Clients of the several-clients experiment.
    #[arg(long, default_value_t = 10)]
    pub clients: usize,
    /// Bytes of the file the random experiment covers.
    #[arg(long, default_value_t = 32 << 20)]
    pub random_file: u64,
    /// Write sizes in bytes (comma-separated).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "16,64,256,1024,4096,16384,32768,65536,262144,1048576"
    )]
    pub sizes: Vec<usize>,
    /// Postmark's transactions per run on the mount ([Hildebrand 2006]'s
    /// Table 1 ran 2,000); 0 skips Postmark.
    #[arg(long, default_value_t = 500)]
    pub postmark_transactions: u32,
}

#[derive(clap::Args)]
pub struct BandwidthWorkerArgs {
    #[arg(long, value_name = "K")]
    pub worker: usize,
    /// The shared file.
    #[arg(long)]
    pub dir: PathBuf,
    #[arg(long)]
    pub procs: usize,
    #[arg(long)]
    pub size_mib: u64,
    #[arg(long)]
    pub block_kib: u64,
    #[arg(long)]
    pub native: bool,
}

#[derive(clap::Args)]
pub struct NometafileArgs {
    /// Where no_metafile.{csv,md,png} go.
    #[arg(long, default_value = "bench/results")]
    pub out: PathBuf,
    /// Scratch directory on disk for the clusters' data; the tmpfs is
    /// mounted at its `tmpfs` subdirectory.
    #[arg(long, default_value = "/var/tmp/shoal-bench-nometafile")]
    pub work: PathBuf,
    #[arg(long, default_value_t = 4)]
    pub servers: u32,
    /// Directories each client makes (the paper: 100).
    #[arg(long, default_value_t = 10)]
    pub dirs: usize,
    /// Empty files in each directory (the paper: 500).
    #[arg(long, default_value_t = 50)]
    pub files: usize,
    /// Concurrent client processes, each count run in turn.
    #[arg(long, value_delimiter = ',', default_value = "1,5")]
    pub clients: Vec<usize>,
    /// Storage under the servers (tmpfs needs root).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "disk,tmpfs")]
    pub storage: Vec<nometafile::Storage>,
    /// Protocols to measure.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "baseline,all-on"
    )]
    pub protocols: Vec<nometafile::Protocol>,
    /// Rounds; each runs every case once, and medians are reported.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// Size of the tmpfs, MiB.
    #[arg(long, default_value_t = 4096)]
    pub tmpfs_mib: u64,
    /// Internal: run as client K of a parent `shoal bench nometafile`.
    #[arg(long, hide = true, value_name = "K")]
    pub worker: Option<usize>,
    /// Internal (workers): the cluster file.
    #[arg(long, hide = true)]
    pub config: Option<PathBuf>,
    /// Internal (workers): the run's Shoal directory; client K works in c<K>.
    #[arg(long, hide = true)]
    pub dir: Option<String>,
}

#[derive(clap::Args)]
pub struct LsArgs {
    /// Where ls.md goes.
    #[arg(long, default_value = "bench/results")]
    pub out: PathBuf,
    /// Scratch directory for the clusters' data and mounts.
    #[arg(long, default_value = "/tmp/shoal-bench-ls")]
    pub work: PathBuf,
    #[arg(long, default_value_t = 4)]
    pub servers: u32,
    /// Files in the listed directory.
    #[arg(short = 'n', long = "files", default_value_t = 12000)]
    pub files: usize,
    /// Bytes in each file.
    #[arg(long, default_value_t = 8192)]
    pub size: usize,
    /// Timed runs of each tool; the median is reported.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
}

#[derive(clap::Args)]
pub struct AblationArgs {
    /// Where ablation.{csv,md,png} go.
    #[arg(long, default_value = "bench/results")]
    pub out: PathBuf,
    /// Scratch directory for the clusters' data and mounts.
    #[arg(long, default_value = "/tmp/shoal-ablation")]
    pub work: PathBuf,
    #[arg(long, default_value_t = 4)]
    pub servers: u32,
    #[arg(short = 'p', long = "procs", default_value_t = 4)]
    pub procs: usize,
    #[arg(short = 'n', long = "files", default_value_t = 2000)]
    pub files: usize,
    #[arg(long, default_value_t = 8192)]
    pub size: usize,
    /// Rounds; each runs every configuration once, and medians are reported.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
}

#[derive(clap::Args)]
pub struct SmallfileArgs {
    /// Directory to run in (each run uses a fresh subdirectory of it).
    #[arg(long)]
    pub dir: PathBuf,
    /// Processes.
    #[arg(short = 'p', long = "procs", default_value_t = 4)]
    pub procs: usize,
    /// Files per process.
    #[arg(short = 'n', long = "files", default_value_t = 2000)]
    pub files: usize,
    /// Bytes written to and read from each file.
    #[arg(long, default_value_t = 8192)]
    pub size: usize,
    /// Runs; the median of each phase is reported.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Also write the results as JSON here.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Also write the results as CSV here.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Time the native client instead of POSIX calls (bypassing FUSE); --dir
    /// must lie under a live Shoal mount, which names the cluster.
    #[arg(long)]
    pub native: bool,
    /// Each phase opens and closes every file it touches (what `cp` and
    /// `cat` do) instead of keeping them open from create to close; with
    /// --native, which opens nothing, each file's writes are flushed where
    /// the POSIX form closes it.
    #[arg(long)]
    pub reopen: bool,
    /// With --native: the create phase makes this many files per
    /// `create_files` call (one message and one transaction each, where the
    /// directory allows), instead of one `create` per file.
    #[arg(long, value_name = "N", default_value_t = 1, requires = "native")]
    pub create_batch: usize,
    /// Run the worker processes with this library as LD_PRELOAD (e.g.
    /// target/release/libshoal_preload.so, with --dir under a Shoal mount).
    #[arg(long, value_name = "LIB", conflicts_with = "native")]
    pub preload: Option<PathBuf>,
    /// Also report, per phase, the CPU time process PID spent (repeat it:
    /// the servers, to split a phase's cost between them and the clients).
    #[arg(long = "watch-pid", value_name = "PID")]
    pub watch_pid: Vec<u32>,
    /// Every process's files in one shared directory (IO500's mdtest-hard
    /// form) instead of a directory per process ([Carns 2009]'s): the first
    /// process makes and removes it, each listing phase lists every file
    /// and stats the process's own.
    #[arg(long)]
    pub shared: bool,
    /// Internal: run as worker K of a parent `shoal bench smallfile`, in the
    /// run directory given as --dir.
    #[arg(long, hide = true, value_name = "K")]
    pub worker: Option<usize>,
}

#[derive(clap::Args)]
pub struct StreamingArgs {
    /// Directory to run in (each run uses a fresh subdirectory of it).
    #[arg(long)]
    pub dir: PathBuf,
    /// Processes.
    #[arg(short = 'p', long = "procs", default_value_t = 4)]
    pub procs: usize,
    /// Data written and read by each process, MiB.
    #[arg(long, default_value_t = 1024)]
    pub size_mib: u64,
    /// Transfer size, KiB.
    #[arg(long, default_value_t = 1024)]
    pub block_kib: u64,
    /// One shared file, each process writing its own contiguous region,
    /// instead of a file per process.
    #[arg(long)]
    pub shared: bool,
    /// Runs; the median of each phase is reported.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Also write the results as JSON here.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Also write the results as CSV here.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Internal: run as worker K of a parent `shoal bench streaming`, in the
    /// run directory given as --dir.
    #[arg(long, hide = true, value_name = "K")]
    pub worker: Option<usize>,
}

pub fn run(args: BenchArgs) -> Result<()> {
    match args.workload {
        Workload::BandwidthWorker(a) => as_worker(interfaces::bandwidth_worker(
            &a.dir,
            a.worker,
            a.procs,
            a.size_mib,
            a.block_kib,
            a.native,
        )),
        Workload::Interfaces(a) => {
            let workload = match a.workload {
                InterfacesWorkload::Smallfile {
                    procs,
                    files,
                    size,
                    reopen,
                } => interfaces::Workload::Smallfile {
                    procs,
                    files,
                    size,
                    reopen,
                },
                InterfacesWorkload::Tree { source } => interfaces::Workload::Tree { source },
                InterfacesWorkload::Bandwidth {
                    procs,
                    size_mib,
                    blocks_kib,
                } => {
                    if procs == 0
                        || size_mib == 0
                        || blocks_kib.iter().any(|&b| b == 0 || b > 1 << 20)
                    {
                        return Err(shoal_proto::ShoalError::invalid(
                            "bandwidth: -p, --size-mib and every block (at most 1 GiB) must be positive",
                        ));
                    }
                    interfaces::Workload::Bandwidth {
                        procs,
                        size_mib,
                        blocks_kib,
                    }
                }
                InterfacesWorkload::Bonnie { size_mib, files_k } => {
                    interfaces::Workload::Bonnie { size_mib, files_k }
                }
            };
            let command = command_line();
            with_sigpipe_ignored(|| {
                interfaces::interfaces(&interfaces::InterfacesOptions {
                    out: a.out,
                    work: a.work,
                    servers: a.servers,
                    rounds: a.rounds.max(1),
                    preload: a.preload,
                    settings: a.settings,
                    workload,
                    command,
                })
            })
        }
        Workload::Nometafile(a) => match (a.worker, &a.config, &a.dir) {
            (Some(k), Some(config), Some(dir)) => {
                as_worker(nometafile_worker::worker(config, dir, k, a.dirs, a.files))
            }
            (Some(_), _, _) => Err(shoal_proto::ShoalError::invalid(
                "a nometafile worker needs --config and --dir",
            )),
            (None, _, _) => {
                let opts = nometafile::NometafileOptions {
                    out: a.out,
                    work: a.work,
                    servers: a.servers,
                    dirs: a.dirs,
                    files: a.files,
                    clients: a.clients,
                    storage: a.storage,
                    protocols: a.protocols,
                    rounds: a.rounds,
                    tmpfs_mib: a.tmpfs_mib,
                };
                let results = with_sigpipe_ignored(|| nometafile::measure(&opts))?;
                nometafile_report::write(&results, &opts)
            }
        },
        Workload::Writesize(a) => with_sigpipe_ignored(|| {
            writesize::writesize(&writesize::WritesizeOptions {
                work: a.work,
                out: a.out,
                servers: a.servers,
                rounds: a.rounds,
                writes: a.writes,
                clients: a.clients,
                random_file: a.random_file,
                sizes: a.sizes,
                postmark_transactions: a.postmark_transactions,
                command: command_line(),
            })
        }),
        Workload::Pfa(a) => match (a.worker, a.pattern.as_slice()) {
            (Some(k), &[p]) => as_worker(pfa_worker::worker(
                &a.dirs[0],
                k,
                pfa_worker::Length::of(a.steps, a.seconds),
                a.record,
                p,
            )),
            (Some(_), _) => Err(shoal_proto::ShoalError::invalid(
                "a pfa worker needs exactly one --pattern",
            )),
            (None, _) => with_sigpipe_ignored(|| {
                pfa::pfa(&pfa::PfaOptions {
                    dirs: a.dirs,
                    procs: a.procs,
                    patterns: a.pattern,
                    length: pfa_worker::Length::of(a.steps, a.seconds),
                    record: a.record,
                    checkpoint_steps: a.checkpoint_steps,
                    rounds: a.rounds.max(1),
                    out: a.out,
                    command: command_line(),
                })
            }),
        },
        Workload::Ls(a) => ls::ls(&ls::LsOptions {
            out: a.out,
            work: a.work,
            servers: a.servers,
            files: a.files,
            size: a.size,
            runs: a.runs,
        }),
        Workload::Ablation(a) => with_sigpipe_ignored(|| {
            ablation::ablation(&ablation::AblationOptions {
                out: a.out,
                work: a.work,
                servers: a.servers,
                procs: a.procs,
                files: a.files,
                size: a.size,
                rounds: a.rounds,
            })
        }),
        Workload::Smallfile(a) => match a.worker {
            Some(k) => {
                let l = smallfile_layout::Layout {
                    shared: a.shared,
                    procs: a.procs,
                    id: k,
                    files: a.files,
                };
                as_worker(match (a.native, a.reopen) {
                    (true, _) => {
                        smallfile_native::worker(&a.dir, l, a.size, a.reopen, a.create_batch)
                    }
                    (false, true) => smallfile::reopen_worker(&a.dir, l, a.size),
                    (false, false) => smallfile::worker(&a.dir, l, a.size),
                })
            }
            None => with_sigpipe_ignored(|| {
                smallfile::smallfile(&smallfile::SmallfileOptions {
                    dir: a.dir,
                    procs: a.procs,
                    files: a.files,
                    size: a.size,
                    runs: a.runs,
                    native: a.native,
                    reopen: a.reopen,
                    create_batch: a.create_batch,
                    preload: a.preload,
                    uid: None,
                    watch: a.watch_pid,
                    shared: a.shared,
                })
            })?
            .emit(a.json.as_deref(), a.csv.as_deref()),
        },
        Workload::Streaming(a) => match a.worker {
            Some(k) => as_worker(streaming::worker(
                &a.dir,
                k,
                a.size_mib,
                a.block_kib,
                a.shared,
            )),
            None => with_sigpipe_ignored(|| {
                streaming::streaming(&streaming::StreamingOptions {
                    dir: a.dir,
                    procs: a.procs,
                    size_mib: a.size_mib,
                    block_kib: a.block_kib,
                    shared: a.shared,
                    runs: a.runs,
                })
            })?
            .emit(a.json.as_deref(), a.csv.as_deref()),
        },
    }
}

/// Runs the parent's side of a benchmark with SIGPIPE ignored: a worker that
/// died must show up as an error on its pipe, not silently kill the parent.
/// The previous disposition is restored for printing the results.
fn with_sigpipe_ignored<T>(f: impl FnOnce() -> Result<T>) -> Result<T> {
    // SAFETY: changes only this process's SIGPIPE disposition; the benchmark
    // parent runs no other threads that could depend on it.
    let previous = unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
    let result = f();
    if previous != libc::SIG_ERR {
        // SAFETY: as above, restoring what was there.
        unsafe { libc::signal(libc::SIGPIPE, previous) };
    }
    result
}

/// A worker's errors go to its parent over the barrier pipe, which names the
/// worker and phase; printing them here as well would say everything twice.
fn as_worker(result: Result<()>) -> Result<()> {
    if let Err(e) = result {
        workers::report_error(&e);
        std::process::exit(1);
    }
    Ok(())
}

/// This process's command line as a user would type it (`shoal bench ...`),
/// for a report to say how it was made.
fn command_line() -> String {
    std::env::args()
        .skip(1)
        .fold("shoal".to_string(), |c, a| c + " " + &a)
}
