//! What listings said about their entries, cached for the cluster's
//! `cache_ttl_ms`, so that a listing followed by a stat of each entry (`ls
//! -l`, `find`, `du`) costs the listing's batches and not one message per
//! entry, and a listing nobody stats (`ls -R`, `find` without tests on
//! attributes) costs no attributes at all.
//!
//! A listing records each entry's attributes if libshoal holds them already
//! (leased: this process made or saw the entry lately), else its name,
//! handle and type ([`listed_many`]), in batches of [`BATCH`] entries per
//! directory. The first stat of an entry
//! asks for the attributes of its whole batch at once (one ListAttr per
//! server holding some of them); they are cached ([`put_many`]) and answer the
//! batch's other stats. Once a program has stat'ed a listed entry (`ls -l`
//! does, `ls -R` does not), its listings bring attributes from then on, a
//! batch at a time ([`wants_attrs`]). What a listing brings goes in under
//! one lock per batch, so that the cost per entry is a hash insert and the
//! cost per stat a hash lookup and a coarse clock read. Any change this
//! process makes through the library
//! empties the cache (changes are rare while a listing is being stat'ed, and
//! a whole-cache clear cannot miss one), and so does a server's lease recall
//! (another client's change to something this process was told of): such a
//! change shows as soon as it returns, as through libshoal's own caches.
//! A recall can come while a listing's answer is on its way into the cache
//! (the recall listener's thread clears it meanwhile): so each fill says
//! when it asked libshoal ([`asking`]), and one that asked before the last
//! clear brings nothing in.

mod run;

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use foldhash::HashMap;
pub use run::Listing;
use run::{Lookup, Run};

/// Entries cached at most, the cluster's `cache_entries` once connected (past
/// it the cache starts again: a listing bigger than this keeps its tail).
static MAX_ENTRIES: AtomicUsize = AtomicUsize::new(1 << 16);
/// Entries of one directory whose attributes are fetched together: libshoal's
/// default readdir batch.
pub const BATCH: usize = 512;

enum Known {
    Attrs(libc::stat),
    /// Listed, attributes not fetched yet.
    Listed {
        handle: u64,
        symlink: bool,
        batch: u64,
    },
}

struct Entry {
    known: Known,
    /// When it was learnt, in [`now_ms`]'s milliseconds.
    at: u64,
}

#[derive(Default)]
struct Cache {
    entries: HashMap<Vec<u8>, Entry>,
    /// The paths of each batch of listed entries.
    batches: HashMap<u64, Vec<Vec<u8>>>,
    /// Per directory listed (its "/"-ended path).
    filling: HashMap<Vec<u8>, Filling>,
    next_batch: u64,
    /// The last listing's entries with attributes, in order: what the
    /// stats that follow a listing are answered from first.
    run: Run,
}

/// A directory's listing: the batch its next entry joins, and how many it
/// holds.
struct Filling {
    batch: u64,
    entries: usize,
}

/// What the cache knows of a path.
pub enum Found {
    Attrs(libc::stat),
    /// Listed without attributes: the (path, handle) pairs of its batch whose
    /// attributes are still to fetch, this path among them.
    Listed(Vec<(Vec<u8>, u64)>),
    Nothing,
}

static CACHE: Mutex<Option<Cache>> = Mutex::new(None);
/// Whether CACHE may hold something: lets a write skip the lock.
static FILLED: AtomicBool = AtomicBool::new(false);
static TTL_MS: AtomicU64 = AtomicU64::new(100);
/// How many times the cache was emptied (see [`Asked`]).
static CLEARS: AtomicU64 = AtomicU64::new(0);
static WANTS_ATTRS: AtomicBool = AtomicBool::new(false);

pub fn set_ttl(ms: u64) {
    TTL_MS.store(ms, Ordering::Relaxed);
}

/// Keeps at most `entries` (at least one batch).
pub fn set_bound(entries: usize) {
    MAX_ENTRIES.store(entries.max(BATCH), Ordering::Relaxed);
}

/// The monotonic clock in milliseconds, read coarsely: a stat answered from
/// the cache reads the clock once, and the coarse clock is a few times
/// cheaper than the precise one. Its tick (a jiffy, 1-10 ms) is what an
/// entry may outlive the TTL by; recalls, not the TTL, are what keep the
/// cache true against other clients' changes.
fn now_ms() -> u64 {
    // SAFETY: a plain C struct; all zeroes is valid, and the kernel fills it.
    let mut t: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: a valid clock id and a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut t) };
    t.tv_sec as u64 * 1000 + t.tv_nsec as u64 / 1_000_000
}

