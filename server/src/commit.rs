//! The commit queue: where a modifying request waits until its changes are
//! durable before it is acknowledged.
//!
//! A change reaches the KV store in two steps (see `kv`): `apply` makes it
//! visible at once, `sync` (one fsync) makes everything applied so far durable.
//! The baseline of [Carns 2009] pays one sync per modifying request. With the
//! `coalescing` switch on, this module implements [Carns 2009]'s metadata commit
//! coalescing (section III.C, Figure 1) with threads instead of PVFS's state
//! machines:
//!
//! * The **scheduling queue** is the number of modifying requests that have
//!   been received and not yet applied. The listener enters a request into it
//!   (a [`Ticket`]) when its frame arrives, just before handing it to the
//!   blocking pool; the request leaves it when its changes are applied
//!   ([`CommitQueue::make_durable`]) or, if it never applies anything (an
//!   error, a request that changes nothing in the KV store), when its handler
//!   returns. Its length is [Carns 2009]'s measure of load: how many more changes
//!   are about to arrive.
//! * When a request has been applied it decides, from the scheduling queue
//!   *after* leaving it: under `low_watermark`, nothing else is coming, so sync
//!   now and complete it (low-latency mode: a lone sequential client pays
//!   exactly one sync per request, as without coalescing). Otherwise defer its
//!   completion to the **coalescing queue**, because the requests still
//!   queued will apply soon and can share the sync.
//! * The coalescing queue is flushed by ONE sync that completes every request
//!   in it when it reaches `high_watermark` (bounding how long and how many
//!   requests wait), or when the scheduling queue falls back under
//!   `low_watermark` (nobody left to wait for: back to low-latency mode).
//!
//! Correctness rules, and how they are upheld:
//!
//! * **Never acknowledge before durable.** A request joins the coalescing
//!   queue only after its apply returned, and a sync *seals* the queue (takes
//!   its current members as its group and opens a new, empty queue) under the
//!   state lock before it calls `KvEngine::sync`. So every member of a group
//!   applied before that group's sync started, and the sync makes it durable.
//!   A request that applies while a sync runs joins the new queue and waits
//!   for the next sync. (The group is our "apply epoch".)
//! * **One sync at a time.** `syncing` is set while one runs; a flush that
//!   becomes due meanwhile is started by one of the new queue's members as
//!   soon as the running sync ends (so the queue can pass the high watermark
//!   only while a sync is already running, and a sync starts the moment it
//!   ends).
//! * **Nobody is stranded.** No thread is dedicated to syncing: the waiters
//!   themselves decide, under the lock, whether a flush is due, and the first
//!   one to see it due becomes the syncer. Every event that can make a flush
//!   due wakes them: a request leaving the scheduling queue without applying
//!   (ticket dropped) and the end of a sync notify the condition variable; a
//!   request that joins the queue checks for itself.
//! * **Failures are not acknowledged.** If the sync fails (or panics), every
//!   member of its group gets EIO; none of them is told its change is durable.
//! * **A safety valve.** [Carns 2009] waits for the scheduling queue without a
//!   time limit, which is only safe while every queued request makes progress
//!   on its own. If one could not (it waits on another server whose requests
//!   are themselves deferred, or the blocking pool is exhausted by waiters) the
//!   deferred requests would wait forever; so a coalescing queue that has been
//!   waiting for [`STALL_LIMIT`] with no sync running is flushed anyway. Under
//!   normal load the watermarks flush it long before.
//!
//! With `coalescing = false`, every modifying request syncs for itself, as in
//! the baseline; with `sync = "none"` nothing ever waits.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use shoal_proto::cluster::{Settings, SyncMode};
use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::Op;

use crate::meta_store::MetaStore;
use crate::stats::Stats;

/// How long a coalescing queue may wait, with no sync running, before it is
/// flushed even though the watermarks do not call for it (see the module doc).
pub const STALL_LIMIT: Duration = Duration::from_millis(20);

pub struct CommitQueue {
    mode: SyncMode,
    coalescing: bool,
    low: usize,
    high: usize,
    stall: Duration,
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<State>,
    /// Signalled when a sync ends and when the scheduling queue shrinks
    /// without a request joining the coalescing queue.
    wake: Condvar,
}

