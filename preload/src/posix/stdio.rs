//! stdio on Shoal files. glibc's fopen opens with its internal open, which
//! no interposer sees, so fopen/fopen64/fdopen of a Shoal file make a
//! `fopencookie` stream whose reads, writes, seeks and close are this
//! library's read/write/lseek64/close on the descriptor. `fileno` of such
//! a stream gives that descriptor (glibc would say -1 for a cookie stream).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use libc::{c_char, c_int, c_void, off64_t, size_t, ssize_t, FILE};

use super::files;
use crate::errno::{errno, set_errno};
use crate::modes::mode_flags;
use crate::real;
use crate::state::{self, Where};
use crate::unwind::{guarded, Failed};

#[repr(C)]
struct CookieIo {
    read: Option<unsafe extern "C" fn(*mut c_void, *mut c_char, size_t) -> ssize_t>,
    write: Option<unsafe extern "C" fn(*mut c_void, *const c_char, size_t) -> ssize_t>,
    seek: Option<unsafe extern "C" fn(*mut c_void, *mut off64_t, c_int) -> c_int>,
    close: Option<unsafe extern "C" fn(*mut c_void) -> c_int>,
}

extern "C" {
    fn fopencookie(cookie: *mut c_void, mode: *const c_char, io: CookieIo) -> *mut FILE;
}

// The cookie is the kernel descriptor standing for the Shoal file.

unsafe extern "C" fn cookie_read(c: *mut c_void, buf: *mut c_char, n: size_t) -> ssize_t {
    // SAFETY: glibc's buffer.
    unsafe { files::read(c as usize as c_int, buf as *mut c_void, n) }
}

unsafe extern "C" fn cookie_write(c: *mut c_void, buf: *const c_char, n: size_t) -> ssize_t {
    // SAFETY: glibc's buffer.
    unsafe { files::write(c as usize as c_int, buf as *const c_void, n) }
}

unsafe extern "C" fn cookie_seek(c: *mut c_void, off: *mut off64_t, whence: c_int) -> c_int {
    // SAFETY: glibc's offset.
    let r = files::lseek64(c as usize as c_int, unsafe { *off }, whence);
    if r < 0 {
        return -1;
    }
    // SAFETY: glibc's offset.
    unsafe { *off = r };
    0
}

unsafe extern "C" fn cookie_close(c: *mut c_void) -> c_int {
    // SAFETY: the descriptor the stream owns.
    unsafe { files::close(c as usize as c_int) }
}

static STREAMS: Mutex<Option<HashMap<usize, c_int>>> = Mutex::new(None);
static STREAMS_OPEN: AtomicUsize = AtomicUsize::new(0);

/// The streams' lock, held across a fork (see `fork.rs`).
pub fn hold_for_fork() -> Box<dyn std::any::Any> {
    Box::new(STREAMS.lock().unwrap_or_else(|e| e.into_inner()))
}

fn stream_fd(f: *mut FILE) -> Option<c_int> {
    if STREAMS_OPEN.load(Ordering::Acquire) == 0 {
        return None;
    }
    STREAMS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()?
        .get(&(f as usize))
        .copied()
}

/// A stream on Shoal descriptor `kfd`.
unsafe fn stream(kfd: c_int, mode: *const c_char) -> *mut FILE {
    let io = CookieIo {
        read: Some(cookie_read),
        write: Some(cookie_write),
        seek: Some(cookie_seek),
        close: Some(cookie_close),
    };
    // SAFETY: a valid mode string (the caller's); the cookie is an integer.
    let f = unsafe { fopencookie(kfd as usize as *mut c_void, mode, io) };
    if !f.is_null() {
        STREAMS
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert_with(HashMap::new)
            .insert(f as usize, kfd);
        STREAMS_OPEN.fetch_add(1, Ordering::AcqRel);
    }
    f
}

unsafe fn fopen_any(path: *const c_char, mode: *const c_char) -> *mut FILE {
    // SAFETY: fopen's contract.
    let w = unsafe { state::classify_at(libc::AT_FDCWD, path) };
    match w {
        Where::Shoal(t) => {
            if mode.is_null() {
                set_errno(libc::EINVAL);
                return std::ptr::null_mut();
            }
            // SAFETY: fopen's contract: a NUL-terminated mode.
            let m = unsafe { std::ffi::CStr::from_ptr(mode) }.to_bytes();
            let Some(flags) = mode_flags(m) else {
                set_errno(libc::EINVAL);
                return std::ptr::null_mut();
            };
            let kfd = files::open_target(&t, flags, 0o666);
            if kfd < 0 {
                return std::ptr::null_mut();
            }
            // SAFETY: our descriptor and the caller's mode.
            let f = unsafe { stream(kfd, mode) };
            if f.is_null() {
                let e = errno();
                files::close_ours(kfd);
                set_errno(e);
            }
            f
        }
        Where::Fail(e) => {
            set_errno(e);
            std::ptr::null_mut()
        }
        Where::Kernel(_) => {
            let (_, p) = w.kernel_args(libc::AT_FDCWD, path);
            // SAFETY: fopen's contract.
            unsafe { real::fopen64(p, mode) }
        }
    }
}

#[no_mangle]
pub unsafe extern "C" fn fopen(path: *const c_char, mode: *const c_char) -> *mut FILE {
    guarded(<*mut FILE as Failed>::failed, || {
        // SAFETY: fopen's contract.
        unsafe { fopen_any(path, mode) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn fopen64(path: *const c_char, mode: *const c_char) -> *mut FILE {
    guarded(<*mut FILE as Failed>::failed, || {
        // SAFETY: fopen's contract.
        unsafe { fopen_any(path, mode) }
    })
}

#[no_mangle]
pub unsafe extern "C" fn fdopen(fd: c_int, mode: *const c_char) -> *mut FILE {
    guarded(<*mut FILE as Failed>::failed, || {
        if state::is_ours(fd) && !state::in_lib() {
            // SAFETY: our descriptor and the caller's mode.
            unsafe { stream(fd, mode) }
        } else {
            // SAFETY: fdopen's contract.
            unsafe { real::fdopen(fd, mode) }
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn fileno(f: *mut FILE) -> c_int {
    guarded(<c_int as Failed>::failed, || {
        match stream_fd(f) {
            Some(fd) => fd,
            // SAFETY: fileno's contract.
            None => unsafe { real::fileno(f) },
        }
    })
}

exported! {
    [fileno_unlocked] (f: *mut FILE) -> c_int => fileno(f);
}

#[no_mangle]
pub unsafe extern "C" fn fclose(f: *mut FILE) -> c_int {
    guarded(<c_int as Failed>::failed, || {
        if stream_fd(f).is_some() {
            let mut s = STREAMS.lock().unwrap_or_else(|e| e.into_inner());
            if s.as_mut().and_then(|m| m.remove(&(f as usize))).is_some() {
                STREAMS_OPEN.fetch_sub(1, Ordering::AcqRel);
            }
        }
        // SAFETY: fclose's contract (a cookie stream closes through cookie_close).
        unsafe { real::fclose(f) }
    })
}
