//! The gathering buffer, the write-back buffer of the gathering path
//! [Hildebrand 2006]: writes under the write threshold wait here (buffered
//! writes), per file, joined where they touch or overlap, and are sent later
//! as a few large writes (see `data::write`).
//!
//! Per file the buffer is a set of extents joined where they touch
//! (`shoal_proto::extents`): a stream of small sequential writes is one
//! growing extent, and 10 writers of one file's disjoint pieces are at most
//! 10. Beside them, per file, the copy of what went to the file's gathering
//! server and is not durable yet (`at_server`): a resend copy, to send again
//! if that server lost it. Both are bounded per file (`gather_buffer`, the
//! caller flushes a file whose buffer is full) and in all (`MAX_TOTAL`,
//! buffered and at the gathering servers together, past which every put
//! asks for a flush).
//!
//! Invariant, checked in debug builds: `State::bytes` is the sum over files
//! of their buffered bytes, `State::at_servers` of their copies'.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use shoal_proto::error::ShoalError;
use shoal_proto::extents::Extents;
use shoal_proto::Handle;

use shoal_proto::Cred;

use crate::consistency::cache::{TtlCache, FOREVER};
use crate::data::threshold::AutoThreshold;

/// Bytes buffered across every file of one client before each write asks for a
/// flush: room for 64 full buffers of the default size.
pub const MAX_TOTAL: usize = 64 << 20;

/// A file's gate: held while a send of its bytes (or a commit of its copy
/// at the gathering server) is under way, so they go one after the other.
pub type Gate = Arc<tokio::sync::Mutex<()>>;

/// What became of a small write handed to [`WriteBack::put`].
#[derive(Debug, PartialEq, Eq)]
pub enum Put {
    /// Buffered.
    Buffered,
    /// Buffered, and the file's buffer is full: send it.
    BufferedFull,
    /// Buffered, and the client holds [`MAX_TOTAL`] bytes or more: send and
    /// commit every file's.
    BufferedOverTotal,
}

/// The bytes of one file to send: its caller and (offset, data) extents.
pub struct Taken {
    /// The caller of the latest write buffered: every writer's right to
    /// write was checked when its write was buffered, so the bytes go as one
    /// of them.
    pub cred: Cred,
    pub extents: Vec<(u64, Vec<u8>)>,
}

struct FileBuf {
    cred: Cred,
    extents: Extents,
    /// What went to the gathering server and is not durable yet: this
    /// client's newest bytes there, to send again if the server lost them.
    at_server: Extents,
    /// The gathering server's epoch `at_server` was acknowledged under.
    epoch: u64,
    /// `at_server` was written out to the strips' servers since it last
    /// grew: readers there see it.
    pushed: bool,
    /// When the oldest byte now buffered was put.
    since: Instant,
    /// The end of the furthest byte put and not yet known to be on the
    /// servers: the file is at least this long for this client's readers.
    end: u64,
    /// Flushes under way, which own `end` until they finish.
    sending: u32,
    /// A send in the background was started and has not taken the bytes
    /// yet.
    scheduled: bool,
    /// A flush that failed, to report at the next fsync or close.
    error: Option<ShoalError>,
    /// Held while a flush of this file is under way, so flushes go one after
    /// the other and a later one never overtakes an earlier one's bytes.
    gate: Gate,
}

impl FileBuf {
    fn new(cred: Cred) -> FileBuf {
        FileBuf {
            cred,
            extents: Extents::default(),
            at_server: Extents::default(),
            epoch: 0,
            pushed: false,
            since: Instant::now(),
            end: 0,
            sending: 0,
            scheduled: false,
            error: None,
            gate: Arc::default(),
        }
    }

    /// Where readers of this client must see the file end at least: past
    /// every byte buffered or still only at the gathering server.
    fn settled_end(&self) -> u64 {
        let unpushed = if self.pushed { 0 } else { self.at_server.end() };
        self.extents.end().max(unpushed)
    }