struct State {
    /// The scheduling queue: modifying requests received, not yet applied.
    scheduled: usize,
    /// The coalescing queue: requests applied and not yet covered by any
    /// sync that has started. Sealed (replaced by a new group) when a sync
    /// starts; its members are completed with that sync's result.
    open: Arc<Group>,
    /// Members of `open`.
    queued: usize,
    /// When `open` got its first member (for the safety valve).
    open_since: Option<Instant>,
    /// A member of `open` asked for a sync now (the scheduling queue was
    /// under the low watermark when it was applied, or it is an fsync) but
    /// a sync was running; the next sync must start as soon as that one ends.
    urgent: bool,
    /// A sync is running (only one at a time).
    syncing: bool,
    /// Syncs started (sealed groups) and syncs ended: the commit sequence.
    /// Each sync takes the next number when it seals its group and ends
    /// before the next one starts, so `ended` only ever grows by one.
    started: u64,
    ended: u64,
}

/// Requests that share one sync; `result` is set when that sync ends.
#[derive(Default)]
struct Group {
    result: OnceLock<Result<()>>,
}

fn lock(inner: &Inner) -> MutexGuard<'_, State> {
    inner.state.lock().unwrap_or_else(|p| p.into_inner())
}

/// A modifying request's place in the scheduling queue. The listener takes it
/// when the frame arrives, and the request carries it (`Request`); it is
/// given back when the request's changes are applied (`Service::change`
/// hands it to [`CommitQueue::make_durable`]), when the request leaves to
/// wait on a peer (`Request::leave_scheduling_queue`) or, at the latest,
/// when it is dropped.
pub struct Ticket {
    inner: Arc<Inner>,
    low: usize,
    spent: bool,
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.spent {
            return;
        }
        let mut st = lock(&self.inner);
        st.scheduled -= 1;
        // The request left without applying anything: if that brings the
        // scheduling queue under the low watermark, a deferred flush is now
        // due and nobody else will notice, so wake the waiters; one of them
        // becomes the syncer.
        if st.scheduled < self.low && st.queued > 0 {
            self.inner.wake.notify_all();
        }
    }
}

/// What a request whose sync failed is told: a full disk stays ENOSPC (the
/// writer can free space and retry); any other failure is EIO.
fn commit_failed(e: ShoalError) -> ShoalError {
    let errno = if e.errno == Errno::ENOSPC {
        Errno::ENOSPC
    } else {
        Errno::EIO
    };
    ShoalError::new(errno, format!("metadata commit failed: {}", e.message))
}

/// Completes a sync even if it unwinds: the group gets its result (EIO if the
/// sync panicked), `syncing` is cleared and the waiters are woken, so that
/// nobody waits forever on a sync that will not end.
struct SyncInProgress<'a> {
    inner: &'a Inner,
    group: Arc<Group>,
    /// This sync's place in the commit sequence.
    seq: u64,
    result: Option<Result<()>>,
}

impl Drop for SyncInProgress<'_> {
    fn drop(&mut self) {
        let result = self
            .result
            .take()
            .unwrap_or_else(|| Err(ShoalError::io("the KV sync panicked")));
        let mut st = lock(self.inner);
        assert!(
            st.syncing && self.seq == st.ended + 1 && self.seq == st.started,
            "commit sequence out of order: sync {} ended after {} of {} started",
            self.seq,
            st.ended,
            st.started
        );
        st.ended = self.seq;
        let _ = self.group.result.set(result);
        st.syncing = false;
        self.inner.wake.notify_all();
    }
}

impl CommitQueue {
    /// The queue the cluster settings ask for.
    pub fn from_settings(s: &Settings) -> CommitQueue {
        CommitQueue::with_params(
            s.sync,
            s.coalescing,
            s.low_watermark as usize,
            s.high_watermark as usize,
        )
    }

