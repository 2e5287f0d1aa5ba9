//! The name cache: directory entries this client has seen, cached for the
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
//!
//! Bounded: at most the setting `cache_entries` names, the least used
//! evicted past it (quick_cache's S3-FIFO, as `cache::TtlCache`). Names are
//! cached one entry per (directory, name), so that eviction can take any one
//! of them; dropping a whole directory's (a recall, or the kernel forgetting
//! the directory) stamps the directory instead of searching every entry:
//! each entry carries the count of such drops when it was put, and one put
//! before its directory's latest drop is void, and replaced at its next put
//! or evicted in its turn. Only a directory that had a name put counts: the
//! kernel forgets files by the thousand (every unlinked one), and counting
//! them would soon pass [`MAX_DROPPED_DIRS`] and void every name.

use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use quick_cache::Equivalent;
use shoal_proto::{Cred, Handle, ObjectKind};

use crate::consistency::cache::{bounded, compacted, Bounded};

/// Callers remembered per entry; the oldest goes when another comes.
const MAX_CALLERS: usize = 8;
/// Directories whose drop is remembered one by one; past it, every entry
/// put so far is void at once.
const MAX_DROPPED_DIRS: usize = 4096;

/// What an entry names: the handle and the kind of object (a file is a
/// metafile, or a datafile without one).
pub type Named = (Handle, ObjectKind);

#[derive(PartialEq, Eq, Hash)]
struct Key(Handle, String);

/// A [`Key`] to look up without making a `String`: hashed alike.
#[derive(Hash)]
struct KeyRef<'a>(Handle, &'a str);

impl Equivalent<Key> for KeyRef<'_> {
    fn equivalent(&self, key: &Key) -> bool {
        self.0 == key.0 && self.1 == key.1
    }
}

struct Entry {
    named: Named,
    /// [`Names::drops`] when the entry was put: void if its directory was
    /// dropped since.
    stamp: u64,
    /// The callers the servers answered with `named`, and until when each
    /// may use it.
    seen_by: Vec<(Cred, Instant)>,
}

struct Names {
    entries: Bounded<Key, Entry>,
    /// Whole directories dropped so far (recalls, forgets, clears).
    drops: u64,
    /// Per directory dropped, [`Names::drops`] just after its drop.
    dropped: foldhash::HashMap<Handle, u64>,
    /// Entries stamped before this are void whatever their directory.
    floor: u64,
    /// The directories with a name put since the last compaction: a drop
    /// of any other handle has nothing to void.
    dirs: foldhash::HashSet<Handle>,
}

impl Names {
    /// Entries of `dir` stamped before this are void.
    fn void_before(&self, dir: Handle) -> u64 {
        self.floor.max(self.dropped.get(&dir).copied().unwrap_or(0))
    }
}

pub struct NameCache {
    ttl: Duration,
    map: Mutex<Names>,
}

impl NameCache {
    /// A cache of at most `max` names, each cached `ttl` (or its lease).
    pub fn new(ttl: Duration, max: usize) -> NameCache {
        NameCache {
            ttl,
            map: Mutex::new(Names {
                entries: bounded(max),
                drops: 0,
                dropped: Default::default(),
                floor: 0,
                dirs: Default::default(),
            }),
        }
    }

