//! Directory streams: opendir/fdopendir/readdir/closedir (and dirfd,
//! rewinddir, telldir, seekdir) and getdents64. Every listing is a
//! readdirplus: each batch of entries comes with its attributes (one
//! ListAttr per server per batch), which go into the cache that answers the
//! stat of each entry that `ls -l`, `find` and `du` make next.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use libc::{c_char, c_int, c_long, c_void, size_t, ssize_t, DIR};

use super::files::{busy, close_ours, open_target};
use crate::cache;
use crate::errno::{errno, fail, set_errno};
use crate::listed::Batch;
use crate::real;
use crate::state::{self, serve, Fd, Target, Where};
use crate::stats::Op;
use crate::unwind::{guarded, Failed};

/// A directory stream of the library's; a `DIR *` points at one.
struct ShoalDir {
    /// The kernel descriptor standing for the directory (what dirfd gives).
    kfd: c_int,
    /// Its Shoal path and its local path, "/" ended, to name the entries
    /// for the cache.
    base: Vec<u8>,
    local: Vec<u8>,
    /// Entries returned since the start (telldir).
    pos: c_long,
    ent: libc::dirent64,
    /// The batch being returned, and how many entries its libshoal call
    /// asked for. A stream is used by one thread at a time (as POSIX asks
    /// of a DIR), so a readdir takes its entry from here with no lock.
    batch: Batch,
    asked: usize,
}

/// The streams of the library's, by address; DIRS_OPEN lets a kernel
/// stream skip the lock.
static DIRS: Mutex<Option<foldhash::HashSet<usize>>> = Mutex::new(None);
static DIRS_OPEN: AtomicUsize = AtomicUsize::new(0);

/// The directory streams' lock, held across a fork (see `fork.rs`).
pub fn hold_for_fork() -> Box<dyn std::any::Any> {
    Box::new(DIRS.lock().unwrap_or_else(|e| e.into_inner()))
}

/// The stream of the library's last found in DIRS (0: none), so that a
/// listing's readdirs after the first take no lock. closedir clears it
/// after taking the stream out of DIRS and before freeing it, so an address
/// the allocator hands out again is never found here.
static LAST_FOUND: AtomicUsize = AtomicUsize::new(0);

fn ours(d: *mut DIR) -> bool {
    if DIRS_OPEN.load(Ordering::Acquire) == 0 || d.is_null() {
        return false;
    }
    if LAST_FOUND.load(Ordering::Acquire) == d as usize {
        return true;
    }
    let found = DIRS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .is_some_and(|s| s.contains(&(d as usize)));
    if found {
        LAST_FOUND.store(d as usize, Ordering::Release);
    }
    found
}

/// `p` ending in '/'.
fn slash_ended(mut p: Vec<u8>) -> Vec<u8> {
    if !p.ends_with(b"/") {
        p.push(b'/');
    }
    p
}

/// The Shoal path of a directory descriptor, ending in '/'.
fn base_of(kfd: c_int) -> Option<Vec<u8>> {
    Some(slash_ended(
        state::shoal_of(&state::fd_local(kfd)?)?.into_bytes(),
    ))
}

/// A stream over Shoal directory descriptor `kfd` (owned from now on).
fn stream(kfd: c_int) -> *mut DIR {
    let local = state::fd_local(kfd);
    let Some((base, local)) = local.and_then(|l| Some((base_of(kfd)?, slash_ended(l)))) else {
        set_errno(libc::EBADF);
        return std::ptr::null_mut();
    };
    let d = Box::into_raw(Box::new(ShoalDir {
        kfd,
        base,
        local,
        pos: 0,
        // SAFETY: a plain C struct; all zeroes is valid.
        ent: unsafe { std::mem::zeroed() },
        batch: Batch::default(),
        asked: 0,
    })) as *mut DIR;
    DIRS.lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(Default::default)
        .insert(d as usize);
    DIRS_OPEN.fetch_add(1, Ordering::AcqRel);
    d
}

/// A stream on Shoal directory `t`, or NULL and errno.
fn stream_of(t: &Target) -> *mut DIR {
    let kfd = open_target(t, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC, 0);
    if kfd < 0 {
        return std::ptr::null_mut();
    }
    stream(kfd)
}

