//! Errors that cross the wire: a POSIX errno and a message naming what went wrong.

use std::fmt;

/// A POSIX error number, as carried in a reply's status and returned on the mount.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Errno(pub i32);

impl Errno {
    pub const EPERM: Errno = Errno(libc::EPERM);
    pub const ENOENT: Errno = Errno(libc::ENOENT);
    pub const EIO: Errno = Errno(libc::EIO);
    pub const EEXIST: Errno = Errno(libc::EEXIST);
    pub const EXDEV: Errno = Errno(libc::EXDEV);
    pub const ENOTDIR: Errno = Errno(libc::ENOTDIR);
    pub const EISDIR: Errno = Errno(libc::EISDIR);
    pub const EINVAL: Errno = Errno(libc::EINVAL);
    pub const EFBIG: Errno = Errno(libc::EFBIG);
    pub const ENOSPC: Errno = Errno(libc::ENOSPC);
    pub const EACCES: Errno = Errno(libc::EACCES);
    pub const ENAMETOOLONG: Errno = Errno(libc::ENAMETOOLONG);
    pub const ENOTEMPTY: Errno = Errno(libc::ENOTEMPTY);
    pub const ENOTSUP: Errno = Errno(libc::ENOTSUP);
    pub const ENODATA: Errno = Errno(libc::ENODATA);
    pub const ERANGE: Errno = Errno(libc::ERANGE);
    pub const E2BIG: Errno = Errno(libc::E2BIG);
    pub const ELOOP: Errno = Errno(libc::ELOOP);
    pub const EPROTO: Errno = Errno(libc::EPROTO);
    pub const EHOSTUNREACH: Errno = Errno(libc::EHOSTUNREACH);
    pub const ETIMEDOUT: Errno = Errno(libc::ETIMEDOUT);
    pub const EBUSY: Errno = Errno(libc::EBUSY);
    pub const ESTALE: Errno = Errno(libc::ESTALE);
    pub const EMLINK: Errno = Errno(libc::EMLINK);
    pub const EAGAIN: Errno = Errno(libc::EAGAIN);
    pub const EDEADLK: Errno = Errno(libc::EDEADLK);
    pub const EINTR: Errno = Errno(libc::EINTR);
    /// Between client and server only, never a caller's: the name asked for
    /// belongs to another partition of a split directory (the client's map
    /// of its partitions is old; proto/src/partitions.rs). The client reads
    /// the partition's record again, which names the partitions split off
    /// from it, and goes there.
    pub const MOVED: Errno = Errno(libc::EREMCHG);
    /// Between client and server only: the partition is splitting; the
    /// client asks again in a moment.
    pub const SPLITTING: Errno = Errno(libc::EINPROGRESS);

    pub fn describe(self) -> String {
        std::io::Error::from_raw_os_error(self.0).to_string()
    }
}

/// An error from a Shoal operation: what the caller sees on the mount (the errno)
/// and what a person reads on the command line (the message).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShoalError {
    pub errno: Errno,
    pub message: String,
}

impl ShoalError {
    pub fn new(errno: Errno, message: impl Into<String>) -> Self {
        ShoalError {
            errno,
            message: message.into(),
        }
    }
    pub fn not_found(what: impl fmt::Display) -> Self {
        Self::new(Errno::ENOENT, format!("{what}: no such file or directory"))
    }
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(Errno::EINVAL, message)
    }
    pub fn io(message: impl Into<String>) -> Self {
        Self::new(Errno::EIO, message)
    }
    pub fn protocol(message: impl Into<String>) -> Self {
        Self::new(Errno::EPROTO, message)
    }
    /// Whether the request that failed so may have been applied all the
    /// same: its connection was lost or it timed out after it was sent
    /// (EIO, ETIMEDOUT), or the server applied it and failed to make it
    /// durable (EIO). Any other errno is a refusal: nothing was applied. A
    /// caller undoing an earlier step of a multi-server operation must not
    /// undo it after such a failure (the step after it may stand).
    pub fn may_have_been_applied(&self) -> bool {
        self.errno == Errno::EIO || self.errno == Errno::ETIMEDOUT
    }

    /// Adds context in front of the message, keeping the errno.
    pub fn context(mut self, what: impl fmt::Display) -> Self {
        self.message = format!("{what}: {}", self.message);
        self
    }
}

impl fmt::Display for ShoalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ShoalError {}

impl From<std::io::Error> for ShoalError {
    fn from(e: std::io::Error) -> Self {
        let errno = e.raw_os_error().map(Errno).unwrap_or(Errno::EIO);
        ShoalError::new(errno, e.to_string())
    }
}

impl From<prost::DecodeError> for ShoalError {
    fn from(e: prost::DecodeError) -> Self {
        ShoalError::protocol(format!("malformed message body: {e}"))
    }
}

pub type Result<T, E = ShoalError> = std::result::Result<T, E>;
