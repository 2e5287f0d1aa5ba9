//! Directory read-ahead: the first batch of the subdirectories a listing
//! shows, fetched before the program opens them, so that a walk of a tree
//! (`ls -R`, `find`, `du`, `tar -c`) waits for about one round trip per
//! listing of siblings rather than one per directory, as statahead does for
//! stats. A front end says what each listing batch showed
//! ([`Client::listed_subdirectories`]; libshoal does, the mount has the
//! kernel's own read-ahead of nothing and does not). Read-ahead starts once
//! the process is seen walking (it opens a directory a listing showed), so
//! that a program that lists one directory fetches nothing it does not
//! read.
//!
//! A batch fetched ahead is used only if, when its directory is opened:
//! - the directory's server still leases it to this client under the lease
//!   that came with the batch (another client's change to the directory
//!   recalls that lease, and a reply to a request that began before such a
//!   change grants none), and
//! - this client has sent no metadata change since the request went (its
//!   own changes are not recalled from it; the pool counts them).
//!
//! Otherwise the batch is dropped and asked for again. A walk that changes
//! the namespace as it goes (`rm -r`, `cp -r` within Shoal) would have
//! every batch dropped, so no read-ahead starts from a listing that follows
//! a change by this client: such a walk pays at most one listing's batches.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::future::{BoxFuture, FutureExt, Shared};
use shoal_proto::msg::ObjectRecord;
use shoal_proto::{Cred, Handle};

use crate::{Client, DirEntry};

/// Batches fetched ahead (or being fetched) and not used yet, at most; past
/// it the oldest goes. A depth-first walk needs the newest first: the
/// children of the directory it just listed.
const MAX_AHEAD: usize = 256;
/// Directories shown by listings remembered, at most, to see a walk start.
const MAX_SHOWN: usize = 4096;

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

struct Slot {
    /// Who asked: the server checked that caller's permission to list.
    cred: Cred,
    /// The pool's count of metadata changes when the request went.
    changes: u64,
    max: u32,
    /// Order of fetching, for eviction.
    seq: u64,
    batch: Shared<BoxFuture<'static, Option<Arc<FirstBatch>>>>,
}

#[derive(Default)]
pub(crate) struct ListingsAhead {
    slots: Mutex<Slots>,
    /// Directories listings showed, until one of them is opened.
    shown: Mutex<foldhash::HashSet<Handle>>,
    walking: AtomicBool,
    /// The pool's count of metadata changes at the last listing reported.
    changes_at_listing: AtomicU64,
    counts: ReadAheadCounts,
}

#[derive(Default)]
struct Slots {
    by_dir: foldhash::HashMap<Handle, Slot>,
    next_seq: u64,
}

#[derive(Default)]
struct ReadAheadCounts {
    fetched: AtomicU64,
    used: AtomicU64,
    dropped: AtomicU64,
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

impl Client {
    /// A front end's listing batch of some directory showed these
    /// subdirectories; once the process walks, their first batches (of
    /// `max` entries) are fetched ahead, and with `with_attrs` (the listing
    /// was a readdirplus) their entries' attributes too, into the attribute
    /// cache where the next readdirplus finds them. Call it within the
    /// client's runtime: the fetches are tasks of it.
    pub fn listed_subdirectories(&self, dirs: &[Handle], max: u32, with_attrs: bool) {
        let ahead = &self.inner.listings_ahead;
        let changes = self.pool().metadata_changes();
        let quiet = ahead.changes_at_listing.swap(changes, Ordering::Relaxed) == changes;
        if !ahead.walking.load(Ordering::Relaxed) {
            let mut shown = ahead.shown.lock().unwrap_or_else(|e| e.into_inner());
            if shown.len() + dirs.len() > MAX_SHOWN {
                shown.clear();
            }
            shown.extend(dirs.iter().copied());
            return;
        }
        if !quiet {
            return;
        }
        let mut slots = ahead.slots.lock().unwrap_or_else(|e| e.into_inner());
        for &dir in dirs.iter().take(MAX_AHEAD) {
            if slots.by_dir.contains_key(&dir) {
                continue;
            }
            if slots.by_dir.len() >= MAX_AHEAD {
                slots.evict_oldest();
            }
            let c = self.clone();
            let batch = async move {
                let (entries, done, dir, lease) =
                    c.readdir_request_sent(dir, "", max, true).await.ok()?;
                if with_attrs {
                    // Cached as any readdirplus's; a failure is met again
                    // by the listing's own.
                    let handles: Vec<Handle> = entries.iter().map(|e| e.handle).collect();
                    let _ = c.listattr(&handles).await;
                }
                let counts = &c.inner.listings_ahead.counts;
                counts.fetched.fetch_add(1, Ordering::Relaxed);
                Some(Arc::new(FirstBatch {
                    entries,
                    done,
                    dir,
                    leased: lease?,
                }))
            }
            .boxed()
            .shared();
            // Driven by the runtime from now on, awaited or not.
            tokio::spawn(batch.clone());
            let seq = slots.next_seq;
            slots.next_seq += 1;
            let slot = Slot {
                cred: self.cred,
                changes,
                max,
                seq,
                batch,
            };
            slots.by_dir.insert(dir, slot);
        }
    }

    /// The first batch of `dir`'s listing (`max` entries) if one was fetched
    /// ahead and is still good (see the module doc). Opening a directory a
    /// listing showed is what starts read-ahead.
    pub(crate) async fn listing_ahead(&self, dir: Handle, max: u32) -> Option<Arc<FirstBatch>> {
        let ahead = &self.inner.listings_ahead;
        if !ahead.walking.load(Ordering::Relaxed) {
            let shown = ahead.shown.lock().unwrap_or_else(|e| e.into_inner());
            if shown.contains(&dir) {
                ahead.walking.store(true, Ordering::Relaxed);
            }
            return None;
        }
        let slot = ahead
            .slots
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .by_dir
            .remove(&dir)?;
        let fetched = slot.batch.await;
        let good = fetched.filter(|f| {
            slot.max == max
                && slot.cred == self.cred
                && slot.changes == self.pool().metadata_changes()
                && f.leased > Instant::now()
                && self.inner.leases.until(dir) == Some(f.leased)
        });
        let count = match good {
            Some(_) => &ahead.counts.used,
            None => &ahead.counts.dropped,
        };
        count.fetch_add(1, Ordering::Relaxed);
        good
    }

    /// What directory read-ahead did so far.
    pub fn read_ahead_listings(&self) -> ReadAhead {
        let c = &self.inner.listings_ahead.counts;
        ReadAhead {
            fetched: c.fetched.load(Ordering::Relaxed),
            used: c.used.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
        }
    }
}

impl Slots {
    fn evict_oldest(&mut self) {
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
