//! `churn`: file-system operations in one directory, one after another,
//! until the process (or what it works through) is killed, each written to
//! a journal before it is called and after it returned, so that a test can
//! tell afterwards which operations were acknowledged (`tests/tests/
//! client_crash.rs`).
//!
//! ```text
//! churn DIR JOURNAL SEED              # ordinary system calls on DIR: through
//!                                     # a mount, or a path the preload library serves
//! churn DIR JOURNAL SEED CLUSTER.toml # the native client; DIR is a Shoal path
//! ```
//!
//! With `CHURN_KILL_AFTER_RUN=PID` in its environment it SIGKILLs PID (0:
//! itself) the moment the last call of its first run of creates or unlinks
//! in `DIR/c` returned.
//!
//! It works in `DIR/a`, `DIR/b` and `DIR/c`, which it makes first. The journal is a
//! local file (its format: `shoal_tests::churn`), one line per event, each
//! line one `write(2)` with `O_APPEND`, so that a line is whole and every
//! line written before a kill is there after it.
//!
//! File data is acknowledged by the close (or fsync) that follows it, as
//! POSIX and close-to-open consistency have it.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use shoal_client::Client;
use shoal_proto::cluster::ClusterConfig;
use shoal_tests::churn::Op;
use shoal_tests::pattern;

/// In churn's environment: a process to SIGKILL (0: churn itself) as
/// soon as the last call of its first run in `c` returned.
const KILL_AFTER_RUN: &str = "CHURN_KILL_AFTER_RUN";
/// A worker that is never killed stops on its own after this long.
const LONGEST_RUN: Duration = Duration::from_secs(120);
/// Largest file written whole, and the largest write.
const LARGE: usize = 1 << 20;
const SMALL: usize = 16 << 10;

/// Where the operations go: ordinary system calls, or the native client.
trait Target {
    fn mkdir(&mut self, name: &str) -> Result<(), i32>;
    fn run(&mut self, op: &Op) -> Result<(), i32>;
}

/// System calls on paths under a directory (a mount, or a preload prefix).
struct Posix(PathBuf);

fn errno(e: std::io::Error) -> i32 {
    e.raw_os_error().unwrap_or(libc::EIO)
}

impl Posix {
    fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    fn write_at(&self, file: &File, off: u64, len: usize, seed: u64) -> Result<(), i32> {
        file.write_all_at(&pattern(seed, len), off).map_err(errno)
    }
}

impl Target for Posix {
    fn mkdir(&mut self, name: &str) -> Result<(), i32> {
        std::fs::create_dir(self.path(name)).map_err(errno)
    }

    fn run(&mut self, op: &Op) -> Result<(), i32> {
        match op {
            Op::Create { name, len, seed } => {
                let f = OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o644)
                    .open(self.path(name))
                    .map_err(errno)?;
                if *len > 0 {
                    self.write_at(&f, 0, *len, *seed)?;
                }
                close(f)
            }
            Op::Write {
                name,
                off,
                len,
                seed,
            } => {
                let f = OpenOptions::new()
                    .write(true)
                    .open(self.path(name))
                    .map_err(errno)?;
                self.write_at(&f, *off, *len, *seed)?;
                close(f)
            }
            Op::Unlink { name } => std::fs::remove_file(self.path(name)).map_err(errno),
            Op::Rename { from, to } => {
                std::fs::rename(self.path(from), self.path(to)).map_err(errno)
            }
            Op::Link { from, to } => {
                std::fs::hard_link(self.path(from), self.path(to)).map_err(errno)
            }
            Op::Fsync { name } => {
                let f = OpenOptions::new()
                    .write(true)
                    .open(self.path(name))
                    .map_err(errno)?;
                f.sync_all().map_err(errno)?;
                close(f)
            }
            Op::FsyncDir { dir } => {
                let d = File::open(self.path(dir)).map_err(errno)?;
                d.sync_all().map_err(errno)?;
                close(d)
            }
        }
    }
}

/// Closes `f`, returning close(2)'s error (where an error sending buffered
/// writes is reported), which dropping a `File` ignores.
fn close(f: File) -> Result<(), i32> {
    use std::os::fd::IntoRawFd;
    // SAFETY: the descriptor is ours alone, taken out of the File.
    match unsafe { libc::close(f.into_raw_fd()) } {
        0 => Ok(()),
        _ => Err(errno(std::io::Error::last_os_error())),
    }
}

