//! POSIX record locks and flock(2) locks on this server's files, for the
//! whole cluster: every client's locks on a file meet here, at the file's
//! server, as Lustre's flock locks meet at the MDS and NFS's at the
//! server's lock manager. The rules of one owner's ranges are
//! `shoal_proto::record_locks`; a flock lock is one whole-file range. The
//! two kinds live in separate tables ([`Space`]), as Linux keeps them: a
//! flock lock never meets an fcntl lock, even on one file.
//!
//! An owner is a client's lock owner (`Owner`). A request that conflicts
//! with another owner's lock fails with EAGAIN, or with `wait` waits here:
//! it is answered over its own connection when granted, by whichever
//! request or disconnection released the lock in its way (`Waiter`). The
//! waiters of a file are granted in the order they came, each as soon as
//! nothing another owner holds is in its way. A wait that would close a
//! cycle of owners waiting for each other's locks on this server fails
//! with EDEADLK, as Linux's own locks do. A waiter whose caller was
//! interrupted (a signal, or killed) is withdrawn ([`Locks::withdraw`]) and
//! answered EINTR.
//!
//! Each file's table carries a write epoch, handed out with every grant: a
//! fresh value whenever a write lock is let go (unlocked, narrowed to a read
//! lock, or ended with its connection) and whenever the table is made
//! anew. A client that finds a grant's epoch equal to the one at which it
//! last dropped its caches of the file knows no lock holder wrote since,
//! and keeps them: the mount's kernel caches (`fuse/src/locks.rs`).
//! Epochs come from one counter per server process that starts at a random
//! value, so a value never comes back, even after a restart.
//!
//! Locks live in memory only and belong to the connection that carried
//! them: when it ends (the client died, or its connection broke) they are
//! dropped and their waiters see it. A client whose connection broke takes
//! its locks again on its next one (`client/src/locks/held.rs`); a
//! restarted server holds none, and its clients take theirs again the same
//! way, at once (they watch their connections). So that nobody else takes
//! them first, a server that may have stopped holding locks (its data
//! directory has the [`MARKER`] a process leaves from its first lock until
//! a clean stop with none held) takes only such reclaims for its first [`GRACE`], and
//! answers every other lock request EBUSY (the client asks again), as an
//! NFS server's grace period does.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use prost::Message;
use shoal_net::sink::FrameSink;
use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::frame::{Frame, Header};
use shoal_proto::msg::{ErrorReply, LockKind, LockReply};
use shoal_proto::record_locks::{Held, OwnerLocks, Range};
use shoal_proto::Handle;

/// Whose a lock is: one lock owner of one client.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Owner {
    pub client: u64,
    pub owner: u64,
}

/// Which of a file's two lock tables: its fcntl (POSIX record) locks or
/// its flock locks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Space {
    pub file: Handle,
    pub flock: bool,
}

/// A lock request, checked.
#[derive(Clone, Copy, Debug)]
pub struct Ask {
    pub space: Space,
    pub owner: Owner,
    pub kind: LockKind,
    pub range: Range,
    pub pid: u32,
    /// The connection it came on (`listener`'s numbering).
    pub conn: u64,
    /// Held on an earlier connection, taken again.
    pub reclaim: bool,
}

/// The file in a server's data directory from its first lock to its clean
/// stop: found at a start, the last process may have died holding locks.
pub const MARKER: &str = "locks-held";

/// How long a server that may have died holding locks takes only reclaims:
/// its clients reconnect within a second of its start (their pauses
/// between tries grow to half a second).
pub const GRACE: Duration = Duration::from_secs(3);

/// Owners holding locks (one per owner, file and kind), requests waiting,
/// and waits withdrawn since the start.
pub struct LockCounts {
    pub holders: u64,
    pub waits: u64,
    pub withdrawn: u64,
}

/// Another owner's lock in the way: what F_GETLK reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conflict {
    pub held: Held,
    pub pid: u32,
}

/// A request waiting for its lock, and where its reply goes.
pub struct Waiter {
    ask: Ask,
    header: Header,
    sink: Arc<FrameSink>,
}

/// What a request that may wait came to.
pub enum Taken {
    /// Granted at this write epoch.
    Granted(u64),
    /// It waits; its reply goes out when granted.
    Waiting,
}

