//! A write-ahead log and an in-memory table in front of an engine whose
//! commits are costly.
//!
//! Why: redb makes a commit durable by writing every B-tree page that the
//! commits since the last durable one dirtied (five or six scattered pages
//! for one create) and then fsyncing, about 0.5 ms here; and even a
//! non-durable redb commit costs tens of microseconds of CPU (page
//! allocation, copies, checksums). A modifying request pays both. Here it
//! pays one synchronous write of its record to a preallocated log (about
//! 0.13 ms) and a few map inserts.
//!
//! How:
//! * [`KvEngine::apply`] puts the batch into the active [`MemTable`]
//!   (visible at once) and appends its encoded record to an in-memory tail.
//! * [`KvEngine::sync`] writes the tail into the current log file: that is
//!   the durability point.
//! * Once the current file holds its checkpoint length, a sync *freezes*
//!   the active table (a new, empty one takes over) and turns the log to
//!   the other file. A background thread then writes the frozen table into
//!   the inner engine in one commit, durably, with the sequence number the
//!   new file starts at (`keys::WAL_SEQ`), and drops it. Reads see the
//!   active table, then the frozen one, then the inner engine, so the turn
//!   is invisible to them; writes never wait for it.
//!
//! Recovery ([`WalEngine::open`]): the inner engine holds everything up to
//! its `WAL_SEQ`; each file's run of records (see `wal_log`) that reaches
//! that number or beyond is replayed onto it, oldest first, as long as the
//! runs follow each other. A file the log turned away from before the last
//! completed checkpoint has only older records and is skipped. Replaying a
//! record the inner engine already holds is harmless: a record is puts and
//! deletes of whole values, so after an in-order replay every key holds the
//! value of the last record that touched it.

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use shoal_proto::error::Result;

use super::engine::{Batch, KvEngine, Pair};
use super::memtable::{merged_scan, MemTable};
use super::wal_log::{encode, io_err, read_run, LogFile, LOG_FILES};
use crate::disk;
use crate::keys;

/// Length of one log file, and so how much is logged between checkpoints:
/// 1/64 of the file system, within these bounds. Big enough that a
/// checkpoint (one commit of everything since the last one) is shared by
/// thousands of requests; small enough that replaying the log at start-up
/// takes a moment, and that a small disk keeps room for the rest.
pub const CHECKPOINT_MIN: u64 = 256 << 10;
pub const CHECKPOINT_MAX: u64 = 16 << 20;
/// Tail length past which an apply writes the tail itself. File data
/// written inline (durable only on fsync) applies without any sync
/// following; this bounds the tail's memory when nothing else syncs, as in
/// scratch mode (`sync = "none"`).
pub const TAIL_LIMIT: usize = 256 << 10;
/// How long a failed checkpoint waits before it tries again.
const CHECKPOINT_RETRY: Duration = Duration::from_secs(1);

pub struct WalEngine<E> {
    shared: Arc<Shared<E>>,
}

struct Shared<E> {
    inner: E,
    tables: RwLock<Tables>,
    /// Records applied and not yet written to the log, in apply order.
    tail: Mutex<Tail>,
    /// Held by the one sync that writes the log.
    log: Mutex<Log>,
    checkpoint_bytes: u64,
}

#[derive(Default)]
struct Tables {
    active: MemTable,
    /// Being written into the inner engine by a checkpoint.
    frozen: Option<Arc<MemTable>>,
}

impl Tables {
    /// The newest record of `key` the tables hold (Some(None): deleted), or
    /// None if only the inner engine can say.
    fn newest(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        self.active
            .get(key)
            .or_else(|| self.frozen.as_ref().and_then(|f| f.get(key)))
    }
}

struct Tail {
    bytes: Vec<u8>,
    next_seq: u64,
}

struct Log {
    files: [LogFile; 2],
    current: usize,
    /// Where the next record goes in the current file; everything before it
    /// is durable once a sync has returned.
    end: u64,
    /// The first sequence number the last sync did not write: syncs run
    /// one at a time under this lock, so it never goes backwards.
    synced_next: u64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|p| p.into_inner())
}

fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|p| p.into_inner())
}

impl<E: KvEngine> WalEngine<E> {
    /// Opens the log in `dir` in front of `inner`, after replaying onto
    /// `inner`, durably, whatever the log holds that `inner` may not.
    pub fn open(inner: E, dir: &Path) -> Result<WalEngine<E>> {
        let total = disk::space(dir).map(|s| s.total).unwrap_or(0);
        let checkpoint_bytes = (total / 64).clamp(CHECKPOINT_MIN, CHECKPOINT_MAX);
        WalEngine::open_with(inner, dir, checkpoint_bytes)
    }

