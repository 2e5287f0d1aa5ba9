//! ioctl(2) on Shoal descriptors: the requests the kernel answers for any
//! regular file are served (FIONREAD, FIGETBSZ, FIOCLEX/FIONCLEX,
//! FIONBIO/FIOASYNC); clones and dedupes are refused as by a file system
//! without reflinks (EOPNOTSUPP; EXDEV when only the other file is
//! Shoal's: they are on different file systems), FIEMAP as by one without
//! extent maps (EOPNOTSUPP), and every other request with ENOTTY ("does not
//! apply to the kind of object"), as the mount, which serves no ioctl,
//! answers it. None reaches the kernel with a stand-in's number.

use libc::{c_int, c_ulong, c_void};

use super::files::{busy, lseek64};
use super::meta::fstat64;
use crate::errno::fail;
use crate::real;
use crate::state::{self, Fd};

/// FIDEDUPERANGE: _IOWR(0x94, 54, struct file_dedupe_range) (linux/fs.h;
/// not in the libc crate).
const FIDEDUPERANGE: c_ulong = 0xc018_9436;
/// FIGETBSZ: _IO(0x00, 2).
const FIGETBSZ: c_ulong = 2;
/// FS_IOC_FIEMAP: _IOWR('f', 11, struct fiemap).
const FS_IOC_FIEMAP: c_ulong = 0xc020_660b;

/// struct file_dedupe_range's head; `dest_count` struct
/// file_dedupe_range_info follow, each starting with its `dest_fd`.
#[repr(C)]
struct DedupeRange {
    src_offset: u64,
    src_length: u64,
    dest_count: u16,
    reserved1: u16,
    reserved2: u32,
}

/// struct file_dedupe_range_info.
#[repr(C)]
struct DedupeInfo {
    dest_fd: i64,
    dest_offset: u64,
    bytes_deduped: u64,
    status: i32,
    reserved: u32,
}

/// Whether a clone or dedupe on kernel descriptor `fd` names a Shoal file
/// as its other side (then the two are on different file systems).
unsafe fn other_side_ours(request: c_ulong, arg: *mut c_void) -> bool {
    let ours = |fd: i64| c_int::try_from(fd).is_ok_and(state::is_ours);
    match request {
        libc::FICLONE => ours(arg as i64),
        // SAFETY: the caller's struct, read only when not NULL.
        libc::FICLONERANGE if !arg.is_null() => {
            ours(unsafe { (*(arg as *const libc::file_clone_range)).src_fd })
        }
        FIDEDUPERANGE if !arg.is_null() => {
            // SAFETY: the caller's struct and its dest_count entries.
            let head = unsafe { &*(arg as *const DedupeRange) };
            // SAFETY: as above: the entries follow the head.
            let infos = unsafe {
                std::slice::from_raw_parts(
                    (arg as *const DedupeRange).add(1) as *const DedupeInfo,
                    head.dest_count as usize,
                )
            };
            infos.iter().any(|i| ours(i.dest_fd))
        }
        _ => false,
    }
}

/// An int answer written where `arg` points.
unsafe fn put_int(arg: *mut c_void, v: c_int) -> c_int {
    if arg.is_null() {
        return fail(libc::EFAULT);
    }
    // SAFETY: the caller's int.
    unsafe { *(arg as *mut c_int) = v };
    0
}

/// A request on Shoal descriptor `fd`.
unsafe fn shoal_ioctl(fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int {
    match request {
        libc::FIOCLEX | libc::FIONCLEX => state::with_info(fd, |i| {
            i.cloexec = request == libc::FIOCLEX;
            0
        })
        .unwrap_or_else(|| fail(libc::EBADF)),
        // Recorded as F_SETFL would (F_GETFL shows them); a Shoal call
        // waits for its servers either way.
        libc::FIONBIO | libc::FIOASYNC if arg.is_null() => fail(libc::EFAULT),
        libc::FIONBIO | libc::FIOASYNC => {
            let bit = if request == libc::FIONBIO {
                libc::O_NONBLOCK
            } else {
                libc::O_ASYNC
            };
            // SAFETY: the caller's int.
            let on = unsafe { *(arg as *const c_int) } != 0;
            state::with_info(fd, |i| {
                i.flags = if on { i.flags | bit } else { i.flags & !bit };
                0
            })
            .unwrap_or_else(|| fail(libc::EBADF))
        }
        libc::FIONREAD | FIGETBSZ => {
            // SAFETY: a zeroed stat is valid; fstat fills it.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: our own struct.
            if unsafe { fstat64(fd, &mut st) } < 0 {
                return -1;
            }
            let v = if request == FIGETBSZ {
                st.st_blksize as i64
            } else {
                // What is left to read from the offset (a regular file's
                // answer in the kernel).
                let off = lseek64(fd, 0, libc::SEEK_CUR);
                if off < 0 {
                    return -1;
                }
                (st.st_size - off).max(0)
            };
            // SAFETY: the caller's int.
            unsafe { put_int(arg, v.min(c_int::MAX as i64) as c_int) }
        }
        libc::FICLONE | libc::FICLONERANGE | FIDEDUPERANGE | FS_IOC_FIEMAP => {
            fail(libc::EOPNOTSUPP)
        }
        _ => fail(libc::ENOTTY),
    }
}

// ioctl's third argument is variadic: an int or a pointer, passed in the
// register a third named argument would use on x86-64 and AArch64 Linux.
exported! {
    [ioctl] (fd: c_int, request: c_ulong, arg: *mut c_void) -> c_int => match state::fd(fd) {
        Fd::Kernel if other_side_ours(request, arg) => fail(libc::EXDEV),
        Fd::Kernel => real::ioctl(fd, request, arg),
        Fd::Shoal(_) => shoal_ioctl(fd, request, arg),
        Fd::Busy => busy(),
    };
}