    /// Nothing buffered, nothing under way, nothing to report, and nobody
    /// waiting on its gate: can go. (A waiter's gate must stay the file's:
    /// a new buffer with a new gate would let a later send overtake the
    /// waiter's.)
    fn idle(&self) -> bool {
        self.extents.is_empty()
            && self.at_server.is_empty()
            && self.sending == 0
            && !self.scheduled
            && self.error.is_none()
            && Arc::strong_count(&self.gate) == 1
    }
}

#[derive(Default)]
struct State {
    files: HashMap<Handle, FileBuf>,
    bytes: usize,
    at_servers: usize,
    /// No file's oldest buffered byte is older than this: [`WriteBack::due`]
    /// answers without a scan until `delay` after it.
    oldest: Option<Instant>,
    /// When [`WriteBack::due`] last scanned the files.
    scanned: Option<Instant>,
}

/// File `h`'s buffer if `gate` is still its gate: a send or commit taken
/// under the gate of a file since discarded touches nothing of a new one of
/// the same handle.
fn gated<'a>(
    files: &'a mut HashMap<Handle, FileBuf>,
    h: Handle,
    gate: &Gate,
) -> Option<&'a mut FileBuf> {
    files.get_mut(&h).filter(|f| Arc::ptr_eq(&f.gate, gate))
}

impl State {
    fn check(&self) {
        if cfg!(debug_assertions) {
            let buffered: usize = self.files.values().map(|f| f.extents.bytes()).sum();
            let at: usize = self.files.values().map(|f| f.at_server.bytes()).sum();
            assert_eq!((buffered, at), (self.bytes, self.at_servers), "byte counts");
        }
    }
}

/// Files with a threshold of their own set through this client.
const MAX_FILE_THRESHOLDS: usize = 1 << 16;

/// The client's side of the gathering path: the buffer, per-file
/// thresholds, and counts.
pub(crate) struct Gathering {
    pub(crate) buffer: WriteBack,
    pub(crate) thresholds: TtlCache<Handle, u32>,
    /// The threshold `auto` follows.
    pub(crate) auto: AutoThreshold,
    pub(crate) direct_writes: AtomicU64,
    pub(crate) direct_bytes: AtomicU64,
    pub(crate) gathered_writes: AtomicU64,
    pub(crate) gathered_bytes: AtomicU64,
    pub(crate) gathered_sends: AtomicU64,
}

impl Gathering {
    /// Counts `n` messages the gathering path sent.
    pub(crate) fn count_sends(&self, n: u64) {
        self.gathered_sends.fetch_add(n, Ordering::Relaxed);
    }
}

impl Default for Gathering {
    fn default() -> Self {
        Gathering {
            buffer: WriteBack::default(),
            thresholds: TtlCache::bounded(FOREVER, MAX_FILE_THRESHOLDS),
            auto: AutoThreshold::default(),
            direct_writes: AtomicU64::new(0),
            direct_bytes: AtomicU64::new(0),
            gathered_writes: AtomicU64::new(0),
            gathered_bytes: AtomicU64::new(0),
            gathered_sends: AtomicU64::new(0),
        }
    }
}

#[derive(Default)]
pub struct WriteBack {
    state: Mutex<State>,
    /// Whether any file is in `state`: lets reads, getattrs and closes of a
    /// client that gathers nothing skip the lock.
    any: AtomicBool,
}

