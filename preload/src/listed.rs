//! A batch of a listing's entries, from the libshoal call that brought it
//! to the readdirs (or getdents64) that return it: names one after
//! another, not records of a fixed 256-byte name, and the attributes that
//! came with them held apart, in the form the cache takes whole. A
//! process's first listing touches every page its buffers use for the
//! first time, and each is a page fault: a listing of 2,000 entries made
//! over a hundred more than the native client's until its entries were
//! stored this way.

use crate::cache::Listing;

#[derive(Clone, Copy)]
struct Entry {
    ino: u64,
    /// Where its name ends in `names`.
    end: usize,
    kind: u8,
    /// Whether its attributes came with it (they are in `attrs`).
    held: bool,
}

/// One libshoal call's entries, reused from one call to the next.
#[derive(Default)]
pub struct Batch {
    names: Vec<u8>,
    entries: Vec<Entry>,
    /// The next entry to return.
    next: usize,
    /// The entries that came with attributes, "." and ".." left out: what
    /// goes into the cache.
    pub attrs: Listing,
}

impl Batch {
    pub fn clear(&mut self) {
        self.names.clear();
        self.entries.clear();
        self.next = 0;
        self.attrs.clear();
    }

    /// Room for `n` entries, made at once rather than grown: growing
    /// touches each size on the way, a fault for every fresh page.
    pub fn reserve(&mut self, n: usize) {
        self.entries.reserve(n);
        self.attrs.reserve(n);
    }

    /// Adds an entry as libshoal gave it.
    pub fn push(&mut self, e: shoal::ListedEntry) {
        self.names.extend_from_slice(e.name);
        self.entries.push(Entry {
            ino: e.ino,
            end: self.names.len(),
            kind: e.kind,
            held: e.attrs.is_some(),
        });
        if let Some(st) = e.attrs.filter(|_| !is_dot(e.name)) {
            self.attrs.push(e.name, st);
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// How many are still to return.
    pub fn left(&self) -> usize {
        self.entries.len() - self.next
    }

    fn name(&self, i: usize) -> &[u8] {
        let start = if i == 0 { 0 } else { self.entries[i - 1].end };
        &self.names[start..self.entries[i].end]
    }

    /// The next entry to return: (d_ino, d_type, name). It is returned
    /// once [`take`](Self::take)n.
    pub fn peek(&self) -> Option<(u64, u8, &[u8])> {
        let e = self.entries.get(self.next)?;
        Some((e.ino, e.kind, self.name(self.next)))
    }

    pub fn take(&mut self) {
        debug_assert!(self.next < self.entries.len(), "an entry to take");
        self.next += 1;
    }

    /// The entries that came without attributes, "." and ".." left out:
    /// (name, handle, whether a symlink).
    pub fn unheld(&self) -> impl Iterator<Item = (&[u8], u64, bool)> {
        let all = self.entries.iter().enumerate();
        all.filter(|(_, e)| !e.held)
            .map(|(i, e)| (self.name(i), e.ino, e.kind == libc::DT_LNK))
            .filter(|(name, _, _)| !is_dot(name))
    }

    pub fn all_held(&self) -> bool {
        self.entries.iter().all(|e| e.held)
    }
}

fn is_dot(name: &[u8]) -> bool {
    name == b"." || name == b".."
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry<'a>(name: &'a str, ino: u64, st: Option<&'a libc::stat>) -> shoal::ListedEntry<'a> {
        let kind = if name == "l" {
            libc::DT_LNK
        } else {
            libc::DT_REG
        };
        shoal::ListedEntry {
            name: name.as_bytes(),
            ino,
            kind,
            attrs: st,
        }
    }

    #[test]
    fn returns_entries_in_order_and_keeps_apart_those_with_attributes() {
        // SAFETY: a plain C struct; all zeroes is a valid value.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        st.st_size = 7;
        let mut b = Batch::default();
        b.push(entry(".", 1, Some(&st)));
        b.push(entry("a", 2, Some(&st)));
        b.push(entry("l", 3, None));
        b.push(entry("..", 4, None));
        assert_eq!((b.len(), b.left()), (4, 4));
        assert!(!b.all_held());
        let got: Vec<_> = b.unheld().map(|(n, h, l)| (n.to_vec(), h, l)).collect();
        assert_eq!(got, [(b"l".to_vec(), 3, true)], "dots left out");
        let with: Vec<_> = b
            .attrs
            .iter()
            .map(|(n, st)| (n.to_vec(), st.st_size))
            .collect();
        assert_eq!(with, [(b"a".to_vec(), 7)], "dots left out");
        let mut names = Vec::new();
        while let Some((ino, _, name)) = b.peek() {
            names.push((ino, String::from_utf8(name.to_vec()).unwrap()));
            b.take();
        }
        assert_eq!(
            names,
            [
                (1, ".".into()),
                (2, "a".into()),
                (3, "l".into()),
                (4, "..".into())
            ]
        );
        assert_eq!(b.left(), 0);
        b.clear();
        assert_eq!((b.len(), b.attrs.len()), (0, 0));
    }
}
