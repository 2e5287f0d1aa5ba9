//! Directories whose every entry this client knows, so that it can say a
//! name is absent without asking: the lookup the kernel makes before each
//! create of a new file then costs no message.
//!
//! How a client comes to know (as NFS clients use a directory's change
//! attribute): a directory's record counts the changes of its entries
//! (`ObjectRecord.entries_version`: 1 when new and empty, one more per entry
//! added, removed or renamed, under the server's write lock). A directory
//! this client has just made, and not yet linked into its parent, is empty
//! and unknown to anyone else: known from the start. Each change this
//! client makes to it comes back with the directory's new record; if the
//! count moved by exactly one, that change was the only one, and the names
//! known stay complete. Anything else — a gap in the count, a failed or unanswered
//! change, a move, two changes in flight whose replies cross, a record with
//! another count — and the directory is forgotten for good: lookups go to
//! its server again.
//!
//! A directory another client made comes to be known too: from a record
//! with the count at 1 (empty, never changed), or when this client's change
//! there, alone in flight, comes back with the count at its first plus the
//! change's own steps (an MPI job's rank creating its files in the
//! directory its neighbour made, as mdtest's `-N` does). What is known of
//! it answers no lookup until its delegation is held: another process of
//! the job may just have made the name asked for. It only lets the client
//! ask for the delegation.
//!
//! What is known is as fresh as the last change confirmed it, and is used
//! only within the client's cache TTL of that (100 ms by default), as the
//! name cache's positive entries are: another client's entry made within
//! that window may be missed for that long. A create that then meets the
//! name gets EEXIST from the server, and the mount has the kernel look the
//! name up again (`fuse/src/fs.rs`, create). Only the user that came to
//! know a directory is answered from it (a lookup by another might have to
//! be refused for want of search permission).
//!
//! Under a directory delegation (`delegations`) a directory is
//! *pinned*: the server recalls the delegation before anyone else changes
//! it, so what is known holds without the TTL, and the creates this client
//! answered itself are among its names before they are sent.
//!
//! Bounded: at most [`MAX_DIRS`] directories (those not confirmed within
//! the TTL make room for new ones) and the setting `known_names` names in
//! all: a change that passes it forgets the other directories least lately
//! confirmed (neither pinned nor with a change in flight) until the names
//! fit, and if they still do not, its own. A directory the kernel forgot
//! goes too unless pinned or changing ([`KnownDirs::evict`]). A forgotten
//! directory only costs its lookups a message again.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use shoal_proto::msg::ObjectRecord;
use shoal_proto::{Cred, Handle, ObjectKind};

/// Directories known at once (beyond, new ones are not taken).
pub const MAX_DIRS: usize = 1024;

