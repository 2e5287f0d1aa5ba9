//! Locks on Shoal files, for the whole cluster (libshoal's): flock, and
//! lockf, which glibc makes of fcntl record locks with its internal fcntl
//! (no interposer sees it), so it is made here of this library's fcntl.
//! fcntl's own F_SETLK & co are in `process.rs` with the rest of fcntl.

use libc::{c_int, off64_t, off_t};

use super::files::busy;
use super::process::fcntl64;
use crate::errno::fail;
use crate::real;
use crate::state::{self, serve, Fd};
use crate::stats::Op;

// flock(2): on Shoal's descriptors, a whole-file lock for the whole
// cluster (libshoal's `shoal_flock`).
exported! {
    [flock] (fd: c_int, op: c_int) -> c_int => match state::fd(fd) {
        Fd::Shoal(s) => serve(Op::Lock, || shoal::shoal_flock(s, op)),
        Fd::Busy => busy(),
        Fd::Kernel => real::flock(fd, op),
    };
}

/// lockf(3) on a Shoal descriptor, as glibc makes it: a write lock (or
/// its test) on `len` bytes from the current offset (to the end of the file
/// and beyond for 0; before it for a negative `len`).
unsafe fn lockf_any(fd: c_int, cmd: c_int, len: off64_t) -> c_int {
    if !state::is_ours(fd) {
        // SAFETY: plain integers.
        return unsafe { real::lockf64(fd, cmd, len) };
    }
    // SAFETY: a zeroed struct flock is valid.
    let mut fl: libc::flock = unsafe { std::mem::zeroed() };
    fl.l_whence = libc::SEEK_CUR as _;
    fl.l_start = 0;
    fl.l_len = len;
    let (op, kind) = match cmd {
        libc::F_TEST => (libc::F_GETLK, libc::F_RDLCK),
        libc::F_ULOCK => (libc::F_SETLK, libc::F_UNLCK),
        libc::F_LOCK => (libc::F_SETLKW, libc::F_WRLCK),
        libc::F_TLOCK => (libc::F_SETLK, libc::F_WRLCK),
        _ => return fail(libc::EINVAL),
    };
    fl.l_type = kind as _;
    let r = fcntl64(fd, op, &mut fl as *mut libc::flock as libc::c_ulong);
    if cmd != libc::F_TEST || r < 0 {
        return r;
    }
    // F_TEST: locked by another process is EACCES, as glibc answers.
    // SAFETY: no arguments.
    if fl.l_type as c_int == libc::F_UNLCK || fl.l_pid == unsafe { libc::getpid() } {
        0
    } else {
        fail(libc::EACCES)
    }
}

exported! {
    [lockf] (fd: c_int, cmd: c_int, len: off_t) -> c_int => lockf_any(fd, cmd, len);
    [lockf64] (fd: c_int, cmd: c_int, len: off64_t) -> c_int => lockf_any(fd, cmd, len);
}
