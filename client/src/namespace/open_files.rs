//! Files a process (or the kernel, for a mount) holds open. POSIX keeps an
//! unlinked (or renamed-over) file readable until its last close, so such a
//! file loses only its name at once ([`crate::types::Unlinked::StillOpen`]); it is
//! reclaimed ([`crate::client::Client::reclaim`]) when its last descriptor closes.
//! If the process dies first it is an orphan, which `shoal fsck` reclaims.
//! The mount and libshoal keep one each, under locks of their own.

use std::collections::HashMap;

use shoal_proto::Handle;

#[derive(Default)]
pub struct OpenFiles {
    map: HashMap<Handle, Entry>,
}

#[derive(Default)]
struct Entry {
    opens: u32,
    /// No entry names the file any more: reclaim it at the last close.
    doomed: bool,
}

impl OpenFiles {
    pub fn opened(&mut self, h: Handle) {
        self.map.entry(h).or_default().opens += 1;
    }

    pub fn is_open(&self, h: Handle) -> bool {
        self.map.contains_key(&h)
    }

    /// How many opens of `h` are not closed yet.
    pub fn opens(&self, h: Handle) -> u32 {
        self.map.get(&h).map_or(0, |e| e.opens)
    }

    /// Records a close; true if it was the last one of a doomed file, which
    /// the caller must now reclaim.
    pub fn closed(&mut self, h: Handle) -> bool {
        let map = &mut self.map;
        let Some(e) = map.get_mut(&h) else {
            return false;
        };
        e.opens = e.opens.saturating_sub(1);
        if e.opens > 0 {
            return false;
        }
        map.remove(&h).is_some_and(|e| e.doomed)
    }

    /// Marks `h`, which lost its last name, for reclaiming at its last
    /// close; false if it is not open, in which case the caller reclaims it
    /// now.
    pub fn doom(&mut self, h: Handle) -> bool {
        match self.map.get_mut(&h) {
            Some(e) => {
                e.doomed = true;
                true
            }
            None => false,
        }
    }

    /// Every doomed file still open (to reclaim when the mount ends, or the
    /// process disconnects); they are forgotten.
    pub fn take_doomed(&mut self) -> Vec<Handle> {
        let map = &mut self.map;
        let doomed: Vec<Handle> = map
            .iter()
            .filter(|(_, e)| e.doomed)
            .map(|(h, _)| *h)
            .collect();
        map.retain(|_, e| !e.doomed);
        doomed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_doomed_file_is_reclaimed_at_its_last_close_only() {
        let mut f = OpenFiles::default();
        assert!(!f.doom(7), "not open: reclaim now");
        f.opened(7);
        f.opened(7);
        assert!(f.doom(7));
        assert!(!f.closed(7));
        assert!(f.closed(7), "reclaim at the last close");
        assert!(!f.closed(7), "already gone");
        f.opened(8);
        assert!(!f.closed(8), "closed without being doomed");
        f.opened(9);
        f.doom(9);
        assert_eq!(f.take_doomed(), vec![9]);
    }
}
