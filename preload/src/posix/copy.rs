//! The calls that move bytes between two descriptors in the kernel:
//! sendfile and copy_file_range are served when a side is Shoal's, by
//! copying through a buffer; splice, tee and vmsplice, which need a pipe on
//! one side and the kernel's page cache on the other, are refused on a
//! Shoal descriptor as a file system without splice support refuses them.

use libc::{c_int, c_uint, c_void, off64_t, off_t, size_t, ssize_t};

use super::files;
use crate::errno::fail;
use crate::real;
use crate::state;

/// Copies up to `n` bytes between two descriptors of which at least one is
/// Shoal's, through a buffer, with this library's own read/write/pread/
/// pwrite (so each side goes where it belongs). `off_*` as sendfile and
/// copy_file_range take them: NULL means the descriptor's offset.
unsafe fn copy_through(
    inp: c_int,
    off_in: *mut off64_t,
    out: c_int,
    off_out: *mut off64_t,
    n: size_t,
) -> ssize_t {
    const CHUNK: usize = 1 << 20;
    let mut buf = vec![0u8; n.min(CHUNK)];
    let mut done: usize = 0;
    while done < n {
        let want = (n - done).min(buf.len());
        let p = buf.as_mut_ptr() as *mut c_void;
        // SAFETY: our buffer; the offsets are the caller's.
        let got = unsafe {
            if off_in.is_null() {
                files::read(inp, p, want)
            } else {
                files::pread64(inp, p, want, *off_in)
            }
        };
        if got < 0 {
            return if done > 0 { done as ssize_t } else { -1 };
        }
        if got == 0 {
            break;
        }
        let mut put = 0usize;
        while put < got as usize {
            let q = buf[put..].as_ptr() as *const c_void;
            let len = got as usize - put;
            // SAFETY: our buffer; the offsets are the caller's.
            let w = unsafe {
                if off_out.is_null() {
                    files::write(out, q, len)
                } else {
                    files::pwrite64(out, q, len, *off_out + put as off64_t)
                }
            };
            if w <= 0 {
                return if done + put > 0 {
                    (done + put) as ssize_t
                } else {
                    -1
                };
            }
            put += w as usize;
        }
        // SAFETY: the caller's offsets, advanced as the calls promise.
        unsafe {
            if !off_in.is_null() {
                *off_in += got as off64_t;
            }
            if !off_out.is_null() {
                *off_out += got as off64_t;
            }
        }
        done += got as usize;
        if (got as usize) < want {
            break;
        }
    }
    done as ssize_t
}

unsafe fn sendfile_any(out: c_int, inp: c_int, off: *mut off64_t, n: size_t) -> ssize_t {
    if state::is_ours(out) || state::is_ours(inp) {
        // SAFETY: sendfile's contract.
        unsafe { copy_through(inp, off, out, std::ptr::null_mut(), n) }
    } else {
        // SAFETY: sendfile's contract.
        unsafe { real::sendfile64(out, inp, off, n) }
    }
}

exported! {
    [sendfile] (out: c_int, inp: c_int, off: *mut off_t, n: size_t) -> ssize_t => sendfile_any(out, inp, off as *mut off64_t, n);
}

exported! {
    [sendfile64] (out: c_int, inp: c_int, off: *mut off64_t, n: size_t) -> ssize_t => sendfile_any(out, inp, off, n);
}

/// copy_file_range(2): through a buffer when a side is Shoal's (no flag
/// is defined: any is EINVAL, as the kernel says).
unsafe fn copy_file_range_any(
    inp: c_int,
    off_in: *mut off64_t,
    out: c_int,
    off_out: *mut off64_t,
    n: size_t,
    flags: c_uint,
) -> ssize_t {
    if !(state::is_ours(out) || state::is_ours(inp)) {
        // SAFETY: copy_file_range's contract.
        return unsafe { real::copy_file_range(inp, off_in, out, off_out, n, flags) };
    }
    if flags != 0 {
        return fail(libc::EINVAL);
    }
    // SAFETY: copy_file_range's contract.
    unsafe { copy_through(inp, off_in, out, off_out, n) }
}

/// splice(2): EINVAL on a Shoal descriptor ("the target file system does
/// not support splicing"); a program falls back to read and write.
unsafe fn splice_any(
    inp: c_int,
    off_in: *mut off64_t,
    out: c_int,
    off_out: *mut off64_t,
    n: size_t,
    flags: c_uint,
) -> ssize_t {
    if state::is_ours(inp) || state::is_ours(out) {
        return fail(libc::EINVAL);
    }
    // SAFETY: splice's contract.
    unsafe { real::splice(inp, off_in, out, off_out, n, flags) }
}

exported! {
    [copy_file_range] (inp: c_int, off_in: *mut off64_t, out: c_int, off_out: *mut off64_t, n: size_t, flags: c_uint) -> ssize_t =>
        copy_file_range_any(inp, off_in, out, off_out, n, flags);
    [splice] (inp: c_int, off_in: *mut off64_t, out: c_int, off_out: *mut off64_t, n: size_t, flags: c_uint) -> ssize_t =>
        splice_any(inp, off_in, out, off_out, n, flags);
    // Both sides of a tee are pipes: a Shoal file is not (EINVAL).
    [tee] (inp: c_int, out: c_int, n: size_t, flags: c_uint) -> ssize_t =>
        match state::is_ours(inp) || state::is_ours(out) {
            true => fail(libc::EINVAL),
            false => real::tee(inp, out, n, flags),
        };
    // vmsplice's descriptor is a pipe: EBADF for any other.
    [vmsplice] (fd: c_int, iov: *const libc::iovec, n: size_t, flags: c_uint) -> ssize_t =>
        match state::is_ours(fd) {
            true => fail(libc::EBADF),
            false => real::vmsplice(fd, iov, n, flags),
        };
}
