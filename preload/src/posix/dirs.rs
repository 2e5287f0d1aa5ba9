//! Directory streams: opendir/fdopendir/readdir/closedir (and dirfd,
//! rewinddir, telldir, seekdir) and getdents64. Every listing is a
//! readdirplus: each batch of entries comes with its attributes (one
//! ListAttr per server per batch), which go into the cache that answers the
//! stat of each entry that `ls -l`, `find` and `du` make next.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use libc::{c_char, c_int, c_long, c_void, size_t, ssize_t, DIR};

use super::files::{busy, close_ours, open_target};
use crate::cache;
use crate::real;
use crate::state::{self, fail, serve, Fd, Where};
use crate::stats::Op;

/// A directory stream of the library's; a `DIR *` points at one.
struct ShoalDir {
    /// The kernel descriptor standing for the directory (what dirfd gives).
    kfd: c_int,
    /// Its Shoal path, "/" ended, to name the entries for the cache.
    base: Vec<u8>,
    /// Entries returned since the start (telldir).
    pos: c_long,
    ent: libc::dirent64,
}

/// The streams of the library's, by address; DIRS_OPEN lets a kernel
/// stream skip the lock.
static DIRS: Mutex<Option<HashSet<usize>>> = Mutex::new(None);
static DIRS_OPEN: AtomicUsize = AtomicUsize::new(0);

fn ours(d: *mut DIR) -> bool {
    if DIRS_OPEN.load(Ordering::Acquire) == 0 || d.is_null() {
        return false;
    }
    DIRS.lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .is_some_and(|s| s.contains(&(d as usize)))
}

/// The Shoal path of a directory descriptor, ending in '/'.
fn base_of(kfd: c_int) -> Option<Vec<u8>> {
    let mut p = state::shoal_of(&state::fd_local(kfd)?)?.into_bytes();
    if !p.ends_with(b"/") {
        p.push(b'/');
    }
    Some(p)
}

/// A stream over Shoal directory descriptor `kfd` (owned from now on).
fn stream(kfd: c_int) -> *mut DIR {
    let Some(base) = base_of(kfd) else {
        state::set_errno(libc::EBADF);
        return std::ptr::null_mut();
    };
    let d = Box::into_raw(Box::new(ShoalDir {
        kfd,
        base,
        pos: 0,
        // SAFETY: a plain C struct; all zeroes is valid.
        ent: unsafe { std::mem::zeroed() },
    })) as *mut DIR;
    DIRS.lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(HashSet::new)
        .insert(d as usize);
    DIRS_OPEN.fetch_add(1, Ordering::AcqRel);
    d
}

#[no_mangle]
pub unsafe extern "C" fn opendir(path: *const c_char) -> *mut DIR {
    // SAFETY: opendir's contract.
    let w = unsafe { state::classify_at(libc::AT_FDCWD, path) };
    match w {
        Where::Shoal(t) => {
            let kfd = open_target(&t, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC, 0);
            if kfd < 0 {
                return std::ptr::null_mut();
            }
            stream(kfd)
        }
        Where::Fail(e) => {
            state::set_errno(e);
            std::ptr::null_mut()
        }
        Where::Kernel(_) => {
            let (_, p) = w.kernel_args(libc::AT_FDCWD, path);
            // SAFETY: opendir's contract.
            unsafe { real::opendir(p) }
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn fdopendir(fd: c_int) -> *mut DIR {
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
                state::set_errno(libc::ENOTDIR);
                return std::ptr::null_mut();
            }
            stream(fd)
        }
        Fd::Busy => {
            state::set_errno(libc::EIO);
            std::ptr::null_mut()
        }
    }
}

/// Entries asked of libshoal per call.
const BATCH_ENTRIES: usize = 64;

/// The next entry of Shoal directory descriptor `kfd` (libshoal's `sfd`),
/// Ok(None) at the end. Entries come from libshoal a batch per call and go
/// into the cache under `base` + name: as listed (their attributes fetched
/// if a stat asks), or with their attributes once this program has stat'ed
/// a listed entry.
fn next_entry(kfd: c_int, sfd: c_int, base: &[u8]) -> Result<Option<shoal::shoal_dirent>, ()> {
    if let Some(e) = state::with_info(kfd, |i| i.pending.pop_front()).flatten() {
        return Ok(Some(e));
    }
    // SAFETY: zeroed C structs are valid; libshoal fills them.
    let zero: (shoal::shoal_dirent, libc::stat) = unsafe { std::mem::zeroed() };
    let mut ents = vec![zero.0; BATCH_ENTRIES];
    let plus = cache::wants_attrs();
    let mut sts = if plus {
        vec![zero.1; BATCH_ENTRIES]
    } else {
        Vec::new()
    };
    let sts_ptr = if plus {
        sts.as_mut_ptr()
    } else {
        std::ptr::null_mut()
    };
    // SAFETY: room for BATCH_ENTRIES entries (and stats).
    let n = serve(Op::Readdir, || unsafe {
        shoal::shoal_readdir_many(sfd, ents.as_mut_ptr(), sts_ptr, BATCH_ENTRIES) as c_int
    });
    if n < 0 {
        return Err(());
    }
    ents.truncate(n as usize);
    for (i, e) in ents.iter().enumerate() {
        // SAFETY: libshoal NUL-terminates the name.
        let name = unsafe { std::ffi::CStr::from_ptr(e.d_name.as_ptr()) }.to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        match plus {
            true => cache::put([base, name].concat(), &sts[i]),
            false => cache::listed(base, name, e.d_ino, e.d_type == libc::DT_LNK),
        }
    }
    let mut ents = ents.into_iter();
    let first = ents.next();
    state::with_info(kfd, |i| i.pending.extend(ents));
    Ok(first)
}

