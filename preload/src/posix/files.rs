//! open and the calls on an open file's data: close, read, write and their
//! positioned and vectored forms (preadv2/pwritev2, the _FORTIFY_SOURCE
//! `_chk` twins), lseek, fsync, sync_file_range, syncfs, truncate, and the
//! hints and allocations that would otherwise reach the /dev/null stand-in
//! (fadvise, readahead, fallocate, mmap).

use libc::{c_char, c_int, c_uint, c_void, mode_t, off64_t, off_t, size_t, ssize_t};

use crate::cache;
use crate::errno::{errno, fail, set_errno};
use crate::real;
use crate::state::{self, serve, Fd, Target, Where};
use crate::stats::Op;
use crate::unwind::{guarded, Failed};

pub(crate) fn busy<T: From<i8>>() -> T {
    fail(libc::EIO)
}

/// Opens `t` through libshoal; returns the kernel descriptor standing for it.
pub(crate) fn open_target(t: &Target, flags: c_int, mode: mode_t) -> c_int {
    let op = if flags & libc::O_CREAT != 0 {
        Op::Create
    } else if flags & libc::O_DIRECTORY != 0 {
        Op::Opendir
    } else {
        Op::Open
    };
    serve(op, || {
        // SAFETY: a NUL-terminated path.
        let sfd = unsafe { shoal::shoal_open(t.shoal.as_ptr(), flags & !libc::O_CLOEXEC, mode) };
        if sfd < 0 {
            return -1;
        }
        if flags & (libc::O_CREAT | libc::O_TRUNC) != 0 {
            cache::clear();
        }
        state::adopt(sfd, t.local.clone(), flags, t.mounted)
    })
}

/// openat(2) for every member of the family.
pub(crate) unsafe fn open_at(
    dirfd: c_int,
    path: *const c_char,
    flags: c_int,
    mode: mode_t,
) -> c_int {
    // SAFETY: the caller passes open's arguments on.
    let w = unsafe { state::classify_at(dirfd, path) };
    match w {
        Where::Shoal(t) => open_target(&t, flags, mode),
        Where::Fail(e) => fail(e),
        Where::Kernel(_) => {
            let (d, p) = w.kernel_args(dirfd, path);
            // SAFETY: as the caller's.
            unsafe { real::openat(d, p, flags, mode) }
        }
    }
}

// open's mode is a variadic argument; on the x86-64 and AArch64 Linux ABIs
// it is passed exactly as a third named argument would be, and read only
// when O_CREAT or O_TMPFILE says it was passed.

fn mode_if_needed(flags: c_int, mode: mode_t) -> mode_t {
    if flags & libc::O_CREAT != 0 || flags & libc::O_TMPFILE == libc::O_TMPFILE {
        mode
    } else {
        0
    }
}