    fn open_with(inner: E, dir: &Path, checkpoint_bytes: u64) -> Result<WalEngine<E>> {
        let next_seq = recover(&inner, dir)?;
        let files = [
            LogFile::open(&dir.join(LOG_FILES[0]), checkpoint_bytes)?,
            LogFile::open(&dir.join(LOG_FILES[1]), checkpoint_bytes)?,
        ];
        Ok(WalEngine {
            shared: Arc::new(Shared {
                inner,
                tables: RwLock::default(),
                tail: Mutex::new(Tail {
                    bytes: Vec::new(),
                    next_seq,
                }),
                log: Mutex::new(Log {
                    files,
                    current: 0,
                    end: 0,
                    synced_next: next_seq,
                }),
                checkpoint_bytes,
            }),
        })
    }

    /// For a server that runs without the log: replays and removes the log
    /// an earlier run left in `dir`, so that switching the log off loses
    /// nothing, and returns the inner engine.
    pub fn retire(inner: E, dir: &Path) -> Result<E> {
        if LOG_FILES.iter().any(|f| dir.join(f).exists()) {
            recover(&inner, dir)?;
            for f in LOG_FILES {
                let path = dir.join(f);
                if let Err(e) = std::fs::remove_file(&path) {
                    if e.kind() != std::io::ErrorKind::NotFound {
                        return Err(io_err("remove", &path, e));
                    }
                }
            }
        }
        Ok(inner)
    }
}

/// Replays the log in `dir` onto `inner` and makes `inner` durable with
/// everything in it; returns the first sequence number the log may use now
/// (every record in either file is older).
fn recover(inner: &dyn KvEngine, dir: &Path) -> Result<u64> {
    let floor = inner
        .get(keys::WAL_SEQ)?
        .map(|v| keys::decode_u64(&v))
        .unwrap_or(1);
    let mut runs = Vec::new();
    for f in LOG_FILES {
        let run = read_run(&dir.join(f))?;
        if run.last().is_some_and(|(last, _)| *last >= floor) {
            runs.push(run);
        }
    }
    runs.sort_by_key(|run| run[0].0);
    let mut next_seq = floor;
    let mut replayed = 0;
    for run in runs {
        if replayed > 0 && run[0].0 != next_seq {
            break;
        }
        for (seq, batch) in run {
            inner.apply(batch)?;
            next_seq = seq + 1;
            replayed += 1;
        }
    }
    if replayed > 0 {
        tracing::info!("metadata log: replayed {replayed} records");
    }
    let mut mark = Batch::default();
    mark.put(keys::WAL_SEQ.to_vec(), keys::encode_u64(next_seq));
    inner.apply(mark)?;
    inner.sync()?;
    Ok(next_seq)
}

impl<E: KvEngine> Shared<E> {
    /// Writes `frozen` into the inner engine, durably, with `floor`, the
    /// first sequence number of the file the log turned to; then drops it.
    /// Until then the file the log turned away from is not written again.
    fn checkpoint(&self, frozen: &MemTable, floor: u64) -> Result<()> {
        let mut batch = frozen.to_batch();
        batch.put(keys::WAL_SEQ.to_vec(), keys::encode_u64(floor));
        self.inner.apply(batch)?;
        self.inner.sync()?;
        write(&self.tables).frozen = None;
        Ok(())
    }
}

