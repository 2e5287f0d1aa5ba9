//! Server write gathering [Hildebrand 2006], its state (the requests and
//! write-outs are in `handlers::gather`): the server that holds a file's
//! metafile is its gathering server. Clients send it their scattered small
//! writes (`gather_write`); it merges every client's into one set of
//! extents per file (overlapping and continuing ones join, newer bytes win)
//! and writes them out, split at strips, to the servers holding the strips,
//! each server's pieces in a few `write_extents`: a few large writes where
//! the clients sent many small ones (NFS server write gathering). It writes
//! a file's out once they fill several clients' buffers (`BUFFERS_PER_FILE`
//! × `gather_buffer`) or [`MAX_EXTENTS_PER_FILE`] pieces, once they waited
//! `gather_delay_ms`, when all files together hold [`MAX_BYTES`], and at a
//! `gather_commit`, which with `durable` also syncs every datafile written
//! since the file's last durable commit.
//!
//! Like NFS's unstable writes, gathered bytes are acknowledged before they
//! are durable, under the server's **epoch**, and the clients keep a copy
//! until a durable commit answers under the same epoch. The epoch changes
//! when this process starts (its buffer is gone) and whenever bytes it wrote
//! out may have been lost before they were durable: a server it wrote to
//! answered with another verifier than before (it restarted), or a
//! write-out or sync failed. Every client holding a copy then sends it again
//! (see the client's `gathering_send`). The change is for all files at
//! once: losses are rare, and a resend is always safe.
//!
//! Bounded memory: [`MAX_BYTES`] gathered bytes in all (past it a
//! `gather_write` waits while every file's are written out), and per file
//! the set of datafiles written since its last durable commit (at most one
//! per server), forgotten only by a durable commit; past [`MAX_UNSYNCED`]
//! files with such a set, a write-out is synced at once.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bytes::Bytes;
use shoal_proto::extents::Extents;
use shoal_proto::handle::Handle;

/// Gathered bytes across every file before a `gather_write` waits for them
/// to be written out.
pub const MAX_BYTES: usize = 256 << 20;
/// A file's bytes are written out once they fill this many client buffers
/// (`gather_buffer`): room for several clients' sends to meet and join
/// before they go.
pub const BUFFERS_PER_FILE: usize = 8;
/// Extents a file's held bytes may be in before they are written out: what
/// bounds the bookkeeping of many tiny disjoint pieces, which bytes alone
/// do not.
pub const MAX_EXTENTS_PER_FILE: usize = 1 << 16;
/// Files with datafiles written since their last durable commit.
pub const MAX_UNSYNCED: usize = 1 << 16;
struct FileGather {
    extents: Extents,
    /// When the oldest byte held was put.
    since: Instant,
    /// Datafiles written out to since the file's last durable commit.
    unsynced: BTreeSet<Handle>,
    /// Held while the file's bytes are written out or synced, so write-outs
    /// of one file go one after the other.
    gate: Arc<Mutex<()>>,
}

#[derive(Default)]
struct State {
    files: HashMap<Handle, FileGather>,
    bytes: usize,
}

#[derive(Default)]
pub struct Gathering {
    state: Mutex<State>,
    /// Each server written to, and its verifier as last seen.
    verifiers: Mutex<HashMap<u32, u64>>,
    /// How often bytes written out may have been lost: part of the epoch.
    losses: AtomicU64,
    /// Wakes the write-out task before its tick: a file's bytes filled.
    full: tokio::sync::Notify,
}

pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Gathering {
    /// The epoch gathered writes are acknowledged under now (`verifier`:
    /// this process's).
    pub fn epoch(&self, verifier: u64) -> u64 {
        verifier.wrapping_add(self.losses.load(Ordering::SeqCst))
    }

    /// Bytes written out may have been lost: every client sends its copy
    /// again.
    pub fn lost(&self, why: &str) {
        tracing::warn!("gathered writes may be lost ({why}): clients will send them again");
        self.losses.fetch_add(1, Ordering::SeqCst);
    }

    /// Server `peer` answered a write-out or sync with `verifier`.
    pub fn saw(&self, peer: u32, verifier: u64) {
        let before = lock(&self.verifiers).insert(peer, verifier);
        if before.is_some_and(|b| b != verifier) {
            self.lost(&format!("server {peer} restarted"));
        }
    }

    /// Joins `extents` into what is held of file `h`. True if the file's
    /// bytes fill [`BUFFERS_PER_FILE`] of `buffer` bytes, or all files'
    /// [`MAX_BYTES`]: write out now.
    pub fn put(&self, h: Handle, extents: &[(u64, Bytes)], buffer: usize) -> bool {
        let mut st = lock(&self.state);
        let State { files, bytes } = &mut *st;
        let f = files.entry(h).or_insert_with(|| FileGather {
            extents: Extents::default(),
            since: Instant::now(),
            unsynced: BTreeSet::new(),
            gate: Arc::default(),
        });
        if f.extents.is_empty() {
            f.since = Instant::now();
        }
        for (offset, data) in extents {
            *bytes += f.extents.join(*offset, data);
        }
        f.extents.bytes() >= buffer * BUFFERS_PER_FILE
            || f.extents.len() >= MAX_EXTENTS_PER_FILE
            || *bytes >= MAX_BYTES
    }

    /// Whether all files together hold [`MAX_BYTES`] or more.
    pub fn over_bound(&self) -> bool {
        lock(&self.state).bytes >= MAX_BYTES
    }

    /// Asks the write-out task to look now.
    pub fn wake_writer_out(&self) {
        self.full.notify_one();
    }

    /// Returns when [`Gathering::wake_writer_out`] was called.
    pub async fn woken(&self) {
        self.full.notified().await
    }

    /// Files whose bytes waited `delay` or fill [`BUFFERS_PER_FILE`] of
    /// `buffer` bytes, or every file with bytes if all hold [`MAX_BYTES`].
    pub fn due(&self, delay: Duration, buffer: usize) -> Vec<Handle> {
        let per_file = buffer * BUFFERS_PER_FILE;
        let st = lock(&self.state);
        let all = st.bytes >= MAX_BYTES;
        st.files
            .iter()
            .filter(|(_, f)| !f.extents.is_empty())
            .filter(|(_, f)| {
                all || f.since.elapsed() >= delay
                    || f.extents.bytes() >= per_file
                    || f.extents.len() >= MAX_EXTENTS_PER_FILE
            })
            .map(|(h, _)| *h)
            .collect()
    }

    /// Every file with bytes held.
    pub fn held(&self) -> Vec<Handle> {
        let st = lock(&self.state);
        let held = st.files.iter().filter(|(_, f)| !f.extents.is_empty());
        held.map(|(h, _)| *h).collect()
    }

    /// The gate of `h`, held while its bytes are written out or synced.
    pub fn gate(&self, h: Handle) -> Option<Arc<Mutex<()>>> {
        lock(&self.state).files.get(&h).map(|f| f.gate.clone())
    }

    /// Forgets `h` if nothing of it is held or to sync.
    pub fn tidy(&self, h: Handle) {
        let mut st = lock(&self.state);
        let idle = st.files.get(&h).is_some_and(|f| {
            f.extents.is_empty() && f.unsynced.is_empty() && Arc::strong_count(&f.gate) == 1
        });
        if idle {
            st.files.remove(&h);
        }
    }

    /// Takes what is held of `h`, to write out (the caller holds the
    /// file's gate).
    pub fn take(&self, h: Handle) -> Vec<(u64, Vec<u8>)> {
        let mut st = lock(&self.state);
        let Some(f) = st.files.get_mut(&h) else {
            return Vec::new();
        };
        let bytes = f.extents.bytes();
        let taken = f.extents.take();
        st.bytes -= bytes;
        taken
    }

    /// Datafiles of `h` were written out to.
    pub fn written(&self, h: Handle, datafiles: impl IntoIterator<Item = Handle>) {
        if let Some(f) = lock(&self.state).files.get_mut(&h) {
            f.unsynced.extend(datafiles);
        }
    }

    /// Takes the datafiles of `h` written out to since its last durable
    /// commit, to sync (the caller holds the file's gate).
    pub fn take_unsynced(&self, h: Handle) -> BTreeSet<Handle> {
        match lock(&self.state).files.get_mut(&h) {
            Some(f) => std::mem::take(&mut f.unsynced),
            None => BTreeSet::new(),
        }
    }

    /// Whether so many files wait for a durable commit that a write-out
    /// must be synced at once.
    pub fn too_many_unsynced(&self) -> bool {
        lock(&self.state).files.len() > MAX_UNSYNCED
    }
}
