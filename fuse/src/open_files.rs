//! Files the kernel holds open. POSIX keeps an unlinked (or renamed-over) file
//! readable until its last close, so such a file loses only its directory
//! entry at once; its objects are reclaimed when the last descriptor closes.
//! If the mount dies first they are orphans, which `shoal fsck` reclaims.

use std::collections::HashMap;
use std::sync::Mutex;

use shoal_proto::Handle;

#[derive(Default)]
pub struct OpenFiles {
    map: Mutex<HashMap<Handle, Entry>>,
}

#[derive(Default)]
struct Entry {
    opens: u32,
    /// No entry names the file any more: reclaim it at the last close. The
    /// directory whose entry named it (for `Client::reclaim`).
    doomed: Option<Handle>,
}

impl OpenFiles {
    pub fn opened(&self, h: Handle) {
        self.map.lock().unwrap().entry(h).or_default().opens += 1;
    }

    pub fn is_open(&self, h: Handle) -> bool {
        self.map.lock().unwrap().contains_key(&h)
    }

    /// Records a close; if it was the last one of a doomed file, which the
    /// caller must now reclaim, the directory whose entry named it.
    pub fn closed(&self, h: Handle) -> Option<Handle> {
        let mut map = self.map.lock().unwrap();
        let e = map.get_mut(&h)?;
        e.opens = e.opens.saturating_sub(1);
        if e.opens > 0 {
            return None;
        }
        map.remove(&h).and_then(|e| e.doomed)
    }

    /// Marks `h`, whose entry in `parent` is gone, for reclaiming at its
    /// last close; false if it is not open, in which case the caller
    /// reclaims it now.
    pub fn doom(&self, h: Handle, parent: Handle) -> bool {
        match self.map.lock().unwrap().get_mut(&h) {
            Some(e) => {
                e.doomed = Some(parent);
                true
            }
            None => false,
        }
    }

    /// Every doomed file still open, with its directory (to reclaim when the
    /// mount ends).
    pub fn take_doomed(&self) -> Vec<(Handle, Handle)> {
        let mut map = self.map.lock().unwrap();
        let doomed: Vec<(Handle, Handle)> = map
            .iter()
            .filter_map(|(h, e)| Some((*h, e.doomed?)))
            .collect();
        map.retain(|_, e| e.doomed.is_none());
        doomed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_doomed_file_is_reclaimed_at_its_last_close_only() {
        let f = OpenFiles::default();
        assert!(!f.doom(7, 1), "not open: reclaim now");
        f.opened(7);
        f.opened(7);
        assert!(f.doom(7, 1));
        assert_eq!(f.closed(7), None);
        assert_eq!(f.closed(7), Some(1), "reclaim, with its directory");
        assert_eq!(f.closed(7), None, "already gone");
        f.opened(8);
        assert_eq!(f.closed(8), None, "closed without being doomed");
        f.opened(9);
        f.doom(9, 2);
        assert_eq!(f.take_doomed(), vec![(9, 2)]);
    }
}
