//! Where a panic stops: at the library's edge. Every C entry point (the
//! interposed functions, the constructor, the exit and fork handlers) runs
//! its body under [`guarded`], so that a panic (a bug of the library's)
//! fails that one call with EIO rather than unwinding into the program,
//! which Rust turns into an abort of the whole process.

/// What an entry point returns when it fails: -1 for a count, an offset or
/// a descriptor, NULL for a pointer (errno says why).
pub trait Failed {
    fn failed() -> Self;
}

macro_rules! failed_is_minus_one {
    ($($t:ty),*) => {
        $(impl Failed for $t {
            fn failed() -> Self {
                -1
            }
        })*
    };
}
failed_is_minus_one!(i32, i64, isize);

impl<T> Failed for *mut T {
    fn failed() -> Self {
        std::ptr::null_mut()
    }
}

impl Failed for () {
    fn failed() -> Self {}
}

/// Runs an entry point's body. A panic (a bug of the library's) must not
/// unwind into the program, which Rust would turn into an abort of the
/// whole process: the call fails with EIO instead (`failed`'s value).
pub fn guarded<T>(failed: impl FnOnce() -> T, body: impl FnOnce() -> T) -> T {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(body)) {
        Ok(v) => v,
        Err(_) => {
            crate::errno::set_errno(libc::EIO);
            failed()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A panic, without the panic hook's message (a test's output must
    /// not show "panicked" when nothing is wrong).
    fn bug() -> ! {
        std::panic::resume_unwind(Box::new("a bug"))
    }

    #[test]
    fn a_panic_is_the_types_failure_with_eio() {
        crate::errno::set_errno(0);
        let r: i64 = guarded(i64::failed, || bug());
        assert_eq!(r, -1);
        assert_eq!(crate::errno::errno(), libc::EIO);
        let p: *mut u8 = guarded(<*mut u8>::failed, || bug());
        assert!(p.is_null());
        assert_eq!(guarded(|| libc::EIO, || -> i32 { bug() }), libc::EIO);
    }

    #[test]
    fn without_a_panic_the_body_answers() {
        crate::errno::set_errno(7);
        assert_eq!(guarded(i32::failed, || 3), 3);
        assert_eq!(crate::errno::errno(), 7, "errno left alone");
    }
}
