//! This thread's errno: read, set, and a call failed with it (-1 and
//! errno, as libc's calls fail).

use libc::c_int;

pub fn errno() -> c_int {
    // SAFETY: this thread's errno slot.
    unsafe { *libc::__errno_location() }
}

pub fn set_errno(e: c_int) {
    // SAFETY: this thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// Sets errno to `e` and returns -1 (of the caller's integer type).
pub fn fail<T: From<i8>>(e: c_int) -> T {
    set_errno(e);
    T::from(-1)
}
