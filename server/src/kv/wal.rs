//! A write-ahead log in front of an engine whose durable commit is costly.
//!
//! Why: redb makes a commit durable by writing every B-tree page the
//! commits since the last durable one dirtied (five or six scattered pages
//! for one create) and then fsyncing; on this project's machines that is
//! about 0.5 ms, against about 0.15 ms to overwrite one block of a
//! preallocated log and fdatasync it. A modifying request waits for exactly
//! that sync, so the log is what a create or a remove costs on disk.
//!
//! How: [`KvEngine::apply`] applies the batch to the inner engine (visible
//! at once, not durable) and appends an encoded copy to an in-memory tail;
//! [`KvEngine::sync`] writes the tail into the log file and fdatasyncs it:
//! that is the durability point. The file is allocated and zero-filled
//! once, so a sync changes data blocks only, never the file's size or
//! extents (which would add a journal commit to every fdatasync). Once the
//! log passes its checkpoint length, the sync also makes the inner engine
//! durable (its own sync) and starts the log again at offset 0, so the log
//! and the time to replay it stay bounded.
//!
//! Recovery ([`WalEngine::open`]): the inner engine opens at its last
//! durable commit (the last checkpoint, or later); the log's records are
//! replayed onto it in order, then checkpointed. Replaying a record the
//! inner engine already holds is harmless: a record is puts and deletes of
//! whole values, so after an in-order replay every key holds the value of
//! the last record that touched it, whatever prefix of the log the inner
//! engine already had.
//!
//! Where the log ends: at the first record that is torn (short, or a bad
//! checksum: a crash in the middle of a write that was never acknowledged)
//! or out of sequence. Sequence numbers grow by one per record and never
//! restart; each checkpoint stores, durably with the inner engine, the
//! first sequence number the restarted log will hold (`keys::WAL_SEQ`). A
//! record below it, or one that does not follow its predecessor, is left
//! over from before a restart of the log and ends it.
//!
//! Record layout (little-endian): `len: u32` (body bytes), `crc: u32`
//! (CRC-32 of `seq` and the body), `seq: u64`, then the body: per operation
//! a tag byte (`1` put, `2` delete), `key_len: u32`, the key, and for a put
//! `value_len: u32` and the value.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use shoal_proto::error::{Result, ShoalError};

use super::{Batch, BatchOp, KvEngine, Pair};
use crate::disk::fs_space;
use crate::keys;

/// The log file, beside the inner engine's files.
pub const LOG_FILE: &str = "meta.wal";
/// Log length past which a sync also checkpoints: 1/64 of the file
/// system, within these bounds. Big enough that the checkpoint's own cost
/// (the inner engine writing every page dirtied since the last one) is
/// shared by thousands of requests; small enough that replaying the log at
/// start-up takes a moment, and that a small disk keeps room for the rest.
pub const CHECKPOINT_MIN: u64 = 256 << 10;
pub const CHECKPOINT_MAX: u64 = 16 << 20;
/// Tail length past which an apply syncs the log itself. File data written
/// inline (durable only on fsync) applies without any sync following; this
/// keeps the tail's memory bounded when nothing else syncs, as in scratch
/// mode (`sync = "none"`).
pub const TAIL_LIMIT: usize = 1 << 20;

const HEADER: usize = 16;
const PUT: u8 = 1;
const DELETE: u8 = 2;
/// Largest body a record may claim when read back (a bound against a
/// garbage length; a batch is far smaller).
const MAX_BODY: usize = 1 << 30;
/// Zero-filling writes this much at a time.
const FILL_CHUNK: usize = 1 << 20;

pub struct WalEngine<E> {
    inner: E,
    /// Records applied to `inner` and not yet written to the log, in apply
    /// order.
    tail: Mutex<Tail>,
    /// The log; held by the one sync that writes it.
    log: Mutex<Log>,
    checkpoint_bytes: u64,
}

