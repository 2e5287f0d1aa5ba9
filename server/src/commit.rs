//! The commit queue: where a modifying request waits until its changes are
//! durable. This is the baseline of seed 000: every modifying request pays one
//! sync of the KV store before its reply. (Commit coalescing replaces this with
//! a shared sync for requests that arrive together.)

use std::sync::atomic::Ordering;

use shoal_proto::cluster::SyncMode;
use shoal_proto::error::Result;

use crate::meta_store::MetaStore;
use crate::stats::Stats;

pub struct CommitQueue {
    mode: SyncMode,
}

impl CommitQueue {
    pub fn new(mode: SyncMode) -> CommitQueue {
        CommitQueue { mode }
    }

    /// Makes every change applied so far durable; returns the syncs it took.
    pub fn make_durable(&self, meta: &MetaStore, stats: &Stats) -> Result<u64> {
        match self.mode {
            SyncMode::None => Ok(0),
            SyncMode::Full => self.sync_now(meta, stats),
        }
    }

    /// Syncs whatever the mode (fsync asks for it explicitly).
    pub fn sync_now(&self, meta: &MetaStore, stats: &Stats) -> Result<u64> {
        meta.kv().sync()?;
        stats.kv_syncs.fetch_add(1, Ordering::Relaxed);
        Ok(1)
    }
}
