//! POSIX record locks through the mount. With FUSE_POSIX_LOCKS the kernel
//! hands fcntl(2) locks (F_SETLK, F_SETLKW, F_GETLK, lockf, OFD locks) to
//! the mount, which takes them for the whole cluster (`Client::lock`), so
//! processes on different machines exclude each other. flock(2) stays each
//! machine's own (fuser does not say which of the two a request is, and
//! only FUSE_FLOCK_LOCKS would send flock here): Lustre's `localflock`.
//!
//! When locks go, as POSIX says: a close of any descriptor of the file by
//! the owner (the kernel's FLUSH names the owner). A read-only open
//! answered with FOPEN_NOFLUSH sends no FLUSH, so once this mount has taken
//! a lock no open gets it (`fs::open_file`); the locks taken through a
//! read-only descriptor opened before the mount's first lock, and OFD locks
//! (whose owner is the open file, never named by a FLUSH), go at the file's
//! last close on this mount (RELEASE).
//!
//! Not handled: a caller's signal while it waits (fuser answers the
//! kernel's FUSE_INTERRUPT itself, with ENOSYS), so a process blocked in
//! F_SETLKW waits until it is granted the lock, even SIGKILLed.
//!
//! After a grant, the kernel's pages and attributes of the file are
//! dropped (unless a lease says nobody changed it): the process reads what
//! the last holder wrote.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use shoal_client::{Client, LockAsk, LockKind};
use shoal_proto::error::{Result, ShoalError};
use shoal_proto::Handle;

use crate::shared::Shared;

/// The kernel's end of a lock "to the end of the file" (OFFSET_MAX): ends
/// past it are given back as it, or the kernel refuses the answer.
const OFFSET_MAX: u64 = i64::MAX as u64;

/// A lock as the kernel asked for it: lock owner, byte range (`end`
/// included), `typ` (F_RDLCK, F_WRLCK, F_UNLCK), caller's pid.
pub struct KernelLock {
    pub owner: u64,
    pub start: u64,
    pub end: u64,
    pub typ: i32,
    pub pid: u32,
}

/// What F_GETLK answers: a lock in the way, or F_UNLCK over the range.
pub struct Tested {
    pub start: u64,
    pub end: u64,
    pub typ: i32,
    pub pid: u32,
}

impl KernelLock {
    fn ask(&self) -> Result<LockAsk> {
        let kind = match self.typ {
            libc::F_RDLCK => LockKind::LockRead,
            libc::F_WRLCK => LockKind::LockWrite,
            libc::F_UNLCK => LockKind::LockUnlock,
            other => return Err(ShoalError::invalid(format!("lock type {other}"))),
        };
        Ok(LockAsk {
            owner: self.owner,
            kind,
            start: self.start,
            end: self.end,
            pid: self.pid,
        })
    }
}

/// F_SETLK and F_SETLKW (`wait`).
pub async fn set(
    c: Client,
    s: Arc<Shared>,
    ino: Handle,
    lock: KernelLock,
    wait: bool,
) -> Result<()> {
    let ask = lock.ask()?;
    s.locking.store(true, Ordering::Relaxed);
    c.lock(ino, ask, wait).await?;
    if ask.kind != LockKind::LockUnlock && c.lease_until(ino).is_none() {
        s.streams.changed(ino);
        s.leases.drop_inode(ino).await;
    }
    Ok(())
}

/// F_GETLK.
pub async fn test(c: Client, ino: Handle, lock: KernelLock) -> Result<Tested> {
    let ask = lock.ask()?;
    Ok(match c.test_lock(ino, ask).await? {
        None => Tested {
            start: lock.start,
            end: lock.end,
            typ: libc::F_UNLCK,
            pid: 0,
        },
        Some(held) => Tested {
            start: held.start.min(OFFSET_MAX),
            end: held.end.min(OFFSET_MAX),
            typ: match held.kind {
                LockKind::LockWrite => libc::F_WRLCK,
                _ => libc::F_RDLCK,
            },
            pid: held.pid,
        },
    })
}