struct OwnerEntry {
    locks: OwnerLocks,
    /// The connection its locks came over: they end with it.
    conn: u64,
    /// The process that last took one, for F_GETLK.
    pid: u32,
}

struct FileLocks {
    owners: HashMap<Owner, OwnerEntry>,
    waiting: VecDeque<Waiter>,
    /// The write epoch (module doc).
    write_epoch: u64,
}

/// Where write epochs come from.
struct Epochs(AtomicU64);

impl Epochs {
    fn new() -> Epochs {
        // Never 0, which says "not known".
        Epochs(AtomicU64::new(rand::random::<u64>() >> 1 | 1))
    }

    fn fresh(&self) -> u64 {
        self.0.fetch_add(1, Ordering::Relaxed)
    }
}

impl FileLocks {
    fn new(epochs: &Epochs) -> FileLocks {
        FileLocks {
            owners: HashMap::new(),
            waiting: VecDeque::new(),
            write_epoch: epochs.fresh(),
        }
    }

    fn conflict(&self, ask: &Ask) -> Option<(Owner, Conflict)> {
        self.owners.iter().find_map(|(o, e)| {
            if *o == ask.owner {
                return None;
            }
            let held = e.locks.conflict(ask.kind, ask.range)?;
            Some((*o, Conflict { held, pid: e.pid }))
        })
    }

    fn apply(&mut self, ask: &Ask, epochs: &Epochs) {
        let e = self.owners.entry(ask.owner).or_insert_with(|| OwnerEntry {
            locks: OwnerLocks::default(),
            conn: ask.conn,
            pid: ask.pid,
        });
        if ask.kind != LockKind::LockWrite && e.locks.writes_in(ask.range) {
            self.write_epoch = epochs.fresh();
        }
        e.locks.set(ask.kind, ask.range);
        e.conn = ask.conn;
        if ask.kind != LockKind::LockUnlock {
            e.pid = ask.pid;
        }
        if e.locks.is_empty() {
            self.owners.remove(&ask.owner);
        }
    }

    /// Grants, in order, every waiter nothing is in the way of now. A grant
    /// can let earlier waiters through too (it may turn its owner's write
    /// lock into a read lock), so passes go on until one grants nothing.
    fn grant_waiters(&mut self, granted: &mut Granted, epochs: &Epochs) {
        loop {
            let before = granted.0.len();
            let mut i = 0;
            while i < self.waiting.len() {
                if self.conflict(&self.waiting[i].ask).is_none() {
                    let w = self.waiting.remove(i).expect("index in range");
                    self.apply(&w.ask, epochs);
                    granted.0.push((w, self.write_epoch));
                } else {
                    i += 1;
                }
            }
            if granted.0.len() == before {
                return;
            }
        }
    }

    /// Every other owner with a lock in the way of `ask`.
    fn in_way(&self, ask: &Ask) -> Vec<Owner> {
        self.owners
            .iter()
            .filter(|(o, e)| **o != ask.owner && e.locks.conflict(ask.kind, ask.range).is_some())
            .map(|(o, _)| *o)
            .collect()
    }

    fn is_empty(&self) -> bool {
        self.owners.is_empty() && self.waiting.is_empty()
    }
}