impl WriteBack {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Buffers a write of `data` at `offset` of file `h` by `cred` (who may
    /// write it: the caller checked); `per_file` is the most a file's buffer
    /// holds before it must be flushed.
    pub fn put(&self, h: Handle, cred: Cred, offset: u64, data: &[u8], per_file: usize) -> Put {
        let mut st = self.state();
        let State {
            files,
            bytes,
            oldest,
            ..
        } = &mut *st;
        let f = files.entry(h).or_insert_with(|| FileBuf::new(cred));
        f.cred = cred;
        if f.extents.is_empty() {
            f.since = Instant::now();
            oldest.get_or_insert(f.since);
        }
        *bytes += f.extents.join(offset, data);
        f.end = f.end.max(offset + data.len() as u64);
        let full = f.extents.bytes() >= per_file;
        self.any.store(true, Ordering::Relaxed);
        st.check();
        if st.bytes + st.at_servers >= MAX_TOTAL {
            Put::BufferedOverTotal
        } else if full {
            Put::BufferedFull
        } else {
            Put::Buffered
        }
    }

    /// Whether any file has something here.
    pub fn any(&self) -> bool {
        self.any.load(Ordering::Relaxed)
    }

    /// Claims the one background send of `h`'s full buffer: true if none
    /// is started or under way (the caller starts it), false if one is (the
    /// caller waits for it and sends what it left: a writer faster than its
    /// sends is held back, and the buffer stays bounded).
    pub fn claim_background_send(&self, h: Handle) -> bool {
        let mut st = self.state();
        let Some(f) = st.files.get_mut(&h) else {
            return false;
        };
        if f.scheduled || f.sending > 0 {
            return false;
        }
        f.scheduled = true;
        true
    }

    /// The flush gate of file `h`, if anything of it is here.
    pub fn gate(&self, h: Handle) -> Option<Gate> {
        if !self.any.load(Ordering::Relaxed) {
            return None;
        }
        self.state().files.get(&h).map(|f| f.gate.clone())
    }

    /// Takes file `h`'s buffered writes, to send (the caller holds `gate`,
    /// the file's); the file stays at least as long as it was until
    /// [`WriteBack::sent`]. None if nothing is buffered, or the gate is not the
    /// file's any more (the file was discarded: it is gone).
    pub fn take(&self, h: Handle, gate: &Gate) -> Option<Taken> {
        let mut st = self.state();
        let f = gated(&mut st.files, h, gate)?;
        f.scheduled = false;
        if f.extents.is_empty() {
            return None;
        }
        let bytes = f.extents.bytes();
        let taken = Taken {
            cred: f.cred,
            extents: f.extents.take(),
        };
        f.sending += 1;
        st.bytes -= bytes;
        Some(taken)
    }

    /// A flush of `h` taken with [`WriteBack::take`] under `gate` ended
    /// (`error` if it failed: held for the next fsync or close to report).
    /// Nothing if the file was discarded meanwhile.
    pub fn sent(&self, h: Handle, gate: &Gate, error: Option<ShoalError>) {
        let mut st = self.state();
        let Some(f) = gated(&mut st.files, h, gate) else {
            return;
        };
        assert!(f.sending > 0, "a send of {h:#x} ended that never started");
        f.sending -= 1;
        if let Some(e) = error {
            f.error.get_or_insert(e);
        }
        if f.sending == 0 {
            // What the servers have now, they report; buffered bytes, and what
            // only the gathering server has, still count.
            f.end = f.settled_end();
        }
    }

    /// `extents` of `h`, taken under `gate`, went to the file's gathering
    /// server, which acknowledged them under `epoch`: holds a resend copy
    /// until a durable commit. True if the server acknowledged earlier ones under
    /// another epoch (it lost them): the caller sends [`WriteBack::at_server`]
    /// again.
    pub fn to_server(
        &self,
        h: Handle,
        gate: &Gate,
        extents: Vec<(u64, Vec<u8>)>,
        epoch: u64,
    ) -> bool {
        let mut st = self.state();
        let State {
            files, at_servers, ..
        } = &mut *st;
        let Some(f) = gated(files, h, gate) else {
            return false;
        };
        let lost = !f.at_server.is_empty() && f.epoch != epoch;
        for (offset, data) in extents {
            *at_servers += f.at_server.join(offset, &data);
        }
        f.epoch = epoch;
        f.pushed = false;
        f.end = f.end.max(f.at_server.end());
        st.check();
        lost
    }

    /// The whole copy of `h` at its gathering server was sent again and
    /// acknowledged under `epoch` (under `gate`).
    pub fn resent(&self, h: Handle, gate: &Gate, epoch: u64) {
        let mut st = self.state();
        if let Some(f) = gated(&mut st.files, h, gate) {
            f.epoch = epoch;
            f.pushed = false;
        }
    }

    /// The gathering server wrote out what it held of `h`, answering under
    /// `epoch` (under `gate`): if that is the copy's epoch, readers
    /// anywhere see the copy now.
    pub fn pushed(&self, h: Handle, gate: &Gate, epoch: u64) {
        let mut st = self.state();
        if let Some(f) = gated(&mut st.files, h, gate) {
            if f.epoch == epoch {
                f.pushed = true;
                if f.sending == 0 {
                    f.end = f.settled_end();
                }
            }
        }
    }

    /// Whether `h` has buffered bytes of `offset..end`, or has a send
    /// under way (whose bytes may be of that range).
    pub fn unsent_in(&self, h: Handle, offset: u64, end: u64) -> bool {
        if !self.any.load(Ordering::Relaxed) {
            return false;
        }
        let st = self.state();
        st.files
            .get(&h)
            .is_some_and(|f| f.sending > 0 || f.extents.overlaps(offset, end))
    }

    /// Whether `h` has bytes at its gathering server that readers of the
    /// strips' servers do not see yet in `offset..end`.
    pub fn unpushed_in(&self, h: Handle, offset: u64, end: u64) -> bool {
        if !self.any.load(Ordering::Relaxed) {
            return false;
        }
        let st = self.state();
        st.files
            .get(&h)
            .is_some_and(|f| !f.pushed && f.at_server.overlaps(offset, end))
    }

    /// Whether `h` has bytes at its gathering server that readers of the
    /// strips' servers do not see yet.
    pub fn unpushed(&self, h: Handle) -> bool {
        self.unpushed_in(h, 0, u64::MAX)
    }

    /// A copy of what of `h` is at its gathering server and not durable
    /// yet (under `gate`), with its writer, to send again. None if nothing.
    pub fn at_server(&self, h: Handle, gate: &Gate) -> Option<Taken> {
        let mut st = self.state();
        let f = gated(&mut st.files, h, gate)?;
        if f.at_server.is_empty() {
            return None;
        }
        let extents = f.at_server.iter().map(|(s, v)| (s, v.to_vec())).collect();
        Some(Taken {
            cred: f.cred,
            extents,
        })
    }

    /// Whether anything of `h` is at its gathering server and not durable
    /// (under `gate`): its writer and the epoch it was acknowledged under.
    pub fn at_server_epoch(&self, h: Handle, gate: &Gate) -> Option<(Cred, u64)> {
        let mut st = self.state();
        let f = gated(&mut st.files, h, gate)?;
        (!f.at_server.is_empty()).then_some((f.cred, f.epoch))
    }

    /// A durable commit of `h` answered under `epoch` (under `gate`): if it
    /// is the epoch the copy was acknowledged under, the copy is durable
    /// and goes. `None`: the commit failed and was reported; the copy goes
    /// (lost, as a local disk's writeback error loses it).
    pub fn committed(&self, h: Handle, gate: &Gate, epoch: Option<u64>) {
        let mut st = self.state();
        let State {
            files, at_servers, ..
        } = &mut *st;
        let Some(f) = gated(files, h, gate) else {
            return;
        };
        if epoch.is_none_or(|e| e == f.epoch) {
            *at_servers -= f.at_server.bytes();
            f.at_server = Extents::default();
            if f.sending == 0 {
                f.end = f.settled_end();
            }
        }
        st.check();
    }

    /// A direct write of `data` at `offset` of `h` is about to go: the copy
    /// at the gathering server takes its bytes too, so that a copy sent
    /// again is this client's newest.
    pub fn overlay(&self, h: Handle, offset: u64, data: &[u8]) {
        if !self.any.load(Ordering::Relaxed) {
            return;
        }
        if let Some(f) = self.state().files.get_mut(&h) {
            f.at_server.overlay(offset, data);
        }
    }

    /// Holds `error`, of a step of `h`'s gathering path taken under `gate`,
    /// for the next fsync or close to report.
    pub fn failed(&self, h: Handle, gate: &Gate, error: ShoalError) {
        let mut st = self.state();
        if let Some(f) = gated(&mut st.files, h, gate) {
            f.error.get_or_insert(error);
        }
    }

    /// Forgets `h` if nothing of it is left and nobody waits on it: a
    /// sender calls this once it let go of the gate.
    pub fn tidy(&self, h: Handle) {
        let mut st = self.state();
        if st.files.get(&h).is_some_and(FileBuf::idle) {
            self.remove(&mut st, h);
        }
    }

    /// The file was truncated to `size`: bytes this client sent before
    /// are not its length any more (buffered ones still are), and the copy at
    /// the gathering server ends there.
    pub fn truncated(&self, h: Handle, size: u64) {
        if !self.any.load(Ordering::Relaxed) {
            return;
        }
        let mut st = self.state();
        let State {
            files, at_servers, ..
        } = &mut *st;
        if let Some(f) = files.get_mut(&h) {
            let before = f.at_server.bytes();
            f.at_server.cut(size);
            *at_servers -= before - f.at_server.bytes();
            if f.sending == 0 {
                f.end = f.settled_end();
            }
        }
        st.check();
    }

    fn remove(&self, st: &mut State, h: Handle) {
        if let Some(f) = st.files.remove(&h) {
            st.bytes -= f.extents.bytes();
            st.at_servers -= f.at_server.bytes();
        }
        if st.files.is_empty() {
            self.any.store(false, Ordering::Relaxed);
        }
    }

    /// The error of a failed flush of `h`, once.
    pub fn take_error(&self, h: Handle) -> Option<ShoalError> {
        if !self.any.load(Ordering::Relaxed) {
            return None;
        }
        let mut st = self.state();
        let f = st.files.get_mut(&h)?;
        let e = f.error.take();
        if f.idle() {
            self.remove(&mut st, h);
        }
        e
    }

    /// Whether a read from `offset` of `h` must wait for a send: bytes are
    /// being sent, or buffered bytes lie past `offset` (there, or further on:
    /// the servers would end the file before them, and a read answered short
    /// makes the kernel think the file shrank).
    pub fn touches(&self, h: Handle, offset: u64) -> bool {
        if !self.any.load(Ordering::Relaxed) {
            return false;
        }
        let st = self.state();
        st.files
            .get(&h)
            .is_some_and(|f| f.sending > 0 || f.end > offset)
    }

    /// How long file `h` is at least, counting what is buffered or being sent.
    pub fn end_of(&self, h: Handle) -> Option<u64> {
        if !self.any.load(Ordering::Relaxed) {
            return None;
        }
        self.state().files.get(&h).map(|f| f.end).filter(|e| *e > 0)
    }

    /// Files whose oldest buffered byte was put more than `delay` ago (and
    /// not yet when this was asked less than a quarter of `delay` ago).
    /// Cheap when none can be (every write asks).
    pub fn due(&self, delay: Duration) -> Vec<Handle> {
        if !self.any.load(Ordering::Relaxed) {
            return Vec::new();
        }
        let mut st = self.state();
        if st.oldest.is_none_or(|o| o.elapsed() < delay) {
            return Vec::new();
        }
        // One scan per quarter of the delay at most: a writer going through
        // many files makes one more of them due at nearly every write, and
        // a scan of them all each time cost it more than its writes. A file
        // goes at most a quarter of the delay late.
        if st.scanned.is_some_and(|s| s.elapsed() < delay / 4) {
            return Vec::new();
        }
        st.scanned = Some(Instant::now());
        let buffered = st.files.iter().filter(|(_, f)| !f.extents.is_empty());
        let (due, waiting): (Vec<_>, Vec<_>) =
            buffered.partition(|(_, f)| f.since.elapsed() >= delay);
        let oldest = waiting.iter().map(|(_, f)| f.since).min();
        let due = due.into_iter().map(|(h, _)| *h).collect();
        st.oldest = oldest;
        due
    }

    /// Every file with something here: bytes buffered or being sent, or a
    /// failed send's error to report.
    pub fn files(&self) -> Vec<Handle> {
        if !self.any.load(Ordering::Relaxed) {
            return Vec::new();
        }
        self.state().files.keys().copied().collect()
    }

    /// Drops everything of `h` (the file is gone).
    pub fn discard(&self, h: Handle) {
        if !self.any.load(Ordering::Relaxed) {
            return;
        }
        let mut st = self.state();
        self.remove(&mut st, h);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Cred = Cred::new(1000, 1000);
    const B: Cred = Cred::new(1001, 1001);

    /// Sends `h`'s buffered writes, as `send_buffered` does: under its gate.
    fn extents(w: &WriteBack, h: Handle) -> Vec<(u64, Vec<u8>)> {
        let Some(gate) = w.gate(h) else {
            return Vec::new();
        };
        let t = w.take(h, &gate).map(|t| t.extents);
        if t.is_some() {
            w.sent(h, &gate, None);
        }
        drop(gate);
        w.tidy(h);
        t.unwrap_or_default()
    }

    #[test]
    fn sequential_writes_grow_one_extent_and_overlaps_keep_the_newest_bytes() {
        let w = WriteBack::default();
        for i in 0..100u64 {
            assert_eq!(w.put(7, A, i * 16, &[i as u8; 16], 1 << 20), Put::Buffered);
        }
        assert_eq!(w.end_of(7), Some(1600));
        let got = extents(&w, 7);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].0, 0);
        assert_eq!(got[0].1.len(), 1600);
        assert_eq!(got[0].1[16 * 42], 42);
        assert_eq!(w.end_of(7), None, "sent: the servers have it");

        // Disjoint, then a write bridging both and overlapping each.
        w.put(7, A, 0, b"aaaa", 1 << 20);
        w.put(7, A, 10, b"bbbb", 1 << 20);
        assert!(w.touches(7, 3) && w.touches(7, 13) && w.touches(7, 4));
        assert!(!w.touches(7, 14), "past every buffered byte");
        w.put(7, A, 2, b"cccccccccc", 1 << 20);
        assert_eq!(extents(&w, 7), vec![(0, b"aaccccccccccbb".to_vec())]);
    }