#[no_mangle]
pub unsafe extern "C" fn opendir(path: *const c_char) -> *mut DIR {
    guarded(<*mut DIR as Failed>::failed, || {
        // SAFETY: opendir's contract.
        let w = unsafe { state::classify_at(libc::AT_FDCWD, path) };
        match w {
            Where::Shoal(t) => stream_of(&t),
            Where::Fail(e) => {
                set_errno(e);
                std::ptr::null_mut()
            }
            Where::Kernel(_) => {
                let (_, p) = w.kernel_args(libc::AT_FDCWD, path);
                // SAFETY: opendir's contract.
                unsafe { real::opendir(p) }
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn fdopendir(fd: c_int) -> *mut DIR {
    guarded(<*mut DIR as Failed>::failed, || {
        match state::fd(fd) {
            // SAFETY: fdopendir's contract.
            Fd::Kernel => unsafe { real::fdopendir(fd) },
            Fd::Shoal(s) => {
                // SAFETY: a zeroed stat is valid.
                let mut st: libc::stat = unsafe { std::mem::zeroed() };
                // SAFETY: our own struct.
                if serve(Op::Stat, || unsafe { shoal::shoal_fstat(s, &mut st) }) < 0 {
                    return std::ptr::null_mut();
                }
                if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
                    set_errno(libc::ENOTDIR);
                    return std::ptr::null_mut();
                }
                stream(fd)
            }
            Fd::Busy => {
                set_errno(libc::EIO);
                std::ptr::null_mut()
            }
        }
    })
}

/// Entries asked of libshoal per call: at first, and by a stream that has
/// had a full batch (libshoal's readdir batch: one call per batch it
/// fetches). Most directories are small: their streams never make room
/// for the big batch.
const FIRST_BATCH: usize = 64;
const STREAM_BATCH: usize = cache::BATCH;

/// Fills `batch` with up to `want` next entries of Shoal directory
/// descriptor `kfd` (libshoal's `sfd`) and returns how many (0 at the end):
/// first those a getdents64 fetched and had no room for, else a libshoal
/// call's. What libshoal gives goes into the cache under `base` + name:
/// with its attributes if this process holds them already (no message) or
/// once this program has stat'ed a listed entry (a readdirplus per batch),
/// else as listed (their attributes fetched if a stat asks). A stream's
/// entries with attributes (`local`: its directory's local path) go in as
/// the cache's run, in the listing's order.
fn fetch(
    kfd: c_int,
    sfd: c_int,
    base: &[u8],
    local: Option<&[u8]>,
    batch: &mut Batch,
    want: usize,
) -> Result<usize, ()> {
    let left = state::with_info(kfd, |i| {
        if i.pending.left() > 0 {
            std::mem::swap(&mut i.pending, batch);
        }
        batch.left()
    });
    if let Some(n @ 1..) = left {
        return Ok(n);
    }
    if local.is_some() {
        cache::reuse_run(&mut batch.attrs);
    }
    batch.clear();
    batch.reserve(want);
    let asked = cache::asking();
    let held = !cache::wants_attrs();
    let n = serve(Op::Readdir, || {
        shoal::readdir_each(sfd, held, want, |e| batch.push(e)) as c_int
    });
    if n < 0 {
        return Err(());
    }
    match local {
        // A stream's readdirs: the stats that follow come in this order.
        Some(local) => cache::listed_in_order(asked, local, base, &mut batch.attrs),
        None => cache::put_many(
            asked,
            batch
                .attrs
                .iter()
                .map(|(name, st)| ([base, name].concat(), *st)),
        ),
    }
    if !batch.all_held() {
        cache::listed_many(asked, base, batch.unheld());
    }
    Ok(batch.len())
}

/// Makes `ent` the entry `e` (d_ino, d_type, name), at offset `off`.
fn fill(ent: &mut libc::dirent64, (ino, kind, name): (u64, u8, &[u8]), off: i64) {
    ent.d_ino = ino;
    ent.d_off = off;
    ent.d_reclen = std::mem::size_of::<libc::dirent64>() as u16;
    ent.d_type = kind;
    let n = name.len().min(ent.d_name.len() - 1);
    for (d, s) in ent.d_name.iter_mut().zip(&name[..n]) {
        *d = *s as libc::c_char;
    }
    ent.d_name[n] = 0;
}

unsafe fn readdir_any(d: *mut DIR) -> *mut libc::dirent64 {
    if !ours(d) {
        // SAFETY: readdir's contract.
        return unsafe { real::readdir64(d) };
    }
    // SAFETY: one of our streams, used by one thread at a time (as POSIX
    // asks of a DIR).
    let sd = unsafe { &mut *(d as *mut ShoalDir) };
    let sfd = match state::fd(sd.kfd) {
        Fd::Shoal(s) => s,
        Fd::Busy => {
            set_errno(libc::EIO);
            return std::ptr::null_mut();
        }
        Fd::Kernel => {
            set_errno(libc::EBADF);
            return std::ptr::null_mut();
        }
    };
    if sd.batch.left() == 0 {
        // After a full batch, the directory is likely big.
        let full = sd.asked > 0 && sd.batch.len() == sd.asked;
        sd.asked = if full { STREAM_BATCH } else { FIRST_BATCH };
        let (kfd, want) = (sd.kfd, sd.asked);
        if let Err(()) = fetch(kfd, sfd, &sd.base, Some(&sd.local), &mut sd.batch, want) {
            return std::ptr::null_mut();
        }
    }
    let Some(e) = sd.batch.peek() else {
        return std::ptr::null_mut();
    };
    sd.pos += 1;
    fill(&mut sd.ent, e, sd.pos);
    sd.batch.take();
    &mut sd.ent
}

#[no_mangle]
pub unsafe extern "C" fn readdir(d: *mut DIR) -> *mut libc::dirent64 {
    guarded(<*mut libc::dirent64 as Failed>::failed, || {
        // SAFETY: readdir's contract (dirent and dirent64 are one layout here).
        unsafe { readdir_any(d) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn readdir64(d: *mut DIR) -> *mut libc::dirent64 {
    guarded(<*mut libc::dirent64 as Failed>::failed, || {
        // SAFETY: readdir's contract.
        unsafe { readdir_any(d) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn closedir(d: *mut DIR) -> c_int {
    guarded(<c_int as Failed>::failed, || {
        if !ours(d) {
            // SAFETY: closedir's contract.
            return unsafe { real::closedir(d) };
        }
        DIRS.lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_mut()
            .map(|s| s.remove(&(d as usize)));
        let _ = LAST_FOUND.compare_exchange(d as usize, 0, Ordering::AcqRel, Ordering::Acquire);
        DIRS_OPEN.fetch_sub(1, Ordering::AcqRel);
        // SAFETY: made by Box::into_raw in stream(), removed from DIRS above so
        // freed once.
        let sd = unsafe { Box::from_raw(d as *mut ShoalDir) };
        if state::is_ours(sd.kfd) {
            close_ours(sd.kfd)
        } else {
            fail(libc::EBADF)
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn dirfd(d: *mut DIR) -> c_int {
    guarded(<c_int as Failed>::failed, || {
        if ours(d) {
            // SAFETY: one of our streams.
            unsafe { (*(d as *mut ShoalDir)).kfd }
        } else {
            // SAFETY: dirfd's contract.
            unsafe { real::dirfd(d) }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn rewinddir(d: *mut DIR) {
    guarded(<() as Failed>::failed, || {
        if !ours(d) {
            // SAFETY: rewinddir's contract.
            return unsafe { real::rewinddir(d) };
        }
        // SAFETY: one of our streams.
        let sd = unsafe { &mut *(d as *mut ShoalDir) };
        if let Fd::Shoal(s) = state::fd(sd.kfd) {
            shoal::shoal_rewinddir(s);
            state::forget_listed(sd.kfd);
            sd.batch.clear();
            (sd.pos, sd.asked) = (0, 0);
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn telldir(d: *mut DIR) -> c_long {
    guarded(<c_long as Failed>::failed, || {
        if ours(d) {
            // SAFETY: one of our streams.
            unsafe { (*(d as *mut ShoalDir)).pos }
        } else {
            // SAFETY: telldir's contract.
            unsafe { real::telldir(d) }
        }
    })
}

/// seekdir to a position telldir gave: rewinds and reads that many entries.
#[no_mangle]
pub unsafe extern "C" fn seekdir(d: *mut DIR, pos: c_long) {
    guarded(<() as Failed>::failed, || {
        if !ours(d) {
            // SAFETY: seekdir's contract.
            return unsafe { real::seekdir(d, pos) };
        }
        // SAFETY: seekdir's contract.
        unsafe { rewinddir(d) };
        for _ in 0..pos {
            // SAFETY: one of our streams.
            if unsafe { readdir_any(d) }.is_null() {
                break;
            }
        }
    })
}

/// The size of a linux_dirent64 record for a name of `len` bytes.
fn reclen(len: usize) -> usize {
    // d_ino (8) + d_off (8) + d_reclen (2) + d_type (1) + name + NUL, 8-aligned.
    (19 + len + 1 + 7) & !7
}

#[no_mangle]
pub unsafe extern "C" fn getdents64(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    guarded(<ssize_t as Failed>::failed, || {
        let sfd = match state::fd(fd) {
            // SAFETY: getdents64's contract.
            Fd::Kernel => return unsafe { real::getdents64(fd, buf, n) },
            Fd::Busy => return busy(),
            Fd::Shoal(s) => s,
        };
        let Some(base) = base_of(fd) else {
            return fail(libc::EBADF);
        };
        // The batch being returned, out of the descriptor's table meanwhile
        // (a program does not list one descriptor from two threads at once).
        let mut batch =
            state::with_info(fd, |i| std::mem::take(&mut i.pending)).unwrap_or_default();
        let mut used = 0usize;
        let mut failed = false;
        loop {
            if batch.left() == 0 {
                match fetch(fd, sfd, &base, None, &mut batch, FIRST_BATCH) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(()) => {
                        failed = true;
                        break;
                    }
                }
            }
            let Some((ino, kind, name)) = batch.peek() else {
                break;
            };
            let len = reclen(name.len());
            if used + len > n {
                break;
            }
            // SAFETY: `len` bytes at `used` are inside the caller's buffer.
            unsafe {
                let rec = (buf as *mut u8).add(used);
                std::ptr::write_bytes(rec, 0, len);
                std::ptr::write_unaligned(rec as *mut u64, ino);
                std::ptr::write_unaligned(rec.add(8) as *mut i64, (used + len) as i64);
                std::ptr::write_unaligned(rec.add(16) as *mut u16, len as u16);
                *rec.add(18) = kind;
                std::ptr::copy_nonoverlapping(name.as_ptr(), rec.add(19), name.len());
            }
            batch.take();
            used += len;
        }
        let no_room = used == 0 && !failed && batch.left() > 0;
        state::with_info(fd, |i| i.pending = batch);
        match (used, failed) {
            (0, true) => -1,
            _ if no_room => fail(libc::EINVAL),
            _ => used as ssize_t,
        }
    })
}

/// getdirentries(3): getdents64, with `*basep` set (glibc's would call
/// its internal getdents64). A Shoal listing has no position but its start,
/// the one lseek can return to: `*basep` is 0.
unsafe fn getdirentries_any(fd: c_int, buf: *mut c_char, n: size_t, basep: *mut i64) -> ssize_t {
    if !state::is_ours(fd) {
        // SAFETY: getdirentries's contract.
        return unsafe { real::getdirentries64(fd, buf, n, basep) };
    }
    if !basep.is_null() {
        // SAFETY: the caller's offset.
        unsafe { *basep = 0 };
    }
    // SAFETY: getdents64's contract.
    unsafe { getdents64(fd, buf as *mut c_void, n) }
}

exported! {
    [getdirentries, getdirentries64] (fd: c_int, buf: *mut c_char, n: size_t, basep: *mut i64) -> ssize_t =>
        getdirentries_any(fd, buf, n, basep);
}

type Select = Option<unsafe extern "C" fn(*const libc::dirent64) -> c_int>;
type Compare =
    Option<unsafe extern "C" fn(*mut *const libc::dirent64, *mut *const libc::dirent64) -> c_int>;

/// scandir(3) of a Shoal directory (glibc's opens and reads it with its
/// internal calls): listed with this library's stream, each entry `select`
/// keeps copied into memory of the program's malloc (which it frees),
/// sorted with `compare` as glibc sorts (qsort).
unsafe fn scan(
    d: *mut DIR,
    list: *mut *mut *mut libc::dirent64,
    select: Select,
    compare: Compare,
) -> c_int {
    let mut selected: Vec<*mut libc::dirent64> = Vec::new();
    let free_all = |selected: &[*mut libc::dirent64]| {
        // SAFETY: each was malloc'd below.
        selected
            .iter()
            .for_each(|&e| unsafe { libc::free(e as *mut c_void) });
    };
    let size = std::mem::size_of::<libc::dirent64>();
    loop {
        set_errno(0);
        // SAFETY: one of our streams.
        let e = unsafe { readdir_any(d) };
        if e.is_null() {
            break;
        }
        // SAFETY: the program's filter, given the entry readdir gave.
        if select.is_some_and(|f| unsafe { f(e) } == 0) {
            continue;
        }
        // SAFETY: a copy of the entry in memory of the program's malloc.
        let copy = unsafe { libc::malloc(size) } as *mut libc::dirent64;
        if copy.is_null() {
            free_all(&selected);
            return fail(libc::ENOMEM);
        }
        // SAFETY: both hold one dirent64.
        unsafe { std::ptr::copy_nonoverlapping(e, copy, 1) };
        selected.push(copy);
    }
    let e = errno();
    if e != 0 {
        free_all(&selected);
        return fail(e);
    }
    let bytes = selected.len().max(1) * std::mem::size_of::<*mut libc::dirent64>();
    // SAFETY: the array the program frees.
    let array = unsafe { libc::malloc(bytes) } as *mut *mut libc::dirent64;
    if array.is_null() {
        free_all(&selected);
        return fail(libc::ENOMEM);
    }
    // SAFETY: room for selected.len() pointers.
    unsafe { std::ptr::copy_nonoverlapping(selected.as_ptr(), array, selected.len()) };
    if let Some(cmp) = compare {
        // SAFETY: qsort calls the program's comparison with pointers to
        // two elements, as scandir's contract has it.
        unsafe {
            libc::qsort(
                array as *mut c_void,
                selected.len(),
                std::mem::size_of::<*mut libc::dirent64>(),
                Some(std::mem::transmute::<
                    unsafe extern "C" fn(
                        *mut *const libc::dirent64,
                        *mut *const libc::dirent64,
                    ) -> c_int,
                    unsafe extern "C" fn(*const c_void, *const c_void) -> c_int,
                >(cmp)),
            )
        };
    }
    // SAFETY: the caller's result pointer.
    unsafe { *list = array };
    selected.len() as c_int
}

unsafe fn scandirat_any(
    dirfd: c_int,
    path: *const c_char,
    list: *mut *mut *mut libc::dirent64,
    select: Select,
    compare: Compare,
) -> c_int {
    // SAFETY: scandir's contract.
    let w = unsafe { state::classify_at(dirfd, path) };
    match w {
        Where::Shoal(t) => {
            let d = stream_of(&t);
            if d.is_null() {
                return -1;
            }
            // SAFETY: our stream; the caller's pointers.
            let n = unsafe { scan(d, list, select, compare) };
            let e = errno();
            // SAFETY: our stream.
            unsafe { closedir(d) };
            set_errno(e);
            n
        }
        Where::Fail(e) => fail(e),
        Where::Kernel(_) => {
            let (d, p) = w.kernel_args(dirfd, path);
            // SAFETY: scandirat's contract.
            unsafe { real::scandirat64(d, p, list, select, compare) }
        }
    }
}

exported! {
    [scandir, scandir64] (path: *const c_char, list: *mut *mut *mut libc::dirent64, select: Select, compare: Compare) -> c_int =>
        scandirat_any(libc::AT_FDCWD, path, list, select, compare);
    [scandirat, scandirat64] (dirfd: c_int, path: *const c_char, list: *mut *mut *mut libc::dirent64, select: Select, compare: Compare) -> c_int =>
        scandirat_any(dirfd, path, list, select, compare);
}