exported! {
    [open, open64] (path: *const c_char, flags: c_int, mode: mode_t) -> c_int => open_at(libc::AT_FDCWD, path, flags, mode_if_needed(flags, mode));
}
exported! {
    [__open_2, __open64_2] (path: *const c_char, flags: c_int) -> c_int => open_at(libc::AT_FDCWD, path, flags, 0);
}
exported! {
    [openat, openat64] (dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> c_int => open_at(dirfd, path, flags, mode_if_needed(flags, mode));
}
exported! {
    [__openat_2, __openat64_2] (dirfd: c_int, path: *const c_char, flags: c_int) -> c_int => open_at(dirfd, path, flags, 0);
}
const CREAT: c_int = libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC;

exported! {
    [creat, creat64] (path: *const c_char, mode: mode_t) -> c_int => open_at(libc::AT_FDCWD, path, CREAT, mode);
}
/// Closes Shoal descriptor `kfd` (standing for `sfd`): libshoal's first,
/// the kernel number last, so that it is never reused while it still
/// stands for the file.
pub(crate) fn close_ours(kfd: c_int) -> c_int {
    let Some(info) = state::unregister(kfd) else {
        return fail(libc::EBADF);
    };
    let r = serve(Op::Close, || shoal::shoal_close(info.sfd));
    let e = errno();
    // SAFETY: the reserved descriptor.
    unsafe { real::close(kfd) };
    set_errno(e);
    r
}

#[no_mangle]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    guarded(<c_int as Failed>::failed, || {
        match state::fd(fd) {
            // SAFETY: close's contract.
            Fd::Kernel => unsafe { real::close(fd) },
            // SAFETY: as above; the child's own descriptor table.
            Fd::Shoal(_) if state::in_vfork_child() => unsafe { real::close(fd) },
            Fd::Shoal(_) => close_ours(fd),
            Fd::Busy => busy(),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    guarded(<ssize_t as Failed>::failed, || {
        match state::fd(fd) {
            // SAFETY: read's contract.
            Fd::Kernel => unsafe { real::read(fd, buf, n) },
            // SAFETY: read's contract.
            Fd::Shoal(s) => serve(Op::Read, || unsafe { shoal::shoal_read(s, buf, n) }),
            Fd::Busy => busy(),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    guarded(<ssize_t as Failed>::failed, || {
        match state::fd(fd) {
            // SAFETY: write's contract.
            Fd::Kernel => unsafe { real::write(fd, buf, n) },
            Fd::Shoal(s) => serve(Op::Write, || {
                cache::clear();
                // SAFETY: write's contract.
                unsafe { shoal::shoal_write(s, buf, n) }
            }),
            Fd::Busy => busy(),
        }
    })
}

unsafe fn pread_any(fd: c_int, buf: *mut c_void, n: size_t, off: off64_t) -> ssize_t {
    match state::fd(fd) {
        // SAFETY: pread's contract.
        Fd::Kernel => unsafe { real::pread64(fd, buf, n, off) },
        // SAFETY: pread's contract.
        Fd::Shoal(s) => serve(Op::Read, || unsafe { shoal::shoal_pread(s, buf, n, off) }),
        Fd::Busy => busy(),
    }
}

unsafe fn pwrite_any(fd: c_int, buf: *const c_void, n: size_t, off: off64_t) -> ssize_t {
    match state::fd(fd) {
        // SAFETY: pwrite's contract.
        Fd::Kernel => unsafe { real::pwrite64(fd, buf, n, off) },
        Fd::Shoal(s) => serve(Op::Write, || {
            cache::clear();
            // SAFETY: pwrite's contract.
            unsafe { shoal::shoal_pwrite(s, buf, n, off) }
        }),
        Fd::Busy => busy(),
    }
}

exported! {
    [pread] (fd: c_int, buf: *mut c_void, n: size_t, off: off_t) -> ssize_t => pread_any(fd, buf, n, off);
}

exported! {
    [pread64] (fd: c_int, buf: *mut c_void, n: size_t, off: off64_t) -> ssize_t => pread_any(fd, buf, n, off);
}

exported! {
    [pwrite] (fd: c_int, buf: *const c_void, n: size_t, off: off_t) -> ssize_t => pwrite_any(fd, buf, n, off);
}

exported! {
    [pwrite64] (fd: c_int, buf: *const c_void, n: size_t, off: off64_t) -> ssize_t => pwrite_any(fd, buf, n, off);
}

/// Most buffers one readv/writev takes (Linux's UIO_MAXIOV).
const IOV_MAX: c_int = 1024;

/// The buffers of an iovec array.
unsafe fn iovecs<'a>(iov: *const libc::iovec, n: c_int) -> Option<&'a [libc::iovec]> {
    if !(0..=IOV_MAX).contains(&n) {
        return None;
    }
    if n == 0 {
        return Some(&[]);
    }
    if iov.is_null() {
        return None;
    }
    // SAFETY: readv's contract: n valid iovecs.
    Some(unsafe { std::slice::from_raw_parts(iov, n as usize) })
}

/// readv/preadv on Shoal descriptor `s`: one read per buffer, stopping at a
/// short one.
unsafe fn readv_shoal(s: c_int, iov: *const libc::iovec, n: c_int, at: Option<off64_t>) -> ssize_t {
    // SAFETY: the caller's iovecs.
    let Some(bufs) = (unsafe { iovecs(iov, n) }) else {
        return fail(libc::EINVAL);
    };
    serve(Op::Read, || {
        let mut total: ssize_t = 0;
        for b in bufs {
            // SAFETY: each buffer is the caller's, valid for iov_len bytes.
            let r = unsafe {
                match at {
                    Some(off) => {
                        shoal::shoal_pread(s, b.iov_base, b.iov_len, off + total as off64_t)
                    }
                    None => shoal::shoal_read(s, b.iov_base, b.iov_len),
                }
            };
            if r < 0 {
                return if total > 0 { total } else { -1 };
            }
            total += r;
            if (r as usize) < b.iov_len {
                break;
            }
        }
        total
    })
}

/// writev/pwritev on Shoal descriptor `s`: the buffers gathered into one
/// write, so that an O_APPEND write stays in one piece.
unsafe fn writev_shoal(
    s: c_int,
    iov: *const libc::iovec,
    n: c_int,
    at: Option<off64_t>,
) -> ssize_t {
    // SAFETY: the caller's iovecs.
    let Some(bufs) = (unsafe { iovecs(iov, n) }) else {
        return fail(libc::EINVAL);
    };
    serve(Op::Write, || {
        cache::clear();
        let mut all = Vec::with_capacity(bufs.iter().map(|b| b.iov_len).sum());
        for b in bufs {
            if b.iov_len > 0 {
                // SAFETY: each buffer is the caller's, valid for iov_len bytes.
                all.extend_from_slice(unsafe {
                    std::slice::from_raw_parts(b.iov_base as *const u8, b.iov_len)
                });
            }
        }
        let p = all.as_ptr() as *const c_void;
        // SAFETY: our own buffer.
        unsafe {
            match at {
                Some(off) => shoal::shoal_pwrite(s, p, all.len(), off),
                None => shoal::shoal_write(s, p, all.len()),
            }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const libc::iovec, n: c_int) -> ssize_t {
    guarded(<ssize_t as Failed>::failed, || {
        match state::fd(fd) {
            // SAFETY: readv's contract.
            Fd::Kernel => unsafe { real::readv(fd, iov, n) },
            // SAFETY: readv's contract.
            Fd::Shoal(s) => unsafe { readv_shoal(s, iov, n, None) },
            Fd::Busy => busy(),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const libc::iovec, n: c_int) -> ssize_t {
    guarded(<ssize_t as Failed>::failed, || {
        match state::fd(fd) {
            // SAFETY: writev's contract.
            Fd::Kernel => unsafe { real::writev(fd, iov, n) },
            // SAFETY: writev's contract.
            Fd::Shoal(s) => unsafe { writev_shoal(s, iov, n, None) },
            Fd::Busy => busy(),
        }
    })
}

unsafe fn preadv_any(fd: c_int, iov: *const libc::iovec, n: c_int, off: off64_t) -> ssize_t {
    match state::fd(fd) {
        // SAFETY: preadv's contract.
        Fd::Kernel => unsafe { real::preadv64(fd, iov, n, off) },
        // SAFETY: preadv's contract.
        Fd::Shoal(s) => unsafe { readv_shoal(s, iov, n, Some(off)) },
        Fd::Busy => busy(),
    }
}

unsafe fn pwritev_any(fd: c_int, iov: *const libc::iovec, n: c_int, off: off64_t) -> ssize_t {
    match state::fd(fd) {
        // SAFETY: pwritev's contract.
        Fd::Kernel => unsafe { real::pwritev64(fd, iov, n, off) },
        // SAFETY: pwritev's contract.
        Fd::Shoal(s) => unsafe { writev_shoal(s, iov, n, Some(off)) },
        Fd::Busy => busy(),
    }
}

exported! {
    [preadv, preadv64] (fd: c_int, iov: *const libc::iovec, n: c_int, off: off_t) -> ssize_t =>
        preadv_any(fd, iov, n, off);
    [pwritev, pwritev64] (fd: c_int, iov: *const libc::iovec, n: c_int, off: off_t) -> ssize_t =>
        pwritev_any(fd, iov, n, off);
}

/// The preadv2/pwritev2 flags served: RWF_HIPRI (polling: a hint), and on
/// writes RWF_DSYNC and RWF_SYNC (an fdatasync or fsync after the write).
/// RWF_NOWAIT, RWF_APPEND and any later flag are EOPNOTSUPP, the kernel's
/// answer for a flag a file does not support.
const RWF_SERVED: c_int = libc::RWF_HIPRI | libc::RWF_DSYNC | libc::RWF_SYNC;

/// preadv2/pwritev2's offset: -1 is the descriptor's own.
fn v2_offset(off: off64_t) -> Option<off64_t> {
    (off != -1).then_some(off)
}

unsafe fn preadv2_any(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    off: off64_t,
    flags: c_int,
) -> ssize_t {
    match state::fd(fd) {
        // SAFETY: preadv2's contract.
        Fd::Kernel => unsafe { real::preadv64v2(fd, iov, n, off, flags) },
        Fd::Shoal(_) if flags & !libc::RWF_HIPRI != 0 => fail(libc::EOPNOTSUPP),
        // SAFETY: preadv2's contract.
        Fd::Shoal(s) => unsafe { readv_shoal(s, iov, n, v2_offset(off)) },
        Fd::Busy => busy(),
    }
}

unsafe fn pwritev2_any(
    fd: c_int,
    iov: *const libc::iovec,
    n: c_int,
    off: off64_t,
    flags: c_int,
) -> ssize_t {
    match state::fd(fd) {
        // SAFETY: pwritev2's contract.
        Fd::Kernel => unsafe { real::pwritev64v2(fd, iov, n, off, flags) },
        Fd::Shoal(_) if flags & !RWF_SERVED != 0 => fail(libc::EOPNOTSUPP),
        Fd::Shoal(s) => {
            // SAFETY: pwritev2's contract.
            let r = unsafe { writev_shoal(s, iov, n, v2_offset(off)) };
            let synced = match flags {
                _ if r < 0 => 0,
                f if f & libc::RWF_SYNC != 0 => fsync(fd),
                f if f & libc::RWF_DSYNC != 0 => fdatasync(fd),
                _ => 0,
            };
            if synced < 0 {
                -1
            } else {
                r
            }
        }
        Fd::Busy => busy(),
    }
}

exported! {
    [preadv2, preadv64v2] (fd: c_int, iov: *const libc::iovec, n: c_int, off: off_t, flags: c_int) -> ssize_t =>
        preadv2_any(fd, iov, n, off, flags);
    [pwritev2, pwritev64v2] (fd: c_int, iov: *const libc::iovec, n: c_int, off: off_t, flags: c_int) -> ssize_t =>
        pwritev2_any(fd, iov, n, off, flags);
}

extern "C" {
    /// glibc's report of a buffer overflow caught by _FORTIFY_SOURCE: it
    /// ends the process, as the `_chk` functions would have.
    fn __chk_fail() -> !;
}

/// The `_chk` twins that programs built with _FORTIFY_SOURCE call in
/// place of read and pread: glibc's would reach the kernel with its own
/// internal call.
pub(crate) unsafe fn checked(n: size_t, buflen: size_t) {
    if n > buflen {
        // SAFETY: no arguments; does not return.
        unsafe { __chk_fail() }
    }
}

exported! {
    [__read_chk] (fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t) -> ssize_t =>
        { checked(n, buflen); read(fd, buf, n) };
    [__pread_chk, __pread64_chk] (fd: c_int, buf: *mut c_void, n: size_t, off: off64_t, buflen: size_t) -> ssize_t =>
        { checked(n, buflen); pread_any(fd, buf, n, off) };
}

fn lseek_any(fd: c_int, off: off64_t, whence: c_int) -> off64_t {
    match state::fd(fd) {
        // SAFETY: lseek's contract.
        Fd::Kernel => unsafe { real::lseek64(fd, off, whence) },
        Fd::Shoal(s) => serve(Op::Seek, || {
            let r = shoal::shoal_lseek(s, off, whence);
            if r == 0 {
                // A directory's listing starts over (getdents64 users).
                state::forget_listed(fd);
            }
            r
        }),
        Fd::Busy => busy(),
    }
}

exported! {
    [lseek] (fd: c_int, off: off_t, whence: c_int) -> off_t => lseek_any(fd, off, whence);
}

exported! {
    [lseek64] (fd: c_int, off: off64_t, whence: c_int) -> off64_t => lseek_any(fd, off, whence);
}

#[no_mangle]
pub extern "C" fn fsync(fd: c_int) -> c_int {
    guarded(<c_int as Failed>::failed, || {
        match state::fd(fd) {
            // SAFETY: fsync's contract.
            Fd::Kernel => unsafe { real::fsync(fd) },
            Fd::Shoal(s) => serve(Op::Fsync, || shoal::shoal_fsync(s)),
            Fd::Busy => busy(),
        }
    })
}

#[no_mangle]
pub extern "C" fn fdatasync(fd: c_int) -> c_int {
    guarded(<c_int as Failed>::failed, || {
        match state::fd(fd) {
            // SAFETY: fdatasync's contract.
            Fd::Kernel => unsafe { real::fdatasync(fd) },
            Fd::Shoal(s) => serve(Op::Fsync, || shoal::shoal_fdatasync(s)),
            Fd::Busy => busy(),
        }
    })
}

/// sync_file_range(2): on a Shoal descriptor, asking that the range be
/// written (SYNC_FILE_RANGE_WRITE or _WAIT_AFTER) sends and waits as
/// fdatasync does; the range is not narrowed (libshoal syncs a file whole).
#[no_mangle]
pub extern "C" fn sync_file_range(fd: c_int, off: off64_t, n: off64_t, flags: c_uint) -> c_int {
    guarded(<c_int as Failed>::failed, || {
        const ALL: c_uint = libc::SYNC_FILE_RANGE_WAIT_BEFORE
            | libc::SYNC_FILE_RANGE_WRITE
            | libc::SYNC_FILE_RANGE_WAIT_AFTER;
        match state::fd(fd) {
            // SAFETY: plain integers.
            Fd::Kernel => unsafe { real::sync_file_range(fd, off, n, flags) },
            Fd::Shoal(_) if flags & !ALL != 0 || off < 0 || n < 0 => fail(libc::EINVAL),
            Fd::Shoal(_) if flags & !libc::SYNC_FILE_RANGE_WAIT_BEFORE == 0 => 0,
            Fd::Shoal(s) => serve(Op::Fsync, || shoal::shoal_fdatasync(s)),
            Fd::Busy => busy(),
        }
    })
}

/// syncfs(2) of a Shoal descriptor: what this process holds back is sent
/// (`shoal_flush`), and every Shoal file it has open is fsynced (the
/// file system is all of Shoal; files other processes or clients wrote
/// are theirs to sync).
#[no_mangle]
pub extern "C" fn syncfs(fd: c_int) -> c_int {
    guarded(<c_int as Failed>::failed, || {
        match state::fd(fd) {
            // SAFETY: a plain integer.
            Fd::Kernel => unsafe { real::syncfs(fd) },
            Fd::Shoal(_) => serve(Op::Fsync, || {
                let mut r = shoal::shoal_flush();
                for kfd in state::all_fds() {
                    let sfd = state::with_info(kfd, |i| i.sfd);
                    if let Some(sfd) = sfd.filter(|_| r == 0) {
                        // A directory's fsync is a no-op in libshoal.
                        r = shoal::shoal_fsync(sfd);
                    }
                }
                r
            }),
            Fd::Busy => busy(),
        }
    })
}

fn ftruncate_any(fd: c_int, len: off64_t) -> c_int {
    match state::fd(fd) {
        // SAFETY: ftruncate's contract.
        Fd::Kernel => unsafe { real::ftruncate64(fd, len) },
        Fd::Shoal(s) => serve(Op::Truncate, || {
            cache::clear();
            shoal::shoal_ftruncate(s, len)
        }),
        Fd::Busy => busy(),
    }
}

exported! {
    [ftruncate] (fd: c_int, len: off_t) -> c_int => ftruncate_any(fd, len);
}

exported! {
    [ftruncate64] (fd: c_int, len: off64_t) -> c_int => ftruncate_any(fd, len);
}

unsafe fn truncate_any(path: *const c_char, len: off64_t) -> c_int {
    // SAFETY: truncate's contract.
    let w = unsafe { state::classify_at(libc::AT_FDCWD, path) };
    match w {
        Where::Shoal(t) => serve(Op::Truncate, || {
            cache::clear();
            // SAFETY: a NUL-terminated path.
            unsafe { shoal::shoal_truncate(t.shoal.as_ptr(), len) }
        }),
        Where::Fail(e) => fail(e),
        Where::Kernel(_) => {
            let (_, p) = w.kernel_args(libc::AT_FDCWD, path);
            // SAFETY: truncate's contract.
            unsafe { real::truncate64(p, len) }
        }
    }
}

exported! {
    [truncate] (path: *const c_char, len: off_t) -> c_int => truncate_any(path, len);
}

exported! {
    [truncate64] (path: *const c_char, len: off64_t) -> c_int => truncate_any(path, len);
}

fn fadvise_any(fd: c_int, off: off64_t, len: off64_t, advice: c_int) -> c_int {
    if state::is_ours(fd) {
        0
    } else {
        // SAFETY: plain integers.
        unsafe { real::posix_fadvise64(fd, off, len, advice) }
    }
}

exported! {
    [posix_fadvise] (fd: c_int, off: off_t, len: off_t, advice: c_int) -> c_int => fadvise_any(fd, off, len, advice), else libc::EIO;
}

exported! {
    [posix_fadvise64] (fd: c_int, off: off64_t, len: off64_t, advice: c_int) -> c_int => fadvise_any(fd, off, len, advice), else libc::EIO;
}

/// readahead(2) of a Shoal descriptor: a hint, accepted (libshoal reads
/// ahead on its own when reads are sequential).
#[no_mangle]
pub extern "C" fn readahead(fd: c_int, off: off64_t, n: size_t) -> ssize_t {
    guarded(<ssize_t as Failed>::failed, || {
        match state::fd(fd) {
            // SAFETY: plain integers.
            Fd::Kernel => unsafe { real::readahead(fd, off, n) },
            Fd::Shoal(_) if off < 0 => fail(libc::EINVAL),
            Fd::Shoal(_) => 0,
            Fd::Busy => busy(),
        }
    })
}

/// Grows Shoal file `s` to at least `end` bytes (what allocating means on
/// a file system without preallocation).
fn grow(s: c_int, end: off64_t) -> c_int {
    serve(Op::Truncate, || {
        // SAFETY: a zeroed stat is valid; shoal_fstat fills it.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: our own struct.
        if unsafe { shoal::shoal_fstat(s, &mut st) } < 0 {
            return -1;
        }
        if st.st_size >= end {
            return 0;
        }
        cache::clear();
        shoal::shoal_ftruncate(s, end)
    })
}

fn fallocate_any(fd: c_int, mode: c_int, off: off64_t, len: off64_t) -> c_int {
    match state::fd(fd) {
        // SAFETY: plain integers.
        Fd::Kernel => unsafe { real::fallocate64(fd, mode, off, len) },
        Fd::Shoal(_) if mode & !libc::FALLOC_FL_KEEP_SIZE != 0 => fail(libc::EOPNOTSUPP),
        Fd::Shoal(_) if mode != 0 => 0,
        Fd::Shoal(s) => grow(s, off.saturating_add(len)),
        Fd::Busy => busy(),
    }
}

exported! {
    [fallocate] (fd: c_int, mode: c_int, off: off_t, len: off_t) -> c_int => fallocate_any(fd, mode, off, len);
}

exported! {
    [fallocate64] (fd: c_int, mode: c_int, off: off64_t, len: off64_t) -> c_int => fallocate_any(fd, mode, off, len);
}

fn posix_fallocate_any(fd: c_int, off: off64_t, len: off64_t) -> c_int {
    match state::fd(fd) {
        // SAFETY: plain integers.
        Fd::Kernel => unsafe { real::posix_fallocate64(fd, off, len) },
        Fd::Shoal(s) => match grow(s, off.saturating_add(len)) {
            0 => 0,
            _ => errno(),
        },
        Fd::Busy => libc::EIO,
    }
}

exported! {
    [posix_fallocate] (fd: c_int, off: off_t, len: off_t) -> c_int => posix_fallocate_any(fd, off, len), else libc::EIO;
}

exported! {
    [posix_fallocate64] (fd: c_int, off: off64_t, len: off64_t) -> c_int => posix_fallocate_any(fd, off, len), else libc::EIO;
}

/// mmap of a Shoal file: a private copy of its bytes (read with pread into
/// anonymous memory). MAP_SHARED with PROT_WRITE cannot stay in step with
/// the file: ENODEV, as for a file system without mmap.
unsafe fn mmap_any(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off64_t,
) -> *mut c_void {
    let s = match state::fd(fd) {
        // SAFETY: mmap's contract.
        Fd::Kernel => return unsafe { real::mmap64(addr, len, prot, flags, fd, off) },
        Fd::Busy => {
            set_errno(libc::EIO);
            return libc::MAP_FAILED;
        }
        Fd::Shoal(s) => s,
    };
    if flags & libc::MAP_SHARED != 0 && prot & libc::PROT_WRITE != 0 {
        set_errno(libc::ENODEV);
        return libc::MAP_FAILED;
    }
    serve(Op::Mmap, || {
        let anon = (flags & !(libc::MAP_SHARED | libc::MAP_SHARED_VALIDATE))
            | libc::MAP_PRIVATE
            | libc::MAP_ANONYMOUS;
        // SAFETY: an anonymous mapping where the caller asked for one.
        let m = unsafe { real::mmap64(addr, len, prot | libc::PROT_WRITE, anon, -1, 0) };
        if m == libc::MAP_FAILED {
            return m;
        }
        let mut done = 0usize;
        while done < len {
            // SAFETY: inside the mapping just made.
            let r = unsafe {
                shoal::shoal_pread(
                    s,
                    (m as *mut u8).add(done) as *mut c_void,
                    len - done,
                    off + done as off64_t,
                )
            };
            if r < 0 {
                let e = errno();
                // SAFETY: the mapping just made.
                unsafe { libc::munmap(m, len) };
                set_errno(e);
                return libc::MAP_FAILED;
            }
            if r == 0 {
                break;
            }
            done += r as usize;
        }
        if prot & libc::PROT_WRITE == 0 {
            // SAFETY: the mapping just made.
            unsafe { libc::mprotect(m, len, prot) };
        }
        m
    })
}

#[no_mangle]
pub unsafe extern "C" fn mmap(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off_t,
) -> *mut c_void {
    guarded(
        || libc::MAP_FAILED,
        || {
            // SAFETY: mmap's contract.
            unsafe { mmap_any(addr, len, prot, flags, fd, off) }
        },
    )
}

#[no_mangle]
pub unsafe extern "C" fn mmap64(
    addr: *mut c_void,
    len: size_t,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: off64_t,
) -> *mut c_void {
    guarded(
        || libc::MAP_FAILED,
        || {
            // SAFETY: mmap's contract.
            unsafe { mmap_any(addr, len, prot, flags, fd, off) }
        },
    )
}
