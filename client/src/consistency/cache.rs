//! Small TTL caches (name -> entry, handle -> attributes), as the client of [Vilayannur 2004]
//! keeps them: entries live `ttl` (default 100 ms) so another client's change is
//! seen within that time, and this client drops what its own changes outdate.
//! An entry a server leased (`leases`) lives until its lease ends, unless
//! the server recalls it first (the client then removes it).
//!
//! Each cache holds at most a bound of entries (the setting `cache_entries`
//! for the client's own): past it, quick_cache's S3-FIFO policy evicts one
//! that was used least (an entry used once goes before one used again), so a
//! walk of millions of files costs the bound, not the walk. An evicted entry
//! is simply asked for again. Expired entries are not swept: they wait their
//! turn to be evicted, or to be replaced by a fresh answer.

use std::hash::Hash;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The lifetime of a cache whose entries are replaced when they change,
/// never expired by age.
pub(crate) const FOREVER: Duration = Duration::from_secs(u64::MAX / 4);

/// A bounded map with quick_cache's eviction, hashed as the rest of the
/// client hashes (foldhash: a listing looks up and inserts a batch at once).
pub type Bounded<K, V> = quick_cache::unsync::Cache<
    K,
    V,
    quick_cache::UnitWeighter,
    foldhash::fast::RandomState,
    quick_cache::unsync::DefaultLifecycle<K, V>,
>;

/// An empty [`Bounded`] map of at most `max` entries (at least one).
pub fn bounded<K: Eq + Hash, V>(max: usize) -> Bounded<K, V> {
    let max = max.max(1);
    Bounded::with(
        max,
        max as u64,
        quick_cache::UnitWeighter,
        Default::default(),
        Default::default(),
    )
}

/// `map` rebuilt with only the entries `keep` keeps: its storage sized to
/// them (quick_cache keeps its largest otherwise).
pub fn compacted<K: Eq + Hash, V>(map: &mut Bounded<K, V>, mut keep: impl FnMut(&K, &V) -> bool) {
    let mut fresh = bounded(map.capacity() as usize);
    for (k, v) in map.drain() {
        if keep(&k, &v) {
            fresh.insert(k, v);
        }
    }
    *map = fresh;
}

pub struct TtlCache<K, V> {
    ttl: Duration,
    /// Each value and until when it may be used.
    map: Mutex<Bounded<K, (V, Instant)>>,
}

/// `now + ttl`, or a century from now for a cache whose entries last "forever".
pub(crate) fn expiry(now: Instant, ttl: Duration) -> Instant {
    now.checked_add(ttl)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 86_400))
}

impl<K: Eq + Hash, V: Clone> TtlCache<K, V> {
    /// A cache of at most `max` entries, each cached `ttl`.
    pub fn bounded(ttl: Duration, max: usize) -> Self {
        TtlCache {
            ttl,
            map: Mutex::new(bounded(max)),
        }
    }