/// The native client, on a runtime of its own; names under a Shoal path.
struct Native {
    client: Client,
    rt: tokio::runtime::Runtime,
    root: String,
}

impl Native {
    fn split(&self, name: &str) -> (String, String) {
        let path = format!("{}/{name}", self.root);
        let (dir, base) = path.rsplit_once('/').expect("a path with a directory");
        (dir.to_string(), base.to_string())
    }

    async fn call(&self, op: &Op) -> Result<(), shoal_client::ShoalError> {
        let c = &self.client;
        let parent = |name: &str| {
            let (dir, base) = self.split(name);
            async move { Ok::<_, shoal_client::ShoalError>((c.resolve(&dir).await?.0, base)) }
        };
        let file = |name: &str| {
            let path = format!("{}/{name}", self.root);
            async move { Ok::<_, shoal_client::ShoalError>(c.resolve(&path).await?.0) }
        };
        match op {
            Op::Create { name, len, seed } => {
                let (dir, base) = parent(name).await?;
                let h = c.create(dir, &base, 0o644).await?.handle;
                if *len > 0 {
                    c.write(h, 0, Bytes::from(pattern(*seed, *len))).await?;
                }
                c.flush(h).await
            }
            Op::Write {
                name,
                off,
                len,
                seed,
            } => {
                let h = file(name).await?;
                c.write(h, *off, Bytes::from(pattern(*seed, *len))).await?;
                c.flush(h).await
            }
            Op::Unlink { name } => {
                let (dir, base) = parent(name).await?;
                c.unlink(dir, &base).await.map(drop)
            }
            Op::Rename { from, to } => {
                let ((fd, fname), (td, tname)) = (parent(from).await?, parent(to).await?);
                c.rename(fd, &fname, td, &tname, false).await
            }
            Op::Link { from, to } => {
                let h = file(from).await?;
                let (td, tname) = parent(to).await?;
                c.link(h, td, &tname).await.map(drop)
            }
            Op::Fsync { name } => c.fsync(file(name).await?).await,
            Op::FsyncDir { dir } => c.fsync(file(dir).await?).await,
        }
    }
}

impl Target for Native {
    fn mkdir(&mut self, name: &str) -> Result<(), i32> {
        let c = &self.client;
        let root = self.root.clone();
        self.rt
            .block_on(async move {
                let dir = c.resolve(&root).await?.0;
                c.mkdir(dir, name, 0o755).await.map(drop)
            })
            .map_err(|e| e.errno.0)
    }

    fn run(&mut self, op: &Op) -> Result<(), i32> {
        self.rt.block_on(self.call(op)).map_err(|e| e.errno.0)
    }
}

/// The journal: a local file, a line per `write(2)`.
struct Journal(File);

impl Journal {
    fn line(&mut self, text: String) {
        self.0
            .write_all(format!("{text}\n").as_bytes())
            .expect("journal write");
    }
}

/// The names churn knows of, as its acknowledged operations left them.
#[derive(Default)]
struct Names {
    files: Vec<String>,
    next: u64,
    /// Calls still to make in the current run in `c`.
    run: u32,
    /// Whether that run unlinks (else it creates).
    run_unlinks: bool,
}

impl Names {
    fn fresh(&mut self, dir: &str) -> String {
        self.next += 1;
        format!("{dir}/n{}", self.next)
    }

    /// A name of `a` or `b`.
    fn any(&self, rng: &mut StdRng) -> Option<String> {
        let ab: Vec<&String> = self.files.iter().filter(|n| !n.starts_with("c/")).collect();
        (!ab.is_empty()).then(|| ab[rng.random_range(0..ab.len())].clone())
    }

    /// The oldest name of `c`.
    fn oldest_in_c(&self) -> Option<String> {
        self.files.iter().find(|n| n.starts_with("c/")).cloned()
    }

    fn forget(&mut self, name: &str) {
        self.files.retain(|n| n != name);
    }
}

/// The next operation. In `a` and `b`: mostly creates (a third of them
/// empty: a create and nothing else, what a client may answer itself),
/// then unlinks, renames, hard links, writes small and large, and now and
/// then an fsync of a file or a directory. Now and then a run of empty
/// creates in `c`, or of unlinks of the oldest there, as a job makes and
/// cleans up its output files: a directory nothing renames or links in,
/// where the client keeps its delegation. True with the last call of a run.
fn next_op(rng: &mut StdRng, names: &mut Names) -> (Op, bool) {
    if names.run == 0 && rng.random_bool(0.03) {
        names.run = rng.random_range(20..200);
        names.run_unlinks = rng.random_bool(0.3);
    }
    if names.run > 0 {
        names.run -= 1;
        let op = match names.oldest_in_c().filter(|_| names.run_unlinks) {
            Some(name) => Op::Unlink { name },
            None => Op::Create {
                name: names.fresh("c"),
                len: 0,
                seed: 0,
            },
        };
        return (op, names.run == 0);
    }
    (other_op(rng, names), false)
}

