//! Calls on names and attributes: the stat family (with statx and the old
//! glibc `__xstat` entry points), access, mkdir, unlink, rename, symlinks,
//! hard links, chmod/chown/utimens, extended attributes and statfs.

use libc::{c_char, c_int, c_uint, c_void, gid_t, mode_t, size_t, ssize_t, uid_t};

use super::files::busy;
use crate::cache;
use crate::errno::{errno, fail};
use crate::real;
use crate::statahead;
use crate::state::{self, serve, Fd, Target, Where};
use crate::stats::{self, Op};
use crate::unwind::{guarded, Failed};

/// Runs `shoal` for a Shoal path, `kernel(dirfd, path)` for the kernel's.
unsafe fn at<T: From<i8>>(
    dirfd: c_int,
    path: *const c_char,
    shoal: impl FnOnce(&Target) -> T,
    kernel: impl FnOnce(c_int, *const c_char) -> T,
) -> T {
    // SAFETY: the caller's path.
    let w = unsafe { state::classify_at(dirfd, path) };
    match w {
        Where::Shoal(t) => shoal(&t),
        Where::Fail(e) => fail(e),
        Where::Kernel(_) => {
            let (d, p) = w.kernel_args(dirfd, path);
            kernel(d, p)
        }
    }
}

/// Whether `path` is "" and `flags` has AT_EMPTY_PATH: the call is on `dirfd`.
unsafe fn empty_path(path: *const c_char, flags: c_int) -> bool {
    // SAFETY: the caller's path, read only if not NULL.
    flags & libc::AT_EMPTY_PATH != 0 && !path.is_null() && unsafe { *path } == 0
}

// ---------------------------------------------------------------- stat

/// A stat of the next entry of the last listing, named by its absolute
/// local path (`ls -l`, `du`, a program statting what readdir gave it):
/// answered from the listing's run (cache/run.rs) before the path is even
/// classified. None: the caller goes the usual way (which is also where a
/// path the run does not know in this form ends up).
unsafe fn stat_next_listed(path: *const c_char, flags: c_int) -> Option<libc::stat> {
    if path.is_null() || !state::ready() || state::in_lib() {
        return None;
    }
    // SAFETY: the caller's NUL-terminated path.
    let p = unsafe { std::ffi::CStr::from_ptr(path) }.to_bytes();
    // An absolute path: the directory descriptor does not matter.
    if p.first() != Some(&b'/') {
        return None;
    }
    let t0 = stats::start();
    let st = cache::next_listed(p, flags & libc::AT_SYMLINK_NOFOLLOW == 0)?;
    stats::record(Op::StatCached, t0);
    Some(st)
}

/// stat/lstat of a Shoal path: from the readdirplus cache if a listing just
/// brought its attributes, else from libshoal.
fn stat_target(t: &Target, follow: bool, st: *mut libc::stat) -> c_int {
    if st.is_null() {
        return fail(libc::EFAULT);
    }
    let t0 = stats::start();
    let cached = match cache::get(t.shoal_bytes(), follow) {
        cache::Found::Attrs(st) => Some(st),
        cache::Found::Listed(batch) => fetch_listed(batch, t.shoal_bytes()),
        cache::Found::Nothing => stat_ahead(t, follow),
    };
    if let Some(cached) = cached {
        // SAFETY: checked not NULL; the caller's struct.
        unsafe { *st = cached };
        stats::record(Op::StatCached, t0);
        return 0;
    }
    serve(Op::Stat, || {
        // SAFETY: a NUL-terminated path and the caller's struct.
        unsafe {
            if follow {
                shoal::shoal_stat(t.shoal.as_ptr(), st)
            } else {
                shoal::shoal_lstat(t.shoal.as_ptr(), st)
            }
        }
    })
}

/// A stat no cache could answer: on a run of them in one directory, lists
/// that directory with attributes (`statahead.rs`) and looks again.
fn stat_ahead(t: &Target, follow: bool) -> Option<libc::stat> {
    statahead::list(&statahead::missed(t.shoal_bytes())?);
    match cache::get(t.shoal_bytes(), follow) {
        cache::Found::Attrs(st) => Some(st),
        _ => None,
    }
}

/// Fetches the attributes of a batch of listed entries (one ListAttr per
/// server), keeps them, and returns `path`'s (None if it went meanwhile or
/// the fetch failed: the caller asks for it alone).
fn fetch_listed(batch: Vec<(Vec<u8>, u64)>, path: &[u8]) -> Option<libc::stat> {
    if !batch.iter().any(|(p, _)| p == path) {
        return None;
    }
    let handles: Vec<u64> = batch.iter().map(|(_, h)| *h).collect();
    // SAFETY: zeroed stats are valid; libshoal fills them.
    let mut sts: Vec<libc::stat> = vec![unsafe { std::mem::zeroed() }; handles.len()];
    let asked = cache::asking();
    // SAFETY: `handles.len()` handles and as many stats.
    let r = serve(Op::Stat, || unsafe {
        shoal::shoal_stat_handles(handles.as_ptr(), handles.len(), sts.as_mut_ptr())
    });
    if r != 0 {
        return None;
    }
    // Entries gone since the listing come back with st_ino 0.
    let fetched: Vec<(Vec<u8>, libc::stat)> = batch
        .into_iter()
        .zip(sts)
        .filter(|(_, st)| st.st_ino != 0)
        .map(|((p, _), st)| (p, st))
        .collect();
    let found = fetched.iter().find(|(p, _)| p == path).map(|(_, st)| *st);
    cache::put_many(asked, fetched);
    found
}

