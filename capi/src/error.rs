//! The library's errors: its `Result`, an error made of a POSIX errno and
//! a message, and a path put in front of a message. Turned into the C
//! convention at the entry points (`ffi::call`).

use shoal_client::{Errno, ShoalError};

pub type Result<T> = std::result::Result<T, ShoalError>;

pub fn err(errno: i32, message: impl Into<String>) -> ShoalError {
    ShoalError::new(Errno(errno), message)
}

/// Adds `path` in front of a message that does not name it yet.
pub fn about(path: &str) -> impl Fn(ShoalError) -> ShoalError + '_ {
    move |e| {
        if e.message.contains(path) {
            e
        } else {
            e.context(path)
        }
    }
}
