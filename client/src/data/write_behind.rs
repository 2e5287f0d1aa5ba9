//! Write-behind on the direct path: a large write returns once it is on
//! its way, with up to `write_behind` bytes of the file's writes in flight,
//! so one writer keeps several servers (and the socket) busy while it
//! prepares its next buffer, as NFS's unstable writes do. A write that
//! failed is reported at the file's next fsync or close (`Client::flush`),
//! as the gathering path's sends are; the file's later writes wait for
//! their replies until then, so a writer meets a failing server at once.
//!
//! What keeps it invisible to the writer (`data::write`, `io`, `attrs`):
//! - a write overlapping one in flight waits for it: the servers never see
//!   two writes of one range race;
//! - reads, truncates, attribute changes, fsync and close of a file wait
//!   for all its writes in flight;
//! - sizes count every write put behind since the file's last fsync or
//!   close, landed or not (`File::reached`): one landing while a server
//!   answers a stat or a listing is counted all the same.
//!
//! Others see a write once its writer's close or fsync returned
//! (close-to-open, as NFS promises and as the gathering path's buffered writes
//! already are), not when the write call returned.
//!
//! Memory is bounded per file (`write_behind`) and in all (`MAX_TOTAL`):
//! a write waits for room. The data in flight is the caller's own buffer
//! (`Bytes`), never copied here.
//!
//! Invariant, checked in debug builds: `State::bytes` is the sum over
//! files of their writes' lengths.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use shoal_proto::error::{Result, ShoalError};
use shoal_proto::Handle;
use tokio::sync::Notify;

/// Bytes in flight across every file of one client before a write waits.
pub const MAX_TOTAL: usize = 64 << 20;

/// Direct writes smaller than this are waited for. Their cost is their
/// round trip, which the gathering path saves (one message for many); in
/// flight here they would make the direct path a second write-back cache
/// that sends one message per write. Under the default write threshold
/// (128 KiB) every direct write goes behind; smaller direct writes come
/// from a lower threshold (a mount's, a file's, or 0).
pub const MIN_BEHIND: usize = 32 << 10;

/// With write-behind, `auto` buffers no write of this size or more: behind
/// the writer it pays no round trip, and the direct path then sends it as
/// fast as the gathering path or faster. Measured (`shoal bench
/// writesize`, one client, sequential): behind the writer, 32 KiB writes
/// went at 0.6-0.7x the gathering path's rate (a message each), 64 KiB at
/// 0.9x-1.04x, 256 KiB at 1.1x-1.4x. The default `write_threshold` is
/// this bound too.
pub const AUTO_BUFFERS_UNDER: usize = shoal_proto::cluster::DEFAULT_WRITE_THRESHOLD as usize;

/// A write in flight: the one to hand back to [`WriteBehind::finish`].
#[must_use = "a write begun must be finished, or its room stays taken"]
pub struct Ticket {
    pub(crate) h: Handle,
    id: u64,
}

#[derive(Default)]
struct File {
    /// (id, start, end) of each write in flight: a few (at most
    /// `write_behind` / [`MIN_BEHIND`]), so they are scanned, not indexed.
    writes: Vec<(u64, u64, u64)>,
    /// A write that failed, to report at the next fsync or close.
    error: Option<ShoalError>,
    /// The end of the furthest write put behind since the file's last
    /// flush (cut to a later truncate's size): the file is at least this
    /// long for this client. Held after the writes land, until the flush,
    /// so that a size a server gave just before one landed is never taken
    /// for the file's.
    reached: u64,
    /// No flush will come (the file is gone, or its last handle closed):
    /// the entry goes once its writes land, unless one failed.
    unwatched: bool,
}

impl File {
    fn overlaps(&self, start: u64, end: u64) -> bool {
        self.writes.iter().any(|&(_, s, e)| s < end && start < e)
    }

    fn bytes(&self) -> usize {
        self.writes.iter().map(|&(_, s, e)| (e - s) as usize).sum()
    }
}

