//! The rules of POSIX record locks, once for both sides of the wire: the
//! locks one owner holds on one file ([`OwnerLocks`]) and how a request
//! changes them, and when two owners' locks are in each other's way. The
//! file's server keeps one per owner (`server/src/locks.rs`); a client keeps
//! the same for the locks it holds, so that it can take them again on a new
//! connection.
//!
//! As fcntl(2) says: an owner's own locks never conflict with each other; a
//! new lock replaces whatever the owner held on its range (a read lock over
//! part of a write lock turns that part into a read lock), and adjacent or
//! overlapping ranges of one kind merge; an unlock of part of a range splits
//! it. Two owners conflict where their ranges overlap and either lock is a
//! write lock.

use crate::msg::LockKind;

/// Bytes `start..=end` of a file (`end` = `u64::MAX`: to its end, however
/// far it grows).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Range {
    pub start: u64,
    pub end: u64,
}

impl Range {
    /// The range, or `None` if it ends before it starts.
    pub fn new(start: u64, end: u64) -> Option<Range> {
        (start <= end).then_some(Range { start, end })
    }

    pub fn overlaps(self, other: Range) -> bool {
        self.start <= other.end && other.start <= self.end
    }
}

/// One held lock: a range and its kind (read or write).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    pub range: Range,
    pub kind: LockKind,
}

/// Whether locks of kinds `a` and `b` of two owners on overlapping ranges
/// are in each other's way.
pub fn kinds_conflict(a: LockKind, b: LockKind) -> bool {
    a == LockKind::LockWrite || b == LockKind::LockWrite
}

/// The locks one owner holds on one file: disjoint ranges in order, no two
/// adjacent ones of the same kind (they merge).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OwnerLocks {
    held: Vec<Held>,
}

impl OwnerLocks {
    pub fn is_empty(&self) -> bool {
        self.held.is_empty()
    }

    pub fn held(&self) -> &[Held] {
        &self.held
    }

    /// Whether a write lock of these overlaps `range`.
    pub fn writes_in(&self, range: Range) -> bool {
        self.held
            .iter()
            .any(|h| h.kind == LockKind::LockWrite && h.range.overlaps(range))
    }

    /// The first of these locks in the way of another owner's `kind` on
    /// `range`.
    pub fn conflict(&self, kind: LockKind, range: Range) -> Option<Held> {
        if kind == LockKind::LockUnlock {
            return None;
        }
        self.held
            .iter()
            .find(|h| h.range.overlaps(range) && kinds_conflict(h.kind, kind))
            .copied()
    }

    /// Applies the owner's own request: `kind` on `range` (an unlock drops
    /// the range). Never fails: conflicts with other owners are checked
    /// before.
    pub fn set(&mut self, kind: LockKind, range: Range) {
        let mut out = Vec::with_capacity(self.held.len() + 2);
        for h in self.held.drain(..) {
            if !h.range.overlaps(range) {
                out.push(h);
                continue;
            }
            // What of `h` lies outside the new range stays as it was.
            if h.range.start < range.start {
                out.push(Held {
                    range: Range {
                        start: h.range.start,
                        end: range.start - 1,
                    },
                    kind: h.kind,
                });
            }
            if h.range.end > range.end {
                out.push(Held {
                    range: Range {
                        start: range.end + 1,
                        end: h.range.end,
                    },
                    kind: h.kind,
                });
            }
        }
        if kind != LockKind::LockUnlock {
            out.push(Held { range, kind });
        }
        out.sort_by_key(|h| h.range.start);
        // Merge neighbours of one kind that touch.
        let mut merged: Vec<Held> = Vec::with_capacity(out.len());
        for h in out {
            match merged.last_mut() {
                Some(last)
                    if last.kind == h.kind
                        && last.range.end != u64::MAX
                        && last.range.end + 1 >= h.range.start =>
                {
                    last.range.end = last.range.end.max(h.range.end);
                }
                _ => merged.push(h),
            }
        }
        debug_assert!(merged.windows(2).all(|w| w[0].range.end < w[1].range.start));
        self.held = merged;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use LockKind::*;

    fn r(start: u64, end: u64) -> Range {
        Range::new(start, end).unwrap()
    }

    fn spans(o: &OwnerLocks) -> Vec<(u64, u64, LockKind)> {
        o.held()
            .iter()
            .map(|h| (h.range.start, h.range.end, h.kind))
            .collect()
    }

    #[test]
    fn an_owners_locks_merge_split_and_change_kind() {
        let mut o = OwnerLocks::default();
        o.set(LockWrite, r(0, 9));
        o.set(LockWrite, r(10, 19));
        assert_eq!(spans(&o), [(0, 19, LockWrite)], "touching ranges merge");
        o.set(LockRead, r(5, 9));
        assert_eq!(
            spans(&o),
            [(0, 4, LockWrite), (5, 9, LockRead), (10, 19, LockWrite)]
        );
        o.set(LockUnlock, r(3, 12));
        assert_eq!(spans(&o), [(0, 2, LockWrite), (13, 19, LockWrite)]);
        o.set(LockRead, r(100, u64::MAX));
        o.set(LockRead, r(50, 100));
        assert_eq!(
            spans(&o),
            [
                (0, 2, LockWrite),
                (13, 19, LockWrite),
                (50, u64::MAX, LockRead)
            ]
        );
        o.set(LockUnlock, r(0, u64::MAX));
        assert!(o.is_empty());
    }

    #[test]
    fn other_owners_conflict_only_where_a_write_lock_overlaps() {
        let mut o = OwnerLocks::default();
        o.set(LockRead, r(0, 9));
        o.set(LockWrite, r(20, 29));
        assert_eq!(o.conflict(LockRead, r(0, 9)), None);
        assert_eq!(o.conflict(LockWrite, r(9, 9)).unwrap().range, r(0, 9));
        assert_eq!(o.conflict(LockRead, r(10, 19)), None);
        assert_eq!(o.conflict(LockRead, r(15, 20)).unwrap().kind, LockWrite);
        assert_eq!(o.conflict(LockUnlock, r(0, u64::MAX)), None);
    }
}
