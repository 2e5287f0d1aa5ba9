//! The distribution cache: each file's layout over the servers, as its
//! metafile's server said.

use std::time::{Duration, Instant};

use shoal_proto::msg::Distribution;
use shoal_proto::Handle;

use crate::consistency::cache::{self, TtlCache};

/// Cached distributions. A distribution never changes once set, except that a
/// stuffed one (stuffing) is replaced once by its unstuffed form, by whichever
/// client first goes past the first strip. So unstuffed distributions are cached
/// without a TTL, and stuffed ones count as current only for the attribute
/// TTL: another client sees the new layout as soon as it sees the new size.
/// Past the TTL a stuffed layout is still used for accesses within the first
/// strip, where it is right whatever happened since: datafile 0 never changes.
pub(crate) struct DistCache {
    ttl: Duration,
    /// A distribution and, for a stuffed one, when it was seen (one map, so
    /// that a readdirplus batch's puts cost one lock each).
    map: TtlCache<Handle, (Distribution, Option<Instant>)>,
}

impl DistCache {
    pub(crate) fn new(stuffed_ttl: Duration, max: usize) -> DistCache {
        DistCache {
            ttl: stuffed_ttl,
            map: TtlCache::bounded(cache::FOREVER, max),
        }
    }

    /// The current distribution of `h`, if known.
    pub(crate) fn get(&self, h: &Handle) -> Option<Distribution> {
        match self.map.get(h)? {
            (d, None) => Some(d),
            (d, Some(at)) => (at.elapsed() < self.ttl).then_some(d),
        }
    }

    /// A layout of `h` seen at any time, stuffed or not: good for what an
    /// unstuff keeps (its strip size, its write threshold).
    pub(crate) fn seen(&self, h: &Handle) -> Option<Distribution> {
        self.map.get(h).map(|(d, _)| d)
    }

    /// A stuffed layout of `h` seen at any time: good for its first strip only.
    pub(crate) fn stuffed_layout(&self, h: &Handle) -> Option<Distribution> {
        self.map.get(h).filter(|(d, _)| d.stuffed).map(|(d, _)| d)
    }

    pub(crate) fn put(&self, h: Handle, dist: Distribution) {
        self.put_many([(h, dist)]);
    }

    /// Drops a stuffed layout of `h` (another client may have unstuffed it).
    pub(crate) fn forget_stuffed(&self, h: Handle) {
        if self.stuffed_layout(&h).is_some() {
            self.map.remove(&h);
        }
    }

    /// Several at once, under one lock (a listing's).
    pub(crate) fn put_many(&self, dists: impl IntoIterator<Item = (Handle, Distribution)>) {
        let now = Instant::now();
        self.map.put_many(dists.into_iter().map(|(h, d)| {
            let seen = d.stuffed.then_some(now);
            (h, (d, seen))
        }));
    }

    /// Drops the layouts of `handles` (the front end forgot them).
    pub(crate) fn remove_many(&self, handles: &[Handle]) {
        self.map.remove_many(handles);
    }

    /// Gives back the room of what was evicted or forgotten.
    pub(crate) fn compact(&self) {
        self.map.compact();
    }

    /// Layouts held now (for the mount's stats).
    pub(crate) fn entries(&self) -> usize {
        self.map.entries()
    }
}
