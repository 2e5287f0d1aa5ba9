//! Small TTL caches (name -> entry, handle -> attributes), as the client of [Vilayannur 2004]
//! keeps them: entries live `ttl` (default 100 ms) so another client's change is
//! seen within that time, and this client drops what its own changes outdate.
//! An entry a server leased (`leases`) lives until its lease ends, unless
//! the server recalls it first (the client then removes it).

use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

// A fast hash: a listing looks up and inserts a batch's handles at once.
use foldhash::HashMap;

/// Entries kept before the cache is emptied and starts again (unless the
/// cache is made with another bound).
const MAX_ENTRIES: usize = 200_000;

/// The lifetime of a cache whose entries are replaced when they change,
/// never expired by age.
pub(crate) const FOREVER: Duration = Duration::from_secs(u64::MAX / 4);

pub struct TtlCache<K, V> {
    ttl: Duration,
    max: usize,
    /// Each value and until when it may be used.
    map: Mutex<HashMap<K, (V, Instant)>>,
}

/// `now + ttl`, or a century from now for a cache kept "forever".
pub(crate) fn expiry(now: Instant, ttl: Duration) -> Instant {
    now.checked_add(ttl)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 86_400))
}

impl<K: Eq + Hash, V: Clone> TtlCache<K, V> {
    pub(crate) fn new(ttl: Duration) -> Self {
        Self::bounded(ttl, MAX_ENTRIES)
    }

    /// A cache emptied whenever it reaches `max` entries.
    pub fn bounded(ttl: Duration, max: usize) -> Self {
        TtlCache {
            ttl,
            max,
            map: Mutex::new(HashMap::default()),
        }
    }

    pub fn get(&self, key: &K) -> Option<V> {
        if self.ttl.is_zero() {
            return None;
        }
        let map = self.map.lock().unwrap();
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
        let map = self.map.lock().unwrap();
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

    /// Several entries, each kept for the TTL or until its lease ends,
    /// whichever is later, under one lock.
    pub(crate) fn put_many_leased(
        &self,
        entries: impl IntoIterator<Item = (K, V, Option<Instant>)>,
    ) {
        if self.ttl.is_zero() {
            return;
        }
        let mut map = self.map.lock().unwrap();
        let now = Instant::now();
        let ttl_end = expiry(now, self.ttl);
        for (key, value, lease) in entries {
            if map.len() >= self.max {
                map.clear();
            }
            let until = lease.map_or(ttl_end, |l| l.max(ttl_end));
            map.insert(key, (value, until));
        }
    }

    /// Changes a cached value in place, if present (keeps its age).
    pub(crate) fn update(&self, key: &K, f: impl FnOnce(&mut V)) {
        if let Some((v, _)) = self.map.lock().unwrap().get_mut(key) {
            f(v);
        }
    }

    pub(crate) fn remove(&self, key: &K) {
        self.map.lock().unwrap().remove(key);
    }

    /// Drops every entry (a server's leases all ended).
    pub(crate) fn clear(&self) {
        self.map.lock().unwrap().clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_expire_and_zero_ttl_disables() {
        let c = TtlCache::new(Duration::from_millis(30));
        c.put(1, "a");
        assert_eq!(c.get(&1), Some("a"));
        c.update(&1, |v| *v = "b");
        assert_eq!(c.get(&1), Some("b"));
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(c.get(&1), None);
        c.put_many([(2, "c"), (3, "d")]);
        assert_eq!(c.get_many([&3, &1, &2]), vec![Some("d"), None, Some("c")]);
        let off = TtlCache::new(Duration::ZERO);
        off.put(1, "a");
        assert_eq!(off.get(&1), None);
        assert_eq!(off.get_many([&1]), vec![None]);
    }

    #[test]
    fn a_leased_entry_outlives_the_ttl_until_removed() {
        let c = TtlCache::new(Duration::from_millis(10));
        c.put_leased(1, "a", Some(Instant::now() + Duration::from_secs(60)));
        c.put_leased(2, "b", None);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(c.get_many([&1, &2]), vec![Some("a"), None]);
        c.remove(&1);
        assert_eq!(c.get(&1), None, "a recall removes it");
    }
}