/// What one of this client's changes did to a directory's entries.
pub enum EntryChange<'a> {
    Added(&'a str),
    Removed(&'a str),
    /// Many entries added by one change (`create_files`): the count moves
    /// by one per name.
    AddedMany(Vec<&'a str>),
    /// Unsent creates (answered here under a delegation), now sent (the
    /// names are already known): the count moves by one per name made.
    UnsentCreates(Vec<&'a str>),
    /// Unsent unlinks (answered here under a delegation), now sent (the
    /// names are already gone from what is known): one step per name
    /// removed.
    UnsentUnlinks(Vec<&'a str>),
}

impl<'a> EntryChange<'a> {
    /// The names the change adds or removes.
    pub fn names(&self) -> &[&'a str] {
        match self {
            EntryChange::Added(name) | EntryChange::Removed(name) => std::slice::from_ref(name),
            EntryChange::AddedMany(names)
            | EntryChange::UnsentCreates(names)
            | EntryChange::UnsentUnlinks(names) => names,
        }
    }

    /// How far the change moves the directory's entries_version.
    fn steps(&self) -> u64 {
        match self {
            EntryChange::Added(_) | EntryChange::Removed(_) => 1,
            EntryChange::AddedMany(names)
            | EntryChange::UnsentCreates(names)
            | EntryChange::UnsentUnlinks(names) => names.len() as u64,
        }
    }
}

/// What [`KnownDirs::add_answered`] or [`KnownDirs::remove_answered`] did.
#[derive(Debug, PartialEq, Eq)]
pub enum LocalChange {
    Done,
    /// The name is in the directory already (an add), or not (a remove).
    Conflict,
    /// A change of this client's own other than unsent changes is in flight
    /// there (a rename onto the name, say): nothing is answered here until
    /// it is answered.
    Busy,
    /// The directory is not pinned for that user (not held, or forgotten).
    NotPinned,
}

struct Known {
    /// The directory's entries_version when `names` was exactly its entries.
    version: u64,
    names: HashSet<String>,
    /// When the server last confirmed it (the reply of a change, or the
    /// record that showed it new).
    confirmed: Instant,
    /// Changes sent and not yet answered: while any is, nothing is answered
    /// from here.
    in_flight: u32,
    /// Of those, messages of unsent changes (`EntryChange::UnsentCreates`,
    /// `UnsentUnlinks`): only these let a create still be answered here
    /// (their names are known already; any other change might take the
    /// name).
    unsent_in_flight: u32,
    /// The user whose requests showed it.
    who: Cred,
    /// Held under a delegation: known without the TTL.
    pinned: bool,
    /// Made by this client. Only then are absent names answered unpinned,
    /// within the TTL: another client's directory is where other processes
    /// of a job make files for this one to open (an MPI rank's create
    /// before a barrier), so what is known of it only lets this client ask
    /// for its delegation, and answers once that is held.
    made_here: bool,
}

pub struct KnownDirs {
    ttl: Duration,
    max_dirs: usize,
    max_names: usize,
    dirs: Mutex<Dirs>,
}

#[derive(Default)]
struct Dirs {
    known: HashMap<Handle, Known>,
    /// Names in all of `known`.
    names: usize,
    /// This client's changes in flight in directories it did not know when
    /// they began (one row per directory while any is in flight).
    unknown: HashMap<Handle, Unknown>,
}

/// The changes of [`Dirs::unknown`] in one directory.
#[derive(Default)]
struct Unknown {
    in_flight: u32,
    /// Begun since the row was made (when none was in flight).
    begun: u32,
}

impl Dirs {
    /// A change of this client's in `dir` is over: None if it began while
    /// `dir` was known (no row of `unknown`), else whether it was alone,
    /// none other of this client's in flight from its beginning to its end
    /// (so the count its reply shows moved by its own steps and others'
    /// only).
    fn end_unknown_change(&mut self, dir: Handle) -> Option<bool> {
        let u = self.unknown.get_mut(&dir)?;
        u.in_flight = u.in_flight.saturating_sub(1);
        let alone = u.in_flight == 0 && u.begun == 1;
        if u.in_flight == 0 {
            self.unknown.remove(&dir);
        }
        Some(alone)
    }

    fn remove(&mut self, dir: Handle) {
        if let Some(k) = self.known.remove(&dir) {
            self.names -= k.names.len();
        }
    }

    /// Makes the names fit under `max` after a change to `dir`: the other
    /// directories that may go, least lately confirmed first, then `dir`.
    fn fit(&mut self, dir: Handle, max: usize) {
        if self.names <= max {
            return;
        }
        let mut others: Vec<(Instant, Handle)> = self
            .known
            .iter()
            .filter(|(h, k)| **h != dir && !k.pinned && k.in_flight == 0)
            .map(|(h, k)| (k.confirmed, *h))
            .collect();
        others.sort_unstable();
        for (_, h) in others {
            if self.names <= max {
                return;
            }
            self.remove(h);
        }
        if self.names > max {
            self.remove(dir);
        }
    }
}

impl KnownDirs {
    /// Known directories of at most `max_names` names in all.
    pub fn new(ttl: Duration, max_names: usize) -> KnownDirs {
        Self::bounded(ttl, MAX_DIRS, max_names)
    }

    fn bounded(ttl: Duration, max_dirs: usize, max_names: usize) -> KnownDirs {
        KnownDirs {
            ttl,
            max_dirs,
            max_names,
            dirs: Mutex::default(),
        }
    }

    fn dirs(&self) -> std::sync::MutexGuard<'_, Dirs> {
        self.dirs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Directory `dir`, just made by user `who` and not yet linked: empty.
    pub fn created(&self, dir: Handle, who: Cred) {
        self.empty(&mut self.dirs(), dir, who, true);
    }

    /// Takes `dir` as known and empty, for `who`, if there is room.
    fn empty(&self, dirs: &mut Dirs, dir: Handle, who: Cred, made_here: bool) {
        if dirs.known.len() >= self.max_dirs {
            let ttl = self.ttl;
            let stale: Vec<Handle> = dirs
                .known
                .iter()
                .filter(|(_, k)| !k.pinned && k.confirmed.elapsed() >= ttl)
                .map(|(h, _)| *h)
                .collect();
            for h in stale {
                dirs.remove(h);
            }
        }
        if dirs.known.len() < self.max_dirs {
            dirs.known.insert(
                dir,
                Known {
                    version: 1,
                    names: HashSet::new(),
                    confirmed: Instant::now(),
                    in_flight: 0,
                    unsent_in_flight: 0,
                    who,
                    pinned: false,
                    made_here,
                },
            );
        }
    }

    /// A directory record fresh from a server, asked for by `who`: a known
    /// directory whose count moved without one of this client's changes
    /// following it is forgotten; an unknown one still at its first count
    /// (empty, never changed) becomes known.
    pub fn seen(&self, rec: &ObjectRecord, who: Cred) {
        if rec.kind() != ObjectKind::Directory {
            return;
        }
        let mut dirs = self.dirs();
        match dirs.known.get(&rec.handle) {
            Some(k) if k.in_flight == 0 && k.version != rec.entries_version => {
                dirs.remove(rec.handle)
            }
            None if rec.entries_version == 1 => self.empty(&mut dirs, rec.handle, who, false),
            _ => {}
        }
    }

    /// A change of `dir`'s entries is about to be sent (`unsent`: unsent
    /// creates or unlinks, to be finished as `EntryChange::UnsentCreates`
    /// or `UnsentUnlinks`).
    pub fn begin(&self, dir: Handle, unsent: bool) {
        let mut dirs = self.dirs();
        if let Some(k) = dirs.known.get_mut(&dir) {
            k.in_flight += 1;
            k.unsent_in_flight += unsent as u32;
        } else {
            let u = dirs.unknown.entry(dir).or_default();
            u.in_flight += 1;
            u.begun += 1;
        }
    }

    /// The change begun on `dir` by user `who` was answered: `after` is the
    /// directory's record the reply carried (None if the change failed or
    /// the reply had none). Known stays known only if the count moved by
    /// exactly the change's own steps. An unknown directory becomes known
    /// if the change added names, was this client's only one there in
    /// flight, and the count is its first (1) plus the change's steps: the
    /// directory was empty and never changed before it, so the names it
    /// added are all its entries.
    pub fn finish(
        &self,
        dir: Handle,
        after: Option<&ObjectRecord>,
        change: EntryChange,
        who: Cred,
    ) {
        let mut dirs = self.dirs();
        let began_unknown = dirs.end_unknown_change(dir);
        if !dirs.known.contains_key(&dir) {
            let adds = matches!(change, EntryChange::Added(_) | EntryChange::AddedMany(_));
            if !(began_unknown == Some(true) && adds) {
                return;
            }
            // Known empty at the first count; the check below keeps it only
            // if the count is the first plus this change's steps.
            self.empty(&mut dirs, dir, who, false);
        }
        let Some(k) = dirs.known.get_mut(&dir) else {
            return;
        };
        // A change begun while unknown was never counted here (the
        // directory became known meanwhile, or just now).
        if began_unknown.is_none() {
            k.in_flight = k.in_flight.saturating_sub(1);
        }
        if let EntryChange::UnsentCreates(_) | EntryChange::UnsentUnlinks(_) = change {
            k.unsent_in_flight = k.unsent_in_flight.saturating_sub(1);
        }
        let steps = change.steps();
        let next =
            after.filter(|rec| rec.handle == dir && rec.entries_version == k.version + steps);
        let Some(rec) = next else {
            dirs.remove(dir);
            return;
        };
        let (before, version) = (k.names.len(), rec.entries_version);
        match change {
            EntryChange::Added(name) => {
                k.names.insert(name.to_string());
            }
            EntryChange::Removed(name) => {
                k.names.remove(name);
            }
            EntryChange::AddedMany(names) => {
                k.names.extend(names.into_iter().map(str::to_string));
            }
            // The names changed when the changes were answered here; later
            // answers (a name unlinked and made again) may have changed
            // them since.
            EntryChange::UnsentCreates(_) | EntryChange::UnsentUnlinks(_) => {}
        }
        k.version = version;
        k.confirmed = Instant::now();
        let after = k.names.len();
        dirs.names = dirs.names + after - before;
        dirs.fit(dir, self.max_names);
    }

    /// The change begun on `dir` (not unsent changes) was refused before it
    /// changed anything (the server said so): what is known stands.
    pub fn unchanged(&self, dir: Handle) {
        let mut dirs = self.dirs();
        if dirs.end_unknown_change(dir).is_some() {
            return;
        }
        if let Some(k) = dirs.known.get_mut(&dir) {
            k.in_flight = k.in_flight.saturating_sub(1);
        }
    }

    /// Stops answering for `dir` (a change whose effect on it this does not
    /// follow, such as a move).
    pub fn forget(&self, dir: Handle) {
        self.dirs().remove(dir);
    }

    /// Stops answering for each of `dirs` that is neither pinned nor
    /// changing (the kernel forgot them: their names are memory to give
    /// back).
    pub fn evict(&self, dirs: &[Handle]) {
        let mut known = self.dirs();
        for dir in dirs {
            if known
                .known
                .get(dir)
                .is_some_and(|k| !k.pinned && k.in_flight == 0)
            {
                known.remove(*dir);
            }
        }
    }

    /// Directories and names known now (for the mount's stats).
    pub fn len(&self) -> (usize, usize) {
        let dirs = self.dirs();
        (dirs.known.len(), dirs.names)
    }

    /// Whether `name` is certainly not in `dir` for user `who`: pinned, or
    /// made here and confirmed less than the TTL ago.
    pub fn absent(&self, dir: Handle, name: &str, who: Cred) -> bool {
        self.dirs().known.get(&dir).is_some_and(|k| {
            k.who == who
                && (k.pinned
                    || (k.made_here && k.in_flight == 0 && k.confirmed.elapsed() < self.ttl))
                && !k.names.contains(name)
        })
    }

    /// `dir`'s count of entry changes if this client knows all its entries
    /// for `who` now (nothing in flight, within the TTL).
    pub fn version(&self, dir: Handle, who: Cred) -> Option<u64> {
        let dirs = self.dirs();
        let k = dirs.known.get(&dir)?;
        let now = k.who == who && k.in_flight == 0 && k.confirmed.elapsed() < self.ttl;
        now.then_some(k.version)
    }

    /// Pins `dir` (its delegation was granted as of `version`), if what is
    /// known is still that.
    pub fn pin(&self, dir: Handle, version: u64) -> bool {
        let mut dirs = self.dirs();
        let Some(k) = dirs.known.get_mut(&dir) else {
            return false;
        };
        if k.in_flight != 0 || k.version != version {
            return false;
        }
        k.pinned = true;
        k.confirmed = Instant::now();
        true
    }

    pub fn unpin(&self, dir: Handle) {
        if let Some(k) = self.dirs().known.get_mut(&dir) {
            k.pinned = false;
            k.confirmed = Instant::now();
        }
    }

    /// Adds `name` to pinned `dir` as a create answered here, for `who`.
    pub fn add_answered(&self, dir: Handle, name: &str, who: Cred) -> LocalChange {
        self.answer_here(dir, name, who, true)
    }

    /// Takes `name` out of pinned `dir` as an unlink answered here, for
    /// `who`.
    pub fn remove_answered(&self, dir: Handle, name: &str, who: Cred) -> LocalChange {
        self.answer_here(dir, name, who, false)
    }

    fn answer_here(&self, dir: Handle, name: &str, who: Cred, add: bool) -> LocalChange {
        let mut dirs = self.dirs();
        let Some(k) = dirs
            .known
            .get_mut(&dir)
            .filter(|k| k.pinned && k.who == who)
        else {
            return LocalChange::NotPinned;
        };
        // A create may be answered while unsent changes are in flight (their
        // names changed when they were answered); an unlink only with
        // nothing in flight, so that no reply still to come names the file.
        let others = if add { k.unsent_in_flight } else { 0 };
        if k.in_flight != others {
            return LocalChange::Busy;
        }
        if !add {
            if !k.names.remove(name) {
                return LocalChange::Conflict;
            }
            dirs.names -= 1;
            return LocalChange::Done;
        }
        if !k.names.insert(name.to_string()) {
            return LocalChange::Conflict;
        }
        dirs.names += 1;
        dirs.fit(dir, self.max_names);
        if !dirs.known.contains_key(&dir) {
            return LocalChange::NotPinned;
        }
        LocalChange::Done
    }

    /// A create answered here failed when sent: `name` is not in `dir`.
    pub fn answered_failed(&self, dir: Handle, name: &str) {
        let mut dirs = self.dirs();
        if dirs
            .known
            .get_mut(&dir)
            .is_some_and(|k| k.names.remove(name))
        {
            dirs.names -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(h: Handle, version: u64) -> ObjectRecord {
        ObjectRecord {
            handle: h,
            kind: ObjectKind::Directory as i32,
            entries_version: version,
            ..Default::default()
        }
    }

    fn me() -> Cred {
        Cred::new(1000, 1000)
    }

    #[test]
    fn names_added_at_once_move_the_count_by_as_many() {
        let k = KnownDirs::new(Duration::from_secs(60), 1 << 20);
        k.created(7, me());
        k.begin(7, false);
        k.finish(
            7,
            Some(&dir(7, 3)),
            EntryChange::AddedMany(vec!["a", "b"]),
            me(),
        );
        assert!(!k.absent(7, "b", me()));
        assert!(k.absent(7, "c", me()));
        k.begin(7, false);
        k.finish(7, Some(&dir(7, 3)), EntryChange::AddedMany(vec![]), me());
        assert!(k.absent(7, "c", me()), "none made, no step");
        k.begin(7, false);
        k.finish(
            7,
            Some(&dir(7, 4)),
            EntryChange::AddedMany(vec!["c", "d"]),
            me(),
        );
        assert!(
            !k.absent(7, "x", me()),
            "one step for two names made: forgotten"
        );
    }

    #[test]
    fn a_pinned_directory_holds_its_answered_names_past_the_ttl() {
        let k = KnownDirs::new(Duration::from_millis(1), 1 << 20);
        k.created(7, me());
        assert_eq!(k.version(7, me()), Some(1));
        use LocalChange::*;
        assert_eq!(k.add_answered(7, "a", me()), NotPinned);
        assert!(!k.pin(7, 2), "another count");
        assert!(k.pin(7, 1));
        assert_eq!(k.add_answered(7, "a", me()), Done);
        assert_eq!(k.add_answered(7, "a", me()), Conflict);
        assert_eq!(k.add_answered(7, "b", Cred::new(1001, 1001)), NotPinned);
        k.begin(7, true);
        assert_eq!(
            k.add_answered(7, "c", me()),
            Done,
            "unsent creates in flight"
        );
        assert_eq!(
            k.remove_answered(7, "a", me()),
            Busy,
            "no unlink while a reply may still name the file"
        );
        k.begin(7, false);
        assert_eq!(k.add_answered(7, "d", me()), Busy, "a change of its own");
        k.finish(7, Some(&dir(7, 2)), EntryChange::Added("d"), me());
        k.finish(
            7,
            Some(&dir(7, 4)),
            EntryChange::UnsentCreates(vec!["a", "c"]),
            me(),
        );
        assert_eq!(k.add_answered(7, "d", me()), Conflict);
        assert_eq!(k.add_answered(7, "e", me()), Done);
        assert_eq!(k.remove_answered(7, "e", me()), Done);
        assert_eq!(k.remove_answered(7, "e", me()), Conflict, "gone");
        assert!(k.absent(7, "e", me()));
        assert_eq!(k.add_answered(7, "e", me()), Done);
        k.answered_failed(7, "e");
        k.answered_failed(7, "c");
        std::thread::sleep(Duration::from_millis(5));
        assert!(k.absent(7, "b", me()), "pinned: no TTL");
        assert!(!k.absent(7, "a", me()));
        k.answered_failed(7, "a");
        assert!(k.absent(7, "a", me()));
        k.unpin(7);
        std::thread::sleep(Duration::from_millis(5));
        assert!(!k.absent(7, "b", me()), "the TTL again");
    }

    #[test]
    fn an_unsent_batchs_reply_leaves_the_names_as_later_answers_left_them() {
        use LocalChange::*;
        let k = KnownDirs::new(Duration::from_secs(60), 1 << 20);
        k.created(7, me());
        assert!(k.pin(7, 1));
        // "a" made here and sent; then unlinked here and made again.
        assert_eq!(k.add_answered(7, "a", me()), Done);
        assert_eq!(k.remove_answered(7, "a", me()), Done);
        assert_eq!(k.add_answered(7, "a", me()), Done);
        // The unlink's message comes back: "a" is still there.
        k.begin(7, true);
        k.finish(
            7,
            Some(&dir(7, 2)),
            EntryChange::UnsentUnlinks(vec!["a"]),
            me(),
        );
        assert!(!k.absent(7, "a", me()), "made again after the unlink");
        assert_eq!(k.add_answered(7, "a", me()), Conflict);
    }

    #[test]
    fn a_new_directory_is_empty_and_follows_its_own_changes() {
        let k = KnownDirs::new(Duration::from_secs(60), 1 << 20);
        k.created(7, me());
        assert!(k.absent(7, "a", me()));
        k.begin(7, false);
        assert!(!k.absent(7, "a", me()), "nothing answered while in flight");
        k.finish(7, Some(&dir(7, 2)), EntryChange::Added("a"), me());
        assert!(!k.absent(7, "a", me()));
        assert!(k.absent(7, "b", me()));
        assert!(
            !k.absent(7, "b", Cred::new(1001, 1001)),
            "another user asks"
        );
        k.begin(7, false);
        k.finish(7, Some(&dir(7, 3)), EntryChange::Removed("a"), me());
        assert!(k.absent(7, "a", me()));
    }

    #[test]
    fn a_gap_a_failure_or_a_foreign_change_forgets() {
        let k = KnownDirs::new(Duration::from_secs(60), 1 << 20);
        k.created(7, me());
        k.begin(7, false);
        k.finish(7, Some(&dir(7, 3)), EntryChange::Added("a"), me());
        assert!(!k.absent(7, "b", me()), "someone else changed it");

        k.created(8, me());
        k.begin(8, false);
        k.finish(8, None, EntryChange::Added("a"), me());
        assert!(!k.absent(8, "b", me()), "a failed change");

        k.created(9, me());
        k.seen(&dir(9, 1), me());
        assert!(k.absent(9, "b", me()), "the same count");
        k.seen(&dir(9, 2), me());
        assert!(!k.absent(9, "b", me()), "a record with a newer count");
        k.seen(&dir(9, 3), me());
        assert!(!k.absent(9, "b", me()), "forgotten for good");

        k.created(10, me());
        k.forget(10);
        assert!(!k.absent(10, "b", me()));
    }

    #[test]
    fn the_first_change_of_a_directory_alone_in_flight_makes_it_known() {
        let k = KnownDirs::new(Duration::from_secs(60), 1 << 20);
        k.begin(7, false);
        k.finish(7, Some(&dir(7, 2)), EntryChange::Added("a"), me());
        assert_eq!(k.version(7, me()), Some(2));
        assert!(
            !k.absent(7, "b", me()),
            "another's directory: not answered unpinned"
        );
        assert!(k.pin(7, 2));
        assert!(
            k.absent(7, "b", me()) && !k.absent(7, "a", me()),
            "pinned: answered"
        );

        // Not its first change: others had been made.
        k.begin(8, false);
        k.finish(8, Some(&dir(8, 5)), EntryChange::Added("a"), me());
        assert_eq!(k.version(8, me()), None);

        // Two of this client's in flight whose replies cross: the count
        // the first shows does not say the second's name is there.
        k.begin(9, false);
        k.begin(9, false);
        k.finish(9, Some(&dir(9, 3)), EntryChange::Added("b"), me());
        k.finish(9, Some(&dir(9, 2)), EntryChange::Added("a"), me());
        assert_eq!(k.version(9, me()), None);
        // One that began while another was in flight and ended after it.
        k.begin(10, false);
        k.begin(10, false);
        k.finish(10, None, EntryChange::Added("b"), me());
        k.finish(10, Some(&dir(10, 2)), EntryChange::Added("a"), me());
        assert_eq!(k.version(10, me()), None);

        // A removal never shows a directory whole.
        k.begin(11, false);
        k.finish(11, Some(&dir(11, 2)), EntryChange::Removed("a"), me());
        assert_eq!(k.version(11, me()), None);

        // Many names at once.
        k.begin(12, false);
        k.finish(
            12,
            Some(&dir(12, 3)),
            EntryChange::AddedMany(vec!["a", "b"]),
            me(),
        );
        assert_eq!(k.version(12, me()), Some(3));
        assert_eq!(
            k.version(12, Cred::new(1001, 1001)),
            None,
            "for its user only"
        );
    }

    #[test]
    fn a_change_begun_while_unknown_does_not_end_one_begun_since() {
        let k = KnownDirs::new(Duration::from_secs(60), 1 << 20);
        k.begin(7, false);
        k.seen(&dir(7, 1), me());
        k.begin(7, false);
        k.finish(7, Some(&dir(7, 2)), EntryChange::Added("a"), me());
        assert_eq!(k.version(7, me()), None, "the second is still in flight");
        k.finish(7, Some(&dir(7, 3)), EntryChange::Added("b"), me());
        assert_eq!(k.version(7, me()), Some(3));
    }

    #[test]
    fn a_record_at_the_first_count_makes_a_directory_known_empty() {
        let k = KnownDirs::new(Duration::from_secs(60), 1 << 20);
        k.seen(&dir(7, 2), me());
        assert_eq!(k.version(7, me()), None, "it has had an entry");
        k.seen(&dir(8, 1), me());
        assert_eq!(k.version(8, me()), Some(1), "never changed: empty");
        k.begin(8, false);
        k.finish(8, Some(&dir(8, 2)), EntryChange::Added("a"), me());
        assert_eq!(k.version(8, me()), Some(2));
    }

    #[test]
    fn crossing_replies_and_age_forget() {
        let k = KnownDirs::new(Duration::from_secs(60), 1 << 20);
        k.created(7, me());
        k.begin(7, false);
        k.begin(7, false);
        // The second change's reply comes first.
        k.finish(7, Some(&dir(7, 3)), EntryChange::Added("b"), me());
        k.finish(7, Some(&dir(7, 2)), EntryChange::Added("a"), me());
        assert!(!k.absent(7, "c", me()));

        let k = KnownDirs::new(Duration::ZERO, 1 << 20);
        k.created(7, me());
        assert!(!k.absent(7, "a", me()), "older than the TTL");
    }

    #[test]
    fn bounded_in_directories_and_names() {
        let k = KnownDirs::bounded(Duration::from_secs(60), 2, 3);
        k.created(1, me());
        k.created(2, me());
        k.created(3, me());
        assert!(!k.absent(3, "a", me()), "no room: not taken");
        for (v, name) in [(2, "a"), (3, "b"), (4, "c")] {
            k.begin(1, false);
            k.finish(1, Some(&dir(1, v)), EntryChange::Added(name), me());
        }
        assert!(k.absent(1, "d", me()), "three names fit");
        k.begin(1, false);
        k.finish(1, Some(&dir(1, 5)), EntryChange::Removed("a"), me());
        k.begin(1, false);
        k.finish(1, Some(&dir(1, 6)), EntryChange::Added("e"), me());
        assert!(k.absent(1, "a", me()), "a removal makes room");
        k.begin(2, false);
        k.finish(2, Some(&dir(2, 2)), EntryChange::Added("x"), me());
        assert!(k.absent(2, "y", me()), "the fourth name...");
        assert!(
            !k.absent(1, "d", me()),
            "... forgets the directory least lately confirmed"
        );
        k.created(4, me());
        for (v, name) in [(2, "a"), (3, "b"), (4, "c"), (5, "d")] {
            k.begin(4, false);
            k.finish(4, Some(&dir(4, v)), EntryChange::Added(name), me());
        }
        assert!(!k.absent(4, "e", me()), "more than fit alone: forgotten");
        assert_eq!(k.len(), (0, 0), "the others made room in vain");

        k.created(5, me());
        k.begin(5, false);
        k.evict(&[5]);
        assert_eq!(k.len(), (1, 0), "not while a change is in flight");
        k.finish(5, Some(&dir(5, 2)), EntryChange::Added("a"), me());
        assert!(k.pin(5, 2));
        k.evict(&[5]);
        assert!(k.absent(5, "b", me()), "nor while pinned");
        k.unpin(5);
        k.evict(&[5]);
        assert!(!k.absent(5, "b", me()), "the kernel forgot it");

        let k = KnownDirs::bounded(Duration::ZERO, 1, 10);
        k.created(1, me());
        k.created(2, me());
        assert_eq!(k.dirs().known.len(), 1, "an expired directory makes room");
        assert!(k.dirs().known.contains_key(&2));
    }
}
