//! The descriptor table: small integers (the lowest free one, from 0, as the
//! kernel hands out) naming open files and directories of this process.
//!
//! The table's lock is held only to look a descriptor up or change the
//! table, never across a request to a server. A file's offset is an atomic
//! counter: a read or write reserves its range with one atomic add, so
//! concurrent calls on one descriptor get disjoint ranges, as POSIX asks,
//! without a lock a thread could hold at fork.
//!
//! A file unlinked (or renamed over) while this process has it open keeps
//! its objects until its last descriptor closes, as POSIX says: the entry
//! goes at once, the objects at the last close (`doom`, `close`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard};

use shoal_client::{Attr, DirEntry, FileKind, OpenFiles};
use shoal_proto::Handle;

use crate::error::{err, Result};
use crate::read_ahead::ReadAhead;

/// Most descriptors open at once (EMFILE beyond).
const MAX_DESCRIPTORS: usize = 1 << 20;

pub struct OpenFile {
    pub handle: Handle,
    pub kind: FileKind,
    pub readable: bool,
    pub writable: bool,
    pub append: bool,
    /// The path it was opened by (messages; `..` of a directory).
    pub path: String,
    pub offset: AtomicU64,
    /// A directory's listing cursor.
    pub dir: Option<Mutex<DirStream>>,
    /// The file's attributes as this open created it; None if it opened an
    /// existing file (see `held_attrs`).
    pub created: Option<Attr>,
    /// What a sequential small read fetched ahead.
    pub read_ahead: Mutex<ReadAhead>,
    /// Whether every change to the file's attributes this process made since
    /// it created it is still held (`held_attrs`): only then is `created`,
    /// with the held changes, what the file is.
    pub fresh: AtomicBool,
}

/// Where a listing stands: entries fetched and not returned yet (with their
/// attributes once a readdirplus asked for them) and the name to continue
/// after.
#[derive(Default)]
pub struct DirStream {
    /// `.` and `..` returned so far (0, 1 or 2).
    pub dots: u8,
    pub buffered: VecDeque<DirEntry>,
    /// The attributes of the buffered entries, index-aligned, once a
    /// readdirplus fetched them; empty until then. Apart, so that a listing
    /// that brings no attributes keeps (and a first listing faults in) no
    /// room for them.
    pub attrs: VecDeque<Option<Attr>>,
    pub after: String,
    pub done: bool,
}

impl DirStream {
    pub fn rewind(&mut self) {
        *self = DirStream::default();
    }
}

pub struct Table {
    slots: Vec<Option<Arc<OpenFile>>>,
    /// Per file handle: descriptors open on it, and whether it lost its
    /// last name (to reclaim it at the last close).
    open: OpenFiles,
    /// Descriptors open on anything but a directory: while there are none,
    /// an unlink cannot take a name from an open file.
    non_dirs: usize,
}

static TABLE: LazyLock<Mutex<Table>> = LazyLock::new(|| {
    Mutex::new(Table {
        slots: Vec::new(),
        open: OpenFiles::default(),
        non_dirs: 0,
    })
});

pub type TableGuard = MutexGuard<'static, Table>;

