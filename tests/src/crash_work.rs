//! The crash suite's workers (`tests/tests/crash.rs`): each creates,
//! writes with fsync, renames, hard-links, moves linked files to another
//! directory and removes files in two directories of its own, through a
//! native client or a mount, and keeps a [`Model`] of what its acknowledged
//! operations say must (not) exist. A worker through a mount runs in a
//! process of its own (`src/bin/crash_worker.rs`), as programs do: the test
//! process spawns servers, and a process that spawns while its own threads
//! wait in calls into a FUSE mount can leave the new process hanging in its
//! first page faults (seen on kernel 6.18).

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{File, OpenOptions};
use std::future::Future;
use std::io::Write;
use std::os::fd::IntoRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use shoal_client::{Client, Errno, FileKind, ShoalError};
use shoal_proto::handle::{Handle, ROOT};

use crate::pattern;

/// Any single operation taking longer than this is a hang: the test fails.
pub const OP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a worker waits after an operation failed.
const BACKOFF: Duration = Duration::from_millis(20);
/// Largest file written: past the first 64 KiB strip and past `inline_max`.
pub const MAX_LEN: usize = 200 << 10;
/// A worker's two directories, as model names begin.
pub const SIDES: [&str; 2] = ["a", "b"];

/// What one worker's acknowledged operations say must (not) exist in its
/// two directories. Names are `a/NAME` or `b/NAME`.
#[derive(Default, Debug, Serialize, Deserialize)]
pub struct Model {
    /// How the worker reached the files (its [`Dirs::via`]).
    pub via: String,
    /// Files whose create, write and fsync (and any rename or link) all
    /// succeeded: name → (seed, len).
    pub files: BTreeMap<String, (u64, usize)>,
    /// Names whose unlink or rename-away was acknowledged.
    pub gone: BTreeSet<String>,
    /// Names an interrupted operation leaves ambiguous; `Some` when, if the
    /// name exists, its bytes are known (an acknowledged file whose unlink or
    /// rename failed).
    pub maybe: BTreeMap<String, Option<(u64, usize)>>,
    /// Interrupted renames of acknowledged files within a directory: the
    /// file is under exactly one of the two names.
    pub either: Vec<(String, String)>,
    /// Interrupted moves of acknowledged files to the other directory: the
    /// file is under one of the two names, or both (never neither).
    pub either_or_both: Vec<(String, String)>,
    pub acked: u64,
    pub failed: u64,
    pub errors: BTreeMap<String, u64>,
}

impl Model {
    /// Records an interrupted operation and backs off a little, so a worker
    /// does not spin while a server is down.
    async fn fail(&mut self, what: &str, e: &ShoalError) {
        self.failed += 1;
        let kind = format!("{what} through {}: errno {}", self.via, e.errno.0);
        if !self.errors.contains_key(&kind) {
            eprintln!("crash: first {kind}: {}", e.message);
        }
        *self.errors.entry(kind).or_default() += 1;
        tokio::time::sleep(BACKOFF).await;
    }
}

/// Runs `f` with the hang bound; a timeout aborts the worker with a message.
async fn bounded<T>(
    what: String,
    f: impl Future<Output = Result<T, ShoalError>>,
) -> Result<Result<T, ShoalError>, String> {
    tokio::time::timeout(OP_TIMEOUT, f)
        .await
        .map_err(|_| format!("{what} hung for more than {OP_TIMEOUT:?}"))
}

/// Runs a call into the mount on the blocking pool; the errno it fails with
/// is the operation's error, as a client's would be.
async fn blocking<T: Send + 'static>(
    call: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> Result<T, ShoalError> {
    match tokio::task::spawn_blocking(call).await {
        Ok(done) => done.map_err(ShoalError::from),
        Err(panicked) => std::panic::resume_unwind(panicked.into_panic()),
    }
}

/// Worker `w`'s directory on `side`, under the root.
pub fn dir_name(w: u64, side: &str, layout: Layout) -> String {
    match layout {
        Layout::Own => format!("w{w}{side}"),
        Layout::Shared => format!("all{side}"),
    }
}