impl<E: KvEngine> WalEngine<E> {
    /// Freezes the active table and turns the log to its other file, if the
    /// current one is full and no checkpoint is under way (caller holds the
    /// log). `next` is the first sequence number not yet written: the new
    /// file starts with it.
    fn turn_if_full(&self, log: &mut Log, next: u64) {
        if log.end < self.shared.checkpoint_bytes {
            return;
        }
        let frozen = {
            let mut tables = write(&self.shared.tables);
            if tables.frozen.is_some() {
                // The last checkpoint is still running (or failing): its
                // file must stay as it is, so this one goes on growing.
                return;
            }
            let frozen = Arc::new(std::mem::take(&mut tables.active));
            tables.frozen = Some(frozen.clone());
            frozen
        };
        log.current ^= 1;
        log.end = 0;
        shoal_proto::crash_point!(shoal_proto::crash_points::LOG_TURNED);
        let shared = self.shared.clone();
        let started = std::thread::Builder::new()
            .name("shoal-checkpoint".into())
            .spawn(move || {
                while let Err(e) = shared.checkpoint(&frozen, next) {
                    tracing::warn!("metadata checkpoint failed (will retry): {e}");
                    std::thread::sleep(CHECKPOINT_RETRY);
                }
            });
        if let Err(e) = started {
            // Without a thread, checkpoint here: slower for this one sync,
            // but the log must not turn back onto an unsaved file.
            tracing::warn!("no thread for the metadata checkpoint ({e}); checkpointing inline");
            let frozen = read(&self.shared.tables).frozen.clone();
            if let Some(frozen) = frozen {
                if let Err(e) = self.shared.checkpoint(&frozen, next) {
                    tracing::warn!("metadata checkpoint failed (will retry): {e}");
                }
            }
        }
    }