fn fstat_any(fd: c_int, st: *mut libc::stat) -> c_int {
    match state::fd(fd) {
        // SAFETY: fstat's contract (stat and stat64 are one layout here).
        Fd::Kernel => unsafe { real::fstat64(fd, st as *mut libc::stat64) },
        // SAFETY: fstat's contract.
        Fd::Shoal(s) => serve(Op::Stat, || unsafe { shoal::shoal_fstat(s, st) }),
        Fd::Busy => busy(),
    }
}

unsafe fn fstatat_any(
    dirfd: c_int,
    path: *const c_char,
    st: *mut libc::stat,
    flags: c_int,
) -> c_int {
    // SAFETY: fstatat's contract.
    if unsafe { empty_path(path, flags) } {
        return fstat_any(dirfd, st);
    }
    if !st.is_null() {
        // SAFETY: fstatat's contract.
        if let Some(found) = unsafe { stat_next_listed(path, flags) } {
            // SAFETY: checked not NULL; the caller's struct.
            unsafe { *st = found };
            return 0;
        }
    }
    // SAFETY: fstatat's contract.
    unsafe {
        at(
            dirfd,
            path,
            |t| stat_target(t, flags & libc::AT_SYMLINK_NOFOLLOW == 0, st),
            |d, p| real::fstatat64(d, p, st as *mut libc::stat64, flags),
        )
    }
}

exported! {
    [stat, stat64] (path: *const c_char, st: *mut libc::stat) -> c_int =>
        fstatat_any(libc::AT_FDCWD, path, st, 0);
    [lstat, lstat64] (path: *const c_char, st: *mut libc::stat) -> c_int =>
        fstatat_any(libc::AT_FDCWD, path, st, libc::AT_SYMLINK_NOFOLLOW);
    [fstat, fstat64] (fd: c_int, st: *mut libc::stat) -> c_int => fstat_any(fd, st);
    [fstatat, fstatat64, newfstatat]
        (dirfd: c_int, path: *const c_char, st: *mut libc::stat, flags: c_int) -> c_int =>
        fstatat_any(dirfd, path, st, flags);
    [__xstat, __xstat64] (_ver: c_int, path: *const c_char, st: *mut libc::stat) -> c_int =>
        fstatat_any(libc::AT_FDCWD, path, st, 0);
    [__lxstat, __lxstat64] (_ver: c_int, path: *const c_char, st: *mut libc::stat) -> c_int =>
        fstatat_any(libc::AT_FDCWD, path, st, libc::AT_SYMLINK_NOFOLLOW);
    [__fxstat, __fxstat64] (_ver: c_int, fd: c_int, st: *mut libc::stat) -> c_int => fstat_any(fd, st);
    [__fxstatat, __fxstatat64]
        (_ver: c_int, dirfd: c_int, path: *const c_char, st: *mut libc::stat, flags: c_int) -> c_int =>
        fstatat_any(dirfd, path, st, flags);
}

fn dev_major(dev: u64) -> u32 {
    (((dev >> 8) & 0xfff) | ((dev >> 32) & !0xfff)) as u32
}

fn dev_minor(dev: u64) -> u32 {
    ((dev & 0xff) | ((dev >> 12) & !0xff)) as u32
}

fn ts(sec: i64, nsec: i64) -> libc::statx_timestamp {
    // SAFETY: a plain C struct; all zeroes is valid.
    let mut t: libc::statx_timestamp = unsafe { std::mem::zeroed() };
    t.tv_sec = sec;
    t.tv_nsec = nsec as u32;
    t
}

/// A `struct statx` with what a `struct stat` says (the basic fields).
pub(crate) fn statx_of(st: &libc::stat) -> libc::statx {
    // SAFETY: a plain C struct; all zeroes is valid.
    let mut x: libc::statx = unsafe { std::mem::zeroed() };
    x.stx_mask = libc::STATX_BASIC_STATS;
    x.stx_blksize = st.st_blksize as u32;
    x.stx_nlink = st.st_nlink as u32;
    x.stx_uid = st.st_uid;
    x.stx_gid = st.st_gid;
    x.stx_mode = st.st_mode as u16;
    x.stx_ino = st.st_ino;
    x.stx_size = st.st_size as u64;
    x.stx_blocks = st.st_blocks as u64;
    x.stx_atime = ts(st.st_atime, st.st_atime_nsec);
    x.stx_mtime = ts(st.st_mtime, st.st_mtime_nsec);
    x.stx_ctime = ts(st.st_ctime, st.st_ctime_nsec);
    x.stx_rdev_major = dev_major(st.st_rdev);
    x.stx_rdev_minor = dev_minor(st.st_rdev);
    x.stx_dev_major = dev_major(st.st_dev);
    x.stx_dev_minor = dev_minor(st.st_dev);
    x
}

