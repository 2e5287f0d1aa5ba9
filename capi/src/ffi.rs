//! What every entry point shares: turning a Rust result into the C
//! convention (a return value, `errno` and a thread-local message), catching
//! panics so none crosses the FFI boundary, and reading C arguments (strings,
//! buffers) with the checks C callers expect (EFAULT for NULL).

use std::cell::RefCell;
use std::ffi::{CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use libc::c_char;

use crate::error::{err, Result};
use crate::{held_attrs, held_back};

thread_local! {
    /// The message of the last call that failed on this thread.
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

/// Sets this thread's `errno`.
pub fn set_errno(e: i32) {
    // SAFETY: __errno_location returns this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

fn remember(message: &str) {
    let text = CString::new(message.replace('\0', "\\0")).unwrap_or_default();
    // A failure while the thread is being torn down has nowhere to go.
    let _ = LAST_ERROR.try_with(|slot| *slot.borrow_mut() = text);
}

/// The message of this thread's last failed call (empty if none), valid
/// until the next failing call on this thread.
pub fn last_error() -> *const c_char {
    LAST_ERROR
        .try_with(|slot| slot.borrow().as_ptr())
        .unwrap_or(c"".as_ptr())
}

/// Runs the body of entry point `name`: on success returns its value; on an
/// error sets errno and the message and returns `failed`; a panic becomes
/// EIO. errno is left as it was on success, as POSIX allows. An attribute
/// change held back (`held_attrs`) is sent first, and if that fails the call
/// fails with its error.
pub fn call<T>(name: &str, failed: T, body: impl FnOnce() -> Result<T>) -> T {
    call_keeping_held(name, failed, || {
        held_attrs::flush()?;
        body()
    })
}

/// [`call`] for the entry points that send a held attribute change
/// themselves: those that may add to it, and close (which closes even if
/// sending it fails).
///
/// After the process's exit handler sent what was held back
/// ([`held_back::exited`]), a call sends what it held back before it returns,
/// and fails if that fails.
pub fn call_keeping_held<T>(name: &str, failed: T, body: impl FnOnce() -> Result<T>) -> T {
    let body = || -> Result<T> {
        let v = body()?;
        if held_back::exited() {
            held_back::send_held_back()?;
        }
        Ok(v)
    };
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(v)) => v,
        Ok(Err(e)) => {
            let errno = if e.errno.0 > 0 { e.errno.0 } else { libc::EIO };
            remember(&format!("{name}: {}", e.message));
            set_errno(errno);
            failed
        }
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            remember(&format!("{name}: internal error in libshoal: {what}"));
            set_errno(libc::EIO);
            failed
        }
    }
}

/// A NUL-terminated C string argument, which Shoal needs as UTF-8.
///
/// # Safety
/// `p` is NULL or points to a NUL-terminated string that outlives the call.
pub unsafe fn c_str<'a>(p: *const c_char, what: &str) -> Result<&'a str> {
    if p.is_null() {
        return Err(err(libc::EFAULT, format!("{what} is NULL")));
    }
    // SAFETY: the caller passes a NUL-terminated string.
    let s = unsafe { CStr::from_ptr(p) };
    s.to_str()
        .map_err(|_| err(libc::EINVAL, format!("{what} {s:?} is not UTF-8")))
}

/// An absolute Shoal path argument.
///
/// # Safety
/// As [`c_str`].
pub unsafe fn c_path<'a>(p: *const c_char) -> Result<&'a str> {
    // SAFETY: as the caller promises.
    let path = unsafe { c_str(p, "path") }?;
    if path.is_empty() {
        return Err(err(libc::ENOENT, "empty path"));
    }
    if !path.starts_with('/') {
        return Err(err(
            libc::EINVAL,
            format!("{path}: give an absolute path inside the Shoal namespace"),
        ));
    }
    Ok(path)
}

/// A buffer of `len` bytes the caller reads from.
///
/// # Safety
/// `p` is NULL or valid for reads of `len` bytes for the call.
pub unsafe fn in_buf<'a>(p: *const libc::c_void, len: usize) -> Result<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(err(libc::EFAULT, "buffer is NULL"));
    }
    check_len(len)?;
    // SAFETY: the caller passes `len` readable bytes.
    Ok(unsafe { std::slice::from_raw_parts(p as *const u8, len) })
}

/// A buffer of `len` bytes the call fills.
///
/// # Safety
/// `p` is NULL or valid for writes of `len` bytes for the call.
pub unsafe fn out_buf<'a>(p: *mut libc::c_void, len: usize) -> Result<&'a mut [u8]> {
    if len == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(err(libc::EFAULT, "buffer is NULL"));
    }
    check_len(len)?;
    // SAFETY: the caller passes `len` writable bytes.
    Ok(unsafe { std::slice::from_raw_parts_mut(p as *mut u8, len) })
}

/// Transfers return ssize_t, so a length must fit in one (as read(2) says).
fn check_len(len: usize) -> Result<()> {
    if len > isize::MAX as usize {
        return Err(err(libc::EINVAL, format!("length {len} is too large")));
    }
    Ok(())
}

/// A struct the call fills.
///
/// # Safety
/// `p` is NULL or valid for writes of a `T`.
pub unsafe fn out_struct<'a, T>(p: *mut T, what: &str) -> Result<&'a mut T> {
    if p.is_null() {
        return Err(err(libc::EFAULT, format!("{what} is NULL")));
    }
    // SAFETY: the caller passes a writable T.
    Ok(unsafe { &mut *p })
}

/// Copies `value` into `buf` as getxattr(2) and listxattr(2) do: with a
/// size of 0, only the length needed; ERANGE if it does not fit.
pub fn copy_sized(value: &[u8], buf: &mut [u8], what: &str) -> Result<isize> {
    if buf.is_empty() {
        return Ok(value.len() as isize);
    }
    if value.len() > buf.len() {
        return Err(err(
            libc::ERANGE,
            format!("{what} is {} bytes, the buffer {}", value.len(), buf.len()),
        ));
    }
    buf[..value.len()].copy_from_slice(value);
    Ok(value.len() as isize)
}
