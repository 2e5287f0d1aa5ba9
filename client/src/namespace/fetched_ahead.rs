//! The state of directory read-ahead (`listings_ahead`): the first batches
//! fetched ahead, one slot per directory (at most [`MAX_AHEAD`]), the
//! directories listings showed (at most [`MAX_SHOWN`]), and the counts
//! `shoal stats` shows.

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::future::{BoxFuture, Shared};
use shoal_proto::msg::ObjectRecord;
use shoal_proto::{Cred, Handle};

use crate::types::DirEntry;

/// Batches fetched ahead (or being fetched) and not used yet, at most; past
/// it the oldest goes. A depth-first walk needs the newest first: the
/// children of the directory it just listed.
pub(crate) const MAX_AHEAD: usize = 256;
/// Directories shown by listings remembered, at most, to see a walk start.
pub(crate) const MAX_SHOWN: usize = 4096;

/// A first batch fetched ahead.
pub(crate) struct FirstBatch {
    pub entries: Vec<DirEntry>,
    /// Whether they are all of the directory's.
    pub done: bool,
    /// The directory's own record.
    pub dir: Option<ObjectRecord>,
    /// Until when the reply leased them.
    pub leased: Instant,
}

pub(crate) struct Slot {
    /// Who asked: the server checked that caller's permission to list.
    pub(crate) cred: Cred,
    /// The pool's count of metadata changes when the request went.
    pub(crate) changes: u64,
    pub(crate) max: u32,
    /// Order of fetching, for eviction.
    pub(crate) seq: u64,
    pub(crate) batch: Shared<BoxFuture<'static, Option<Arc<FirstBatch>>>>,
}

#[derive(Default)]
pub(crate) struct ListingsAhead {
    pub(crate) slots: Mutex<Slots>,
    /// Directories listings showed, until one of them is opened.
    pub(crate) shown: Mutex<foldhash::HashSet<Handle>>,
    pub(crate) walking: AtomicBool,
    /// The pool's count of metadata changes at the last listing reported.
    pub(crate) changes_at_listing: AtomicU64,
    pub(crate) counts: ReadAheadCounts,
}

#[derive(Default)]
pub(crate) struct Slots {
    pub(crate) by_dir: foldhash::HashMap<Handle, Slot>,
    pub(crate) next_seq: u64,
}

#[derive(Default)]
pub(crate) struct ReadAheadCounts {
    pub(crate) fetched: AtomicU64,
    pub(crate) used: AtomicU64,
    pub(crate) dropped: AtomicU64,
}

/// What directory read-ahead did in this client so far.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadAhead {
    /// First batches brought ahead of their directory's opening (with
    /// their entries' attributes if asked).
    pub fetched: u64,
    /// Of those, answered an opening.
    pub used: u64,
    /// Of those, found stale (or failed) at the opening and asked for again.
    pub dropped: u64,
}

impl std::fmt::Display for ReadAhead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "fetched {}, used {}, dropped {}",
            self.fetched, self.used, self.dropped
        )
    }
}

impl Slots {
    pub(crate) fn evict_oldest(&mut self) {
        let oldest = self
            .by_dir
            .iter()
            .min_by_key(|(_, s)| s.seq)
            .map(|(h, _)| *h);
        if let Some(h) = oldest {
            self.by_dir.remove(&h);
        }
    }
}