#[no_mangle]
pub unsafe extern "C" fn statx(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mask: c_uint,
    stx: *mut libc::statx,
) -> c_int {
    guarded(<c_int as Failed>::failed, || {
        if stx.is_null() {
            // SAFETY: statx's contract; the kernel reports EFAULT.
            return unsafe { real::statx(dirfd, path, flags, mask, stx) };
        }
        // SAFETY: statx's contract (an empty path is not absolute: not this).
        if let Some(found) = unsafe { stat_next_listed(path, flags) } {
            // SAFETY: checked not NULL; the caller's struct.
            unsafe { *stx = statx_of(&found) };
            return 0;
        }
        // SAFETY: a plain C struct; all zeroes is valid.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: statx's contract.
        let r = if unsafe { empty_path(path, flags) } {
            match state::fd(dirfd) {
                // SAFETY: statx's contract.
                Fd::Kernel => return unsafe { real::statx(dirfd, path, flags, mask, stx) },
                // SAFETY: our own struct.
                Fd::Shoal(s) => serve(Op::Stat, || unsafe { shoal::shoal_fstat(s, &mut st) }),
                Fd::Busy => return busy(),
            }
        } else {
            // SAFETY: the caller's path.
            let w = unsafe { state::classify_at(dirfd, path) };
            match w {
                Where::Shoal(t) => stat_target(&t, flags & libc::AT_SYMLINK_NOFOLLOW == 0, &mut st),
                Where::Fail(e) => return fail(e),
                Where::Kernel(_) => {
                    let (d, p) = w.kernel_args(dirfd, path);
                    // SAFETY: statx's contract.
                    return unsafe { real::statx(d, p, flags, mask, stx) };
                }
            }
        };
        if r == 0 {
            // SAFETY: checked not NULL; the caller's struct.
            unsafe { *stx = statx_of(&st) };
        }
        r
    })
}

// ---------------------------------------------------------------- access

unsafe fn faccessat_any(dirfd: c_int, path: *const c_char, mode: c_int, flags: c_int) -> c_int {
    // SAFETY: faccessat's contract.
    unsafe {
        at(
            dirfd,
            path,
            |t| {
                if mode == libc::F_OK && cache::exists(t.shoal_bytes()) {
                    return 0;
                }
                serve(Op::Access, || shoal::shoal_access(t.shoal.as_ptr(), mode))
            },
            |d, p| real::faccessat(d, p, mode, flags),
        )
    }
}

exported! {
    [access] (path: *const c_char, mode: c_int) -> c_int => faccessat_any(libc::AT_FDCWD, path, mode, 0);
}

exported! {
    [faccessat] (dirfd: c_int, path: *const c_char, mode: c_int, flags: c_int) -> c_int => faccessat_any(dirfd, path, mode, flags);
}

exported! {
    [euidaccess, eaccess] (path: *const c_char, mode: c_int) -> c_int => faccessat_any(libc::AT_FDCWD, path, mode, libc::AT_EACCESS);
}
// ---------------------------------------------------------------- namespace

/// A call that changes the namespace: the cache goes first.
fn change(op: Op, f: impl FnOnce() -> c_int) -> c_int {
    serve(op, || {
        cache::clear();
        f()
    })
}

