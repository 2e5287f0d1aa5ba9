//! The batch of entries, with their attributes, that a listing brought
//! last, in the listing's order. The stats that follow a listing
//! (`ls -l`, `du`, `find -ls`, a program walking what `readdir` gives) ask
//! for its entries in that order, so each is answered by comparing its name
//! with the next entry's: no path built, hashed or allocated per entry,
//! where the cache's map costs all three.
//!
//! An entry answered leaves the run (a second stat of it asks libshoal,
//! whose own caches still hold it); entries passed over, and whatever is
//! left when the run ends, go into the map, so a stat out of order is
//! answered as before.

/// How far past the next entry a stat may land and still be answered
/// from the run (a program that stats only some of what it lists: `find
/// -name X -ls`).
const LOOKAHEAD: usize = 8;

/// Entries with their attributes, in a listing's order: what a run is
/// made of. A stream fills one and hands it over whole ([`Run::start`]),
/// taking the run's last one back to fill next: the two are reused from
/// one batch to the next, no entry copied on the way.
#[derive(Default)]
pub struct Listing {
    /// The names, one after another; name i ends at `ends[i]`.
    names: Vec<u8>,
    ends: Vec<usize>,
    sts: Vec<libc::stat>,
}

impl Listing {
    pub fn clear(&mut self) {
        self.names.clear();
        self.ends.clear();
        self.sts.clear();
    }

    /// Room for `n` more entries.
    pub fn reserve(&mut self, n: usize) {
        self.ends.reserve(n);
        self.sts.reserve(n);
    }

    pub fn push(&mut self, name: &[u8], st: &libc::stat) {
        self.names.extend_from_slice(name);
        self.ends.push(self.names.len());
        self.sts.push(*st);
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    fn name(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.names[start..self.ends[i]]
    }

    /// (name, attributes) of each entry.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &libc::stat)> {
        (0..self.len()).map(|i| (self.name(i), &self.sts[i]))
    }
}

#[derive(Default)]
pub struct Run {
    /// The directory's local path (what the program names entries by) and
    /// its Shoal path, both "/"-ended.
    local: Vec<u8>,
    shoal: Vec<u8>,
    listing: Listing,
    /// The first entry not answered yet.
    next: usize,
    /// When the listing brought it (the cache's clock).
    pub at: u64,
}

/// What a stat of a local path finds in the run.
pub enum Lookup {
    /// Its attributes; the entries passed over on the way are given back
    /// for the map.
    Found(libc::stat),
    /// Not in this directory (or not an entry of it): the run stays.
    Elsewhere,
    /// In this directory, but not next (or a symlink to follow): the run
    /// is to go into the map.
    OutOfOrder,
}

impl Run {
    /// Starts again with `listing`, of directory `local` (Shoal path
    /// `shoal`), both "/"-ended, brought at time `at`; `listing` is left
    /// with the last run's room, emptied. The caller has taken what was
    /// left of the last run.
    pub fn start(&mut self, local: &[u8], shoal: &[u8], at: u64, listing: &mut Listing) {
        debug_assert!(self.is_empty(), "the last run's entries are taken first");
        for (mine, theirs) in [(&mut self.local, local), (&mut self.shoal, shoal)] {
            mine.clear();
            mine.extend_from_slice(theirs);
        }
        std::mem::swap(&mut self.listing, listing);
        listing.clear();
        self.next = 0;
        self.at = at;
    }

    pub fn is_empty(&self) -> bool {
        self.next == self.listing.len()
    }

    /// Swaps the room of the run, whose every entry has been answered, for
    /// `listing`'s; both are left empty (what `listing` held is not the
    /// run's: a fill the cache did not take).
    pub fn give_room(&mut self, listing: &mut Listing) {
        assert!(self.is_empty(), "a run gives its room once it is used up");
        std::mem::swap(&mut self.listing, listing);
        self.listing.clear();
        listing.clear();
        self.next = 0;
    }

    /// Looks local path `path` up among the next entries; with `follow`, a
    /// symlink's own attributes are no answer. A Found entry leaves the run
    /// with those before it.
    pub fn lookup(
        &mut self,
        path: &[u8],
        follow: bool,
        passed: &mut Vec<(Vec<u8>, libc::stat)>,
    ) -> Lookup {
        let Some(name) = path.strip_prefix(self.local.as_slice()) else {
            return Lookup::Elsewhere;
        };
        if self.is_empty() || name.is_empty() || name.contains(&b'/') {
            return Lookup::Elsewhere;
        }
        let last = (self.next + LOOKAHEAD).min(self.listing.len());
        let Some(i) = (self.next..last).find(|&i| self.listing.name(i) == name) else {
            return Lookup::OutOfOrder;
        };
        let st = self.listing.sts[i];
        if follow && st.st_mode & libc::S_IFMT == libc::S_IFLNK {
            return Lookup::OutOfOrder;
        }
        passed.extend((self.next..i).map(|j| self.entry(j)));
        self.next = i + 1;
        Lookup::Found(st)
    }

