//! The client's side of server write gathering [Hildebrand 2006]: buffered
//! writes that are scattered (a buffer of several extents) go in one
//! `gather_write` to the file's gathering server, its metafile's server,
//! which merges them with every other client's writes of the file into
//! strip-aligned large writes to the servers holding the strips (see the
//! server's `gathering`). As NFS's unstable writes, they are acknowledged
//! before they are durable, under the server's epoch; the client holds a
//! resend copy (`WriteBack::at_server`, updated by its later direct writes
//! and truncates so it stays the newest) until a durable commit answers under
//! the same epoch, and sends the copy again whenever the epoch changed (the
//! server restarted, or a server it wrote to did before the data was
//! durable).
//!
//! When the copy must reach the strips' servers:
//! - before this client reads the file, writes it directly, truncates it or
//!   changes its attributes (a push, `durable` false: readers of the strips
//!   see the bytes, and a later write-out can never land over newer ones);
//! - at fsync and close, durably ([`Client::commit_gathered`]), after which
//!   the copy goes;
//! - when the client holds `MAX_TOTAL` bytes in all.

use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::handle::server_of;
use shoal_proto::msg::GatherCommitRequest;
use shoal_proto::{extents, ops, Handle};

use crate::client::Client;
use crate::data::gathering_buffer::Gate;

/// A buffer goes to the gathering server when its extents average under
/// this many bytes: then sending each one direct costs more in messages than
/// the gathering server's extra hop costs in copies. Measured
/// (`bench/results/writesize.md`): one client's random 16 KiB writes ran at
/// two thirds of the direct sends' speed through it, 4 and 8 KiB ones even;
/// ten clients' interleaved 1 KiB records 5-7x faster through it.
pub const SMALL_EXTENTS: usize = 16 << 10;

/// Most payload bytes of one `gather_write` (the frame allows 16 MiB).
const SEND_BATCH: usize = 8 << 20;

/// How often a commit sends the copy again because the epoch changed
/// before it gives up: a server that restarts this often is down.
const MAX_RESENDS: usize = 3;

impl Client {
    /// Whether buffered extents (`extents` of them, `bytes` in all) go through
    /// their file's gathering server: when the cluster gathers on servers
    /// and they are small ([`SMALL_EXTENTS`]) and scattered (one extent is
    /// already one large write to the strips' servers), or the server holds
    /// this client's earlier ones (`at_server`): a file stays on one path,
    /// as switching makes the direct writes durable first.
    pub(crate) fn goes_to_gathering_server(
        &self,
        extents: usize,
        bytes: usize,
        at_server: bool,
    ) -> bool {
        self.config().settings.gather_on_server
            && (extents > 1 || at_server)
            && bytes / extents.max(1) < SMALL_EXTENTS
    }

    /// Sends `extents` of `h` to its gathering server (under the file's
    /// `gate`, as the caller whose writes they are) and holds a resend copy;
    /// if the server lost earlier ones, sends the whole copy again.
    pub(crate) async fn send_to_gathering_server(
        &self,
        h: Handle,
        gate: &Gate,
        extents: Vec<(u64, Vec<u8>)>,
    ) -> Result<()> {
        let end = extents
            .iter()
            .map(|(o, d)| o + d.len() as u64)
            .max()
            .unwrap_or(0);
        // The server writes out to the layout it holds: one that reaches
        // `end` (a stuffed file is unstuffed first, as a direct write does).
        let dist = self.dist_upto(h, end).await?;
        if dist.stuffed && end > dist.strip_size {
            self.unstuff(h).await?;
        }
        // Direct writes sent before are made durable first: their copy
        // must go (a resend could land older bytes over gathered ones), and
        // without it a restart of their server would lose them.
        self.inner.write_behind.settle(h).await;
        if self.inner.uncommitted_writes.holds_copy(h) {
            self.commit_direct_changes(h).await?;
        }
        self.inner.uncommitted_writes.forgo_copy(h);
        let epoch = self
            .gather_write(h, extents.iter().map(|(o, d)| (*o, d.as_slice())))
            .await?;
        let buffer = &self.inner.gathering.buffer;
        if buffer.to_server(h, gate, extents, epoch) {
            self.resend_to_gathering_server(h, gate).await?;
        }
        Ok(())
    }

