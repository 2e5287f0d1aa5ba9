//! mkstemp and friends, and mkdtemp: glibc makes the file (or directory)
//! with its internal open/mkdir, which no interposer sees, so for a Shoal
//! template the library fills in the X's and makes it itself.

use std::sync::atomic::{AtomicU64, Ordering};

use libc::{c_char, c_int};

use super::files::open_target;
use crate::errno::{errno, fail, set_errno};
use crate::real;
use crate::state::{self, Where};
use crate::unwind::{guarded, Failed};

/// Random letters for the X's (xorshift over the time, the pid and a
/// counter: unpredictability is not the point, O_EXCL decides).
fn letters(out: &mut [u8]) {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    const CHARS: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut x = now
        ^ (u64::from(std::process::id()) << 32)
        ^ COUNTER.fetch_add(0x9e37_79b9, Ordering::Relaxed);
    for c in out {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *c = CHARS[(x % CHARS.len() as u64) as usize];
    }
}

/// The 6 X's of `template` (before `suffix` bytes), or EINVAL.
unsafe fn xs<'a>(template: *mut c_char, suffix: c_int) -> Option<&'a mut [u8]> {
    if template.is_null() || suffix < 0 {
        return None;
    }
    // SAFETY: a NUL-terminated, writable template.
    let len = unsafe { libc::strlen(template) };
    let end = len.checked_sub(suffix as usize)?;
    let start = end.checked_sub(6)?;
    // SAFETY: inside the template.
    let x = unsafe { std::slice::from_raw_parts_mut((template as *mut u8).add(start), 6) };
    x.iter().all(|&c| c == b'X').then_some(x)
}

const ATTEMPTS: usize = 100;

unsafe fn mkostemps_any(template: *mut c_char, suffix: c_int, flags: c_int) -> c_int {
    // SAFETY: the caller's template.
    let w = unsafe { state::classify_at(libc::AT_FDCWD, template) };
    match w {
        Where::Kernel(None) => {
            // SAFETY: the call's contract.
            return unsafe { real::mkostemps64(template, suffix, flags) };
        }
        Where::Fail(e) => return fail(e),
        _ => {}
    }
    // SAFETY: the caller's template.
    let Some(x) = (unsafe { xs(template, suffix) }) else {
        return fail(libc::EINVAL);
    };
    let flags = (flags & !libc::O_ACCMODE) | libc::O_RDWR | libc::O_CREAT | libc::O_EXCL;
    for _ in 0..ATTEMPTS {
        letters(x);
        // SAFETY: the template, now a full path.
        let w = unsafe { state::classify_at(libc::AT_FDCWD, template) };
        let fd = match w {
            Where::Shoal(t) => open_target(&t, flags, 0o600),
            Where::Fail(e) => return fail(e),
            Where::Kernel(_) => {
                let (_, p) = w.kernel_args(libc::AT_FDCWD, template);
                // SAFETY: a NUL-terminated path.
                unsafe { real::openat(libc::AT_FDCWD, p, flags, 0o600) }
            }
        };
        if fd >= 0 || errno() != libc::EEXIST {
            return fd;
        }
    }
    fail(libc::EEXIST)
}

exported! {
    [mkstemp, mkstemp64] (template: *mut c_char) -> c_int => mkostemps_any(template, 0, 0);
}
exported! {
    [mkostemp, mkostemp64] (template: *mut c_char, flags: c_int) -> c_int => mkostemps_any(template, 0, flags);
}
exported! {
    [mkstemps, mkstemps64] (template: *mut c_char, suffix: c_int) -> c_int => mkostemps_any(template, suffix, 0);
}
exported! {
    [mkostemps, mkostemps64] (template: *mut c_char, suffix: c_int, flags: c_int) -> c_int => mkostemps_any(template, suffix, flags);
}
#[no_mangle]
pub unsafe extern "C" fn mkdtemp(template: *mut c_char) -> *mut c_char {
    guarded(<*mut c_char as Failed>::failed, || {
        // SAFETY: the caller's template.
        match unsafe { state::classify_at(libc::AT_FDCWD, template) } {
            // SAFETY: the call's contract.
            Where::Kernel(None) => return unsafe { real::mkdtemp(template) },
            Where::Fail(e) => {
                set_errno(e);
                return std::ptr::null_mut();
            }
            _ => {}
        }
        // SAFETY: the caller's template.
        let Some(x) = (unsafe { xs(template, 0) }) else {
            set_errno(libc::EINVAL);
            return std::ptr::null_mut();
        };
        for _ in 0..ATTEMPTS {
            letters(x);
            // SAFETY: the template, now a full path (mkdir is this library's).
            if unsafe { super::meta::mkdir(template, 0o700) } == 0 {
                return template;
            }
            if errno() != libc::EEXIST {
                return std::ptr::null_mut();
            }
        }
        set_errno(libc::EEXIST);
        std::ptr::null_mut()
    })
}