unsafe fn mkdirat_any(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int {
    // SAFETY: mkdirat's contract.
    unsafe {
        at(
            dirfd,
            path,
            |t| change(Op::Mkdir, || shoal::shoal_mkdir(t.shoal.as_ptr(), mode)),
            |d, p| real::mkdirat(d, p, mode),
        )
    }
}

exported! {
    [mkdir] (path: *const c_char, mode: mode_t) -> c_int => mkdirat_any(libc::AT_FDCWD, path, mode);
}

exported! {
    [mkdirat] (dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int => mkdirat_any(dirfd, path, mode);
}

unsafe fn unlinkat_any(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int {
    // SAFETY: unlinkat's contract.
    unsafe {
        at(
            dirfd,
            path,
            |t| {
                if flags & libc::AT_REMOVEDIR != 0 {
                    change(Op::Rmdir, || shoal::shoal_rmdir(t.shoal.as_ptr()))
                } else {
                    change(Op::Unlink, || shoal::shoal_unlink(t.shoal.as_ptr()))
                }
            },
            |d, p| real::unlinkat(d, p, flags),
        )
    }
}

exported! {
    [unlink] (path: *const c_char) -> c_int => unlinkat_any(libc::AT_FDCWD, path, 0);
}

exported! {
    [unlinkat] (dirfd: c_int, path: *const c_char, flags: c_int) -> c_int => unlinkat_any(dirfd, path, flags);
}

exported! {
    [rmdir] (path: *const c_char) -> c_int => unlinkat_any(libc::AT_FDCWD, path, libc::AT_REMOVEDIR);
}

/// A call naming two paths (rename, link): both Shoal's, both the kernel's,
/// or EXDEV.
unsafe fn two_paths(
    olddirfd: c_int,
    old: *const c_char,
    newdirfd: c_int,
    new: *const c_char,
    shoal: impl FnOnce(&Target, &Target) -> c_int,
    kernel: impl FnOnce(c_int, *const c_char, c_int, *const c_char) -> c_int,
) -> c_int {
    // SAFETY: the caller's paths.
    let (a, b) = unsafe {
        (
            state::classify_at(olddirfd, old),
            state::classify_at(newdirfd, new),
        )
    };
    match (&a, &b) {
        (Where::Fail(e), _) | (_, Where::Fail(e)) => fail(*e),
        (Where::Shoal(x), Where::Shoal(y)) => shoal(x, y),
        (Where::Kernel(_), Where::Kernel(_)) => {
            let (od, op) = a.kernel_args(olddirfd, old);
            let (nd, np) = b.kernel_args(newdirfd, new);
            kernel(od, op, nd, np)
        }
        _ => fail(libc::EXDEV),
    }
}

unsafe fn renameat2_any(
    olddirfd: c_int,
    old: *const c_char,
    newdirfd: c_int,
    new: *const c_char,
    flags: c_uint,
) -> c_int {
    // SAFETY: renameat2's contract.
    unsafe {
        two_paths(
            olddirfd,
            old,
            newdirfd,
            new,
            |x, y| {
                if flags & libc::RENAME_EXCHANGE != 0
                    || flags & !(libc::RENAME_NOREPLACE | libc::RENAME_EXCHANGE) != 0
                {
                    return fail(libc::EINVAL);
                }
                change(Op::Rename, || {
                    if flags & libc::RENAME_NOREPLACE != 0 {
                        // SAFETY: a zeroed stat is valid.
                        let mut st: libc::stat = std::mem::zeroed();
                        if shoal::shoal_lstat(y.shoal.as_ptr(), &mut st) == 0 {
                            return fail(libc::EEXIST);
                        }
                    }
                    shoal::shoal_rename(x.shoal.as_ptr(), y.shoal.as_ptr())
                })
            },
            |od, op, nd, np| real::renameat2(od, op, nd, np, flags),
        )
    }
}

exported! {
    [rename] (old: *const c_char, new: *const c_char) -> c_int => renameat2_any(libc::AT_FDCWD, old, libc::AT_FDCWD, new, 0);
}

exported! {
    [renameat] (olddirfd: c_int, old: *const c_char, newdirfd: c_int, new: *const c_char) -> c_int => renameat2_any(olddirfd, old, newdirfd, new, 0);
}

exported! {
    [renameat2] (olddirfd: c_int, old: *const c_char, newdirfd: c_int, new: *const c_char, flags: c_uint) -> c_int => renameat2_any(olddirfd, old, newdirfd, new, flags);
}

unsafe fn linkat_any(
    olddirfd: c_int,
    old: *const c_char,
    newdirfd: c_int,
    new: *const c_char,
    flags: c_int,
) -> c_int {
    // SAFETY: linkat's contract.
    unsafe {
        two_paths(
            olddirfd,
            old,
            newdirfd,
            new,
            |x, y| {
                let follow = (flags & libc::AT_SYMLINK_FOLLOW != 0) as c_int;
                change(Op::Link, || {
                    shoal::shoal_link(x.shoal.as_ptr(), y.shoal.as_ptr(), follow)
                })
            },
            |od, op, nd, np| real::linkat(od, op, nd, np, flags),
        )
    }
}

exported! {
    [link] (old: *const c_char, new: *const c_char) -> c_int => linkat_any(libc::AT_FDCWD, old, libc::AT_FDCWD, new, 0);
}

exported! {
    [linkat] (olddirfd: c_int, old: *const c_char, newdirfd: c_int, new: *const c_char, flags: c_int) -> c_int => linkat_any(olddirfd, old, newdirfd, new, flags);
}

unsafe fn symlinkat_any(target: *const c_char, dirfd: c_int, path: *const c_char) -> c_int {
    // SAFETY: symlinkat's contract.
    unsafe {
        at(
            dirfd,
            path,
            |t| {
                change(Op::Symlink, || {
                    shoal::shoal_symlink(target, t.shoal.as_ptr())
                })
            },
            |d, p| real::symlinkat(target, d, p),
        )
    }
}

exported! {
    [symlink] (target: *const c_char, path: *const c_char) -> c_int => symlinkat_any(target, libc::AT_FDCWD, path);
}

exported! {
    [symlinkat] (target: *const c_char, dirfd: c_int, path: *const c_char) -> c_int => symlinkat_any(target, dirfd, path);
}

unsafe fn readlinkat_any(
    dirfd: c_int,
    path: *const c_char,
    buf: *mut c_char,
    size: size_t,
) -> ssize_t {
    // SAFETY: readlinkat's contract.
    unsafe {
        at(
            dirfd,
            path,
            |t| {
                serve(Op::Readlink, || {
                    shoal::shoal_readlink(t.shoal.as_ptr(), buf, size)
                })
            },
            |d, p| real::readlinkat(d, p, buf, size),
        )
    }
}

exported! {
    [readlink] (path: *const c_char, buf: *mut c_char, size: size_t) -> ssize_t => readlinkat_any(libc::AT_FDCWD, path, buf, size);
}

exported! {
    [readlinkat] (dirfd: c_int, path: *const c_char, buf: *mut c_char, size: size_t) -> ssize_t => readlinkat_any(dirfd, path, buf, size);
}

// ---------------------------------------------------------------- attributes

unsafe fn fchmodat_any(dirfd: c_int, path: *const c_char, mode: mode_t, flags: c_int) -> c_int {
    // SAFETY: fchmodat's contract.
    unsafe {
        at(
            dirfd,
            path,
            |t| {
                if flags & libc::AT_SYMLINK_NOFOLLOW != 0 {
                    // As Linux: a symlink's mode cannot be changed.
                    return fail(libc::EOPNOTSUPP);
                }
                change(Op::Setattr, || shoal::shoal_chmod(t.shoal.as_ptr(), mode))
            },
            |d, p| real::fchmodat(d, p, mode, flags),
        )
    }
}

exported! {
    [chmod] (path: *const c_char, mode: mode_t) -> c_int => fchmodat_any(libc::AT_FDCWD, path, mode, 0);
}

exported! {
    [fchmodat] (dirfd: c_int, path: *const c_char, mode: mode_t, flags: c_int) -> c_int => fchmodat_any(dirfd, path, mode, flags);
}

#[no_mangle]
pub extern "C" fn fchmod(fd: c_int, mode: mode_t) -> c_int {
    guarded(<c_int as Failed>::failed, || {
        match state::fd(fd) {
            // SAFETY: plain integers.
            Fd::Kernel => unsafe { real::fchmod(fd, mode) },
            Fd::Shoal(s) => change(Op::Setattr, || shoal::shoal_fchmod(s, mode)),
            Fd::Busy => busy(),
        }
    })
}

unsafe fn fchownat_any(
    dirfd: c_int,
    path: *const c_char,
    uid: uid_t,
    gid: gid_t,
    flags: c_int,
) -> c_int {
    // SAFETY: fchownat's contract.
    if unsafe { empty_path(path, flags) } {
        return fchown(dirfd, uid, gid);
    }
    // SAFETY: fchownat's contract.
    unsafe {
        at(
            dirfd,
            path,
            |t| {
                change(Op::Setattr, || {
                    if flags & libc::AT_SYMLINK_NOFOLLOW != 0 {
                        shoal::shoal_lchown(t.shoal.as_ptr(), uid, gid)
                    } else {
                        shoal::shoal_chown(t.shoal.as_ptr(), uid, gid)
                    }
                })
            },
            |d, p| real::fchownat(d, p, uid, gid, flags),
        )
    }
}

exported! {
    [chown] (path: *const c_char, uid: uid_t, gid: gid_t) -> c_int => fchownat_any(libc::AT_FDCWD, path, uid, gid, 0);
}

exported! {
    [lchown] (path: *const c_char, uid: uid_t, gid: gid_t) -> c_int => fchownat_any(libc::AT_FDCWD, path, uid, gid, libc::AT_SYMLINK_NOFOLLOW);
}

exported! {
    [fchownat] (dirfd: c_int, path: *const c_char, uid: uid_t, gid: gid_t, flags: c_int) -> c_int => fchownat_any(dirfd, path, uid, gid, flags);
}

#[no_mangle]
pub extern "C" fn fchown(fd: c_int, uid: uid_t, gid: gid_t) -> c_int {
    guarded(<c_int as Failed>::failed, || {
        match state::fd(fd) {
            // SAFETY: plain integers.
            Fd::Kernel => unsafe { real::fchown(fd, uid, gid) },
            Fd::Shoal(s) => change(Op::Setattr, || shoal::shoal_fchown(s, uid, gid)),
            Fd::Busy => busy(),
        }
    })
}

unsafe fn futimens_any(fd: c_int, times: *const libc::timespec) -> c_int {
    match state::fd(fd) {
        // SAFETY: futimens's contract.
        Fd::Kernel => unsafe { real::futimens(fd, times) },
        // SAFETY: futimens's contract.
        Fd::Shoal(s) => change(Op::Setattr, || unsafe { shoal::shoal_futimens(s, times) }),
        Fd::Busy => busy(),
    }
}

exported! {
    [futimens] (fd: c_int, times: *const libc::timespec) -> c_int => futimens_any(fd, times);
}

#[no_mangle]
pub unsafe extern "C" fn utimensat(
    dirfd: c_int,
    path: *const c_char,
    times: *const libc::timespec,
    flags: c_int,
) -> c_int {
    guarded(<c_int as Failed>::failed, || {
        if path.is_null() {
            // Linux: utimensat(fd, NULL, ...) is futimens(fd, ...).
            // SAFETY: utimensat's contract.
            return unsafe { futimens_any(dirfd, times) };
        }
        // SAFETY: utimensat's contract.
        if unsafe { empty_path(path, flags) } {
            // SAFETY: utimensat's contract.
            return unsafe { futimens_any(dirfd, times) };
        }
        // SAFETY: utimensat's contract.
        unsafe {
            at(
                dirfd,
                path,
                |t| {
                    change(Op::Setattr, || {
                        shoal::shoal_utimens(t.shoal.as_ptr(), times, flags)
                    })
                },
                |d, p| real::utimensat(d, p, times, flags),
            )
        }
    })
}

/// `struct timeval[2]` as `struct timespec[2]` (NULL stays NULL: now).
unsafe fn timespecs(tv: *const libc::timeval) -> Option<[libc::timespec; 2]> {
    if tv.is_null() {
        return None;
    }
    // SAFETY: the caller's two timevals.
    let tv = unsafe { std::slice::from_raw_parts(tv, 2) };
    Some([0, 1].map(|i| libc::timespec {
        tv_sec: tv[i].tv_sec,
        tv_nsec: tv[i].tv_usec * 1000,
    }))
}

unsafe fn utimes_at(path: *const c_char, tv: *const libc::timeval, flags: c_int) -> c_int {
    // SAFETY: the caller's timevals.
    let ts = unsafe { timespecs(tv) };
    let p = ts.as_ref().map_or(std::ptr::null(), |t| t.as_ptr());
    // SAFETY: utimensat's contract.
    unsafe { utimensat(libc::AT_FDCWD, path, p, flags) }
}

exported! {
    [utimes] (path: *const c_char, tv: *const libc::timeval) -> c_int => utimes_at(path, tv, 0);
}

exported! {
    [lutimes] (path: *const c_char, tv: *const libc::timeval) -> c_int => utimes_at(path, tv, libc::AT_SYMLINK_NOFOLLOW);
}

#[no_mangle]
pub unsafe extern "C" fn futimes(fd: c_int, tv: *const libc::timeval) -> c_int {
    guarded(<c_int as Failed>::failed, || {
        // SAFETY: the caller's timevals.
        let ts = unsafe { timespecs(tv) };
        let p = ts.as_ref().map_or(std::ptr::null(), |t| t.as_ptr());
        // SAFETY: futimens's contract.
        unsafe { futimens_any(fd, p) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn utime(path: *const c_char, times: *const libc::utimbuf) -> c_int {
    guarded(<c_int as Failed>::failed, || {
        let ts = (!times.is_null()).then(|| {
            // SAFETY: the caller's struct.
            let t = unsafe { &*times };
            [
                libc::timespec {
                    tv_sec: t.actime,
                    tv_nsec: 0,
                },
                libc::timespec {
                    tv_sec: t.modtime,
                    tv_nsec: 0,
                },
            ]
        });
        let p = ts.as_ref().map_or(std::ptr::null(), |t| t.as_ptr());
        // SAFETY: utimensat's contract.
        unsafe { utimensat(libc::AT_FDCWD, path, p, 0) }
    })
}

// ---------------------------------------------------------------- xattrs

/// Names refused with EOPNOTSUPP without asking a server, as the mount
/// does (fuse/src/xattr.rs): the kernel's own `system.*` (POSIX ACLs),
/// SELinux labels and file capabilities. `ls -l` asks for two of them per
/// entry; tools take EOPNOTSUPP as "none".
unsafe fn refused(name: *const c_char) -> bool {
    if name.is_null() {
        return false;
    }
    // SAFETY: a NUL-terminated name.
    let n = unsafe { std::ffi::CStr::from_ptr(name) }.to_bytes();
    n.starts_with(b"system.") || n == b"security.selinux" || n == b"security.capability"
}

macro_rules! xattr_path {
    ($name:ident, $shoal:ident, ($($a:ident: $t:ty),*) -> $r:ty) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, $($a: $t),*) -> $r {
            guarded(<$r as Failed>::failed, || {
                // SAFETY: the call's contract.
                unsafe {
                    at(
                        libc::AT_FDCWD,
                        path,
                        |t| serve(Op::Xattr, || shoal::$shoal(t.shoal.as_ptr(), $($a),*)),
                        |_, p| real::$name(p, $($a),*),
                    )
                }

            })
        }
    };
    ($name:ident, $shoal:ident, named ($($a:ident: $t:ty),*) -> $r:ty) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, name: *const c_char, $($a: $t),*) -> $r {
            guarded(<$r as Failed>::failed, || {
                // SAFETY: the call's contract.
                unsafe {
                    at(
                        libc::AT_FDCWD,
                        path,
                        |t| match refused(name) {
                            true => fail(libc::EOPNOTSUPP),
                            false => serve(Op::Xattr, || shoal::$shoal(t.shoal.as_ptr(), name, $($a),*)),
                        },
                        |_, p| real::$name(p, name, $($a),*),
                    )
                }

            })
        }
    };
}

macro_rules! xattr_fd {
    ($name:ident, $shoal:ident, ($($a:ident: $t:ty),*) -> $r:ty) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, $($a: $t),*) -> $r {
            guarded(<$r as Failed>::failed, || {
                match state::fd(fd) {
                    // SAFETY: the call's contract.
                    Fd::Kernel => unsafe { real::$name(fd, $($a),*) },
                    // SAFETY: the call's contract.
                    Fd::Shoal(s) => serve(Op::Xattr, || unsafe { shoal::$shoal(s, $($a),*) }),
                    Fd::Busy => busy(),
                }

            })
        }
    };
    ($name:ident, $shoal:ident, named ($($a:ident: $t:ty),*) -> $r:ty) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name(fd: c_int, name: *const c_char, $($a: $t),*) -> $r {
            guarded(<$r as Failed>::failed, || {
                match state::fd(fd) {
                    // SAFETY: the call's contract.
                    Fd::Kernel => unsafe { real::$name(fd, name, $($a),*) },
                    // SAFETY: the call's contract.
                    Fd::Shoal(_) if unsafe { refused(name) } => fail(libc::EOPNOTSUPP),
                    // SAFETY: the call's contract.
                    Fd::Shoal(s) => serve(Op::Xattr, || unsafe { shoal::$shoal(s, name, $($a),*) }),
                    Fd::Busy => busy(),
                }

            })
        }
    };
}

