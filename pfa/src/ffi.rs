//! The C ABI (`pfa.h`, generated): the same calls as [Kato 2011]'s, for C
//! programs. Buffers are known by their address, as in the paper: `pfa_mmap`
//! returns a pointer and the other calls take it. Errors return -1 (or NULL)
//! and set `errno`.
//!
//! Built into `libshoal_pfa.{a,so}` by this crate; libshoal can link this
//! crate and re-export the same symbols.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_long, c_void, CStr};
use std::io;
use std::sync::Mutex;

use crate::{Container, Mode, Options, PfaBuf};

/// `pfa_mmap` flags.
pub const PFA_RDONLY: c_int = 0;
pub const PFA_WRONLY: c_int = 1;
pub const PFA_INCREMENTAL: c_int = 2;

/// The C handle of a container.
pub struct PfaContainer(Container);

static BUFS: Mutex<Option<HashMap<usize, PfaBuf>>> = Mutex::new(None);

fn fail(e: io::Error) -> c_int {
    let errno = e.raw_os_error().unwrap_or(match e.kind() {
        io::ErrorKind::NotFound => libc::ENOENT,
        io::ErrorKind::AlreadyExists => libc::EEXIST,
        io::ErrorKind::InvalidInput => libc::EINVAL,
        io::ErrorKind::PermissionDenied => libc::EBADF,
        io::ErrorKind::InvalidData => libc::EIO,
        _ => libc::EIO,
    });
    // SAFETY: errno is thread-local.
    unsafe { *libc::__errno_location() = errno };
    -1
}

fn with_buf<T>(buf: *mut c_void, f: impl FnOnce(&mut PfaBuf) -> io::Result<T>) -> io::Result<T> {
    let mut bufs = BUFS.lock().unwrap_or_else(|e| e.into_inner());
    let b = bufs
        .as_mut()
        .and_then(|m| m.get_mut(&(buf as usize)))
        .ok_or_else(|| io::Error::from_raw_os_error(libc::EBADF))?;
    f(b)
}

/// # Safety
/// `path` is a NUL-terminated string.
unsafe fn path_of<'a>(path: *const c_char) -> io::Result<&'a str> {
    if path.is_null() {
        return Err(io::Error::from_raw_os_error(libc::EFAULT));
    }
    // SAFETY: the caller passes a NUL-terminated string.
    unsafe { CStr::from_ptr(path) }
        .to_str()
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn boxed(r: io::Result<Container>) -> *mut PfaContainer {
    match r {
        Ok(c) => Box::into_raw(Box::new(PfaContainer(c))),
        Err(e) => {
            fail(e);
            std::ptr::null_mut()
        }
    }
}

/// Opens the container at `path`, creating it for `nranks` ranks with
/// chunks of at least `chunk_size` bytes (0: the default) if it does not
/// exist. Every rank of a job may call it.
///
/// # Safety
/// `path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pfa_create(
    path: *const c_char,
    nranks: c_int,
    chunk_size: usize,
) -> *mut PfaContainer {
    // SAFETY: forwarded from the caller.
    let r = unsafe { path_of(path) }.and_then(|p| {
        let mut o = Options::new(u32::try_from(nranks).unwrap_or(0));
        if chunk_size > 0 {
            o.chunk_size = chunk_size as u64;
        }
        Container::open_or_create(p, &o)
    });
    boxed(r)
}

/// Opens an existing container.
///
/// # Safety
/// `path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pfa_open(path: *const c_char) -> *mut PfaContainer {
    // SAFETY: forwarded from the caller.
    boxed(unsafe { path_of(path) }.and_then(Container::open))
}

/// Flushes every store made so far to stable storage.
///
/// # Safety
/// `c` comes from `pfa_create` or `pfa_open` and is not closed.
#[no_mangle]
pub unsafe extern "C" fn pfa_sync(c: *mut PfaContainer) -> c_int {
    // SAFETY: per the contract above.
    match unsafe { c.as_ref() } {
        Some(c) => c.0.sync().map(|_| 0).unwrap_or_else(fail),
        None => fail(io::Error::from_raw_os_error(libc::EFAULT)),
    }
}

/// Syncs and closes the handle (mapped buffers stay usable until unmapped).
///
/// # Safety
/// `c` comes from `pfa_create` or `pfa_open`; it is not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn pfa_close(c: *mut PfaContainer) -> c_int {
    if c.is_null() {
        return fail(io::Error::from_raw_os_error(libc::EFAULT));
    }
    // SAFETY: per the contract above.
    let c = unsafe { Box::from_raw(c) };
    c.0.close().map(|_| 0).unwrap_or_else(fail)
}