    #[test]
    fn a_full_buffer_two_callers_and_a_failed_flush() {
        let w = WriteBack::default();
        assert_eq!(w.put(1, A, 0, &[1; 64], 100), Put::Buffered);
        assert_eq!(w.put(1, A, 64, &[1; 64], 100), Put::BufferedFull);
        let g = w.gate(1).expect("buffered");
        let t = w.take(1, &g).expect("buffered");
        assert_eq!((t.cred, t.extents.len()), (A, 1));
        assert!(w.touches(1, 200), "being sent");
        assert_eq!(w.end_of(1), Some(128), "being sent still counts");
        assert_eq!(w.put(1, B, 500, &[2; 8], 100), Put::Buffered);
        assert_eq!(w.put(1, A, 600, &[2; 8], 100), Put::Buffered);
        assert_eq!(w.take(1, &g).map(|t| t.cred), Some(A), "the latest writer");
        w.sent(1, &g, None);
        w.sent(1, &g, Some(ShoalError::io("disk gone")));
        drop(g);
        assert_eq!(w.end_of(1), None, "everything sent");
        assert!(w.take_error(1).is_some());
        assert!(w.take_error(1).is_none(), "reported once");
        w.put(1, A, 0, &[3; 8], 100);
        assert_eq!(w.due(Duration::ZERO), vec![1]);
        w.discard(1);
        assert!(w.gate(1).is_none() && w.end_of(1).is_none());
    }