fn fresh(at: u64, now: u64) -> bool {
    now.saturating_sub(at) <= TTL_MS.load(Ordering::Relaxed)
}

/// When a fill asked libshoal for what it brings: taken before the call.
/// The cache takes it only if it was not emptied since (a recall may have
/// been for what the answer says).
#[derive(Clone, Copy)]
pub struct Asked(u64);

/// Taken before asking libshoal for what goes into the cache.
pub fn asking() -> Asked {
    Asked(CLEARS.load(Ordering::SeqCst))
}

/// Runs `f` on the cache (made if need be) at time `now`, under one lock:
/// a listing's batch goes in as one. Nothing, if the cache was emptied
/// after the fill `asked`. [`clear`] counts, then looks at FILLED; this
/// sets FILLED, then looks at the count: either it sees the count, or the
/// clear sees FILLED and takes the lock after this fill.
fn with_cache<T>(asked: Asked, f: impl FnOnce(&mut Cache, u64) -> T) -> Option<T> {
    if TTL_MS.load(Ordering::Relaxed) == 0 {
        return None;
    }
    let mut c = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    FILLED.store(true, Ordering::SeqCst);
    if CLEARS.load(Ordering::SeqCst) != asked.0 {
        return None;
    }
    let cache = c.get_or_insert_with(Cache::default);
    if cache.entries.len() >= MAX_ENTRIES.load(Ordering::Relaxed) {
        *cache = Cache::default();
    }
    Some(f(cache, now_ms()))
}

/// Remembers the attributes of Shoal paths (no symlink followed), as one
/// batch.
pub fn put_many(asked: Asked, found: impl IntoIterator<Item = (Vec<u8>, libc::stat)>) {
    with_cache(asked, |c, at| put_attrs(&mut c.entries, found, at));
}

fn put_attrs(
    entries: &mut HashMap<Vec<u8>, Entry>,
    found: impl IntoIterator<Item = (Vec<u8>, libc::stat)>,
    at: u64,
) {
    let found = found.into_iter();
    entries.reserve(found.size_hint().0);
    for (path, st) in found {
        let known = Known::Attrs(st);
        entries.insert(path, Entry { known, at });
    }
}

/// Remembers what a listing of directory `local` (Shoal path `shoal`, both
/// "/"-ended) found with attributes, in the listing's order (see
/// `run.rs`), taking `listing` and leaving it empty. What the last listing
/// left unanswered goes into the map.
pub fn listed_in_order(asked: Asked, local: &[u8], shoal: &[u8], listing: &mut Listing) {
    with_cache(asked, |c, at| {
        c.end_run();
        c.run.start(local, shoal, at, listing);
    });
}

/// Gives `listing` the last run's room if every entry of the run has been
/// answered: a stream about to fill its next batch then reuses the one
/// buffer, rather than two in turn (whose pages a process's first listing
/// would each fault in).
pub fn reuse_run(listing: &mut Listing) {
    let mut c = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(c) = c.as_mut().filter(|c| c.run.is_empty()) {
        c.run.give_room(listing);
    }
}

/// The attributes of local path `path` (absolute, as the program gave it)
/// if it is the next entry of the last listing, or one of the few after
/// it; with `follow`, a symlink's own are no answer. None otherwise (ask
/// [`get`] with its Shoal path).
pub fn next_listed(path: &[u8], follow: bool) -> Option<libc::stat> {
    if !FILLED.load(Ordering::Relaxed) {
        return None;
    }
    let mut c = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    let c = c.as_mut()?;
    if c.run.is_empty() {
        return None;
    }
    if !fresh(c.run.at, now_ms()) {
        c.run.forget();
        return None;
    }
    let mut passed = Vec::new();
    match c.run.lookup(path, follow, &mut passed) {
        Lookup::Found(st) => {
            put_attrs(&mut c.entries, passed, c.run.at);
            Some(st)
        }
        Lookup::Elsewhere => None,
        Lookup::OutOfOrder => {
            c.end_run();
            None
        }
    }
}

