//! POSIX record locks and flock(2) through the mount. With FUSE_POSIX_LOCKS
//! the kernel hands fcntl(2) locks (F_SETLK, F_SETLKW, F_GETLK, lockf, OFD
//! locks) to the mount, and with FUSE_FLOCK_LOCKS flock(2) locks too
//! (FUSE_LK_FLOCK); the mount takes both for the whole cluster
//! (`Client::lock`), so processes on different machines exclude each other,
//! as Lustre's and BeeGFS's coherent flock do. The two kinds stay apart, as
//! Linux keeps them: a flock lock never meets an fcntl lock.
//!
//! When locks go, as POSIX says: a close of any descriptor of the file by
//! the owner (the kernel's FLUSH names the owner). A read-only open
//! answered with FOPEN_NOFLUSH sends no FLUSH, so once this mount has taken
//! a lock no open gets it (`fs::open_file`); the locks taken through a
//! read-only descriptor opened before the mount's first lock, and OFD locks
//! (whose owner is the open file, never named by a FLUSH), go at the file's
//! last close on this mount (RELEASE). A flock lock goes at its open file's
//! last close (the kernel's RELEASE names it).
//!
//! A caller's signal while it waits (F_SETLKW, a blocking flock) reaches
//! the mount as FUSE_INTERRUPT (`lock_waits`): the wait is withdrawn at its
//! server and answered EINTR, so the caller returns EINTR from its handler,
//! or, SIGKILLed, is gone at once (the kernel waits for the request's
//! answer even for a dying process).
//!
//! After a grant, the kernel's pages and attributes of the file are
//! dropped, unless a lease says nobody changed it, or this mount dropped
//! them already at the grant's write epoch (no write lock was let go since:
//! `lock_epochs`): the process reads what the last holder wrote.

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
/// included), `typ` (F_RDLCK, F_WRLCK, F_UNLCK), caller's pid, and whether
/// it is a flock lock.
pub struct KernelLock {
    pub owner: u64,
    pub start: u64,
    pub end: u64,
    pub typ: i32,
    pub pid: u32,
    pub flock: bool,
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
            flock: self.flock,
        })
    }
}

/// F_SETLK and F_SETLKW (`wait`), and flock(2); the kernel's request
/// `unique`, whose interrupt ends a wait.
pub async fn set(
    c: Client,
    s: Arc<Shared>,
    ino: Handle,
    lock: KernelLock,
    wait: bool,
    unique: u64,
) -> Result<()> {
    let ask = lock.ask()?;
    s.locking.store(true, Ordering::Relaxed);
    let grant = if wait {
        let interrupted = s.lock_waits.waiting(unique);
        let taken = c.lock_until(ino, ask, true, interrupted).await;
        s.lock_waits.done(unique);
        taken?
    } else {
        c.lock_until(ino, ask, false, std::future::pending())
            .await?
    };
    if ask.kind != LockKind::LockUnlock
        && c.lease_until(ino).is_none()
        && !s.lock_epochs.current(ino, grant.write_epoch)
    {
        s.streams.changed(ino);
        s.leases.drop_inode(ino).await;
        s.lock_epochs.dropped(ino, grant.write_epoch);
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