    fn map(&self) -> MutexGuard<'_, Bounded<K, (V, Instant)>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn get(&self, key: &K) -> Option<V> {
        if self.ttl.is_zero() {
            return None;
        }
        let map = self.map();
        let now = Instant::now();
        map.get(key)
            .filter(|(_, until)| now < *until)
            .map(|(v, _)| v.clone())
    }

    /// [`get`](Self::get) of each key, index-aligned, under one lock.
    pub fn get_many<'a>(&self, keys: impl IntoIterator<Item = &'a K>) -> Vec<Option<V>>
    where
        K: 'a,
    {
        let keys = keys.into_iter();
        if self.ttl.is_zero() {
            return keys.map(|_| None).collect();
        }
        let map = self.map();
        let now = Instant::now();
        keys.map(|k| {
            map.get(k)
                .filter(|(_, until)| now < *until)
                .map(|(v, _)| v.clone())
        })
        .collect()
    }

    pub fn put(&self, key: K, value: V) {
        self.put_many([(key, value)]);
    }

    /// Several entries at once, under one lock (a listing's batch).
    pub fn put_many(&self, entries: impl IntoIterator<Item = (K, V)>) {
        self.put_many_leased(entries.into_iter().map(|(k, v)| (k, v, None)));
    }

    /// An entry a server leased until `lease` (if it did).
    pub(crate) fn put_leased(&self, key: K, value: V, lease: Option<Instant>) {
        self.put_many_leased([(key, value, lease)]);
    }

    /// Several entries, each cached for the TTL or until its lease ends,
    /// whichever is later, under one lock.
    pub(crate) fn put_many_leased(
        &self,
        entries: impl IntoIterator<Item = (K, V, Option<Instant>)>,
    ) {
        if self.ttl.is_zero() {
            return;
        }
        let mut map = self.map();
        let now = Instant::now();
        let ttl_end = expiry(now, self.ttl);
        for (key, value, lease) in entries {
            let until = lease.map_or(ttl_end, |l| l.max(ttl_end));
            map.insert(key, (value, until));
        }
    }

    /// Keeps the live entry of `key`, as it is, until `lease` if that is
    /// later (a server leased the object, and the entry is newer than what
    /// the server said of it); whether there was one.
    pub(crate) fn extend(&self, key: &K, lease: Option<Instant>) -> bool {
        let now = Instant::now();
        let mut map = self.map();
        let Some(mut entry) = map.peek_mut(key) else {
            return false;
        };
        if entry.1 <= now {
            return false;
        }
        if let Some(lease) = lease {
            entry.1 = entry.1.max(lease);
        }
        true
    }

    /// Changes a cached value in place, if present (keeps its age).
    pub(crate) fn update(&self, key: &K, f: impl FnOnce(&mut V)) {
        if let Some(mut e) = self.map().peek_mut(key) {
            f(&mut e.0);
        }
    }

    pub(crate) fn remove(&self, key: &K) {
        self.map().remove(key);
    }

    /// Drops the entries of `keys`, under one lock.
    pub(crate) fn remove_many<'a>(&self, keys: impl IntoIterator<Item = &'a K>)
    where
        K: 'a,
    {
        let mut map = self.map();
        for k in keys {
            map.remove(k);
        }
    }

    /// Drops every entry (a server's leases all ended).
    pub(crate) fn clear(&self) {
        self.map().clear();
    }

    /// Drops the expired entries and gives back the room of those gone.
    pub(crate) fn compact(&self) {
        let now = Instant::now();
        compacted(&mut self.map(), |_, (_, until)| *until > now);
    }

    /// Entries held now, expired or not (for the mount's stats).
    pub fn entries(&self) -> usize {
        self.map().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_and_zero_ttl_disables() {
        let c = TtlCache::bounded(Duration::from_millis(30), 100);
        c.put(1, "a");
        assert_eq!(c.get(&1), Some("a"));
        c.update(&1, |v| *v = "b");
        assert_eq!(c.get(&1), Some("b"));
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(c.get(&1), None);
        c.put_many([(2, "c"), (3, "d")]);
        assert_eq!(c.get_many([&3, &1, &2]), vec![Some("d"), None, Some("c")]);
        let off = TtlCache::bounded(Duration::ZERO, 100);
        off.put(1, "a");
        assert_eq!(off.get(&1), None);
        assert_eq!(off.get_many([&1]), vec![None]);
    }

    #[test]
    fn a_leased_entry_outlives_the_ttl_until_removed() {
        let c = TtlCache::bounded(Duration::from_millis(10), 100);
        c.put_leased(1, "a", Some(Instant::now() + Duration::from_secs(60)));
        c.put_leased(2, "b", None);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(c.get_many([&1, &2]), vec![Some("a"), None]);
        c.remove(&1);
        assert_eq!(c.get(&1), None, "a recall removes it");
    }

    #[test]
    fn holds_at_most_its_bound_and_keeps_what_is_used() {
        let c = TtlCache::bounded(FOREVER, 100);
        c.put(-1, -1);
        for i in 0..1000 {
            c.put(i, i);
            assert_eq!(c.get(&-1), Some(-1), "used again and again");
        }
        assert!(c.entries() <= 100, "{} entries", c.entries());
        assert_eq!(c.get(&999), Some(999), "the newest stays");
        c.remove_many([&999, &-1]);
        assert_eq!(c.get_many([&999, &-1]), vec![None, None]);
    }
}
