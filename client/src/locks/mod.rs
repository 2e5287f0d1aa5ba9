//! POSIX record locks and flock locks for the whole cluster: each file's
//! locks are held by its server (`server/src/locks.rs`), so processes on
//! different clients exclude each other as processes on one machine do. A
//! lock owner is the front end's (the mount passes the kernel's, libshoal a
//! process's or an open file's); the server keeps owners of different
//! clients apart, and flock locks apart from fcntl locks.
//!
//! A wait can be interrupted ([`Client::lock_until`]): the front end's
//! caller got a signal, or was killed. The wait is then withdrawn at the
//! server, which answers it EINTR, or granted it already: either way the
//! one answer the request gets says which, so no lock is ever held that
//! this client does not know of.
//!
//! Locks order data as well as access, as NFS's do: before an unlock, the
//! writes this client holds of the file (buffered, behind) go to the
//! servers, so that whoever takes the range next reads them; after a lock
//! is granted, what this client caches of the file is dropped, unless a
//! lease says nobody changed it since.

pub(crate) mod held;

use held::Holder;

use shoal_proto::error::{Errno, Result, ShoalError};
use std::future::Future;

use shoal_proto::msg::{LockRequest, TestLockRequest, WithdrawLockRequest};
use shoal_proto::record_locks::Range;
use shoal_proto::{handle, ops, Handle, Operation};

use crate::client::Client;

/// How often a lock request asks again a server in its grace period.
const GRACE_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// How often an interrupted wait's withdrawal is sent again until the wait
/// is answered: the first may reach the server before the wait itself (a
/// connection broke and the wait was sent again).
const WITHDRAW_AGAIN: std::time::Duration = std::time::Duration::from_millis(100);

pub use shoal_proto::msg::LockKind;

/// A lock request: `kind` on bytes `start..=end` (`end` = `u64::MAX`: to
/// the end of the file) for lock `owner`, made by process `pid`; a flock(2)
/// lock (`flock`, on the whole file) or an fcntl one.
#[derive(Clone, Copy, Debug)]
pub struct LockAsk {
    pub owner: u64,
    pub kind: LockKind,
    pub start: u64,
    pub end: u64,
    pub pid: u32,
    pub flock: bool,
}

/// What a grant says besides itself: the file's write epoch then (see
/// `LockReply`; 0 for an unlock, or from a server that does not say). Two
/// grants with the same nonzero epoch saw no write lock let go between
/// them: what was cached of the file after the first is still current.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LockGrant {
    pub write_epoch: u64,
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
        self.lock_until(h, ask, wait, std::future::pending())
            .await
            .map(drop)
    }

    /// [`lock`](Self::lock), whose wait ends with EINTR once `interrupted`
    /// is ready (the caller got a signal), unless the lock was granted
    /// first.
    pub async fn lock_until(
        &self,
        h: Handle,
        ask: LockAsk,
        wait: bool,
        interrupted: impl Future<Output = ()>,
    ) -> Result<LockGrant> {
        let range = ask.range()?;
        let server = handle::server_of(h);
        let held = self.pool().held_locks(server)?;
        let holder = Holder {
            owner: ask.owner,
            flock: ask.flock,
        };
        let request = LockRequest {
            file: h,
            owner: ask.owner,
            kind: ask.kind as i32,
            start: range.start,
            end: range.end,
            wait,
            pid: ask.pid,
            reclaim: false,
            flock: ask.flock,
        };
        if ask.kind == LockKind::LockUnlock {
            // An owner that holds nothing here has nothing to let go (a
            // close of every file sends an unlock).
            if !held.holds(h, holder) {
                return Ok(LockGrant::default());
            }
            let flushed = self.flush(h).await;
            held.set(h, holder, ask.kind, range);
            self.after_grace::<ops::Lock>(server, &request).await?;
            return flushed.map(|()| LockGrant::default());
        }
        let reply = self.lock_after_grace(server, &request, interrupted).await?;
        held.set(h, holder, ask.kind, range);
        if self.lease_until(h).is_none() {
            self.forget(h);
        }
        Ok(LockGrant {
            write_epoch: reply.write_epoch,
        })
    }

    /// Sends lock request `request` as [`after_grace`](Self::after_grace)
    /// does, withdrawing it at the server once `interrupted` is ready.
    async fn lock_after_grace(
        &self,
        server: u32,
        request: &LockRequest,
        interrupted: impl Future<Output = ()>,
    ) -> Result<shoal_proto::msg::LockReply> {
        let interrupted_error =
            || ShoalError::new(Errno::EINTR, "interrupted while waiting for a lock");
        let mut interrupted = std::pin::pin!(interrupted);
        loop {
            let call = self.pool().call::<ops::Lock>(server, self.cred, request);
            let mut call = std::pin::pin!(call);
            let answer = tokio::select! {
                answer = &mut call => answer,
                () = &mut interrupted => self.withdrawn(server, request, call).await,
            };
            match answer {
                Err(e) if e.errno == Errno::EBUSY => tokio::select! {
                    () = tokio::time::sleep(GRACE_POLL) => {}
                    () = &mut interrupted => return Err(interrupted_error()),
                },
                other => return other,
            }
        }
    }

    /// The answer to the waiting lock request `call` once it is withdrawn:
    /// EINTR, or the grant that came first.
    async fn withdrawn<F: Future<Output = Result<shoal_proto::msg::LockReply>>>(
        &self,
        server: u32,
        request: &LockRequest,
        call: std::pin::Pin<&mut F>,
    ) -> Result<shoal_proto::msg::LockReply> {
        let withdraw = WithdrawLockRequest {
            file: request.file,
            owner: request.owner,
            flock: request.flock,
        };
        let mut call = call;
        loop {
            if let Err(e) = self
                .pool()
                .call::<ops::WithdrawLock>(server, self.cred, &withdraw)
                .await
            {
                tracing::warn!(
                    "withdrawing a lock wait on {:#x}: {}",
                    request.file,
                    e.message
                );
            }
            tokio::select! {
                answer = &mut call => return answer,
                () = tokio::time::sleep(WITHDRAW_AGAIN) => {}
            }
        }
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

    /// Drops every fcntl lock (`flock` false) or the flock lock of `owner`
    /// on `h` (a close of the file by the owner: POSIX drops them all; the
    /// last close of an open file, its flock lock).
    pub async fn unlock_owner(&self, h: Handle, owner: u64, flock: bool) -> Result<()> {
        let ask = LockAsk {
            owner,
            kind: LockKind::LockUnlock,
            start: 0,
            end: u64::MAX,
            pid: 0,
            flock,
        };
        self.lock(h, ask, false).await
    }

    /// Drops every lock any owner of this client holds on `h` (its last
    /// close here).
    pub async fn unlock_all(&self, h: Handle) -> Result<()> {
        let holders = self.pool().held_locks(handle::server_of(h))?.holders_of(h);
        for holder in holders {
            self.unlock_owner(h, holder.owner, holder.flock).await?;
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