    /// Waits until no checkpoint is under way and its thread is gone
    /// (tests: the inner engine can then be opened again).
    #[cfg(test)]
    fn wait_for_checkpoint(&self) {
        while Arc::strong_count(&self.shared) > 1 {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

impl<E: KvEngine> KvEngine for WalEngine<E> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if let Some(v) = read(&self.shared.tables).newest(key) {
            return Ok(v.map(<[u8]>::to_vec));
        }
        self.shared.inner.get(key)
    }

    fn get_many(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        let mut out = Vec::with_capacity(keys.len());
        // Indices of the keys the tables do not hold: the inner engine's.
        let mut below = Vec::new();
        {
            let tables = read(&self.shared.tables);
            for (i, key) in keys.iter().enumerate() {
                match tables.newest(key) {
                    Some(v) => out.push(v.map(<[u8]>::to_vec)),
                    None => {
                        out.push(None);
                        below.push(i);
                    }
                }
            }
        }
        if !below.is_empty() {
            let asked: Vec<&[u8]> = below.iter().map(|&i| keys[i]).collect();
            for (i, v) in below.into_iter().zip(self.shared.inner.get_many(&asked)?) {
                out[i] = v;
            }
        }
        Ok(out)
    }

    fn scan(&self, prefix: &[u8], after: Option<&[u8]>, limit: usize) -> Result<Vec<Pair>> {
        let tables = read(&self.shared.tables);
        let mut layers = vec![&tables.active];
        layers.extend(tables.frozen.as_deref());
        merged_scan(&layers, &self.shared.inner, prefix, after, limit)
    }

    fn apply(&self, batch: Batch) -> Result<()> {
        let full = {
            // Under the tail lock, so that the log's order is the apply order.
            let mut tail = lock(&self.shared.tail);
            let seq = tail.next_seq;
            encode(&mut tail.bytes, seq, &batch);
            tail.next_seq += 1;
            write(&self.shared.tables).active.apply(batch);
            tail.bytes.len() >= TAIL_LIMIT
        };
        if full {
            // The batch is applied; whether it is durable is what a sync
            // reports, so a failure here is only worth a warning (the tail
            // stays, for the next sync).
            if let Err(e) = self.sync() {
                tracing::warn!("metadata log: writing a full tail failed: {e}");
            }
        }
        Ok(())
    }

    fn sync(&self) -> Result<()> {
        let mut log = lock(&self.shared.log);
        let (pending, next) = {
            let mut tail = lock(&self.shared.tail);
            (std::mem::take(&mut tail.bytes), tail.next_seq)
        };
        assert!(
            next >= log.synced_next,
            "metadata log sequence went backwards: {next} after {}",
            log.synced_next
        );
        if !pending.is_empty() {
            let (end, current) = (log.end, log.current);
            if let Err(e) = log.files[current].write_at(&pending, end) {
                // Nothing of it counts as written: put it back in front of
                // what was applied since, for the next sync to write again
                // at the same place. (Writing the bytes again is what
                // survives a failed writeback: the kernel may have dropped
                // those pages.)
                let mut tail = lock(&self.shared.tail);
                let later = std::mem::replace(&mut tail.bytes, pending);
                tail.bytes.extend_from_slice(&later);
                return Err(e);
            }
            log.end += pending.len() as u64;
        }
        log.synced_next = next;
        self.turn_if_full(&mut log, next);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::mem_engine::MemEngine;
    use crate::kv::redb_engine::RedbEngine;

    fn put(k: &str, v: &str) -> Batch {
        let mut b = Batch::default();
        b.put(k.as_bytes().to_vec(), v.as_bytes().to_vec());
        b
    }

    fn get(kv: &dyn KvEngine, k: &str) -> Option<String> {
        kv.get(k.as_bytes())
            .unwrap()
            .map(|v| String::from_utf8(v).unwrap())
    }

    /// A crash loses whatever the inner engine had not made durable: model
    /// it with a fresh in-memory engine under the same log.
    fn reopen_after_crash(dir: &Path) -> WalEngine<MemEngine> {
        WalEngine::open(MemEngine::default(), dir).unwrap()
    }

    #[test]
    fn synced_records_survive_losing_the_inner_engine() {
        let dir = tempfile::tempdir().unwrap();
        {
            let kv = WalEngine::open(MemEngine::default(), dir.path()).unwrap();
            kv.apply(put("a", "1")).unwrap();
            let mut b = put("b", "2");
            b.delete(b"a".to_vec());
            kv.apply(b).unwrap();
            kv.apply(put("c", "3")).unwrap();
            kv.sync().unwrap();
            // Applied, never synced: may be lost.
            kv.apply(put("d", "4")).unwrap();
            assert_eq!(get(&kv, "d").as_deref(), Some("4"), "visible at once");
        }
        let kv = reopen_after_crash(dir.path());
        assert_eq!(get(&kv, "a"), None, "the delete after the put replays too");
        assert_eq!(get(&kv, "b").as_deref(), Some("2"));
        assert_eq!(get(&kv, "c").as_deref(), Some("3"));
        assert_eq!(get(&kv, "d"), None);
    }

    #[test]
    fn replay_over_an_engine_that_has_part_of_the_log_is_harmless() {
        let dir = tempfile::tempdir().unwrap();
        let inner = MemEngine::default();
        {
            let kv = WalEngine::open(MemEngine::default(), dir.path()).unwrap();
            for (i, v) in ["1", "2", "3"].iter().enumerate() {
                kv.apply(put("k", v)).unwrap();
                if i == 0 {
                    // The inner engine held the first record durably.
                    inner.apply(put("k", v)).unwrap();
                }
            }
            kv.apply(put("other", "x")).unwrap();
            kv.sync().unwrap();
        }
        let kv = WalEngine::open(inner, dir.path()).unwrap();
        assert_eq!(get(&kv, "k").as_deref(), Some("3"));
        assert_eq!(get(&kv, "other").as_deref(), Some("x"));
    }

    /// Applies and syncs `n` records `k000..` of 100 bytes each.
    fn fill(kv: &dyn KvEngine, from: usize, n: usize) {
        for i in from..from + n {
            kv.apply(put(&format!("k{i:04}"), &"v".repeat(100)))
                .unwrap();
            kv.sync().unwrap();
        }
    }

    #[test]
    fn checkpoints_turn_the_log_and_lose_nothing_across_turns_and_crashes() {
        let dir = tempfile::tempdir().unwrap();
        let inner_dir = tempfile::tempdir().unwrap();
        let open = || {
            let inner = RedbEngine::open(inner_dir.path()).unwrap();
            WalEngine::open_with(inner, dir.path(), 4096).unwrap()
        };
        {
            let kv = open();
            // Each record is ~130 bytes: 300 of them turn the log ~9 times.
            fill(&kv, 0, 300);
            kv.wait_for_checkpoint();
            // A log that filled while a checkpoint still ran goes on growing
            // until the next write finds none running (a slow checkpoint
            // thread, as under a loaded test run): that write turns it.
            kv.apply(put("turn", "x")).unwrap();
            kv.sync().unwrap();
            kv.wait_for_checkpoint();
            assert!(lock(&kv.shared.log).end < 4096 + 200);
            // Deletes across a turn, and a scan over all three layers.
            let mut b = Batch::default();
            for i in (0..300).step_by(2) {
                b.delete(format!("k{i:04}").into_bytes());
            }
            kv.apply(b).unwrap();
            kv.sync().unwrap();
            assert_eq!(kv.scan(b"k", None, 1000).unwrap().len(), 150);
            // And point reads over the same layers, one by one and at once
            // (deletes in the tables over records in the inner engine).
            let keys: Vec<Vec<u8>> = (0..300).map(|i| format!("k{i:04}").into_bytes()).collect();
            let asked: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
            let one_by_one: Vec<_> = asked.iter().map(|k| kv.get(k).unwrap()).collect();
            assert_eq!(kv.get_many(&asked).unwrap(), one_by_one);
            assert_eq!(one_by_one.iter().flatten().count(), 150);
            kv.wait_for_checkpoint();
        }
        // A crash: what was applied to redb without a durable commit is
        // gone with the process (redb reopens at its last durable commit).
        let kv = open();
        assert_eq!(kv.scan(b"k", None, 1000).unwrap().len(), 150);
        assert_eq!(get(&kv, "k0001").as_deref(), Some(&*"v".repeat(100)));
        assert_eq!(get(&kv, "k0002"), None);
        fill(&kv, 300, 100);
        kv.wait_for_checkpoint();
        drop(kv);
        let kv = open();
        assert_eq!(kv.scan(b"k", None, 1000).unwrap().len(), 250);
    }

    #[test]
    fn a_crash_during_a_checkpoint_replays_both_files_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let keep = MemEngine::default();
        {
            // An inner engine that never takes the checkpoint: the frozen
            // table's records live only in the first file.
            struct Refuses;
            impl KvEngine for Refuses {
                fn get(&self, _: &[u8]) -> Result<Option<Vec<u8>>> {
                    Ok(None)
                }
                fn scan(&self, _: &[u8], _: Option<&[u8]>, _: usize) -> Result<Vec<Pair>> {
                    Ok(Vec::new())
                }
                fn apply(&self, b: Batch) -> Result<()> {
                    match &b.ops[..] {
                        [crate::kv::engine::BatchOp::Put(k, _)] if k == keys::WAL_SEQ => Ok(()),
                        _ => Err(shoal_proto::ShoalError::io("disk full")),
                    }
                }
                fn sync(&self) -> Result<()> {
                    Ok(())
                }
            }
            let kv = WalEngine::open_with(Refuses, dir.path(), 4096).unwrap();
            fill(&kv, 0, 100);
            assert!(read(&kv.shared.tables).frozen.is_some(), "checkpoint stuck");
            assert_eq!(
                kv.scan(b"k", None, 1000).unwrap().len(),
                100,
                "still readable"
            );
        }
        let kv = WalEngine::open(keep, dir.path()).unwrap();
        assert_eq!(kv.scan(b"k", None, 1000).unwrap().len(), 100);
    }

    #[test]
    fn records_older_than_the_last_checkpoint_are_not_replayed() {
        let dir = tempfile::tempdir().unwrap();
        let mut old = Vec::new();
        for (i, v) in ["old1", "old2"].iter().enumerate() {
            encode(&mut old, i as u64 + 1, &put("k", v));
        }
        std::fs::write(dir.path().join(LOG_FILES[1]), &old).unwrap();
        // The last checkpoint said the log went on at seq 5.
        let inner = MemEngine::default();
        inner.apply(put("k", "checkpointed")).unwrap();
        let mut b = Batch::default();
        b.put(keys::WAL_SEQ.to_vec(), keys::encode_u64(5));
        inner.apply(b).unwrap();
        let kv = WalEngine::open(inner, dir.path()).unwrap();
        assert_eq!(get(&kv, "k").as_deref(), Some("checkpointed"));
        assert_eq!(lock(&kv.shared.tail).next_seq, 5);
    }

    #[test]
    fn switching_the_log_off_replays_it_first() {
        let dir = tempfile::tempdir().unwrap();
        {
            let kv = WalEngine::open(MemEngine::default(), dir.path()).unwrap();
            kv.apply(put("a", "1")).unwrap();
            kv.sync().unwrap();
        }
        let kv = WalEngine::retire(MemEngine::default(), dir.path()).unwrap();
        assert_eq!(get(&kv, "a").as_deref(), Some("1"));
        assert!(LOG_FILES.iter().all(|f| !dir.path().join(f).exists()));
        WalEngine::retire(MemEngine::default(), dir.path()).unwrap();
    }

    #[test]
    fn a_big_tail_is_written_without_waiting_for_a_sync() {
        let dir = tempfile::tempdir().unwrap();
        {
            let kv = WalEngine::open(MemEngine::default(), dir.path()).unwrap();
            let big = "x".repeat(TAIL_LIMIT);
            kv.apply(put("big", &big)).unwrap();
        }
        let kv = reopen_after_crash(dir.path());
        assert_eq!(get(&kv, "big").map(|v| v.len()), Some(TAIL_LIMIT));
    }
}