#[derive(Default)]
struct State {
    files: HashMap<Handle, File>,
    bytes: usize,
    next_id: u64,
}

impl State {
    fn check(&self) {
        if cfg!(debug_assertions) {
            let sum: usize = self.files.values().map(File::bytes).sum();
            assert_eq!(sum, self.bytes, "bytes in flight");
        }
    }
}

#[derive(Default)]
pub struct WriteBehind {
    state: Mutex<State>,
    /// Whether any file is in `state`: lets reads, truncates and small
    /// writes of a client with nothing in flight skip the lock.
    busy: AtomicBool,
    /// Woken whenever a write finishes: waiters look again.
    finished: Notify,
}

impl WriteBehind {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Notes, under the lock, whether any file is left in `st`.
    fn note_busy(&self, st: &State) {
        self.busy.store(!st.files.is_empty(), Ordering::Release);
    }

    fn idle(&self) -> bool {
        !self.busy.load(Ordering::Acquire)
    }

    /// Waits until `ready` holds of the state, looking again after each
    /// write that finishes; returns what `ready` returned.
    async fn wait_for<T>(&self, mut ready: impl FnMut(&mut State) -> Option<T>) -> T {
        loop {
            let notified = self.finished.notified();
            tokio::pin!(notified);
            // Registered before the look, so a finish between the look and
            // the wait is not missed.
            notified.as_mut().enable();
            if let Some(t) = ready(&mut self.state()) {
                return t;
            }
            notified.await;
        }
    }

    /// Begins a write of `[start, end)` of `h` behind the caller, once no
    /// write in flight overlaps it and there is room (`per_file` bytes of
    /// the file's, [`MAX_TOTAL`] in all; a write alone always fits). None if
    /// the file has a failed write not reported yet: this write goes (after
    /// any it overlaps) and is waited for.
    pub async fn begin(&self, h: Handle, start: u64, end: u64, per_file: usize) -> Option<Ticket> {
        debug_assert!(start < end, "an empty write has nothing in flight");
        let len = (end - start) as usize;
        self.wait_for(|st| {
            let f = st.files.get(&h);
            if f.is_some_and(|f| f.overlaps(start, end)) {
                return None;
            }
            if f.is_some_and(|f| f.error.is_some()) {
                return Some(None);
            }
            let mine = f.map_or(0, File::bytes);
            if mine > 0 && (mine + len > per_file || st.bytes + len > MAX_TOTAL) {
                return None;
            }
            st.next_id += 1;
            let id = st.next_id;
            let f = st.files.entry(h).or_default();
            f.writes.push((id, start, end));
            f.reached = f.reached.max(end);
            st.bytes += len;
            st.check();
            self.note_busy(st);
            Some(Some(Ticket { h, id }))
        })
        .await
    }

    /// The write of `ticket` is done: its room goes to the next, and its
    /// failure waits for the file's next fsync or close.
    pub fn finish(&self, ticket: Ticket, result: Result<()>) {
        let mut st = self.state();
        let State { files, bytes, .. } = &mut *st;
        let f = files
            .get_mut(&ticket.h)
            .expect("a file with a write in flight has its entry");
        let at = f
            .writes
            .iter()
            .position(|w| w.0 == ticket.id)
            .expect("a ticket is finished once");
        let (_, start, end) = f.writes.swap_remove(at);
        *bytes -= (end - start) as usize;
        if let Err(e) = result {
            f.error.get_or_insert(e);
        }
        if f.unwatched && f.writes.is_empty() && f.error.is_none() {
            files.remove(&ticket.h);
            self.note_busy(&st);
        }
        st.check();
        drop(st);
        self.finished.notify_waiters();
    }

    /// Waits until no write of `h` is in flight.
    pub async fn settle(&self, h: Handle) {
        self.settle_range(h, 0, u64::MAX).await
    }

