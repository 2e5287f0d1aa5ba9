//! Attributes that a readdirplus brought, kept for the cluster's
//! `cache_ttl_ms` so that a listing followed by a stat of each entry (`ls
//! -l`, `find`, `du`) costs the listing's batches and not one message per
//! entry. Any change this process makes through the library empties it
//! (changes are rare while a listing is being stat'ed, and a whole-cache
//! clear cannot miss one); another client's change shows within the TTL, the
//! same promise as libshoal's own name and attribute caches.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Entries kept at most (a listing bigger than this only keeps its tail).
const MAX_ENTRIES: usize = 1 << 16;

struct Entry {
    st: libc::stat,
    at: Instant,
}

static CACHE: Mutex<Option<HashMap<Vec<u8>, Entry>>> = Mutex::new(None);
/// Whether CACHE may hold something: lets a write skip the lock.
static FILLED: AtomicBool = AtomicBool::new(false);
static TTL_MS: AtomicU64 = AtomicU64::new(100);

pub fn set_ttl(ms: u64) {
    TTL_MS.store(ms, Ordering::Relaxed);
}

fn ttl() -> Duration {
    Duration::from_millis(TTL_MS.load(Ordering::Relaxed))
}

/// Remembers the attributes of Shoal path `path` (no symlink followed).
pub fn put(path: Vec<u8>, st: &libc::stat) {
    if TTL_MS.load(Ordering::Relaxed) == 0 {
        return;
    }
    let mut c = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    let map = c.get_or_insert_with(HashMap::new);
    if map.len() >= MAX_ENTRIES {
        map.clear();
    }
    map.insert(
        path,
        Entry {
            st: *st,
            at: Instant::now(),
        },
    );
    FILLED.store(true, Ordering::Relaxed);
}

/// The attributes of `path` if a listing brought them less than the TTL
/// ago. With `follow`, a symlink's own attributes are no answer.
pub fn get(path: &[u8], follow: bool) -> Option<libc::stat> {
    if !FILLED.load(Ordering::Relaxed) {
        return None;
    }
    let mut c = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    let map = c.as_mut()?;
    let e = map.get(path)?;
    if e.at.elapsed() > ttl() {
        map.remove(path);
        return None;
    }
    if follow && e.st.st_mode & libc::S_IFMT == libc::S_IFLNK {
        return None;
    }
    Some(e.st)
}

/// Forgets everything (this process changed something).
pub fn clear() {
    if FILLED.swap(false, Ordering::Relaxed) {
        let mut c = CACHE.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(map) = c.as_mut() {
            map.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_within_the_ttl_and_forgets_on_a_change() {
        // SAFETY: a plain C struct; all zeroes is a valid value.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        st.st_mode = libc::S_IFREG | 0o644;
        st.st_size = 42;
        put(b"/d/f".to_vec(), &st);
        st.st_mode = libc::S_IFLNK | 0o777;
        put(b"/d/l".to_vec(), &st);
        assert_eq!(get(b"/d/f", true).unwrap().st_size, 42);
        assert!(get(b"/d/l", false).is_some());
        assert!(get(b"/d/l", true).is_none(), "a symlink is followed");
        assert!(get(b"/d/g", false).is_none());
        clear();
        assert!(get(b"/d/f", false).is_none());
        set_ttl(0);
        put(b"/d/f".to_vec(), &st);
        assert!(get(b"/d/f", false).is_none());
        set_ttl(100);
    }
}