/// Where the workers work: each in two directories of its own, or all in
/// the same two (names carry their worker's id either way).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    Own,
    Shared,
}

/// Whether directory entry `entry` is one worker `w` made (its names are
/// a letter, the worker's id, a dash and a number).
pub fn made_by(entry: &str, w: u64) -> bool {
    entry
        .get(1..)
        .and_then(|rest| rest.split_once('-'))
        .is_some_and(|(id, _)| id == w.to_string())
}

/// The side (index into [`SIDES`]) and entry name of a model name.
fn place(name: &str) -> (usize, &str) {
    match name.split_once('/') {
        Some(("a", n)) => (0, n),
        Some(("b", n)) => (1, n),
        _ => panic!("model name {name:?} is not a/NAME or b/NAME"),
    }
}

/// A worker's two directories and the way to reach them: the native client
/// (by handle) or a mount of the cluster (by path). Workers do their
/// operations through it, and verifiers read what they left.
#[derive(Clone)]
pub enum Dirs {
    Native(Client, [Handle; 2]),
    Mount([PathBuf; 2]),
}

/// A file just created, open for its write and fsync.
pub enum Created {
    Native(Handle),
    /// Shared with the blocking call that writes it.
    Mount(Arc<File>),
}

/// What a name holds, as a verifier reads it.
pub struct Found {
    /// The file's handle (a mount's inode numbers are handles).
    pub handle: Handle,
    /// The size its attributes give.
    pub size: u64,
    /// Its bytes, read to the end.
    pub data: Vec<u8>,
}

impl Dirs {
    /// Worker `w`'s directories through `client`.
    pub async fn native(client: &Client, w: u64, layout: Layout) -> Dirs {
        let mut dirs = [0; 2];
        for (d, side) in dirs.iter_mut().zip(SIDES) {
            *d = client
                .lookup(ROOT, &dir_name(w, side, layout))
                .await
                .unwrap()
                .0;
        }
        Dirs::Native(client.clone(), dirs)
    }

    /// Worker `w`'s directories under the mount point `mnt`.
    pub fn mount(mnt: &Path, w: u64, layout: Layout) -> Dirs {
        Dirs::Mount(SIDES.map(|side| mnt.join(dir_name(w, side, layout))))
    }

