//! Small TTL caches (name -> entry, handle -> attributes), as the client of [Vilayannur 2004]
//! keeps them: entries live `ttl` (default 100 ms) so another client's change is
//! seen within that time, and this client drops what its own changes outdate.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Entries kept before the cache is emptied and starts again (unless the
/// cache is made with another bound).
const MAX_ENTRIES: usize = 200_000;

/// The lifetime of a cache whose entries are replaced when they change,
/// never expired by age.
pub(crate) const FOREVER: Duration = Duration::from_secs(u64::MAX / 4);

pub struct TtlCache<K, V> {
    ttl: Duration,
    max: usize,
    map: Mutex<HashMap<K, (V, Instant)>>,
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
            map: Mutex::new(HashMap::new()),
        }
    }

    pub fn get(&self, key: &K) -> Option<V> {
        if self.ttl.is_zero() {
            return None;
        }
        let map = self.map.lock().unwrap();
        map.get(key)
            .filter(|(_, at)| at.elapsed() < self.ttl)
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
                .filter(|(_, at)| now.saturating_duration_since(*at) < self.ttl)
                .map(|(v, _)| v.clone())
        })
        .collect()
    }

    pub fn put(&self, key: K, value: V) {
        self.put_many([(key, value)]);
    }

    /// Several entries at once, under one lock (a listing's batch).
    pub fn put_many(&self, entries: impl IntoIterator<Item = (K, V)>) {
        if self.ttl.is_zero() {
            return;
        }
        let mut map = self.map.lock().unwrap();
        let now = Instant::now();
        for (key, value) in entries {
            if map.len() >= self.max {
                map.clear();
            }
            map.insert(key, (value, now));
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
}