    #[test]
    fn a_waiters_gate_stays_the_files_and_a_discarded_files_send_is_ignored() {
        let w = WriteBack::default();
        w.put(5, A, 0, b"old", 100);
        let sender = w.gate(5).unwrap();
        let waiter = w.gate(5).unwrap(); // a close waiting behind the send
        let t = w.take(5, &sender).unwrap();
        assert_eq!(t.extents, vec![(0, b"old".to_vec())]);
        w.sent(5, &sender, None);
        drop(sender);
        w.tidy(5);
        // A new write while the waiter waits joins the same gate, so the
        // waiter's send and any later one go one after the other.
        w.put(5, A, 0, b"new", 100);
        assert!(Arc::ptr_eq(&w.gate(5).unwrap(), &waiter));
        assert_eq!(
            w.take(5, &waiter).unwrap().extents,
            vec![(0, b"new".to_vec())]
        );
        w.sent(5, &waiter, None);
        drop(waiter);
        w.tidy(5);
        assert!(w.gate(5).is_none(), "gone once nobody waits");

        // The file goes while its bytes are being sent; a new one of the
        // same handle is not the old send's.
        w.put(6, A, 0, b"x", 100);
        let g = w.gate(6).unwrap();
        w.take(6, &g).unwrap();
        w.discard(6);
        w.put(6, A, 0, b"y", 100);
        assert!(w.take(6, &g).is_none(), "a stale gate takes nothing");
        w.sent(6, &g, Some(ShoalError::io("lost")));
        assert!(
            w.take_error(6).is_none(),
            "the stale send's error is not the new file's"
        );
        assert_eq!(w.end_of(6), Some(1));
        assert_eq!(w.files(), vec![6]);
    }