struct Tail {
    bytes: Vec<u8>,
    next_seq: u64,
}

struct Log {
    file: File,
    path: PathBuf,
    /// Where the next record goes: the log's records end here, and all of
    /// them are durable once a sync has returned.
    end: u64,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn io_err(what: &str, path: &Path, e: std::io::Error) -> ShoalError {
    ShoalError::from(e).context(format!("metadata log {}: {what}", path.display()))
}

impl<E: KvEngine> WalEngine<E> {
    /// Opens the log in `dir` in front of `inner`, replays what it holds onto
    /// `inner` and checkpoints.
    pub fn open(inner: E, dir: &Path) -> Result<WalEngine<E>> {
        let total = fs_space(dir).map(|(total, _)| total).unwrap_or(0);
        let checkpoint_bytes = (total / 64).clamp(CHECKPOINT_MIN, CHECKPOINT_MAX);
        WalEngine::open_with(inner, dir, checkpoint_bytes)
    }

    fn open_with(inner: E, dir: &Path, checkpoint_bytes: u64) -> Result<WalEngine<E>> {
        let path = dir.join(LOG_FILE);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| io_err("open", &path, e))?;
        let log = Log { file, path, end: 0 };
        let floor = inner
            .get(keys::WAL_SEQ)?
            .map(|v| keys::decode_u64(&v))
            .unwrap_or(1);
        let replayed = replay(&log, &inner, floor)?;
        if replayed.records > 0 {
            tracing::info!(
                "metadata log: replayed {} records ({} bytes)",
                replayed.records,
                replayed.bytes
            );
        }
        fill(&log, checkpoint_bytes)?;
        let engine = WalEngine {
            inner,
            tail: Mutex::new(Tail {
                bytes: Vec::new(),
                next_seq: replayed.next_seq,
            }),
            log: Mutex::new(log),
            checkpoint_bytes,
        };
        // The replayed records become durable in the inner engine, and the
        // log starts again after them.
        engine.checkpoint(&mut lock(&engine.log), replayed.next_seq)?;
        Ok(engine)
    }

    /// For a server that runs without the log: replays and removes a log an
    /// earlier run left in `dir`, so that switching the log off loses
    /// nothing, and returns the inner engine.
    pub fn retire(inner: E, dir: &Path) -> Result<E> {
        let path = dir.join(LOG_FILE);
        if !path.exists() {
            return Ok(inner);
        }
        let engine = WalEngine::open(inner, dir)?;
        std::fs::remove_file(&path).map_err(|e| io_err("remove", &path, e))?;
        Ok(engine.inner)
    }

    /// Makes the inner engine durable and starts the log again at offset 0
    /// (caller holds the log). `next` is the sequence number of the first
    /// record the restarted log will hold: everything before it is applied
    /// to the inner engine. Records applied meanwhile are still in the
    /// tail and go to the restarted log with the next sync.
    fn checkpoint(&self, log: &mut Log, next: u64) -> Result<()> {
        let mut floor = Batch::default();
        floor.put(keys::WAL_SEQ.to_vec(), keys::encode_u64(next));
        self.inner.apply(floor)?;
        self.inner.sync()?;
        log.end = 0;
        Ok(())
    }
}

/// Makes the log file at least `len` bytes of written zeros, durably, so
/// that syncs overwrite allocated blocks and do not change the file's size
/// (only the sync that crosses the checkpoint length writes past it).
fn fill(log: &Log, len: u64) -> Result<()> {
    let have = log
        .file
        .metadata()
        .map_err(|e| io_err("stat", &log.path, e))?
        .len();
    if have >= len {
        return Ok(());
    }
    let zeros = vec![0u8; FILL_CHUNK];
    let mut at = have;
    while at < len {
        let n = (len - at).min(FILL_CHUNK as u64) as usize;
        log.file
            .write_all_at(&zeros[..n], at)
            .map_err(|e| io_err("allocate", &log.path, e))?;
        at += n as u64;
    }
    log.file
        .sync_all()
        .map_err(|e| io_err("allocate", &log.path, e))
}