    /// Whether Shoal path `path` names an entry of the run's directory.
    pub fn holds(&self, path: &[u8]) -> bool {
        !self.is_empty()
            && path
                .strip_prefix(self.shoal.as_slice())
                .is_some_and(|name| !name.is_empty() && !name.contains(&b'/'))
    }

    /// Entry `i` as the map keeps it: its Shoal path and attributes.
    fn entry(&self, i: usize) -> (Vec<u8>, libc::stat) {
        let l = &self.listing;
        ([self.shoal.as_slice(), l.name(i)].concat(), l.sts[i])
    }

    /// Ends the run, its entries dropped (they are stale, or outdated by a
    /// change).
    pub fn forget(&mut self) {
        self.next = self.listing.len();
    }

    /// Ends the run: the entries not answered, for the map.
    pub fn take_rest(&mut self) -> impl Iterator<Item = (Vec<u8>, libc::stat)> + '_ {
        let rest = self.next..self.listing.len();
        self.next = self.listing.len();
        rest.map(|i| self.entry(i))
    }
}

/// A `struct stat` of this mode and size, for tests (of the cache's too).
#[cfg(test)]
pub(super) fn stat_of(mode: u32, size: i64) -> libc::stat {
    // SAFETY: a plain C struct; all zeroes is a valid value.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    st.st_mode = mode;
    st.st_size = size;
    st
}

#[cfg(test)]
mod tests {
    use super::*;

    fn paths_and_sizes(entries: &[(Vec<u8>, libc::stat)]) -> Vec<(String, i64)> {
        let named = entries.iter();
        named
            .map(|(p, st)| (String::from_utf8_lossy(p).into_owned(), st.st_size))
            .collect()
    }

    #[test]
    fn answers_in_order_passes_over_a_few_and_hands_the_rest_back() {
        let mut listing = Listing::default();
        for i in 0..20 {
            let mode = if i == 4 { libc::S_IFLNK } else { libc::S_IFREG };
            listing.push(format!("f{i}").as_bytes(), &stat_of(mode, i));
        }
        let mut run = Run::default();
        run.start(b"/mnt/d/", b"/d/", 0, &mut listing);
        assert_eq!(listing.len(), 0, "the last run's room, emptied");
        let mut passed = Vec::new();
        let size = |l: Lookup| match l {
            Lookup::Found(st) => Some(st.st_size),
            _ => None,
        };
        assert_eq!(size(run.lookup(b"/mnt/d/f0", true, &mut passed)), Some(0));
        assert_eq!(size(run.lookup(b"/mnt/d/f2", true, &mut passed)), Some(2));
        assert_eq!(
            paths_and_sizes(&passed),
            [("/d/f1".into(), 1)],
            "passed over"
        );
        assert!(matches!(
            run.lookup(b"/mnt/e/f3", true, &mut passed),
            Lookup::Elsewhere
        ));
        assert!(matches!(
            run.lookup(b"/mnt/d/f3/x", true, &mut passed),
            Lookup::Elsewhere
        ));
        assert!(run.holds(b"/d/f3") && !run.holds(b"/d/f3/x") && !run.holds(b"/e/f3"));
        assert_eq!(size(run.lookup(b"/mnt/d/f3", false, &mut passed)), Some(3));
        assert!(
            matches!(
                run.lookup(b"/mnt/d/f4", true, &mut passed),
                Lookup::OutOfOrder
            ),
            "a symlink to follow"
        );
        assert!(matches!(
            run.lookup(b"/mnt/d/f1", true, &mut passed),
            Lookup::OutOfOrder
        ));
        assert!(
            matches!(
                run.lookup(b"/mnt/d/f19", true, &mut passed),
                Lookup::OutOfOrder
            ),
            "beyond the look-ahead"
        );
        let rest: Vec<_> = run.take_rest().collect();
        assert_eq!(rest.len(), 16, "f4 to f19");
        assert_eq!(paths_and_sizes(&rest)[0], ("/d/f4".into(), 4));
        assert!(run.is_empty() && !run.holds(b"/d/f5"));
        assert!(matches!(
            run.lookup(b"/mnt/d/f5", true, &mut passed),
            Lookup::Elsewhere
        ));
    }

    #[test]
    fn a_used_up_run_gives_its_room_back_empty() {
        let mut listing = Listing::default();
        listing.reserve(512);
        listing.push(b"f0", &stat_of(libc::S_IFREG, 0));
        let mut run = Run::default();
        run.start(b"/mnt/d/", b"/d/", 0, &mut listing);
        let mut passed = Vec::new();
        assert!(matches!(
            run.lookup(b"/mnt/d/f0", true, &mut passed),
            Lookup::Found(_)
        ));
        let mut next = Listing::default();
        run.give_room(&mut next);
        assert!(next.sts.capacity() >= 512, "the run's room, reused");
        assert_eq!(next.len(), 0, "emptied");
        assert!(run.is_empty() && !run.holds(b"/d/f0"));
    }
}