xattr_path!(getxattr, shoal_getxattr, named (value: *mut c_void, size: size_t) -> ssize_t);
xattr_path!(lgetxattr, shoal_lgetxattr, named (value: *mut c_void, size: size_t) -> ssize_t);
xattr_fd!(fgetxattr, shoal_fgetxattr, named (value: *mut c_void, size: size_t) -> ssize_t);
xattr_path!(setxattr, shoal_setxattr, named (value: *const c_void, size: size_t, flags: c_int) -> c_int);
xattr_path!(lsetxattr, shoal_lsetxattr, named (value: *const c_void, size: size_t, flags: c_int) -> c_int);
xattr_fd!(fsetxattr, shoal_fsetxattr, named (value: *const c_void, size: size_t, flags: c_int) -> c_int);
xattr_path!(listxattr, shoal_listxattr, (list: *mut c_char, size: size_t) -> ssize_t);
xattr_path!(llistxattr, shoal_llistxattr, (list: *mut c_char, size: size_t) -> ssize_t);
xattr_fd!(flistxattr, shoal_flistxattr, (list: *mut c_char, size: size_t) -> ssize_t);
xattr_path!(removexattr, shoal_removexattr, named () -> c_int);
xattr_path!(lremovexattr, shoal_lremovexattr, named () -> c_int);
xattr_fd!(fremovexattr, shoal_fremovexattr, named () -> c_int);