    fn with_params(mode: SyncMode, coalescing: bool, low: usize, high: usize) -> CommitQueue {
        CommitQueue {
            mode,
            coalescing,
            low: low.max(1),
            high: high.max(1),
            stall: STALL_LIMIT,
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    scheduled: 0,
                    open: Arc::default(),
                    queued: 0,
                    open_since: None,
                    urgent: false,
                    syncing: false,
                    started: 0,
                    ended: 0,
                }),
                wake: Condvar::new(),
            }),
        }
    }

    fn coalesces(&self) -> bool {
        self.coalescing && self.mode != SyncMode::None
    }

    /// Enters a request that arrived with `op` into the scheduling queue, if
    /// it modifies metadata and this queue coalesces. Called by the listener
    /// as soon as the frame is read and has a slot to run, so that the queue
    /// counts every change that is about to be applied.
    pub fn schedule(&self, op: Op) -> Option<Ticket> {
        if !self.coalesces() || !op.modifies_metadata() {
            return None;
        }
        lock(&self.inner).scheduled += 1;
        Some(Ticket {
            inner: self.inner.clone(),
            low: self.low,
            spent: false,
        })
    }

    /// Requests in the scheduling queue now (for tests and diagnostics).
    pub fn scheduled(&self) -> usize {
        lock(&self.inner).scheduled
    }

    /// Called once the changes of the request holding `ticket` are
    /// applied: returns when they (and every change applied before them)
    /// are durable. Returns the syncs this caller performed (1 or 0: with
    /// coalescing, another request may have performed the sync that
    /// covered it).
    pub fn make_durable(
        &self,
        ticket: Option<Ticket>,
        meta: &MetaStore,
        stats: &Stats,
    ) -> Result<u64> {
        self.durable(ticket, &|| meta.sync(), stats)
    }

    /// Syncs whatever the mode (fsync asks for it explicitly). With
    /// coalescing, it is a flush of the coalescing queue that starts now (or
    /// right after a running sync): the deferred requests complete with it.
    pub fn sync_now(&self, meta: &MetaStore, stats: &Stats) -> Result<u64> {
        if self.coalesces() {
            self.join_and_wait(&|| meta.sync(), stats, None, true)
        } else {
            sync_counted(&|| meta.sync(), stats).map(|()| 1)
        }
    }

    fn durable(
        &self,
        ticket: Option<Ticket>,
        sync: &dyn Fn() -> Result<()>,
        stats: &Stats,
    ) -> Result<u64> {
        debug_assert!(
            ticket
                .as_ref()
                .is_none_or(|t| Arc::ptr_eq(&t.inner, &self.inner)),
            "a ticket is spent in the queue that issued it"
        );
        match self.mode {
            // Scratch mode never waits (and takes no tickets).
            SyncMode::None => Ok(0),
            SyncMode::Full | SyncMode::Replay if !self.coalescing => {
                sync_counted(sync, stats).map(|()| 1)
            }
            SyncMode::Full | SyncMode::Replay => self.join_and_wait(sync, stats, ticket, false),
        }
    }

    /// [Carns 2009]'s decision, taken by an applied request (or an fsync, with
    /// `urgent`), and its wait for the sync that covers it.
    fn join_and_wait(
        &self,
        sync: &dyn Fn() -> Result<()>,
        stats: &Stats,
        ticket: Option<Ticket>,
        urgent: bool,
    ) -> Result<u64> {
        let mut st = lock(&self.inner);
        if let Some(mut t) = ticket {
            // Leave the scheduling queue and join the coalescing queue under
            // one lock: no flush decision can see one without the other. No
            // need to wake anyone: this thread checks the flush condition
            // itself below, and it is the same for every member.
            st.scheduled -= 1;
            t.spent = true;
        }
        let group = st.open.clone();
        st.queued += 1;
        st.open_since.get_or_insert_with(Instant::now);
        // Under the low watermark: sync now (low-latency mode). If a sync is
        // running, "now" is the moment it ends; remember that.
        if urgent || st.scheduled < self.low {
            st.urgent = true;
        }
        loop {
            if let Some(result) = group.result.get() {
                return result.clone().map(|()| 0).map_err(commit_failed);
            }
            // Not done, so `group` is still the open queue (a sealed group is
            // being synced, and gets its result before `syncing` clears).
            if !st.syncing && self.flush_due(&st) {
                debug_assert!(Arc::ptr_eq(&st.open, &group));
                if !(st.urgent || st.scheduled < self.low || st.queued >= self.high) {
                    stats.commit_stalls.fetch_add(1, Ordering::Relaxed);
                    tracing::debug!(
                        queued = st.queued,
                        scheduled = st.scheduled,
                        "commit queue stalled for {:?}: flushing anyway",
                        self.stall
                    );
                }
                // Become the syncer: seal the queue so that everything in it
                // (all applied before this point) completes with this sync,
                // and later applies wait for the next one.
                st.open = Arc::default();
                st.queued = 0;
                st.open_since = None;
                st.urgent = false;
                assert_eq!(st.started, st.ended, "a sync started while another ran");
                st.syncing = true;
                st.started += 1;
                let seq = st.started;
                drop(st);
                let mut running = SyncInProgress {
                    inner: &self.inner,
                    group: group.clone(),
                    seq,
                    result: None,
                };
                let result = sync_counted(sync, stats);
                running.result = Some(result.clone());
                drop(running);
                return result.map(|()| 1).map_err(commit_failed);
            }
            st = match (st.syncing, st.open_since) {
                // Nothing but a sync's end, a ticket leaving or the stall
                // limit can make the flush due; wait for the first of them.
                (false, Some(since)) => {
                    let left = (since + self.stall).saturating_duration_since(Instant::now());
                    self.inner
                        .wake
                        .wait_timeout(st, left.max(Duration::from_micros(100)))
                        .unwrap_or_else(|p| p.into_inner())
                        .0
                }
                _ => self.inner.wake.wait(st).unwrap_or_else(|p| p.into_inner()),
            };
        }
    }

    /// Whether the open coalescing queue must be synced now.
    fn flush_due(&self, st: &State) -> bool {
        st.urgent
            || st.scheduled < self.low
            || st.queued >= self.high
            || st
                .open_since
                .is_some_and(|since| since.elapsed() >= self.stall)
    }
}