/// Maps a buffer of `size` bytes for logical file `name` of `rank`.
/// `flags`: `PFA_RDONLY` (the buffer holds step 0), `PFA_WRONLY`, or
/// `PFA_WRONLY | PFA_INCREMENTAL` (stores after the first write only the
/// pages changed since the previous one).
///
/// # Safety
/// `c` is an open container; `name` a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn pfa_mmap(
    c: *mut PfaContainer,
    name: *const c_char,
    size: usize,
    rank: c_int,
    flags: c_int,
) -> *mut c_void {
    // SAFETY: per the contract above.
    let r = match (unsafe { c.as_ref() }, unsafe { path_of(name) }) {
        (Some(c), Ok(name)) => {
            let mode = match flags {
                PFA_RDONLY => Ok(Mode::Read),
                PFA_WRONLY => Ok(Mode::Write),
                f if f == PFA_WRONLY | PFA_INCREMENTAL => Ok(Mode::WriteIncremental),
                _ => Err(io::Error::from_raw_os_error(libc::EINVAL)),
            };
            let rank = u32::try_from(rank).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL));
            mode.and_then(|m| c.0.mmap(name, size, rank?, m))
        }
        (None, _) => Err(io::Error::from_raw_os_error(libc::EFAULT)),
        (_, Err(e)) => Err(e),
    };
    match r {
        Ok(b) => {
            let ptr = b.as_ptr() as *mut c_void;
            let mut bufs = BUFS.lock().unwrap_or_else(|e| e.into_inner());
            bufs.get_or_insert_with(HashMap::new)
                .insert(ptr as usize, b);
            ptr
        }
        Err(e) => {
            fail(e);
            std::ptr::null_mut()
        }
    }
}

/// Stores the first `len` bytes of the buffer as the next step of its
/// logical file; returns that step.
#[no_mangle]
pub extern "C" fn pfa_append(buf: *mut c_void, len: usize) -> c_long {
    with_buf(buf, |b| b.append(len))
        .map(|s| s as c_long)
        .unwrap_or_else(|e| fail(e) as c_long)
}

/// Moves to a step, counted as lseek(2) counts bytes (`SEEK_SET`,
/// `SEEK_CUR`, `SEEK_END`), and fills the buffer with it; returns the step.
#[no_mangle]
#[allow(clippy::useless_conversion)] // c_long is i64 only on LP64
pub extern "C" fn pfa_seek(buf: *mut c_void, offset: c_long, whence: c_int) -> c_long {
    let pos = match whence {
        libc::SEEK_SET if offset >= 0 => io::SeekFrom::Start(offset as u64),
        libc::SEEK_CUR => io::SeekFrom::Current(i64::from(offset)),
        libc::SEEK_END => io::SeekFrom::End(i64::from(offset)),
        _ => return fail(io::Error::from_raw_os_error(libc::EINVAL)) as c_long,
    };
    with_buf(buf, |b| b.seek(pos))
        .map(|s| s as c_long)
        .unwrap_or_else(|e| fail(e) as c_long)
}

/// 1 past the last step, 0 before it, -1 for an unknown buffer.
#[no_mangle]
pub extern "C" fn pfa_eof(buf: *mut c_void) -> c_int {
    with_buf(buf, |b| Ok(c_int::from(b.eof()))).unwrap_or_else(fail)
}

/// The logical length of the step in a read buffer.
#[no_mangle]
pub extern "C" fn pfa_length(buf: *mut c_void) -> c_long {
    with_buf(buf, |b| Ok(b.len() as c_long)).unwrap_or_else(|e| fail(e) as c_long)
}

/// Declares `len` bytes at `offset` written (before a system call such as
/// read(2) fills them: see `PfaBuf::touch`).
#[no_mangle]
pub extern "C" fn pfa_touch(buf: *mut c_void, offset: usize, len: usize) -> c_int {
    with_buf(buf, |b| b.touch(offset, len))
        .map(|_| 0)
        .unwrap_or_else(fail)
}

/// Unmaps the buffer (storing nothing: `pfa_append` first).
#[no_mangle]
pub extern "C" fn pfa_munmap(buf: *mut c_void) -> c_int {
    let mut bufs = BUFS.lock().unwrap_or_else(|e| e.into_inner());
    match bufs.as_mut().and_then(|m| m.remove(&(buf as usize))) {
        Some(b) => {
            drop(bufs);
            b.munmap();
            0
        }
        None => fail(io::Error::from_raw_os_error(libc::EBADF)),
    }
}
