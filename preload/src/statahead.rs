//! Statahead (Lustre's name for it): a program that stats one entry after
//! another of a directory it did not list itself (`find -exec stat {} +`,
//! `stat dir/*`, `du` over names it was given) would cost one lookup per
//! entry. After [`TRIGGER`] such misses in a row in one directory, the
//! library lists that directory once with attributes (one Readdir and one
//! ListAttr per server for each 512 entries, at most [`MAX_ENTRIES`]) and
//! keeps them in the listing cache, which answers the next stats there.
//!
//! What is cached is as fresh as the lookups it replaces were when it was
//! fetched, and is cached for the same TTL as any listing (`cache.rs`). A
//! program that stats a few names of a huge directory never triggers it;
//! one that does pays at most one bounded listing per run of misses.

use std::ffi::{CStr, CString};
use std::sync::Mutex;

use libc::c_int;

use crate::cache;
use crate::errno::{errno, set_errno};

/// Misses in a row in one directory that make it worth a listing.
pub const TRIGGER: u32 = 3;
/// Most entries one statahead lists (a directory's first ones).
pub const MAX_ENTRIES: usize = 4096;
/// Entries asked of libshoal per call.
const BATCH: usize = 64;

/// The directory of the latest miss and how many came in a row there.
static RUN: Mutex<Option<(Vec<u8>, u32)>> = Mutex::new(None);

/// The run's lock, held across a fork (see `fork.rs`).
pub fn hold_for_fork() -> Box<dyn std::any::Any> {
    Box::new(RUN.lock().unwrap_or_else(|e| e.into_inner()))
}

/// Counts a stat of `path` that the caches could not answer, and returns
/// its directory (with its trailing "/") when the run of misses there just
/// reached [`TRIGGER`]: time to list it.
pub fn missed(path: &[u8]) -> Option<Vec<u8>> {
    let slash = path.iter().rposition(|&b| b == b'/')?;
    let dir = &path[..=slash];
    let mut run = RUN.lock().unwrap_or_else(|e| e.into_inner());
    match run.as_mut() {
        Some((d, n)) if d.as_slice() == dir => *n += 1,
        _ => *run = Some((dir.to_vec(), 1)),
    }
    let (_, n) = run.as_ref().expect("just set");
    if *n < TRIGGER {
        return None;
    }
    // Listed once per run: the next miss there starts a new count.
    *run = None;
    Some(dir.to_vec())
}

/// Lists directory `dir` ("/"-ended) with attributes into the listing
/// cache, its first [`MAX_ENTRIES`] entries. A failure is left for the stat
/// that asked to meet on its own (errno is left as it was).
pub fn list(dir: &[u8]) {
    let saved = errno();
    let path = match dir {
        b"/" => dir,
        _ => &dir[..dir.len() - 1],
    };
    if let Ok(path) = CString::new(path) {
        let asked = cache::asking();
        // SAFETY: a NUL-terminated path.
        let fd = unsafe { shoal::shoal_opendir(path.as_ptr()) };
        if fd >= 0 {
            fill(asked, fd, dir);
            shoal::shoal_closedir(fd);
        }
    }
    set_errno(saved);
}

/// Reads listing `fd` of `dir` into the cache.
fn fill(asked: cache::Asked, fd: c_int, dir: &[u8]) {
    // SAFETY: zeroed C structs are valid; libshoal fills them.
    let zero: (shoal::shoal_dirent, libc::stat) = unsafe { std::mem::zeroed() };
    let mut ents = vec![zero.0; BATCH];
    let mut sts = vec![zero.1; BATCH];
    let mut seen = 0;
    while seen < MAX_ENTRIES {
        // SAFETY: room for BATCH entries and stats.
        let n =
            unsafe { shoal::shoal_readdir_many(fd, ents.as_mut_ptr(), sts.as_mut_ptr(), BATCH) };
        if n <= 0 {
            return;
        }
        let n = n as usize;
        cache::put_many(
            asked,
            ents[..n].iter().zip(&sts[..n]).filter_map(|(e, st)| {
                // SAFETY: libshoal NUL-terminates the name.
                let name = unsafe { CStr::from_ptr(e.d_name.as_ptr()) }.to_bytes();
                (name != b"." && name != b"..").then(|| ([dir, name].concat(), *st))
            }),
        );
        seen += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test: the run is process-wide.
    #[test]
    fn a_run_of_misses_in_one_directory_triggers_one_listing() {
        assert_eq!(missed(b"/d/a"), None);
        assert_eq!(missed(b"/d/b"), None);
        assert_eq!(missed(b"/d/c"), Some(b"/d/".to_vec()), "the third in a row");
        assert_eq!(missed(b"/d/e"), None, "counted again from one");
        assert_eq!(missed(b"/x/a"), None);
        assert_eq!(missed(b"/d/f"), None, "another directory broke the run");
        assert_eq!(missed(b"/d/g"), None);
        assert_eq!(missed(b"/d/h"), Some(b"/d/".to_vec()));
        assert_eq!(missed(b"noslash"), None);
    }
}