    pub fn via(&self) -> &'static str {
        match self {
            Dirs::Native(..) => "the native client",
            Dirs::Mount(_) => "the mount",
        }
    }

    /// The path of a model name (through a mount).
    fn path(dirs: &[PathBuf; 2], name: &str) -> PathBuf {
        let (side, entry) = place(name);
        dirs[side].join(entry)
    }

    /// Creates `name`, which must not exist.
    pub async fn create(&self, name: &str) -> Result<Created, ShoalError> {
        match self {
            Dirs::Native(c, dirs) => {
                let (side, entry) = place(name);
                let made = c.create(dirs[side], entry, 0o644).await?;
                Ok(Created::Native(made.handle))
            }
            Dirs::Mount(dirs) => {
                let path = Dirs::path(dirs, name);
                let mut open = OpenOptions::new();
                open.write(true).create_new(true).mode(0o644);
                let file = blocking(move || open.open(path)).await?;
                Ok(Created::Mount(Arc::new(file)))
            }
        }
    }

    /// Writes `data` at the start of `file`; how many bytes were taken.
    pub async fn write(&self, file: &Created, data: Bytes) -> Result<usize, ShoalError> {
        match (self, file) {
            (Dirs::Native(c, _), Created::Native(h)) => c.write(*h, 0, data).await,
            (Dirs::Mount(_), Created::Mount(f)) => {
                let f = f.clone();
                blocking(move || (&*f).write_all(&data).map(|()| data.len())).await
            }
            _ => unreachable!("a file is written the way it was created"),
        }
    }

    /// Fsyncs `file`, and closes it (a mount reports errors at close too).
    pub async fn fsync(&self, file: Created) -> Result<(), ShoalError> {
        match (self, file) {
            (Dirs::Native(c, _), Created::Native(h)) => c.fsync(h).await,
            (Dirs::Mount(_), Created::Mount(f)) => {
                let f = Arc::into_inner(f).expect("no write in flight");
                blocking(move || {
                    f.sync_all()?;
                    // SAFETY: a descriptor this call owns, closed once.
                    match unsafe { libc::close(f.into_raw_fd()) } {
                        0 => Ok(()),
                        _ => Err(std::io::Error::last_os_error()),
                    }
                })
                .await
            }
            _ => unreachable!("a file is fsynced the way it was created"),
        }
    }

    /// Renames `from` to `to` (model names; `to` does not exist).
    pub async fn rename(&self, from: &str, to: &str) -> Result<(), ShoalError> {
        match self {
            Dirs::Native(c, dirs) => {
                let ((fs, fe), (ts, te)) = (place(from), place(to));
                c.rename(dirs[fs], fe, dirs[ts], te, false).await
            }
            Dirs::Mount(dirs) => {
                let (from, to) = (Dirs::path(dirs, from), Dirs::path(dirs, to));
                blocking(move || std::fs::rename(from, to)).await
            }
        }
    }

    /// Gives the file `existing` the new name `new` (a hard link).
    pub async fn link(&self, existing: &str, new: &str) -> Result<(), ShoalError> {
        match self {
            Dirs::Native(c, dirs) => {
                let ((es, ee), (ns, ne)) = (place(existing), place(new));
                let (h, _) = c.lookup(dirs[es], ee).await?;
                c.link(h, dirs[ns], ne).await.map(|_| ())
            }
            Dirs::Mount(dirs) => {
                let (existing, new) = (Dirs::path(dirs, existing), Dirs::path(dirs, new));
                blocking(move || std::fs::hard_link(existing, new)).await
            }
        }
    }

    pub async fn unlink(&self, name: &str) -> Result<(), ShoalError> {
        match self {
            Dirs::Native(c, dirs) => {
                let (side, entry) = place(name);
                c.unlink(dirs[side], entry).await
            }
            Dirs::Mount(dirs) => {
                let path = Dirs::path(dirs, name);
                blocking(move || std::fs::remove_file(path)).await
            }
        }
    }

    /// The regular file `name`, read whole; `None` if it does not exist.
    pub async fn read(&self, name: &str) -> Result<Option<Found>, ShoalError> {
        match self {
            Dirs::Native(c, dirs) => {
                let (side, entry) = place(name);
                let handle = match c.lookup(dirs[side], entry).await {
                    Ok((h, kind)) => {
                        assert_eq!(kind, FileKind::File, "{name} is a regular file");
                        h
                    }
                    Err(e) if e.errno == Errno::ENOENT => return Ok(None),
                    Err(e) => return Err(e),
                };
                let size = c.getattr(handle).await?.size;
                let data = c.read(handle, 0, MAX_LEN + 1).await?.to_vec();
                Ok(Some(Found { handle, size, data }))
            }
            Dirs::Mount(dirs) => {
                let path = Dirs::path(dirs, name);
                blocking(move || {
                    let meta = match std::fs::symlink_metadata(&path) {
                        Ok(meta) => meta,
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                        Err(e) => return Err(e),
                    };
                    assert!(meta.is_file(), "{} is a regular file", path.display());
                    let data = std::fs::read(&path)?;
                    let (handle, size) = (meta.ino(), meta.len());
                    Ok(Some(Found { handle, size, data }))
                })
                .await
            }
        }
    }

    /// The names in the directory on `side`.
    pub async fn list(&self, side: usize) -> Result<Vec<String>, ShoalError> {
        match self {
            Dirs::Native(c, dirs) => {
                let entries = c.readdir_all(dirs[side]).await?;
                Ok(entries.into_iter().map(|e| e.name).collect())
            }
            Dirs::Mount(dirs) => {
                let dir = dirs[side].clone();
                blocking(move || {
                    std::fs::read_dir(dir)?
                        .map(|e| Ok(e?.file_name().to_string_lossy().into_owned()))
                        .collect()
                })
                .await
            }
        }
    }
}