pub fn lock_table() -> TableGuard {
    TABLE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Adds `file` under the lowest free descriptor.
pub fn insert(file: OpenFile) -> Result<i32> {
    insert_shared(Arc::new(file))
}

/// Adds another descriptor for an open file (dup: the offset is shared).
pub fn insert_shared(file: Arc<OpenFile>) -> Result<i32> {
    let mut t = lock_table();
    let handle = file.handle;
    let fd = match t.slots.iter().position(Option::is_none) {
        Some(free) => free,
        None if t.slots.len() < MAX_DESCRIPTORS => {
            t.slots.push(None);
            t.slots.len() - 1
        }
        None => return Err(err(libc::EMFILE, "too many open Shoal descriptors")),
    };
    t.non_dirs += usize::from(file.kind != FileKind::Directory);
    t.slots[fd] = Some(file);
    t.open.opened(handle);
    Ok(fd as i32)
}

/// The open file behind `fd`.
pub fn get(fd: i32) -> Result<Arc<OpenFile>> {
    let t = lock_table();
    usize::try_from(fd)
        .ok()
        .and_then(|i| t.slots.get(i).cloned().flatten())
        .ok_or_else(|| bad_fd(fd))
}

pub fn bad_fd(fd: i32) -> shoal_client::ShoalError {
    err(libc::EBADF, format!("{fd} is not an open Shoal descriptor"))
}

/// Removes `fd`; returns the file and whether that was the last descriptor
/// of a file that lost its last name, which the caller reclaims.
pub fn remove(fd: i32) -> Result<(Arc<OpenFile>, bool)> {
    let mut t = lock_table();
    let file = usize::try_from(fd)
        .ok()
        .and_then(|i| t.slots.get_mut(i).and_then(Option::take))
        .ok_or_else(|| bad_fd(fd))?;
    t.non_dirs -= usize::from(file.kind != FileKind::Directory);
    let reclaim = t.open.closed(file.handle);
    Ok((file, reclaim))
}

/// Runs `f` on every open file of this process on `h` but `except`. The
/// descriptor slots are scanned only if `h` has other opens: a write, which
/// calls this, must not cost a walk of every open descriptor.
fn for_each_on(h: Handle, except: Option<&OpenFile>, f: impl Fn(&OpenFile)) {
    let t = lock_table();
    if t.open.opens(h) <= u32::from(except.is_some()) {
        return;
    }
    for file in t.slots.iter().flatten() {
        if file.handle == h && !except.is_some_and(|e| std::ptr::eq(e, &**file)) {
            f(file);
        }
    }
}

/// This process changed `h`'s attributes without holding the change: its
/// descriptors' `created` attributes no longer say what it is.
pub fn attributes_changed(h: Handle) {
    for_each_on(h, None, |file| file.fresh.store(false, Ordering::Release));
}

/// This process changed `h`'s data (through `writer`, if a descriptor):
/// what its descriptors read ahead goes.
pub fn data_changed(h: Handle, writer: Option<&OpenFile>) {
    let clear = |file: &OpenFile| {
        file.read_ahead
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear()
    };
    if let Some(w) = writer {
        clear(w);
    }
    for_each_on(h, writer, clear);
}

/// Whether some descriptor of this process is open on `h`.
pub fn is_open(h: Handle) -> bool {
    lock_table().open.is_open(h)
}

/// Whether any descriptor of this process is open on something other than
/// a directory (a file, a symlink, a special file).
pub fn any_non_dir_open() -> bool {
    lock_table().non_dirs > 0
}

/// `h` lost its last name. If a descriptor is still open on it, marks it
/// to be reclaimed at its last close and returns false; if not, returns
/// true: the caller reclaims it now.
pub fn doom(h: Handle) -> bool {
    !lock_table().open.doom(h)
}

/// Closes every descriptor (disconnect); returns the files to reclaim.
pub fn close_all() -> Vec<Handle> {
    let mut t = lock_table();
    t.slots.clear();
    t.non_dirs = 0;
    let doomed = t.open.take_doomed();
    t.open = OpenFiles::default();
    doomed
}

impl OpenFile {
    /// Reserves `len` bytes at the offset; returns where they start.
    pub fn reserve(&self, len: u64) -> u64 {
        self.offset.fetch_add(len, Ordering::SeqCst)
    }

    /// A transfer reserved at `start` for `reserved` bytes moved `done`:
    /// gives back the rest if nothing moved the offset since.
    pub fn settle(&self, start: u64, reserved: u64, done: u64) {
        if done < reserved {
            let _ = self.offset.compare_exchange(
                start + reserved,
                start + done,
                Ordering::SeqCst,
                Ordering::SeqCst,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(h: Handle) -> OpenFile {
        OpenFile {
            handle: h,
            kind: FileKind::File,
            readable: true,
            writable: true,
            append: false,
            path: "/f".into(),
            offset: AtomicU64::new(0),
            dir: None,
            created: None,
            read_ahead: Mutex::default(),
            fresh: AtomicBool::new(false),
        }
    }

    #[test]
    fn descriptors_are_the_lowest_free_and_a_doomed_file_goes_at_its_last_close() {
        // One test: the table is process-wide.
        let a = insert(file(7001)).unwrap();
        let b = insert(file(7001)).unwrap();
        assert_eq!(b, a + 1);
        assert!(get(a).is_ok());
        assert_eq!(get(-1).err().unwrap().errno.0, libc::EBADF);
        assert!(!doom(7001), "open: reclaimed later");
        assert!(!remove(a).unwrap().1, "one descriptor left");
        assert_eq!(remove(a).err().unwrap().errno.0, libc::EBADF);
        let c = insert(file(7002)).unwrap();
        assert_eq!(c, a, "the lowest free number again");
        assert!(remove(b).unwrap().1, "last close reclaims");
        assert!(!is_open(7001));
        assert!(doom(7001), "not open: reclaim now");
        remove(c).unwrap();
    }

    #[test]
    fn a_short_transfer_gives_back_its_unused_reservation() {
        let f = file(1);
        let start = f.reserve(100);
        f.settle(start, 100, 40);
        assert_eq!(f.offset.load(Ordering::SeqCst), 40);
        let start = f.reserve(100);
        let other = f.reserve(10);
        f.settle(start, 100, 0);
        assert_eq!(other, 140);
        assert_eq!(
            f.offset.load(Ordering::SeqCst),
            150,
            "a later reservation stands"
        );
    }
}
