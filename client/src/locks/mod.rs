//! POSIX record locks for the whole cluster: each file's locks are held by
//! its server (`server/src/locks.rs`), so processes on different clients
//! exclude each other as processes on one machine do. A lock owner is the
//! front end's (the mount passes the kernel's, libshoal a process's); the
//! server keeps owners of different clients apart.
//!
//! Locks order data as well as access, as NFS's do: before an unlock, the
//! writes this client holds of the file (buffered, behind) go to the
//! servers, so that whoever takes the range next reads them; after a lock
//! is granted, what this client caches of the file is dropped, unless a
//! lease says nobody changed it since.

pub(crate) mod held;

use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::msg::{LockRequest, TestLockRequest};
use shoal_proto::record_locks::Range;
use shoal_proto::{handle, ops, Handle, Operation};

use crate::client::Client;

/// How often a lock request asks again a server in its grace period.
const GRACE_POLL: std::time::Duration = std::time::Duration::from_millis(50);

pub use shoal_proto::msg::LockKind;

/// A lock request: `kind` on bytes `start..=end` (`end` = `u64::MAX`: to
/// the end of the file) for lock `owner`, made by process `pid`.
#[derive(Clone, Copy, Debug)]
pub struct LockAsk {
    pub owner: u64,
    pub kind: LockKind,
    pub start: u64,
    pub end: u64,
    pub pid: u32,
}

/// Another owner's lock in the way (what F_GETLK reports).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LockConflict {
    pub kind: LockKind,
    pub start: u64,
    pub end: u64,
    pub pid: u32,
}

impl LockAsk {
    fn range(&self) -> Result<Range> {
        Range::new(self.start, self.end).ok_or_else(|| {
            ShoalError::invalid(format!(
                "lock range {}..={} ends before it starts",
                self.start, self.end
            ))
        })
    }
}

impl Client {
    /// Takes, changes or drops (`LockKind::LockUnlock`) a lock on file `h`;
    /// a conflict is EAGAIN, or with `wait` is waited out (EDEADLK if the
    /// owner in the way waits for this one).
    pub async fn lock(&self, h: Handle, ask: LockAsk, wait: bool) -> Result<()> {
        let range = ask.range()?;
        let server = handle::server_of(h);
        let held = self.pool().held_locks(server)?;
        let request = LockRequest {
            file: h,
            owner: ask.owner,
            kind: ask.kind as i32,
            start: range.start,
            end: range.end,
            wait,
            pid: ask.pid,
            reclaim: false,
        };
        if ask.kind == LockKind::LockUnlock {
            // An owner that holds nothing here has nothing to let go (a
            // close of every file sends an unlock).
            if !held.holds(h, ask.owner) {
                return Ok(());
            }
            let flushed = self.flush(h).await;
            held.set(h, ask.owner, ask.kind, range);
            self.after_grace::<ops::Lock>(server, &request).await?;
            return flushed;
        }
        self.after_grace::<ops::Lock>(server, &request).await?;
        held.set(h, ask.owner, ask.kind, range);
        if self.lease_until(h).is_none() {
            self.forget(h);
        }
        Ok(())
    }

    /// F_GETLK: the first lock of another owner (of any client) in the way
    /// of `ask`, if any.
    pub async fn test_lock(&self, h: Handle, ask: LockAsk) -> Result<Option<LockConflict>> {
        let range = ask.range()?;
        if ask.kind == LockKind::LockUnlock {
            return Err(ShoalError::new(Errno::EINVAL, "F_GETLK of an unlock"));
        }
        let request = TestLockRequest {
            file: h,
            owner: ask.owner,
            kind: ask.kind as i32,
            start: range.start,
            end: range.end,
        };
        let reply = self
            .after_grace::<ops::TestLock>(handle::server_of(h), &request)
            .await?;
        Ok(reply.conflict.then(|| LockConflict {
            kind: reply.kind(),
            start: reply.start,
            end: reply.end,
            pid: reply.pid,
        }))
    }

    /// Sends lock request `request` to `server`, again and again while the
    /// server is in its grace period (EBUSY: it restarted and is letting
    /// the holders of its lost locks take them back first). The period is
    /// the server's to bound.
    async fn after_grace<O: Operation>(
        &self,
        server: u32,
        request: &O::Request,
    ) -> Result<O::Reply> {
        loop {
            match self.pool().call::<O>(server, self.cred, request).await {
                Err(e) if e.errno == Errno::EBUSY => tokio::time::sleep(GRACE_POLL).await,
                other => return other,
            }
        }
    }

    /// Drops every lock `owner` holds on `h` (a close of the file by the
    /// owner: POSIX drops them all).
    pub async fn unlock_owner(&self, h: Handle, owner: u64) -> Result<()> {
        let ask = LockAsk {
            owner,
            kind: LockKind::LockUnlock,
            start: 0,
            end: u64::MAX,
            pid: 0,
        };
        self.lock(h, ask, false).await
    }

    /// Drops every lock any owner of this client holds on `h` (its last
    /// close here).
    pub async fn unlock_all(&self, h: Handle) -> Result<()> {
        let owners = self.pool().held_locks(handle::server_of(h))?.owners_of(h);
        for owner in owners {
            self.unlock_owner(h, owner).await?;
        }
        Ok(())
    }

    /// Whether any owner of this client holds a lock on `h`.
    pub fn holds_locks(&self, h: Handle) -> bool {
        self.pool()
            .held_locks(handle::server_of(h))
            .is_ok_and(|held| held.on_file(h))
    }
}
