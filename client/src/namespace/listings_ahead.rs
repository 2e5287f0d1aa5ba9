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

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use futures::future::FutureExt;
use shoal_proto::Handle;

use crate::client::Client;
use crate::namespace::fetched_ahead::{FirstBatch, ReadAhead, Slot, MAX_AHEAD, MAX_SHOWN};

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