pub async fn worker(fs: Dirs, id: u64, until: Instant, seed: u64) -> Result<Model, String> {
    let mut rng = StdRng::seed_from_u64(seed ^ (id << 32));
    let mut m = Model {
        via: fs.via().to_owned(),
        ..Model::default()
    };
    let mut i = 0u64;
    while Instant::now() < until {
        i += 1;
        let name = format!("a/f{id}-{i}");
        let fseed = id * 1_000_000 + i;
        let len = match rng.random_range(0..4) {
            0 => 0,
            1 => rng.random_range(1..4096),
            2 => rng.random_range(4096..(64 << 10)),
            _ => rng.random_range((64 << 10)..MAX_LEN),
        };
        let file = match bounded(format!("create {name}"), fs.create(&name)).await? {
            Ok(file) => file,
            Err(e) => {
                m.fail("create", &e).await;
                m.maybe.insert(name, None);
                continue;
            }
        };
        if len > 0 {
            let data = Bytes::from(pattern(fseed, len));
            match bounded(format!("write {name}"), fs.write(&file, data)).await? {
                Ok(n) if n == len => {}
                Ok(n) => return Err(format!("write {name}: {n} of {len} bytes acknowledged")),
                Err(e) => {
                    m.fail("write", &e).await;
                    m.maybe.insert(name, None);
                    continue;
                }
            }
        }
        if let Err(e) = bounded(format!("fsync {name}"), fs.fsync(file)).await? {
            m.fail("fsync", &e).await;
            m.maybe.insert(name, None);
            continue;
        }
        m.acked += 1;
        m.files.insert(name.clone(), (fseed, len));

        let mut name = name;
        if rng.random_bool(0.3) {
            let to = format!("a/r{id}-{i}");
            let content = m.files.remove(&name).unwrap();
            match bounded(format!("rename {name}"), fs.rename(&name, &to)).await? {
                Ok(()) => {
                    m.acked += 1;
                    m.gone.insert(name);
                    m.files.insert(to.clone(), content);
                    name = to;
                }
                Err(e) => {
                    m.fail("rename", &e).await;
                    m.maybe.insert(name.clone(), Some(content));
                    m.maybe.insert(to.clone(), Some(content));
                    m.either.push((name, to));
                    continue;
                }
            }
        }
        if rng.random_bool(0.3) {
            link_and_move(&fs, &mut m, &mut rng, id, i, &name).await?;
        }
        if rng.random_bool(0.3) && !m.files.is_empty() {
            let k = rng.random_range(0..m.files.len());
            let victim = m.files.keys().nth(k).unwrap().clone();
            let content = m.files.remove(&victim).unwrap();
            match bounded(format!("unlink {victim}"), fs.unlink(&victim)).await? {
                Ok(()) => {
                    m.acked += 1;
                    m.gone.insert(victim);
                }
                Err(e) => {
                    m.fail("unlink", &e).await;
                    m.maybe.insert(victim, Some(content));
                }
            }
        }
    }
    Ok(m)
}

/// Gives the acknowledged file `name` a second name in the other directory
/// (a hard link), and now and then moves that name back to the first
/// directory under a third (a rename of a linked file across directories).
async fn link_and_move(
    fs: &Dirs,
    m: &mut Model,
    rng: &mut StdRng,
    id: u64,
    i: u64,
    name: &str,
) -> Result<(), String> {
    let content = m.files[name];
    let linked = format!("b/l{id}-{i}");
    match bounded(format!("link {name} {linked}"), fs.link(name, &linked)).await? {
        Ok(()) => {
            m.acked += 1;
            m.files.insert(linked.clone(), content);
        }
        Err(e) => {
            m.fail("link", &e).await;
            m.maybe.insert(linked, Some(content));
            return Ok(());
        }
    }
    if rng.random_bool(0.5) {
        let to = format!("a/m{id}-{i}");
        m.files.remove(&linked);
        match bounded(format!("rename {linked} {to}"), fs.rename(&linked, &to)).await? {
            Ok(()) => {
                m.acked += 1;
                m.gone.insert(linked);
                m.files.insert(to, content);
            }
            Err(e) => {
                m.fail("move", &e).await;
                m.maybe.insert(linked.clone(), Some(content));
                m.maybe.insert(to.clone(), Some(content));
                m.either_or_both.push((linked, to));
            }
        }
    }
    Ok(())
}