// ---------------------------------------------------------------- statfs

/// statfs/statvfs of a Shoal descriptor: of the path it was opened by.
fn fd_shoal_path(fd: c_int) -> Option<std::ffi::CString> {
    state::shoal_of(&state::fd_local(fd)?)
}

macro_rules! statfs_calls {
    ($path_fn:ident, $fd_fn:ident, $ty:ty, $shoal:ident, $real_path:ident, $real_fd:ident) => {
        #[no_mangle]
        pub unsafe extern "C" fn $path_fn(path: *const c_char, buf: *mut $ty) -> c_int {
            guarded(<c_int as Failed>::failed, || {
                // SAFETY: the call's contract.
                unsafe {
                    at(
                        libc::AT_FDCWD,
                        path,
                        |t| {
                            serve(Op::Statfs, || {
                                shoal::$shoal(t.shoal.as_ptr(), buf as *mut _)
                            })
                        },
                        |_, p| real::$real_path(p, buf as *mut _),
                    )
                }
            })
        }

        #[no_mangle]
        pub unsafe extern "C" fn $fd_fn(fd: c_int, buf: *mut $ty) -> c_int {
            guarded(<c_int as Failed>::failed, || {
                match state::fd(fd) {
                    // SAFETY: the call's contract.
                    Fd::Kernel => unsafe { real::$real_fd(fd, buf as *mut _) },
                    Fd::Shoal(_) => match fd_shoal_path(fd) {
                        // SAFETY: a NUL-terminated path; the caller's buffer.
                        Some(p) => serve(Op::Statfs, || unsafe {
                            shoal::$shoal(p.as_ptr(), buf as *mut _)
                        }),
                        None => fail(libc::EBADF),
                    },
                    Fd::Busy => busy(),
                }
            })
        }
    };
}