/// Remembers that a listing of directory `dir` ("/"-ended) found these
/// entries: (name, object handle, whether a symlink).
pub fn listed_many<'n>(
    asked: Asked,
    dir: &[u8],
    found: impl IntoIterator<Item = (&'n [u8], u64, bool)>,
) {
    with_cache(asked, |c, at| {
        let found = found.into_iter();
        c.entries.reserve(found.size_hint().0);
        // A directory with no listing yet starts a batch at its first entry.
        let mut filling = c.filling.remove(dir).unwrap_or(Filling {
            batch: 0,
            entries: BATCH,
        });
        for (name, handle, symlink) in found {
            if filling.entries == BATCH {
                c.next_batch += 1;
                filling = Filling {
                    batch: c.next_batch,
                    entries: 0,
                };
            }
            filling.entries += 1;
            let batch = filling.batch;
            let path = [dir, name].concat();
            c.batches.entry(batch).or_default().push(path.clone());
            let known = Known::Listed {
                handle,
                symlink,
                batch,
            };
            c.entries.insert(path, Entry { known, at });
        }
        c.filling.insert(dir.to_vec(), filling);
    });
}

impl Cache {
    /// Puts what the run did not answer into the map, which answers any
    /// order.
    fn end_run(&mut self) {
        let at = self.run.at;
        put_attrs(&mut self.entries, self.run.take_rest(), at);
    }
}

/// What is known of `path` less than the TTL ago. With `follow`, a symlink's
/// own attributes are no answer.
pub fn get(path: &[u8], follow: bool) -> Found {
    if !FILLED.load(Ordering::Relaxed) {
        return Found::Nothing;
    }
    let mut c = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    let Some(c) = c.as_mut() else {
        return Found::Nothing;
    };
    if c.run.holds(path) {
        c.end_run();
    }
    let Some(e) = c.entries.get(path) else {
        return Found::Nothing;
    };
    if !fresh(e.at, now_ms()) {
        c.entries.remove(path);
        return Found::Nothing;
    }
    match e.known {
        Known::Attrs(st) if follow && st.st_mode & libc::S_IFMT == libc::S_IFLNK => Found::Nothing,
        Known::Attrs(st) => Found::Attrs(st),
        Known::Listed { symlink: true, .. } if follow => Found::Nothing,
        Known::Listed { batch, .. } => {
            WANTS_ATTRS.store(true, Ordering::Relaxed);
            let paths = c.batches.remove(&batch).unwrap_or_default();
            let pending = paths
                .into_iter()
                .filter_map(|p| match c.entries.get(&p)?.known {
                    Known::Listed { handle, .. } => Some((p, handle)),
                    Known::Attrs(_) => None,
                })
                .collect();
            Found::Listed(pending)
        }
    }
}

/// Whether this program stats what it lists (a stat asked for a listed
/// entry: `ls -l`, not `ls -R`): its listings then bring attributes, a batch
/// at a time ([`put`]), rather than wait for a stat to ask.
pub fn wants_attrs() -> bool {
    WANTS_ATTRS.load(Ordering::Relaxed)
}

/// Whether `path` exists and is not a symlink (whose target might not), as
/// far as a listing less than the TTL ago knows: access(F_OK) without a
/// message.
pub fn exists(path: &[u8]) -> bool {
    if !FILLED.load(Ordering::Relaxed) {
        return false;
    }
    let mut c = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    let Some(c) = c.as_mut() else {
        return false;
    };
    if c.run.holds(path) {
        c.end_run();
    }
    c.entries.get(path).is_some_and(|e| {
        let symlink = match e.known {
            Known::Attrs(st) => st.st_mode & libc::S_IFMT == libc::S_IFLNK,
            Known::Listed { symlink, .. } => symlink,
        };
        !symlink && fresh(e.at, now_ms())
    })
}