pub struct Locks {
    files: Mutex<HashMap<Space, FileLocks>>,
    epochs: Epochs,
    /// Waits withdrawn since the start.
    withdrawn: AtomicU64,
    marker: PathBuf,
    /// The marker is on disk.
    marked: AtomicBool,
    /// The end of the grace period, if this start has one.
    grace_until: Option<Instant>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Locks {
    /// The lock table of a server starting on `data_dir`: with a grace
    /// period if the marker is there.
    pub fn open(data_dir: &Path) -> Locks {
        let marker = data_dir.join(MARKER);
        let held_before = marker.exists();
        Locks {
            files: Mutex::default(),
            epochs: Epochs::new(),
            withdrawn: Default::default(),
            marker,
            marked: AtomicBool::new(held_before),
            grace_until: held_before.then(|| Instant::now() + GRACE),
        }
    }

    /// EBUSY for a request the grace period holds back; before the first
    /// lock of this process, the marker, durably.
    fn admit(&self, ask: &Ask) -> Result<()> {
        if let Some(until) = self.grace_until {
            if !ask.reclaim && Instant::now() < until {
                return Err(ShoalError::new(
                    Errno::EBUSY,
                    "the server restarted and lets holders take their locks back first",
                ));
            }
        }
        if ask.kind != LockKind::LockUnlock && !self.marked.load(Ordering::Acquire) {
            let f = std::fs::File::create(&self.marker)?;
            f.sync_all()?;
            if let Some(dir) = self.marker.parent() {
                std::fs::File::open(dir)?.sync_all()?;
            }
            self.marked.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// At a clean stop: with no lock held, the next start has no grace
    /// period. With some, it has: their holders are alive and come back
    /// for them.
    pub fn stopped(&self) {
        if self.files_locked() > 0 {
            return;
        }
        if let Err(e) = std::fs::remove_file(&self.marker) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!("removing {}: {e}", self.marker.display());
            }
        }
    }

    /// Takes, changes or drops a lock without waiting: EAGAIN if another
    /// owner's lock is in the way. The file's write epoch after it.
    pub fn take(&self, ask: &Ask) -> Result<u64> {
        self.admit(ask)?;
        let (epoch, answers) = {
            let mut files = lock(&self.files);
            let f = self.table(&mut files, ask.space);
            if let Some((_, c)) = f.conflict(ask) {
                return Err(busy(ask, &c));
            }
            self.apply_and_regrant(&mut files, ask)
        };
        answers.send();
        Ok(epoch)
    }

    /// The lock table of `space`, made anew if it has none.
    fn table<'a>(
        &self,
        files: &'a mut HashMap<Space, FileLocks>,
        space: Space,
    ) -> &'a mut FileLocks {
        files
            .entry(space)
            .or_insert_with(|| FileLocks::new(&self.epochs))
    }

    /// [`take`](Self::take), but a conflict waits: the reply to the request
    /// `header` goes out over `sink` once the lock is granted. EDEADLK if
    /// the owner in the way waits, through a chain of owners, for this one.
    pub fn take_or_wait(&self, ask: Ask, header: Header, sink: Arc<FrameSink>) -> Result<Taken> {
        self.admit(&ask)?;
        let (epoch, answers) = {
            let mut files = lock(&self.files);
            let in_way = self.table(&mut files, ask.space).conflict(&ask);
            match in_way {
                None => self.apply_and_regrant(&mut files, &ask),
                Some(_) => {
                    let holders = files[&ask.space].in_way(&ask);
                    if waits_for(&files, holders, ask.owner) {
                        return Err(ShoalError::new(
                            Errno::EDEADLK,
                            format!(
                                "a lock on {:#x} would wait for an owner that waits for this one",
                                ask.space.file
                            ),
                        ));
                    }
                    let f = files.get_mut(&ask.space).expect("made above");
                    f.waiting.push_back(Waiter { ask, header, sink });
                    return Ok(Taken::Waiting);
                }
            }
        };
        answers.send();
        Ok(Taken::Granted(epoch))
    }

    /// Applies `ask`, which nothing is in the way of, and grants the
    /// waiters an unlock or a narrower lock lets through; the file's write
    /// epoch after `ask`.
    fn apply_and_regrant(
        &self,
        files: &mut HashMap<Space, FileLocks>,
        ask: &Ask,
    ) -> (u64, Granted) {
        let f = files
            .get_mut(&ask.space)
            .expect("the caller made the entry");
        let mut granted = Granted::default();
        f.apply(ask, &self.epochs);
        let epoch = f.write_epoch;
        f.grant_waiters(&mut granted, &self.epochs);
        if f.is_empty() {
            files.remove(&ask.space);
        }
        (epoch, granted)
    }

    /// F_GETLK: the first lock of another owner in the way of `ask`.
    pub fn test(&self, ask: &Ask) -> Result<Option<Conflict>> {
        self.admit(ask)?;
        let files = lock(&self.files);
        Ok(files
            .get(&ask.space)
            .and_then(|f| f.conflict(ask))
            .map(|(_, c)| c))
    }

    /// Connection `conn` of `client` ended: its locks and waits end with
    /// it, and whoever waited for those locks gets them.
    pub fn disconnected(&self, client: u64, conn: u64) {
        let mut answers = Granted::default();
        {
            let mut files = lock(&self.files);
            let all = Range {
                start: 0,
                end: u64::MAX,
            };
            files.retain(|_, f| {
                let before = f.owners.len() + f.waiting.len();
                let mut wrote = false;
                f.owners.retain(|o, e| {
                    let gone = o.client == client && e.conn == conn;
                    wrote |= gone && e.locks.writes_in(all);
                    !gone
                });
                if wrote {
                    f.write_epoch = self.epochs.fresh();
                }
                f.waiting
                    .retain(|w| !(w.ask.owner.client == client && w.ask.conn == conn));
                if f.owners.len() + f.waiting.len() != before {
                    f.grant_waiters(&mut answers, &self.epochs);
                }
                !f.is_empty()
            });
        }
        answers.send();
    }

    /// The waiting requests of `owner` in `space` end, each answered EINTR
    /// (their caller was interrupted); how many there were. Whatever waits
    /// behind them may now be granted (they could have held up a read lock
    /// behind a write lock's wait).
    pub fn withdraw(&self, space: Space, owner: Owner) -> usize {
        let mut answers = Granted::default();
        let withdrawn: VecDeque<Waiter> = {
            let mut files = lock(&self.files);
            let Some(f) = files.get_mut(&space) else {
                return 0;
            };
            let (gone, left) = std::mem::take(&mut f.waiting)
                .into_iter()
                .partition(|w| w.ask.owner == owner);
            f.waiting = left;
            f.grant_waiters(&mut answers, &self.epochs);
            if f.is_empty() {
                files.remove(&space);
            }
            gone
        };
        answers.send();
        let n = withdrawn.len();
        self.withdrawn.fetch_add(n as u64, Ordering::Relaxed);
        for w in withdrawn {
            w.answer(
                Errno::EINTR,
                "the lock's caller was interrupted while it waited",
            );
        }
        n
    }

    /// What the table holds now (statistics).
    pub fn counts(&self) -> LockCounts {
        let files = lock(&self.files);
        LockCounts {
            holders: files.values().map(|f| f.owners.len() as u64).sum(),
            waits: files.values().map(|f| f.waiting.len() as u64).sum(),
            withdrawn: self.withdrawn.load(Ordering::Relaxed),
        }
    }

    /// How many files have locks or waiters (statistics, tests).
    pub fn files_locked(&self) -> usize {
        lock(&self.files).len()
    }
}