impl<E: KvEngine> KvEngine for WalEngine<E> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.inner.get(key)
    }

    fn scan(&self, prefix: &[u8], after: Option<&[u8]>, limit: usize) -> Result<Vec<Pair>> {
        self.inner.scan(prefix, after, limit)
    }

    fn apply(&self, batch: Batch) -> Result<()> {
        let full = {
            // Under the tail lock, so that the log's order is the apply order.
            let mut tail = lock(&self.tail);
            let seq = tail.next_seq;
            let start = tail.bytes.len();
            encode(&mut tail.bytes, seq, &batch);
            if let Err(e) = self.inner.apply(batch) {
                tail.bytes.truncate(start);
                return Err(e);
            }
            tail.next_seq += 1;
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
        let mut log = lock(&self.log);
        let (pending, next) = {
            let mut tail = lock(&self.tail);
            (std::mem::take(&mut tail.bytes), tail.next_seq)
        };
        if !pending.is_empty() {
            let written = log
                .file
                .write_all_at(&pending, log.end)
                .and_then(|()| log.file.sync_data());
            if let Err(e) = written {
                // Nothing of it counts as written: put it back in front of
                // what was applied since, for the next sync to write again
                // at the same place. (Writing the bytes again, rather than
                // calling fdatasync again, is what survives a failed
                // writeback: the kernel may have dropped those pages.)
                let mut tail = lock(&self.tail);
                let later = std::mem::replace(&mut tail.bytes, pending);
                tail.bytes.extend_from_slice(&later);
                return Err(io_err("write", &log.path, e));
            }
            log.end += pending.len() as u64;
        }
        if log.end >= self.checkpoint_bytes {
            // What was just synced is durable in the log whatever happens
            // here; a failed checkpoint is retried by the next sync.
            if let Err(e) = self.checkpoint(&mut log, next) {
                tracing::warn!("metadata log checkpoint failed (will retry): {e}");
            }
        }
        Ok(())
    }
}