/// The cache's lock, held across a fork (see `fork.rs`).
pub struct ForkHold(MutexGuard<'static, Option<Cache>>);

pub fn hold_for_fork() -> ForkHold {
    ForkHold(CACHE.lock().unwrap_or_else(|e| e.into_inner()))
}

impl ForkHold {
    /// In the child: it starts with nothing cached, since its client is
    /// new and no server will recall its parent's leases from it. The
    /// parent's copy is forgotten, not freed: freeing would write to every
    /// page of it, copying them all from the parent at each fork.
    pub fn empty_in_child(mut self) {
        std::mem::forget(self.0.take());
        CLEARS.fetch_add(1, Ordering::SeqCst);
        FILLED.store(false, Ordering::SeqCst);
    }
}

/// Forgets everything (this process changed something, or a server
/// recalled a lease: another client changed something). The tables keep
/// their room: the next listing refills them without growing them again.
pub fn clear() {
    CLEARS.fetch_add(1, Ordering::SeqCst);
    if FILLED.swap(false, Ordering::SeqCst) {
        let mut c = CACHE.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = c.as_mut() {
            c.entries.clear();
            c.batches.clear();
            c.filling.clear();
            c.run.forget();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::run::stat_of;
    use super::*;

    // One test: the cache is process-wide.
    #[test]
    fn answers_within_the_ttl_fetches_a_listed_batch_once_and_forgets_on_a_change() {
        put_many(
            asking(),
            [
                (b"/d/f".to_vec(), stat_of(libc::S_IFREG | 0o644, 42)),
                (b"/d/l".to_vec(), stat_of(libc::S_IFLNK | 0o777, 1)),
            ],
        );
        assert!(matches!(get(b"/d/f", true), Found::Attrs(st) if st.st_size == 42));
        assert!(matches!(get(b"/d/l", false), Found::Attrs(_)));
        assert!(
            matches!(get(b"/d/l", true), Found::Nothing),
            "a symlink is followed"
        );
        assert!(matches!(get(b"/d/g", false), Found::Nothing));

        assert!(!wants_attrs());
        let names: Vec<String> = (0..BATCH + 2).map(|i| format!("n{i}")).collect();
        // In two listings' batches of libshoal's, as a stream's readdirs give them.
        let (first, rest) = names.split_at(300);
        for part in [first, rest] {
            let found = part.iter().map(|n| {
                let i: u64 = n[1..].parse().unwrap();
                (n.as_bytes(), 100 + i, i == 1)
            });
            listed_many(asking(), b"/e/", found);
        }
        assert!(exists(b"/e/n0"));
        assert!(!exists(b"/e/n1"), "a symlink's target might not exist");
        assert!(
            matches!(get(b"/e/n1", true), Found::Nothing),
            "a listed symlink"
        );
        let Found::Listed(batch) = get(b"/e/n0", false) else {
            panic!("listed")
        };
        assert_eq!(batch.len(), BATCH, "the first batch, whole");
        assert!(batch.contains(&(b"/e/n7".to_vec(), 107)));
        put_many(
            asking(),
            [(b"/e/n0".to_vec(), stat_of(libc::S_IFREG | 0o600, 7))],
        );
        assert!(matches!(get(b"/e/n0", false), Found::Attrs(st) if st.st_size == 7));
        let Found::Listed(rest) = get(b"/e/n513", false) else {
            panic!("listed")
        };
        assert_eq!(rest.len(), 2, "the second batch");
        assert!(wants_attrs(), "a stat of a listed entry");

        // A fill that asked before a clear (a recall came while its answer
        // was on the way) brings nothing in.
        let asked = asking();
        clear();
        assert!(matches!(get(b"/d/f", false), Found::Nothing));
        assert!(!exists(b"/e/n3"));
        put_many(asked, [(b"/d/f".to_vec(), stat_of(libc::S_IFREG, 2))]);
        assert!(matches!(get(b"/d/f", false), Found::Nothing));
        put_many(asking(), [(b"/d/f".to_vec(), stat_of(libc::S_IFREG, 3))]);
        assert!(matches!(get(b"/d/f", false), Found::Attrs(st) if st.st_size == 3));
        clear();
        set_ttl(0);
        put_many(asking(), [(b"/d/f".to_vec(), stat_of(libc::S_IFREG, 1))]);
        assert!(matches!(get(b"/d/f", false), Found::Nothing));
        set_ttl(100);

        // Bounded by the cluster's cache_entries: past it, it starts again.
        set_bound(BATCH);
        let batch = |dir: &str| {
            let entries = (0..BATCH).map(|i| {
                (
                    format!("/{dir}/{i}").into_bytes(),
                    stat_of(libc::S_IFREG, 1),
                )
            });
            put_many(asking(), entries.collect::<Vec<_>>());
        };
        batch("x");
        assert!(matches!(get(b"/x/0", false), Found::Attrs(_)));
        batch("y");
        assert!(
            matches!(get(b"/x/0", false), Found::Nothing),
            "the bound was passed"
        );
        assert!(matches!(get(b"/y/0", false), Found::Attrs(_)));
        set_bound(1 << 16);
    }
}