    /// Waits until no write of `h` that overlaps `[start, end)` is in flight.
    pub async fn settle_range(&self, h: Handle, start: u64, end: u64) {
        if self.idle() {
            return;
        }
        self.wait_for(|st| {
            (!st.files.get(&h).is_some_and(|f| f.overlaps(start, end))).then_some(())
        })
        .await
    }

    /// Waits until no write of `h` is in flight, then forgets the file and
    /// returns the failure of a write not reported yet: what fsync and
    /// close report.
    pub async fn flush(&self, h: Handle) -> Result<()> {
        self.settle(h).await;
        if self.idle() {
            return Ok(());
        }
        let mut st = self.state();
        let Some(f) = st.files.get_mut(&h) else {
            return Ok(());
        };
        let failed = f.error.take();
        // A write begun since the settle keeps the file's entry.
        if f.writes.is_empty() {
            st.files.remove(&h);
            self.note_busy(&st);
        }
        failed.map_or(Ok(()), Err)
    }

    /// How long `h` is at least for this client, by the writes it put
    /// behind since the file's last flush ([`File::reached`]).
    pub fn end_of(&self, h: Handle) -> Option<u64> {
        if self.idle() {
            return None;
        }
        self.state().files.get(&h).map(|f| f.reached)
    }

    /// `h` was truncated to `size`: the writes before no longer make it
    /// longer than that.
    pub fn truncated(&self, h: Handle, size: u64) {
        if self.idle() {
            return;
        }
        if let Some(f) = self.state().files.get_mut(&h) {
            f.reached = f.reached.min(size);
        }
    }

    /// Files with writes in flight, a failure to report, or writes landed
    /// since their last flush.
    pub fn files(&self) -> Vec<Handle> {
        self.state().files.keys().copied().collect()
    }

    /// Whether any file has writes in flight, a failure to report, or
    /// writes landed since their last flush.
    pub fn any(&self) -> bool {
        !self.idle()
    }

    /// The file `h` is gone: a failure of its writes is no one's to report.
    pub fn discard(&self, h: Handle) {
        self.unwatch(h, true);
    }

    /// The last handle of `h` closed after its flush, and writes may still
    /// have come (a mapping written back late): the entry goes once they
    /// land, unless one failed, which the file's next fsync reports.
    pub fn closed(&self, h: Handle) {
        self.unwatch(h, false);
    }

