//! From Shoal errors to FUSE replies, and the checks on names that arrive
//! from the kernel as raw bytes.

use std::ffi::OsStr;

use fuser::{
    ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry,
    ReplyLock, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
};
use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::names::NAME_MAX;

/// The errno the kernel gets for `e`: Shoal errors already carry a POSIX errno,
/// so it passes straight through (a non-positive one becomes EIO).
pub fn errno(e: &ShoalError) -> fuser::Errno {
    fuser::Errno::from_i32(e.errno.0)
}

/// A name from the kernel as the `&str` the client takes. Longer than
/// NAME_MAX bytes: ENAMETOOLONG (checked first, so the errno does not depend
/// on the encoding). Not UTF-8: EINVAL, because Shoal stores names as UTF-8
/// strings on the wire and in its directories.
pub fn name_str(name: &OsStr) -> Result<&str> {
    if name.len() > NAME_MAX {
        return Err(ShoalError::new(
            Errno::ENAMETOOLONG,
            format!("name of {} bytes is longer than {NAME_MAX}", name.len()),
        ));
    }
    name.to_str().ok_or_else(|| {
        ShoalError::invalid(format!(
            "name {:?} is not UTF-8; Shoal names must be UTF-8",
            name.to_string_lossy()
        ))
    })
}

/// Any fuser reply: all of them can carry an error.
pub trait ErrorReply: Send + 'static {
    fn error(self, errno: fuser::Errno);
}

macro_rules! error_reply {
    ($($t:ty),*) => {$(
        impl ErrorReply for $t {
            fn error(self, errno: fuser::Errno) {
                <$t>::error(self, errno)
            }
        }
    )*};
}

error_reply!(
    ReplyAttr,
    ReplyCreate,
    ReplyData,
    ReplyDirectory,
    ReplyDirectoryPlus,
    ReplyEmpty,
    ReplyEntry,
    ReplyLock,
    ReplyOpen,
    ReplyStatfs,
    ReplyWrite,
    ReplyXattr
);

/// Answers `reply` with `e`, logging it at debug level: errors such as ENOENT
/// are the normal answer to many lookups, so they are not warnings.
pub fn fail(op: &'static str, reply: impl ErrorReply, e: ShoalError) {
    tracing::debug!(op, errno = e.errno.0, "{e}");
    reply.error(errno(&e));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    #[test]
    fn names_are_checked() {
        assert_eq!(name_str(OsStr::new("a b")).unwrap(), "a b");
        let long = "x".repeat(NAME_MAX + 1);
        assert_eq!(
            name_str(OsStr::new(&long)).unwrap_err().errno,
            Errno::ENAMETOOLONG
        );
        let bad = OsStr::from_bytes(b"caf\xe9");
        assert_eq!(name_str(bad).unwrap_err().errno, Errno::EINVAL);
    }

    #[test]
    fn errno_passes_through() {
        let e = ShoalError::new(Errno::ENOTEMPTY, "x");
        assert_eq!(errno(&e).code(), libc::ENOTEMPTY);
        assert_eq!(errno(&ShoalError::new(Errno(0), "?")).code(), libc::EIO);
    }
}