/// Runs `sync` (the store's: `MetaStore::sync`), counted.
fn sync_counted(sync: &dyn Fn() -> Result<()>, stats: &Stats) -> Result<()> {
    sync()?;
    stats.kv_syncs.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::{Batch, KvEngine, MemEngine, Pair};
    use shoal_proto::Errno;
    use std::sync::atomic::{AtomicBool, AtomicU64};
    use std::sync::mpsc;

    /// The in-memory engine, with a sync that checks the commit rule: it
    /// records how many applies had completed when it started (those are
    /// the ones it makes durable), and it can be told to fail.
    #[derive(Default)]
    struct Engine {
        mem: MemEngine,
        applied: AtomicU64,
        durable: AtomicU64,
        syncs: AtomicU64,
        fail: AtomicBool,
    }

    impl KvEngine for Engine {
        fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
            self.mem.get(key)
        }
        fn scan(&self, prefix: &[u8], after: Option<&[u8]>, limit: usize) -> Result<Vec<Pair>> {
            self.mem.scan(prefix, after, limit)
        }
        fn apply(&self, batch: Batch) -> Result<()> {
            self.mem.apply(batch)
        }
        fn sync(&self) -> Result<()> {
            let upto = self.applied.load(Ordering::SeqCst);
            // Give other threads a chance to apply while "the disk" works.
            std::thread::yield_now();
            if self.fail.load(Ordering::SeqCst) {
                return Err(ShoalError::io("disk on fire"));
            }
            self.syncs.fetch_add(1, Ordering::SeqCst);
            self.durable.fetch_max(upto, Ordering::SeqCst);
            Ok(())
        }
    }

    fn queue(coalescing: bool, low: usize, high: usize) -> CommitQueue {
        CommitQueue::with_params(SyncMode::Full, coalescing, low, high)
    }

    /// What a request does between the listener and its reply: enter the
    /// scheduling queue, apply, wait until durable. Checks that the reply
    /// comes after a sync that started after the apply.
    fn request(q: &CommitQueue, kv: &Engine, stats: &Stats, key: u64) -> Result<u64> {
        let ticket = q.schedule(Op::CreateObject);
        let mut b = Batch::default();
        b.put(key.to_be_bytes().to_vec(), vec![1]);
        kv.apply(b)?;
        let seq = kv.applied.fetch_add(1, Ordering::SeqCst) + 1;
        let syncs = q.durable(ticket, &|| kv.sync(), stats)?;
        assert!(
            kv.durable.load(Ordering::SeqCst) >= seq,
            "apply {seq} acknowledged before a sync covered it"
        );
        Ok(syncs)
    }

    /// Runs `threads` x `each` requests; returns the syncs each reported.
    fn run(
        q: &Arc<CommitQueue>,
        kv: &Arc<Engine>,
        stats: &Arc<Stats>,
        threads: u64,
        each: u64,
    ) -> Vec<Result<u64>> {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (q, kv, stats) = (q.clone(), kv.clone(), stats.clone());
                std::thread::spawn(move || {
                    (0..each)
                        .map(|i| request(&q, &kv, &stats, t * 1_000_000 + i))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    }

    #[test]
    fn concurrent_requests_share_syncs_and_all_complete() {
        let q = Arc::new(queue(true, 1, 8));
        let kv = Arc::new(Engine::default());
        let stats = Arc::new(Stats::default());
        let results = run(&q, &kv, &stats, 8, 200);
        assert_eq!(results.len(), 1600);
        let reported: u64 = results.iter().map(|r| *r.as_ref().unwrap()).sum();
        let syncs = kv.syncs.load(Ordering::SeqCst);
        assert_eq!(reported, syncs, "each sync is reported by one request");
        assert_eq!(stats.kv_syncs.load(Ordering::Relaxed), syncs);
        assert!(syncs < 1600, "{syncs} syncs for 1600 concurrent requests");
        assert!(
            syncs >= 1600 / 8 / 2,
            "at most 8 per sync (plus a running sync's late joiners): {syncs}"
        );
        assert_eq!(q.scheduled(), 0);
        assert_eq!(kv.applied.load(Ordering::SeqCst), 1600);
    }

    #[test]
    fn a_single_sequential_client_syncs_once_per_request() {
        let q = Arc::new(queue(true, 1, 8));
        let kv = Arc::new(Engine::default());
        let stats = Arc::new(Stats::default());
        let results = run(&q, &kv, &stats, 1, 200);
        assert!(results.iter().all(|r| *r.as_ref().unwrap() == 1));
        assert_eq!(kv.syncs.load(Ordering::SeqCst), 200);
        assert_eq!(stats.kv_syncs.load(Ordering::Relaxed), 200);
    }

    #[test]
    fn without_coalescing_every_request_syncs() {
        let q = Arc::new(queue(false, 1, 8));
        let kv = Arc::new(Engine::default());
        let stats = Arc::new(Stats::default());
        assert!(q.schedule(Op::CreateObject).is_none());
        let results = run(&q, &kv, &stats, 8, 50);
        assert!(results.iter().all(|r| *r.as_ref().unwrap() == 1));
        assert_eq!(kv.syncs.load(Ordering::SeqCst), 400);
    }

    #[test]
    fn scratch_mode_never_syncs() {
        let q = Arc::new(CommitQueue::with_params(SyncMode::None, true, 1, 8));
        let kv = Engine::default();
        let stats = Stats::default();
        assert!(q.schedule(Op::CreateObject).is_none());
        assert_eq!(q.durable(None, &|| kv.sync(), &stats).unwrap(), 0);
        assert_eq!(kv.syncs.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn only_modifying_requests_enter_the_scheduling_queue() {
        let q = queue(true, 1, 8);
        assert!(q.schedule(Op::GetAttr).is_none());
        let t = q.schedule(Op::CrDirEnt);
        assert_eq!(q.scheduled(), 1);
        drop(t);
        assert_eq!(q.scheduled(), 0);
    }

    /// Spawns a request that applies without a ticket (so it does not hold
    /// the scheduling queue up itself); its result arrives on the channel.
    fn deferred(
        q: &Arc<CommitQueue>,
        kv: &Arc<Engine>,
        stats: &Arc<Stats>,
        tx: &mpsc::Sender<Result<u64>>,
    ) {
        let (q, kv, stats, tx) = (q.clone(), kv.clone(), stats.clone(), tx.clone());
        std::thread::spawn(move || {
            kv.applied.fetch_add(1, Ordering::SeqCst);
            let _ = tx.send(q.durable(None, &|| kv.sync(), &stats));
        });
    }

    /// A bound on waiting for a result that must come (not a measurement).
    const PATIENCE: Duration = Duration::from_secs(20);

    fn never_stalls(mut q: CommitQueue) -> Arc<CommitQueue> {
        q.stall = Duration::from_secs(3600);
        Arc::new(q)
    }

    #[test]
    fn the_high_watermark_flushes_the_coalescing_queue_with_one_sync() {
        let q = never_stalls(queue(true, 1, 8));
        let kv = Arc::new(Engine::default());
        let stats = Arc::new(Stats::default());
        // A request that was received and is not applied yet keeps the
        // scheduling queue at the low watermark: completions are deferred.
        let pending = q.schedule(Op::CreateObject).unwrap();
        let (tx, rx) = mpsc::channel();
        for _ in 0..8 {
            deferred(&q, &kv, &stats, &tx);
        }
        let eight: Vec<u64> = (0..8)
            .map(|_| rx.recv_timeout(PATIENCE).unwrap().unwrap())
            .collect();
        assert_eq!(eight.iter().sum::<u64>(), 1, "one of the eight synced");
        assert_eq!(kv.syncs.load(Ordering::SeqCst), 1);
        // The ninth waits in a new coalescing queue ...
        deferred(&q, &kv, &stats, &tx);
        assert!(rx.recv_timeout(Duration::from_millis(50)).is_err());
        assert_eq!(kv.syncs.load(Ordering::SeqCst), 1);
        // ... until the scheduling queue falls under the low watermark: the
        // pending request leaves it (here without applying anything) and
        // must wake the waiter, which syncs.
        drop(pending);
        assert_eq!(rx.recv_timeout(PATIENCE).unwrap().unwrap(), 1);
        assert_eq!(kv.syncs.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn the_last_queued_request_to_apply_flushes_the_others() {
        let q = never_stalls(queue(true, 1, 8));
        let kv = Arc::new(Engine::default());
        let stats = Arc::new(Stats::default());
        // Three requests arrive together, then apply one after the other:
        // the first two find others still in the scheduling queue and defer,
        // the third finds it empty and syncs once for all three.
        let tickets: Vec<Ticket> = (0..3).map(|_| q.schedule(Op::SetAttr).unwrap()).collect();
        let (tx, rx) = mpsc::channel();
        for (i, t) in tickets.into_iter().enumerate() {
            let (q2, kv, stats, tx) = (q.clone(), kv.clone(), stats.clone(), tx.clone());
            std::thread::spawn(move || {
                kv.applied.fetch_add(1, Ordering::SeqCst);
                let _ = tx.send(q2.durable(Some(t), &|| kv.sync(), &stats));
            });
            if i < 2 {
                while lock(&q.inner).queued < i + 1 {
                    std::thread::yield_now();
                }
                assert!(rx.try_recv().is_err(), "request {i} was deferred");
            }
        }
        let syncs: Vec<u64> = (0..3)
            .map(|_| rx.recv_timeout(PATIENCE).unwrap().unwrap())
            .collect();
        assert_eq!(syncs.iter().sum::<u64>(), 1);
        assert_eq!(kv.syncs.load(Ordering::SeqCst), 1);
        assert_eq!(q.scheduled(), 0);
    }

    #[test]
    fn a_failed_sync_fails_every_request_it_covered() {
        let q = Arc::new(queue(true, 1, 8));
        let kv = Arc::new(Engine::default());
        let stats = Arc::new(Stats::default());
        kv.fail.store(true, Ordering::SeqCst);
        let results = run(&q, &kv, &stats, 8, 50);
        assert_eq!(results.len(), 400);
        for r in &results {
            assert_eq!(r.as_ref().unwrap_err().errno, Errno::EIO);
        }
        assert_eq!(stats.kv_syncs.load(Ordering::Relaxed), 0);
        // The queue recovers once the disk does.
        kv.fail.store(false, Ordering::SeqCst);
        let results = run(&q, &kv, &stats, 4, 50);
        assert!(results.iter().all(|r| r.is_ok()));
        assert_eq!(q.scheduled(), 0);
    }

    #[test]
    fn fsync_flushes_the_coalescing_queue() {
        let q = never_stalls(queue(true, 1, 8));
        let kv = Arc::new(Engine::default());
        let stats = Arc::new(Stats::default());
        let pending = q.schedule(Op::CreateObject).unwrap();
        let (tx, rx) = mpsc::channel();
        for _ in 0..3 {
            deferred(&q, &kv, &stats, &tx);
        }
        while lock(&q.inner).queued < 3 {
            std::thread::yield_now();
        }
        assert!(rx.try_recv().is_err());
        let meta = MetaStore::open(kv.clone() as Arc<dyn KvEngine>, 0).unwrap();
        let fsync = q.sync_now(&meta, &stats).unwrap();
        let others: u64 = (0..3)
            .map(|_| rx.recv_timeout(PATIENCE).unwrap().unwrap())
            .sum();
        assert_eq!(fsync + others, 1, "one sync for the fsync and the three");
        drop(pending);
    }
}