    fn unwatch(&self, h: Handle, gone: bool) {
        if self.idle() {
            return;
        }
        let mut st = self.state();
        if let Some(f) = st.files.get_mut(&h) {
            if gone {
                f.error = None;
            }
            f.unwatched = true;
            if f.writes.is_empty() && f.error.is_none() {
                st.files.remove(&h);
            }
        }
        self.note_busy(&st);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    const MIB: u64 = 1 << 20;

    fn io_error() -> ShoalError {
        ShoalError::io("server gone".to_string())
    }

    #[tokio::test]
    async fn a_full_window_waits_for_the_oldest_write() {
        let wb = Arc::new(WriteBehind::default());
        let a = wb.begin(1, 0, MIB, 2 * MIB as usize).await.unwrap();
        let b = wb.begin(1, MIB, 2 * MIB, 2 * MIB as usize).await.unwrap();
        assert_eq!(wb.end_of(1), Some(2 * MIB));
        let third = {
            let wb = wb.clone();
            tokio::spawn(async move { wb.begin(1, 2 * MIB, 3 * MIB, 2 * MIB as usize).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!third.is_finished(), "no room until a write finishes");
        wb.finish(a, Ok(()));
        let c = third.await.unwrap().unwrap();
        wb.finish(b, Ok(()));
        wb.finish(c, Ok(()));
        assert_eq!(
            wb.end_of(1),
            Some(3 * MIB),
            "landed writes count until the flush"
        );
        assert!(wb.flush(1).await.is_ok());
        assert!(!wb.any(), "a flushed file leaves no entry");
        assert_eq!(wb.end_of(1), None);
    }

    #[tokio::test]
    async fn a_truncate_cuts_what_the_writes_reached() {
        let wb = WriteBehind::default();
        let a = wb.begin(4, 0, 2 * MIB, 8 * MIB as usize).await.unwrap();
        wb.finish(a, Ok(()));
        wb.truncated(4, MIB);
        assert_eq!(wb.end_of(4), Some(MIB));
        wb.truncated(4, 3 * MIB);
        assert_eq!(
            wb.end_of(4),
            Some(MIB),
            "a longer size is the servers' to say"
        );
    }

    #[tokio::test]
    async fn an_overlapping_write_waits_and_others_do_not() {
        let wb = Arc::new(WriteBehind::default());
        let a = wb.begin(1, 0, MIB, 64 * MIB as usize).await.unwrap();
        // Another file, and a later range of this one, go at once.
        let other = wb.begin(2, 0, MIB, 64 * MIB as usize).await.unwrap();
        let later = wb.begin(1, MIB, 2 * MIB, 64 * MIB as usize).await.unwrap();
        let over = {
            let wb = wb.clone();
            tokio::spawn(async move { wb.begin(1, 10, 20, 64 * MIB as usize).await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!over.is_finished(), "a rewrite of a range in flight waits");
        wb.finish(a, Ok(()));
        let over = over.await.unwrap().unwrap();
        for t in [other, later, over] {
            wb.finish(t, Ok(()));
        }
        assert_eq!(wb.files().len(), 2, "until their flush");
    }

    #[tokio::test]
    async fn a_failure_is_reported_once_at_flush_and_later_writes_are_waited_for() {
        let wb = WriteBehind::default();
        let a = wb.begin(7, 0, MIB, 8 * MIB as usize).await.unwrap();
        wb.finish(a, Err(io_error()));
        assert!(
            wb.begin(7, MIB, 2 * MIB, 8 * MIB as usize).await.is_none(),
            "after a failure the writer waits for its writes"
        );
        assert_eq!(wb.files(), vec![7]);
        let e = wb.flush(7).await.unwrap_err();
        assert!(e.message.contains("server gone"), "{e}");
        assert!(wb.flush(7).await.is_ok(), "reported once");
        assert!(!wb.any());
    }

    #[tokio::test]
    async fn settle_waits_for_every_write_of_the_file() {
        let wb = Arc::new(WriteBehind::default());
        let a = wb.begin(3, 0, MIB, 8 * MIB as usize).await.unwrap();
        let settled = {
            let wb = wb.clone();
            tokio::spawn(async move { wb.settle(3).await })
        };
        let range = {
            let wb = wb.clone();
            tokio::spawn(async move { wb.settle_range(3, MIB, 2 * MIB).await })
        };
        range.await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!settled.is_finished());
        wb.finish(a, Ok(()));
        settled.await.unwrap();
    }

    #[tokio::test]
    async fn a_closed_file_leaves_once_its_late_writes_land() {
        let wb = WriteBehind::default();
        let a = wb.begin(5, 0, MIB, 8 * MIB as usize).await.unwrap();
        wb.closed(5);
        assert_eq!(wb.end_of(5), Some(MIB), "in flight still");
        wb.finish(a, Ok(()));
        assert!(!wb.any(), "landed: nothing left to count");
        let b = wb.begin(6, 0, MIB, 8 * MIB as usize).await.unwrap();
        wb.closed(6);
        wb.finish(b, Err(io_error()));
        assert!(
            wb.flush(6).await.is_err(),
            "a failure waits for the next fsync"
        );
    }

    #[tokio::test]
    async fn a_discarded_file_reports_nothing() {
        let wb = WriteBehind::default();
        let a = wb.begin(9, 0, MIB, 8 * MIB as usize).await.unwrap();
        wb.finish(a, Err(io_error()));
        wb.discard(9);
        assert!(!wb.any());
        assert!(wb.flush(9).await.is_ok());
    }
}