statfs_calls!(
    statfs,
    fstatfs,
    libc::statfs,
    shoal_statfs,
    statfs64,
    fstatfs64
);
statfs_calls!(
    statfs64,
    fstatfs64,
    libc::statfs64,
    shoal_statfs,
    statfs64,
    fstatfs64
);
statfs_calls!(
    statvfs,
    fstatvfs,
    libc::statvfs,
    shoal_statvfs,
    statvfs64,
    fstatvfs64
);
statfs_calls!(
    statvfs64,
    fstatvfs64,
    libc::statvfs64,
    shoal_statvfs,
    statvfs64,
    fstatvfs64
);

// ---------------------------------------------------------------- more names

/// mknod and mkfifo: Shoal has no device or FIFO nodes of libshoal's own;
/// on a mount the kernel makes them there, through the mount (so each is
/// made at the local path the library resolved, relative paths from a
/// Shoal directory included); under a bare SHOAL_PREFIX they are EPERM
/// ("the file system does not support the type of node requested").
unsafe fn mknodat_any(dirfd: c_int, path: *const c_char, mode: mode_t, dev: libc::dev_t) -> c_int {
    // SAFETY: mknodat's contract.
    unsafe {
        at(
            dirfd,
            path,
            |t| match std::ffi::CString::new(t.local.clone()) {
                Ok(local) if t.mounted => {
                    cache::clear();
                    real::mknodat(libc::AT_FDCWD, local.as_ptr(), mode, dev)
                }
                _ => fail(libc::EPERM),
            },
            |d, p| real::mknodat(d, p, mode, dev),
        )
    }
}

