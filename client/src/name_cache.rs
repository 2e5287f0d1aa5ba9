//! The name cache: directory entries this client has seen, kept for the
//! cache TTL (default 100 ms) so another client's change is seen within that
//! time.
//!
//! An entry is one per (directory, name), whoever looked it up: a change
//! this client makes to a name, as any caller, drops it for every caller at
//! once. (Keyed per caller, a rename by one user left the old name alive for
//! the others on the same mount until the TTL ran out, and a write to the old
//! name landed in the renamed file.) Who may use the entry is still per
//! caller: a lookup needs search permission on the directory, which the
//! servers check, so each caller's first use within the TTL is its own
//! lookup or listing, remembered beside the entry with its own age.
//!
//! A name the directory's server leased (`leases`) lives until the lease
//! ends; a recall of the directory drops all its names at once.

use std::sync::Mutex;
use std::time::{Duration, Instant};

// A fast hash: a listing puts a batch of hundreds of names at once.
use foldhash::HashMap;

use shoal_proto::{Cred, Handle, ObjectKind};

/// Entries kept before the cache is emptied and starts again.
const MAX_ENTRIES: usize = 200_000;
/// Callers remembered per entry; the oldest goes when another comes.
const MAX_CALLERS: usize = 8;

/// What an entry names: the handle and the kind of object (a file is a
/// metafile, or a datafile without one).
pub type Named = (Handle, ObjectKind);

struct Entry {
    named: Named,
    /// The callers the servers answered with `named`, and until when each
    /// may use it.
    seen_by: Vec<(Cred, Instant)>,
}

#[derive(Default)]
struct Names {
    /// Per directory, its names.
    dirs: HashMap<Handle, HashMap<String, Entry>>,
    count: usize,
}

pub struct NameCache {
    ttl: Duration,
    map: Mutex<Names>,
}

impl NameCache {
    pub fn new(ttl: Duration) -> NameCache {
        NameCache {
            ttl,
            map: Mutex::default(),
        }
    }

    /// What `name` in `dir` names, if `who` was told so within the TTL.
    pub fn get(&self, dir: Handle, name: &str, who: Cred) -> Option<Named> {
        if self.ttl.is_zero() {
            return None;
        }
        let map = self.map.lock().unwrap();
        let e = map.dirs.get(&dir)?.get(name)?;
        let now = Instant::now();
        e.seen_by
            .iter()
            .any(|(c, until)| *c == who && now < *until)
            .then_some(e.named)
    }

    /// Records that `who` was told (or made) `name` in `dir` naming `named`.
    /// An entry naming something else is replaced, with every caller's claim.
    /// With `lease`, the directory's server leased its names until then.
    pub fn put(&self, dir: Handle, name: &str, who: Cred, named: Named, lease: Option<Instant>) {
        self.put_many(dir, who, [(name, named)], lease);
    }

    /// [`put`](Self::put) of several names of `dir` under one lock (a
    /// listing's batch).
    pub fn put_many<'a>(
        &self,
        dir: Handle,
        who: Cred,
        entries: impl IntoIterator<Item = (&'a str, Named)>,
        lease: Option<Instant>,
    ) {
        if self.ttl.is_zero() {
            return;
        }
        let entries = entries.into_iter();
        let mut map = self.map.lock().unwrap();
        if map.count + entries.size_hint().0 > MAX_ENTRIES {
            *map = Names::default();
        }
        let ttl_end = crate::cache::expiry(Instant::now(), self.ttl);
        let until = lease.map_or(ttl_end, |l| l.max(ttl_end));
        let Names { dirs, count } = &mut *map;
        let names = dirs.entry(dir).or_default();
        for (name, named) in entries {
            // A name listed again (the common case) costs no allocation.
            let e = match names.get_mut(name) {
                Some(e) => e,
                None => {
                    *count += 1;
                    let fresh = Entry {
                        named,
                        seen_by: Vec::with_capacity(1),
                    };
                    names.entry(name.to_string()).or_insert(fresh)
                }
            };
            if e.named != named {
                e.named = named;
                e.seen_by.clear();
            }
            // The caller told last is told again (a name listed again by
            // the same process): its claim is renewed where it stands.
            if let Some(last) = e.seen_by.last_mut().filter(|(c, _)| *c == who) {
                last.1 = until;
                continue;
            }
            e.seen_by.retain(|(c, _)| *c != who);
            if e.seen_by.len() >= MAX_CALLERS {
                e.seen_by.remove(0);
            }
            e.seen_by.push((who, until));
        }
    }