fn encode(out: &mut Vec<u8>, seq: u64, batch: &Batch) {
    let start = out.len();
    out.extend_from_slice(&[0; HEADER]);
    for op in &batch.ops {
        match op {
            BatchOp::Put(k, v) => {
                out.push(PUT);
                put_bytes(out, k);
                put_bytes(out, v);
            }
            BatchOp::Delete(k) => {
                out.push(DELETE);
                put_bytes(out, k);
            }
        }
    }
    let body_len = out.len() - start - HEADER;
    let mut crc = crc32fast::Hasher::new();
    crc.update(&seq.to_le_bytes());
    crc.update(&out[start + HEADER..]);
    let header = &mut out[start..start + HEADER];
    header[0..4].copy_from_slice(&(body_len as u32).to_le_bytes());
    header[4..8].copy_from_slice(&crc.finalize().to_le_bytes());
    header[8..16].copy_from_slice(&seq.to_le_bytes());
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

struct Replayed {
    records: u64,
    bytes: u64,
    next_seq: u64,
}

/// Applies every whole, in-sequence record of the log to `inner`; the first
/// must be at least `floor`.
fn replay(log: &Log, inner: &dyn KvEngine, floor: u64) -> Result<Replayed> {
    let mut data = Vec::new();
    {
        use std::io::Read;
        let mut f = &log.file;
        f.read_to_end(&mut data)
            .map_err(|e| io_err("read", &log.path, e))?;
    }
    let mut at = 0;
    let mut out = Replayed {
        records: 0,
        bytes: 0,
        next_seq: floor,
    };
    let mut expected: Option<u64> = None;
    while let Some((seq, body, next)) = record_at(&data, at) {
        let in_sequence = match expected {
            Some(e) => seq == e,
            None => seq >= floor,
        };
        if !in_sequence {
            break;
        }
        let Some(batch) = decode_body(body) else {
            break;
        };
        inner.apply(batch)?;
        out.records += 1;
        out.next_seq = seq + 1;
        expected = Some(seq + 1);
        at = next;
    }
    out.bytes = at as u64;
    Ok(out)
}

/// The record at `at`: its sequence number, body and the offset after it;
/// None if it is short or its checksum is wrong.
fn record_at(data: &[u8], at: usize) -> Option<(u64, &[u8], usize)> {
    let header = data.get(at..at.checked_add(HEADER)?)?;
    let len = u32::from_le_bytes(header[0..4].try_into().ok()?) as usize;
    let crc = u32::from_le_bytes(header[4..8].try_into().ok()?);
    let seq = u64::from_le_bytes(header[8..16].try_into().ok()?);
    if len > MAX_BODY {
        return None;
    }
    let end = at + HEADER + len;
    let body = data.get(at + HEADER..end)?;
    let mut h = crc32fast::Hasher::new();
    h.update(&seq.to_le_bytes());
    h.update(body);
    (h.finalize() == crc).then_some((seq, body, end))
}

fn decode_body(mut body: &[u8]) -> Option<Batch> {
    let mut batch = Batch::default();
    while let Some((&tag, rest)) = body.split_first() {
        body = rest;
        let key = take_bytes(&mut body)?;
        match tag {
            PUT => {
                let value = take_bytes(&mut body)?;
                batch.put(key, value);
            }
            DELETE => batch.delete(key),
            _ => return None,
        }
    }
    Some(batch)
}

fn take_bytes(body: &mut &[u8]) -> Option<Vec<u8>> {
    let len = u32::from_le_bytes(body.get(0..4)?.try_into().ok()?) as usize;
    let bytes = body.get(4..4 + len)?.to_vec();
    *body = &body[4 + len..];
    Some(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kv::MemEngine;

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

    /// The log file's bytes and the offsets where its records end.
    fn records(dir: &Path) -> (Vec<u8>, Vec<usize>) {
        let data = std::fs::read(dir.join(LOG_FILE)).unwrap();
        let mut ends = Vec::new();
        let mut at = 0;
        while let Some((_, _, next)) = record_at(&data, at) {
            ends.push(next);
            at = next;
        }
        (data, ends)
    }

    #[test]
    fn a_torn_record_ends_the_log_and_keeps_what_came_before() {
        let dir = tempfile::tempdir().unwrap();
        {
            let kv = WalEngine::open(MemEngine::default(), dir.path()).unwrap();
            kv.apply(put("a", "1")).unwrap();
            kv.apply(put("b", "2")).unwrap();
            kv.sync().unwrap();
        }
        let path = dir.path().join(LOG_FILE);
        let (whole, ends) = records(dir.path());
        assert_eq!(ends.len(), 2);
        // A crash in the middle of the second record's write: its last
        // bytes never replaced the zeros.
        let mut torn = whole.clone();
        torn[ends[1] - 3..ends[1]].fill(0);
        std::fs::write(&path, &torn).unwrap();
        let kv = reopen_after_crash(dir.path());
        assert_eq!(get(&kv, "a").as_deref(), Some("1"));
        assert_eq!(get(&kv, "b"), None);
        // A flipped bit in the body is no better than a short write.
        drop(kv);
        let mut bad = whole.clone();
        bad[ends[1] - 1] ^= 0x40;
        std::fs::write(&path, &bad).unwrap();
        let kv = reopen_after_crash(dir.path());
        assert_eq!(get(&kv, "a").as_deref(), Some("1"));
        assert_eq!(get(&kv, "b"), None);
    }

    #[test]
    fn stale_records_after_a_restart_of_the_log_are_not_replayed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(LOG_FILE);
        // An older log: seq 1..=3, k = old1..old3.
        let mut old = Vec::new();
        for (i, v) in ["old1", "old2", "old3"].iter().enumerate() {
            encode(&mut old, i as u64 + 1, &put("k", v));
        }
        // A newer log written over its start after a checkpoint: seq 10,
        // k = new1, the same length as the first old record, so that the
        // second old record follows it exactly.
        let mut new = Vec::new();
        encode(&mut new, 10, &put("k", "new1"));
        assert_eq!(new.len(), record_at(&old, 0).unwrap().2);
        let mut file = new.clone();
        file.extend_from_slice(&old[new.len()..]);
        std::fs::write(&path, &file).unwrap();
        let kv = reopen_after_crash(dir.path());
        assert_eq!(get(&kv, "k").as_deref(), Some("new1"));
        assert_eq!(lock(&kv.tail).next_seq, 11);
    }

    #[test]
    fn records_below_the_checkpointed_floor_are_not_replayed() {
        let dir = tempfile::tempdir().unwrap();
        let mut old = Vec::new();
        for (i, v) in ["old1", "old2"].iter().enumerate() {
            encode(&mut old, i as u64 + 1, &put("k", v));
        }
        std::fs::write(dir.path().join(LOG_FILE), &old).unwrap();
        // The last checkpoint said the log would restart at seq 5: these
        // records are from before it (their first write after the restart
        // was torn).
        let inner = MemEngine::default();
        let mut b = Batch::default();
        b.put(keys::WAL_SEQ.to_vec(), keys::encode_u64(5));
        inner.apply(b).unwrap();
        let kv = WalEngine::open(inner, dir.path()).unwrap();
        assert_eq!(get(&kv, "k"), None);
        assert_eq!(lock(&kv.tail).next_seq, 5);
    }

    #[test]
    fn a_checkpoint_restarts_the_log_and_sequence_numbers_go_on() {
        let dir = tempfile::tempdir().unwrap();
        let inner_dir = tempfile::tempdir().unwrap();
        {
            let inner = crate::kv::RedbEngine::open(inner_dir.path()).unwrap();
            let kv = WalEngine::open_with(inner, dir.path(), 4096).unwrap();
            for i in 0..200 {
                kv.apply(put(&format!("k{i:03}"), &"v".repeat(100)))
                    .unwrap();
                kv.sync().unwrap();
            }
            let end = lock(&kv.log).end;
            assert!(end < 4096, "checkpoints keep the log short: {end}");
            assert_eq!(lock(&kv.tail).next_seq, 201);
        }
        // Everything is in the inner engine or the log; the log's leftovers
        // from before its last restart are not replayed again.
        let inner = crate::kv::RedbEngine::open(inner_dir.path()).unwrap();
        let kv = WalEngine::open(inner, dir.path()).unwrap();
        assert_eq!(kv.scan(b"k", None, 1000).unwrap().len(), 200);
        assert_eq!(lock(&kv.tail).next_seq, 201);
        assert_eq!(lock(&kv.log).end, 0);
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
        assert!(!dir.path().join(LOG_FILE).exists());
        WalEngine::retire(MemEngine::default(), dir.path()).unwrap();
    }

    #[test]
    fn a_failed_apply_leaves_nothing_in_the_log() {
        /// Refuses every batch but the log's own floor.
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
                    [BatchOp::Put(k, _)] if k == keys::WAL_SEQ => Ok(()),
                    _ => Err(ShoalError::io("no")),
                }
            }
            fn sync(&self) -> Result<()> {
                Ok(())
            }
        }
        let dir = tempfile::tempdir().unwrap();
        let kv = WalEngine::open(Refuses, dir.path()).unwrap();
        assert!(kv.apply(put("a", "1")).is_err());
        kv.sync().unwrap();
        assert_eq!(lock(&kv.log).end, 0);
        assert_eq!(lock(&kv.tail).next_seq, 1);
    }
}