/// Whether any of `holders`, through the owners they wait for on this
/// server, waits for `asker`: a search of every owner in the way of every
/// wait, each owner looked at once.
fn waits_for(files: &HashMap<Space, FileLocks>, holders: Vec<Owner>, asker: Owner) -> bool {
    let mut seen = std::collections::HashSet::new();
    let mut next = holders;
    while let Some(at) = next.pop() {
        if at == asker {
            return true;
        }
        if !seen.insert(at) {
            continue;
        }
        for f in files.values() {
            for w in f.waiting.iter().filter(|w| w.ask.owner == at) {
                next.extend(f.in_way(&w.ask));
            }
        }
    }
    false
}

fn busy(ask: &Ask, c: &Conflict) -> ShoalError {
    ShoalError::new(
        Errno::EAGAIN,
        format!(
            "bytes {}..={} of {:#x} are locked by process {} of another owner",
            c.held.range.start, c.held.range.end, ask.space.file, c.pid
        ),
    )
}

/// The waiters a change to the table granted, each with the write epoch of
/// its grant, to answer once the table's lock is let go (a full socket must
/// not hold up every other lock).
#[derive(Default)]
struct Granted(Vec<(Waiter, u64)>);

impl Granted {
    fn send(self) {
        for (w, write_epoch) in self.0 {
            // A failed send means the connection is gone: its end drops
            // the lock.
            let body = Bytes::from(LockReply { write_epoch }.encode_to_vec());
            let _ = w
                .sink
                .send(&Frame::reply_to(&w.header, 0, body, Bytes::new()));
        }
    }
}

impl Waiter {
    /// Answers the waiting request with an error.
    fn answer(self, errno: Errno, message: &str) {
        let body = ErrorReply {
            message: message.to_string(),
        };
        let _ = self.sink.send(&Frame::reply_to(
            &self.header,
            errno.0,
            Bytes::from(body.encode_to_vec()),
            Bytes::new(),
        ));
    }
}