    /// Drops `name` in `dir` for every caller (this client changed it).
    pub fn remove(&self, dir: Handle, name: &str) {
        let mut map = self.map.lock().unwrap();
        let removed = map.dirs.get_mut(&dir).and_then(|n| n.remove(name));
        map.count -= usize::from(removed.is_some());
    }

    /// Drops every name of `dir` (its server recalled its lease).
    pub fn remove_dir(&self, dir: Handle) {
        let mut map = self.map.lock().unwrap();
        if let Some(names) = map.dirs.remove(&dir) {
            map.count -= names.len();
        }
    }

    /// Drops every name (a server's leases all ended).
    pub fn clear(&self) {
        *self.map.lock().unwrap() = Names::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Cred = Cred::new(1001, 1001);
    const B: Cred = Cred::new(1002, 1002);

    #[test]
    fn an_entry_is_per_caller_to_use_but_one_to_drop() {
        let c = NameCache::new(Duration::from_secs(60));
        c.put(1, "a", A, (7, ObjectKind::Metafile), None);
        assert_eq!(c.get(1, "a", A), Some((7, ObjectKind::Metafile)));
        assert_eq!(c.get(1, "a", B), None, "B has not been allowed to look");
        c.put(1, "a", B, (7, ObjectKind::Metafile), None);
        c.remove(1, "a");
        assert_eq!(c.get(1, "a", A), None, "a change by anyone drops it for A");
        assert_eq!(c.get(1, "a", B), None);
    }

    #[test]
    fn a_new_answer_replaces_every_callers_claim() {
        let c = NameCache::new(Duration::from_secs(60));
        c.put(1, "a", A, (7, ObjectKind::Metafile), None);
        c.put(1, "a", B, (8, ObjectKind::Metafile), None);
        assert_eq!(c.get(1, "a", A), None, "A was told of the old object");
        assert_eq!(c.get(1, "a", B), Some((8, ObjectKind::Metafile)));
    }

    #[test]
    fn entries_expire_and_zero_ttl_disables() {
        let c = NameCache::new(Duration::from_millis(20));
        c.put(1, "a", A, (7, ObjectKind::Metafile), None);
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(c.get(1, "a", A), None);
        let off = NameCache::new(Duration::ZERO);
        off.put(1, "a", A, (7, ObjectKind::Metafile), None);
        assert_eq!(off.get(1, "a", A), None);
    }

    #[test]
    fn leased_names_outlive_the_ttl_until_their_directory_is_recalled() {
        let c = NameCache::new(Duration::from_millis(10));
        let lease = Some(Instant::now() + Duration::from_secs(60));
        c.put_many(
            1,
            A,
            [
                ("a", (7, ObjectKind::Metafile)),
                ("b", (8, ObjectKind::Metafile)),
            ],
            lease,
        );
        c.put(2, "c", A, (9, ObjectKind::Metafile), lease);
        std::thread::sleep(Duration::from_millis(20));
        assert_eq!(c.get(1, "b", A), Some((8, ObjectKind::Metafile)));
        c.remove_dir(1);
        assert_eq!(c.get(1, "a", A), None);
        assert_eq!(c.get(1, "b", A), None);
        assert_eq!(c.get(2, "c", A), Some((9, ObjectKind::Metafile)));
    }
}