/// An operation in `a` or `b` (see [`next_op`]).
fn other_op(rng: &mut StdRng, names: &mut Names) -> Op {
    let dir = if rng.random_bool(0.5) { "a" } else { "b" };
    let len = |rng: &mut StdRng| match rng.random_range(0..10) {
        0..=3 => 0,
        4..=8 => rng.random_range(1..SMALL),
        _ => rng.random_range(SMALL..LARGE),
    };
    let seed = rng.random_range(0..1 << 32);
    let roll = rng.random_range(0..100);
    let Some(existing) = names.any(rng).filter(|_| roll >= 40) else {
        let len = len(rng);
        return Op::Create {
            name: names.fresh(dir),
            len,
            seed,
        };
    };
    match roll {
        40..=59 => Op::Unlink { name: existing },
        60..=69 => Op::Rename {
            from: existing,
            to: names.fresh(dir),
        },
        70..=74 => {
            let other = if existing.starts_with("a/") { "b" } else { "a" };
            Op::Link {
                from: existing,
                to: names.fresh(other),
            }
        }
        75..=89 => Op::Write {
            name: existing,
            off: rng.random_range(0..LARGE as u64),
            len: len(rng).max(1),
            seed,
        },
        90..=94 => Op::Fsync { name: existing },
        _ => Op::FsyncDir {
            dir: dir.to_string(),
        },
    }
}

/// What an acknowledged operation leaves of the names churn knows.
fn apply(names: &mut Names, op: &Op) {
    match op {
        Op::Create { name, .. } => names.files.push(name.clone()),
        Op::Link { to, .. } => names.files.push(to.clone()),
        Op::Unlink { name } => names.forget(name),
        Op::Rename { from, to } => {
            names.forget(from);
            names.files.push(to.clone());
        }
        Op::Write { .. } | Op::Fsync { .. } | Op::FsyncDir { .. } => {}
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if !(4..=5).contains(&args.len()) {
        eprintln!("usage: churn DIR JOURNAL SEED [CLUSTER.toml]");
        std::process::exit(2);
    }
    let (dir, journal, seed) = (&args[1], &args[2], &args[3]);
    let seed: u64 = seed.parse().expect("SEED is a number");
    let mut target: Box<dyn Target> = match args.get(4) {
        Some(config) => {
            let config = ClusterConfig::load(Path::new(config)).expect("cluster file");
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            let client = rt.block_on(async { Client::new(config) });
            Box::new(Native {
                client,
                rt,
                root: dir.clone(),
            })
        }
        None => Box::new(Posix(PathBuf::from(dir))),
    };
    let mut journal = Journal(
        OpenOptions::new()
            .create(true)
            .append(true)
            .open(journal)
            .expect("journal"),
    );
    for side in ["a", "b", "c"] {
        if let Err(e) = target.mkdir(side) {
            journal.line(format!("F 0 {e}"));
            return;
        }
    }
    // The moment a client's crash finds the most it answered itself: the
    // last call of a run in `c` just returned.
    let kill_after_run: Option<i32> = std::env::var(KILL_AFTER_RUN)
        .ok()
        .map(|pid| pid.parse().expect("a process id"));
    let mut rng = StdRng::seed_from_u64(seed);
    let mut names = Names::default();
    let started = Instant::now();
    let mut seq = 0u64;
    while started.elapsed() < LONGEST_RUN {
        seq += 1;
        let (op, ends_run) = next_op(&mut rng, &mut names);
        journal.line(format!("B {seq} {op}"));
        match target.run(&op) {
            Ok(()) => {
                journal.line(format!("A {seq}"));
                apply(&mut names, &op);
                if let Some(pid) = kill_after_run.filter(|_| ends_run) {
                    let pid = if pid == 0 {
                        std::process::id() as i32
                    } else {
                        pid
                    };
                    // SAFETY: a plain signal, to this process or the one the test named.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
            Err(e) => {
                journal.line(format!("F {seq} {e}"));
                return;
            }
        }
    }
}