    #[test]
    fn the_copy_at_the_gathering_server_stays_newest_until_a_durable_commit() {
        let w = WriteBack::default();
        w.put(3, A, 0, b"aaaa", 100);
        w.put(3, A, 10, b"bbbb", 100);
        let g = w.gate(3).unwrap();
        let t = w.take(3, &g).unwrap();
        w.sent(3, &g, None);
        assert!(!w.to_server(3, &g, t.extents, 7), "nothing earlier to lose");
        assert!(
            w.unpushed(3) && w.touches(3, 13),
            "readers must wait for a push"
        );
        assert_eq!(w.end_of(3), Some(14));
        w.overlay(3, 2, b"XXXXXXXXXX");
        w.truncated(3, 12);
        let copy = w.at_server(3, &g).unwrap().extents;
        assert_eq!(copy, vec![(0, b"aaXX".to_vec()), (10, b"XX".to_vec())]);
        w.pushed(3, &g, 7);
        assert!(
            !w.unpushed(3) && !w.touches(3, 0),
            "pushed: the servers have it"
        );
        // Another send acknowledged under another epoch: the server lost
        // the first one.
        assert!(w.to_server(3, &g, vec![(20, b"c".to_vec())], 8));
        w.resent(3, &g, 8);
        w.committed(3, &g, Some(7));
        assert_eq!(
            w.at_server_epoch(3, &g),
            Some((A, 8)),
            "a stale commit keeps it"
        );
        w.committed(3, &g, Some(8));
        assert!(w.at_server(3, &g).is_none());
        drop(g);
        w.tidy(3);
        assert!(w.files().is_empty());
    }

    #[test]
    fn the_client_wide_bound_asks_for_flushes() {
        let w = WriteBack::default();
        let big = vec![0u8; 1 << 20];
        for h in 0..(MAX_TOTAL >> 20) as u64 - 1 {
            assert_eq!(w.put(h, A, 0, &big, 2 << 20), Put::Buffered);
        }
        assert_eq!(w.put(999, A, 0, &big, 2 << 20), Put::BufferedOverTotal);
        extents(&w, 999);
        assert_eq!(w.put(999, A, 0, &[1], 2 << 20), Put::Buffered);
    }
}