    fn map(&self) -> MutexGuard<'_, Names> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What `name` in `dir` names, if `who` was told so within the TTL.
    pub fn get(&self, dir: Handle, name: &str, who: Cred) -> Option<Named> {
        if self.ttl.is_zero() {
            return None;
        }
        let map = self.map();
        let e = map.entries.get(&KeyRef(dir, name))?;
        let now = Instant::now();
        let seen = e.seen_by.iter().any(|(c, until)| *c == who && now < *until);
        (seen && e.stamp >= map.void_before(dir)).then_some(e.named)
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
        entries_in: impl IntoIterator<Item = (&'a str, Named)>,
        lease: Option<Instant>,
    ) {
        if self.ttl.is_zero() {
            return;
        }
        let mut map = self.map();
        map.dirs.insert(dir);
        let ttl_end = crate::consistency::cache::expiry(Instant::now(), self.ttl);
        let until = lease.map_or(ttl_end, |l| l.max(ttl_end));
        let (stamp, void_before) = (map.drops, map.void_before(dir));
        let entries = &mut map.entries;
        for (name, named) in entries_in {
            // A name listed again (the common case) costs no allocation.
            let Some(mut e) = entries.get_mut(&KeyRef(dir, name)) else {
                let fresh = Entry {
                    named,
                    stamp,
                    seen_by: vec![(who, until)],
                };
                entries.insert(Key(dir, name.to_string()), fresh);
                continue;
            };
            if e.stamp < void_before || e.named != named {
                e.named = named;
                e.stamp = stamp;
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
        self.map().entries.remove(&KeyRef(dir, name));
    }

    /// Drops every name of `dir` (its server recalled its lease).
    pub fn remove_dir(&self, dir: Handle) {
        self.remove_dirs(&[dir]);
    }

    /// Drops every name of each of `dirs` (the kernel forgot them), under
    /// one lock.
    pub fn remove_dirs(&self, dirs: &[Handle]) {
        let mut map = self.map();
        let named: Vec<Handle> = dirs
            .iter()
            .copied()
            .filter(|d| map.dirs.contains(d))
            .collect();
        if named.is_empty() {
            return;
        }
        map.drops += 1;
        if map.dropped.len() + named.len() > MAX_DROPPED_DIRS {
            map.dropped.clear();
            map.floor = map.drops;
            return;
        }
        let at = map.drops;
        map.dropped.extend(named.into_iter().map(|d| (d, at)));
    }

    /// Drops every name (a server's leases all ended).
    pub fn clear(&self) {
        let mut map = self.map();
        map.entries.clear();
        map.dropped.clear();
        map.dirs.clear();
    }

    /// Drops the void and expired names, and gives back their room.
    pub fn compact(&self) {
        let mut map = self.map();
        let now = Instant::now();
        let names = &mut *map;
        let (floor, dropped) = (names.floor, &names.dropped);
        compacted(&mut names.entries, |Key(dir, _), e| {
            let current = e.stamp >= floor.max(dropped.get(dir).copied().unwrap_or(0));
            current && e.seen_by.iter().any(|(_, until)| *until > now)
        });
        // Every entry left is current: no drop needs remembering.
        names.dropped = Default::default();
        names.floor = 0;
        names.dirs = names.entries.iter().map(|(key, _)| key.0).collect();
    }

    /// Names held now, void or expired ones too (for the mount's stats).
    pub fn len(&self) -> usize {
        self.map().entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Cred = Cred::new(1001, 1001);
    const B: Cred = Cred::new(1002, 1002);

    #[test]
    fn an_entry_is_per_caller_to_use_but_one_to_drop() {
        let c = NameCache::new(Duration::from_secs(60), 100);
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
        let c = NameCache::new(Duration::from_secs(60), 100);
        c.put(1, "a", A, (7, ObjectKind::Metafile), None);
        c.put(1, "a", B, (8, ObjectKind::Metafile), None);
        assert_eq!(c.get(1, "a", A), None, "A was told of the old object");
        assert_eq!(c.get(1, "a", B), Some((8, ObjectKind::Metafile)));
    }

    #[test]
    fn entries_expire_and_zero_ttl_disables() {
        let c = NameCache::new(Duration::from_millis(20), 100);
        c.put(1, "a", A, (7, ObjectKind::Metafile), None);
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(c.get(1, "a", A), None);
        let off = NameCache::new(Duration::ZERO, 100);
        off.put(1, "a", A, (7, ObjectKind::Metafile), None);
        assert_eq!(off.get(1, "a", A), None);
    }

    #[test]
    fn leased_names_outlive_the_ttl_until_their_directory_is_recalled() {
        let c = NameCache::new(Duration::from_millis(10), 100);
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

    #[test]
    fn bounded_and_a_dropped_directory_stays_dropped_past_the_bound_of_drops() {
        let c = NameCache::new(Duration::from_secs(60), 100);
        for i in 0..1000u64 {
            c.put(
                1 + i % 3,
                &format!("n{i}"),
                A,
                (i, ObjectKind::Metafile),
                None,
            );
        }
        assert!(c.len() <= 100, "{} names", c.len());
        assert_eq!(c.get(1, "n999", A), Some((999, ObjectKind::Metafile)));
        c.put(7, "a", A, (7, ObjectKind::Metafile), None);
        c.put(8, "b", A, (8, ObjectKind::Metafile), None);
        c.remove_dirs(&[7]);
        assert_eq!(c.get(7, "a", A), None);
        assert_eq!(c.get(8, "b", A), Some((8, ObjectKind::Metafile)));
        c.put(7, "a", A, (7, ObjectKind::Metafile), None);
        assert_eq!(
            c.get(7, "a", A),
            Some((7, ObjectKind::Metafile)),
            "put again"
        );
        // Directories that held names (evicted since) past the bound.
        let many: Vec<Handle> = (1000..1000 + MAX_DROPPED_DIRS as u64).collect();
        for d in &many {
            c.put(*d, "x", A, (*d, ObjectKind::Metafile), None);
        }
        c.put(8, "b", A, (8, ObjectKind::Metafile), None);
        c.put(7, "a", A, (7, ObjectKind::Metafile), None);
        c.remove_dirs(&many);
        assert_eq!(c.get(8, "b", A), None, "past the bound every name is void");
        assert_eq!(c.get(7, "a", A), None);
    }

    #[test]
    fn forgetting_thousands_of_files_voids_no_directory() {
        let c = NameCache::new(Duration::from_secs(60), 100);
        c.put(1, "a", A, (7, ObjectKind::Metafile), None);
        // The kernel forgets unlinked files in batches: handles that name
        // no directory here, far past the drops remembered one by one.
        for batch in (100..100 + 2 * MAX_DROPPED_DIRS as u64)
            .collect::<Vec<_>>()
            .chunks(64)
        {
            c.remove_dirs(batch);
        }
        assert_eq!(c.get(1, "a", A), Some((7, ObjectKind::Metafile)));
        c.remove_dirs(&[1]);
        assert_eq!(c.get(1, "a", A), None, "its own directory's drop");
    }
}