exported! {
    [mknod] (path: *const c_char, mode: mode_t, dev: libc::dev_t) -> c_int => mknodat_any(libc::AT_FDCWD, path, mode, dev);
    [mknodat] (dirfd: c_int, path: *const c_char, mode: mode_t, dev: libc::dev_t) -> c_int => mknodat_any(dirfd, path, mode, dev);
    [mkfifo] (path: *const c_char, mode: mode_t) -> c_int => mknodat_any(libc::AT_FDCWD, path, mode | libc::S_IFIFO, 0);
    [mkfifoat] (dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int => mknodat_any(dirfd, path, mode | libc::S_IFIFO, 0);
}

/// remove(3), as glibc's: unlink, and rmdir if that says it is a
/// directory (glibc's would call its internal unlink).
unsafe fn remove_any(path: *const c_char) -> c_int {
    // SAFETY: remove's contract.
    let r = unsafe { unlinkat_any(libc::AT_FDCWD, path, 0) };
    if r < 0 && errno() == libc::EISDIR {
        // SAFETY: as above.
        return unsafe { unlinkat_any(libc::AT_FDCWD, path, libc::AT_REMOVEDIR) };
    }
    r
}

exported! {
    [remove] (path: *const c_char) -> c_int => remove_any(path);
    [lchmod] (path: *const c_char, mode: mode_t) -> c_int => fchmodat_any(libc::AT_FDCWD, path, mode, libc::AT_SYMLINK_NOFOLLOW);
    [__readlink_chk] (path: *const c_char, buf: *mut c_char, size: size_t, buflen: size_t) -> ssize_t =>
        { super::files::checked(size, buflen); readlinkat_any(libc::AT_FDCWD, path, buf, size) };
    [__readlinkat_chk] (dirfd: c_int, path: *const c_char, buf: *mut c_char, size: size_t, buflen: size_t) -> ssize_t =>
        { super::files::checked(size, buflen); readlinkat_any(dirfd, path, buf, size) };
}

/// futimesat(2): utimes relative to a directory descriptor (NULL path: of
/// the descriptor itself).
unsafe fn futimesat_any(dirfd: c_int, path: *const c_char, tv: *const libc::timeval) -> c_int {
    // SAFETY: the caller's timevals.
    let ts = unsafe { timespecs(tv) };
    let p = ts.as_ref().map_or(std::ptr::null(), |t| t.as_ptr());
    if path.is_null() {
        // SAFETY: futimens's contract.
        return unsafe { futimens_any(dirfd, p) };
    }
    // SAFETY: utimensat's contract.
    unsafe { utimensat(dirfd, path, p, 0) }
}

exported! {
    [futimesat] (dirfd: c_int, path: *const c_char, tv: *const libc::timeval) -> c_int => futimesat_any(dirfd, path, tv);
}

/// pathconf/fpathconf on Shoal: the limits glibc gives for a Linux file
/// system it has no table for (its own would ask the kernel's statfs of the
/// path or stand-in), with Shoal's name length.
fn shoal_pathconf(name: c_int) -> libc::c_long {
    match name {
        libc::_PC_LINK_MAX => 127,
        libc::_PC_NAME_MAX => 255,
        libc::_PC_PATH_MAX => libc::PATH_MAX as libc::c_long,
        libc::_PC_PIPE_BUF => libc::PIPE_BUF as libc::c_long,
        libc::_PC_CHOWN_RESTRICTED | libc::_PC_NO_TRUNC | libc::_PC_2_SYMLINKS => 1,
        libc::_PC_VDISABLE => 0,
        libc::_PC_FILESIZEBITS => 64,
        libc::_PC_MAX_CANON | libc::_PC_MAX_INPUT => 255,
        // No limit, or not known: -1 with errno unchanged, as POSIX asks.
        libc::_PC_SYNC_IO
        | libc::_PC_ASYNC_IO
        | libc::_PC_PRIO_IO
        | libc::_PC_SOCK_MAXBUF
        | libc::_PC_REC_INCR_XFER_SIZE
        | libc::_PC_REC_MAX_XFER_SIZE
        | libc::_PC_REC_MIN_XFER_SIZE
        | libc::_PC_REC_XFER_ALIGN
        | libc::_PC_SYMLINK_MAX => -1,
        libc::_PC_ALLOC_SIZE_MIN => 4096,
        _ => fail(libc::EINVAL),
    }
}

exported! {
    [pathconf] (path: *const c_char, name: c_int) -> libc::c_long =>
        at(libc::AT_FDCWD, path, |_| shoal_pathconf(name), |_, p| real::pathconf(p, name));
    [fpathconf] (fd: c_int, name: c_int) -> libc::c_long => match state::fd(fd) {
        Fd::Kernel => real::fpathconf(fd, name),
        Fd::Shoal(_) => shoal_pathconf(name),
        Fd::Busy => busy(),
    };
}

/// isfdtype(3): whether `fd` is of file type `kind` (S_IFREG & co).
fn isfdtype_any(fd: c_int, kind: c_int) -> c_int {
    if !state::is_ours(fd) {
        // SAFETY: plain integers.
        return unsafe { real::isfdtype(fd, kind) };
    }
    // SAFETY: a zeroed stat is valid; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    if fstat_any(fd, &mut st) < 0 {
        return -1;
    }
    (st.st_mode & libc::S_IFMT == kind as mode_t) as c_int
}

/// name_to_handle_at(2) of a Shoal path or descriptor: EOPNOTSUPP, "the
/// file system does not support decoding of a path name to a file handle"
/// (programs such as `tar --xattrs` and systemd then go by path). A handle
/// given to open_by_handle_at with a Shoal descriptor cannot be Shoal's:
/// ESTALE.
unsafe fn name_to_handle_at_any(
    dirfd: c_int,
    path: *const c_char,
    handle: *mut c_void,
    mount_id: *mut c_int,
    flags: c_int,
) -> c_int {
    // SAFETY: the call's path.
    if unsafe { empty_path(path, flags) } && state::is_ours(dirfd) {
        return fail(libc::EOPNOTSUPP);
    }
    // SAFETY: name_to_handle_at's contract.
    unsafe {
        at(
            dirfd,
            path,
            |_| fail(libc::EOPNOTSUPP),
            |d, p| real::name_to_handle_at(d, p, handle, mount_id, flags),
        )
    }
}

exported! {
    [isfdtype] (fd: c_int, kind: c_int) -> c_int => isfdtype_any(fd, kind);
    [name_to_handle_at] (dirfd: c_int, path: *const c_char, handle: *mut c_void, mount_id: *mut c_int, flags: c_int) -> c_int =>
        name_to_handle_at_any(dirfd, path, handle, mount_id, flags);
    [open_by_handle_at] (mount_fd: c_int, handle: *mut c_void, flags: c_int) -> c_int => match state::is_ours(mount_fd) {
        true => fail(libc::ESTALE),
        false => real::open_by_handle_at(mount_fd, handle, flags),
    };
}
