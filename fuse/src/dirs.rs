//! Open directories: a per-`opendir` snapshot of the listing, so the offsets
//! (cookies) handed to the kernel stay valid for the life of the handle.
//!
//! Cookie scheme: index 0 is ".", 1 is "..", and `2 + i` is the i-th entry of
//! the listing in name order. An entry's cookie is its index plus one: the
//! kernel passes back the cookie of the last entry it consumed, which is then
//! the index to continue from. Entries are fetched lazily, one client batch
//! at a time, so a huge directory starts listing at once; a read at offset 0
//! (opendir or rewinddir) starts a fresh snapshot so it sees recent changes.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use shoal_client::cache::{bounded, Bounded};
use shoal_client::{Client, DirEntry};
use shoal_proto::error::Result;
use shoal_proto::Handle;

/// Index of the first real entry (after "." and "..").
pub const FIRST_ENTRY: u64 = 2;

/// The listing of one open directory, as far as it has been fetched.
pub struct Listing {
    pub dir: Handle,
    entries: Vec<DirEntry>,
    done: bool,
}

impl Listing {
    pub fn new(dir: Handle) -> Listing {
        Listing {
            dir,
            entries: Vec::new(),
            done: false,
        }
    }

    /// Forgets what was fetched: the next read lists the directory anew.
    pub fn rewind(&mut self) {
        self.entries.clear();
        self.done = false;
    }

    /// Entries `i..i + n` of the listing (fewer at its end), fetching batches
    /// from the directory's server as needed.
    pub async fn range(&mut self, client: &Client, i: usize, n: usize) -> Result<&[DirEntry]> {
        let want = i.saturating_add(n);
        while self.entries.len() < want && !self.done {
            let batch = client.config().settings.readdir_batch.max(1);
            let after = self.entries.last().map(|e| e.name.as_str()).unwrap_or("");
            let (more, done) = client.readdir(self.dir, after, batch).await?;
            // An empty batch that claims more would loop forever; treat it as the end.
            self.done = done || more.is_empty();
            self.entries.extend(more);
        }
        let end = want.min(self.entries.len());
        Ok(self.entries.get(i..end).unwrap_or(&[]))
    }
}

/// The table of open directories, keyed by the file handle given to the kernel.
#[derive(Default)]
pub struct OpenDirs {
    next: AtomicU64,
    open: Mutex<HashMap<u64, Arc<tokio::sync::Mutex<Listing>>>>,
}

impl OpenDirs {
    /// Registers a new open directory and returns its file handle (never 0, so
    /// a handle the kernel invents is never mistaken for one of ours).
    pub fn open(&self, dir: Handle) -> u64 {
        let fh = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let listing = Arc::new(tokio::sync::Mutex::new(Listing::new(dir)));
        lock(&self.open).insert(fh, listing);
        fh
    }

    /// The listing of `fh`. A handle we do not know (the kernel skipped
    /// opendir) gets a throwaway listing of `dir` so reading still works.
    pub fn get(&self, fh: u64, dir: Handle) -> Arc<tokio::sync::Mutex<Listing>> {
        lock(&self.open)
            .get(&fh)
            .filter(|l| l.try_lock().map(|l| l.dir == dir).unwrap_or(true))
            .cloned()
            .unwrap_or_else(|| Arc::new(tokio::sync::Mutex::new(Listing::new(dir))))
    }

    pub fn release(&self, fh: u64) {
        lock(&self.open).remove(&fh);
    }

    #[cfg(test)]
    pub fn count(&self) -> usize {
        lock(&self.open).len()
    }
}

/// Directories seen so far and their parents, only to give ".." its inode
/// number in listings (Shoal's client does not expose a directory's parent).
/// Bounded by the setting `cache_entries`, the least used evicted past it,
/// and a directory the kernel forgot goes: an unknown parent is reported as
/// the directory itself, which nothing relies on.
pub struct Parents {
    map: Mutex<Bounded<Handle, Handle>>,
}

impl Parents {
    /// At most `max` directories' parents.
    pub fn new(max: usize) -> Parents {
        Parents {
            map: Mutex::new(bounded(max)),
        }
    }

    pub fn set(&self, dir: Handle, parent: Handle) {
        lock(&self.map).insert(dir, parent);
    }

    pub fn get(&self, dir: Handle) -> Handle {
        if dir == shoal_proto::handle::ROOT {
            return dir;
        }
        lock(&self.map).get(&dir).copied().unwrap_or(dir)
    }

    /// Drops what is known of `dirs` (the kernel forgot them).
    pub fn forget(&self, dirs: &[Handle]) {
        let mut map = lock(&self.map);
        for d in dirs {
            map.remove(d);
        }
    }

    /// Parents remembered now.
    pub fn len(&self) -> usize {
        lock(&self.map).len()
    }
}

/// Locks a std mutex, ignoring poisoning: the maps stay consistent because
/// nothing panics while holding them, and the mount must never panic.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_are_distinct_and_released() {
        let dirs = OpenDirs::default();
        let a = dirs.open(1);
        let b = dirs.open(7);
        assert!(a != 0 && b != 0 && a != b);
        assert_eq!(dirs.count(), 2);
        assert_eq!(dirs.get(b, 7).try_lock().unwrap().dir, 7);
        // An unknown or mismatched handle gets a private listing of the directory asked.
        assert_eq!(dirs.get(999, 3).try_lock().unwrap().dir, 3);
        assert_eq!(dirs.get(a, 3).try_lock().unwrap().dir, 3);
        dirs.release(a);
        dirs.release(b);
        assert_eq!(dirs.count(), 0);
    }

    #[test]
    fn parents_default_to_self() {
        let p = Parents::new(16);
        assert_eq!(p.get(1), 1);
        assert_eq!(p.get(5), 5);
        p.set(5, 9);
        assert_eq!(p.get(5), 9);
        p.forget(&[5]);
        assert_eq!(p.get(5), 5);
    }
}