    /// Sends the whole copy of `h` at its gathering server again.
    async fn resend_to_gathering_server(&self, h: Handle, gate: &Gate) -> Result<()> {
        let buffer = &self.inner.gathering.buffer;
        let Some(copy) = buffer.at_server(h, gate) else {
            return Ok(());
        };
        tracing::info!("the gathering server of {h:#x} lost writes: sending them again");
        let extents = copy.extents.iter().map(|(o, d)| (*o, d.as_slice()));
        let epoch = self.with_cred(copy.cred).gather_write(h, extents).await?;
        buffer.resent(h, gate, epoch);
        Ok(())
    }

    /// `gather_write`s of `extents` of `h` (in order, not overlapping), as
    /// many as its limits need, all in flight at once; returns the epoch
    /// they were all acknowledged under. If the server's epoch moved
    /// between them (it restarted half way), all are sent again.
    async fn gather_write<'a>(
        &self,
        h: Handle,
        extents: impl Iterator<Item = (u64, &'a [u8])>,
    ) -> Result<u64> {
        let batches = extents::batches(extents, SEND_BATCH);
        for _ in 0..=MAX_RESENDS {
            let sends = batches.iter().map(|batch| {
                let (request, payload) = extents::to_request(h, batch.iter().copied());
                async move {
                    let (reply, _) = self
                        .pool()
                        .call_with_payload::<ops::GatherWrite>(
                            server_of(h),
                            self.cred,
                            &request,
                            payload,
                        )
                        .await?;
                    Ok::<u64, ShoalError>(reply.epoch)
                }
            });
            let epochs = futures::future::try_join_all(sends).await?;
            self.inner.gathering.count_sends(epochs.len() as u64);
            match epochs.split_first() {
                Some((first, rest)) if rest.iter().all(|e| e == first) => return Ok(*first),
                Some(_) => continue,
                None => return Err(ShoalError::invalid("a gather_write of nothing")),
            }
        }
        Err(lost_again(h))
    }

    /// Has the gathering server of `h` write out what it holds of the
    /// file, and with `durable` make it durable (then the copy goes); sends
    /// the copy again first whenever the server's epoch changed. Under the
    /// file's `gate`. Nothing to do if this client has nothing there (or,
    /// not `durable`, nothing readers do not see yet).
    pub(crate) async fn commit_gathered(
        &self,
        h: Handle,
        gate: &Gate,
        durable: bool,
    ) -> Result<()> {
        let buffer = &self.inner.gathering.buffer;
        for _ in 0..=MAX_RESENDS {
            let Some((cred, epoch)) = buffer.at_server_epoch(h, gate) else {
                return Ok(());
            };
            if !durable && !buffer.unpushed(h) {
                return Ok(());
            }
            let reply = self
                .pool()
                .call::<ops::GatherCommit>(
                    server_of(h),
                    cred,
                    &GatherCommitRequest { handle: h, durable },
                )
                .await;
            let now = match reply {
                Ok(r) => r.epoch,
                Err(e) => {
                    if durable {
                        buffer.committed(h, gate, None);
                    }
                    return Err(e);
                }
            };
            if now == epoch {
                match durable {
                    true => buffer.committed(h, gate, Some(now)),
                    false => buffer.pushed(h, gate, now),
                }
                return Ok(());
            }
            self.resend_to_gathering_server(h, gate).await?;
        }
        if durable {
            buffer.committed(h, gate, None);
        }
        Err(lost_again(h))
    }
}

fn lost_again(h: Handle) -> ShoalError {
    ShoalError::new(
        Errno::EIO,
        format!(
            "the gathering server of file {h:#x} lost its writes {} times in a row",
            MAX_RESENDS + 1
        ),
    )
}