/// The listing of `kfd` starts over: what was fetched and not returned goes.
pub fn forget_listed(kfd: c_int) {
    state::with_info(kfd, |i| i.pending.clear());
}

fn fill(ent: &mut libc::dirent64, e: &shoal::shoal_dirent, off: i64) {
    ent.d_ino = e.d_ino;
    ent.d_off = off;
    ent.d_reclen = std::mem::size_of::<libc::dirent64>() as u16;
    ent.d_type = e.d_type;
    ent.d_name = e.d_name;
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
            state::set_errno(libc::EIO);
            return std::ptr::null_mut();
        }
        Fd::Kernel => {
            state::set_errno(libc::EBADF);
            return std::ptr::null_mut();
        }
    };
    match next_entry(sd.kfd, sfd, &sd.base) {
        Ok(Some(e)) => {
            sd.pos += 1;
            fill(&mut sd.ent, &e, sd.pos);
            &mut sd.ent
        }
        _ => std::ptr::null_mut(),
    }
}

#[no_mangle]
pub unsafe extern "C" fn readdir(d: *mut DIR) -> *mut libc::dirent64 {
    // SAFETY: readdir's contract (dirent and dirent64 are one layout here).
    unsafe { readdir_any(d) }
}

#[no_mangle]
pub unsafe extern "C" fn readdir64(d: *mut DIR) -> *mut libc::dirent64 {
    // SAFETY: readdir's contract.
    unsafe { readdir_any(d) }
}

#[no_mangle]
pub unsafe extern "C" fn closedir(d: *mut DIR) -> c_int {
    if !ours(d) {
        // SAFETY: closedir's contract.
        return unsafe { real::closedir(d) };
    }
    DIRS.lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_mut()
        .map(|s| s.remove(&(d as usize)));
    DIRS_OPEN.fetch_sub(1, Ordering::AcqRel);
    // SAFETY: made by Box::into_raw in stream(), removed from DIRS above so
    // freed once.
    let sd = unsafe { Box::from_raw(d as *mut ShoalDir) };
    if state::is_ours(sd.kfd) {
        close_ours(sd.kfd)
    } else {
        fail(libc::EBADF)
    }
}

#[no_mangle]
pub unsafe extern "C" fn dirfd(d: *mut DIR) -> c_int {
    if ours(d) {
        // SAFETY: one of our streams.
        unsafe { (*(d as *mut ShoalDir)).kfd }
    } else {
        // SAFETY: dirfd's contract.
        unsafe { real::dirfd(d) }
    }
}

#[no_mangle]
pub unsafe extern "C" fn rewinddir(d: *mut DIR) {
    if !ours(d) {
        // SAFETY: rewinddir's contract.
        return unsafe { real::rewinddir(d) };
    }
    // SAFETY: one of our streams.
    let sd = unsafe { &mut *(d as *mut ShoalDir) };
    if let Fd::Shoal(s) = state::fd(sd.kfd) {
        shoal::shoal_rewinddir(s);
        forget_listed(sd.kfd);
        sd.pos = 0;
    }
}

#[no_mangle]
pub unsafe extern "C" fn telldir(d: *mut DIR) -> c_long {
    if ours(d) {
        // SAFETY: one of our streams.
        unsafe { (*(d as *mut ShoalDir)).pos }
    } else {
        // SAFETY: telldir's contract.
        unsafe { real::telldir(d) }
    }
}

/// seekdir to a position telldir gave: rewinds and reads that many entries.
#[no_mangle]
pub unsafe extern "C" fn seekdir(d: *mut DIR, pos: c_long) {
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
}

/// The size of a linux_dirent64 record for a name of `len` bytes.
fn reclen(len: usize) -> usize {
    // d_ino (8) + d_off (8) + d_reclen (2) + d_type (1) + name + NUL, 8-aligned.
    (19 + len + 1 + 7) & !7
}

#[no_mangle]
pub unsafe extern "C" fn getdents64(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    let sfd = match state::fd(fd) {
        // SAFETY: getdents64's contract.
        Fd::Kernel => return unsafe { real::getdents64(fd, buf, n) },
        Fd::Busy => return busy(),
        Fd::Shoal(s) => s,
    };
    let Some(base) = base_of(fd) else {
        return fail(libc::EBADF);
    };
    let mut used = 0usize;
    loop {
        let e = match next_entry(fd, sfd, &base) {
            Ok(Some(x)) => x,
            Ok(None) => break,
            Err(()) => return if used > 0 { used as ssize_t } else { -1 },
        };
        // SAFETY: libshoal NUL-terminates the name.
        let name = unsafe { std::ffi::CStr::from_ptr(e.d_name.as_ptr()) }.to_bytes();
        let len = reclen(name.len());
        if used + len > n {
            if used == 0 {
                return fail(libc::EINVAL);
            }
            state::with_info(fd, |i| i.pending.push_front(e));
            break;
        }
        // SAFETY: `len` bytes at `used` are inside the caller's buffer.
        unsafe {
            let rec = (buf as *mut u8).add(used);
            std::ptr::write_bytes(rec, 0, len);
            std::ptr::write_unaligned(rec as *mut u64, e.d_ino);
            std::ptr::write_unaligned(rec.add(8) as *mut i64, (used + len) as i64);
            std::ptr::write_unaligned(rec.add(16) as *mut u16, len as u16);
            *rec.add(18) = e.d_type;
            std::ptr::copy_nonoverlapping(name.as_ptr(), rec.add(19), name.len());
        }
        used += len;
    }
    used as ssize_t
}
