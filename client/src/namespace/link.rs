//! Hard links and the link count (ObjectRecord.links): a name counted
//! before its entry exists, uncounted after its entry is gone, so a crash in
//! between leaves a count one too high for fsck, never a name the count
//! misses.

use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::handle::{server_of, Handle};
use shoal_proto::msg::*;
use shoal_proto::names::check_name;
use shoal_proto::{crash_points, ops};

use crate::client::Client;
use crate::types::{Attr, Unlinked};

impl Client {
    /// Makes `new_dir/new_name` another name of `h` (a hard link; not of a
    /// directory, EPERM): the link is counted on `h`'s server, then the
    /// entry added (2 messages, and the attributes), so a crash in between
    /// leaves a count one too high for fsck, never a name the count misses.
    pub async fn link(&self, h: Handle, new_dir: Handle, new_name: &str) -> Result<Attr> {
        check_name(new_name)?;
        self.inner.delegated.not_made_here(h);
        let reply = self.count_link(h).await?;
        self.forget(h);
        let rec = reply
            .object
            .ok_or_else(|| ShoalError::protocol("link reply without the object"))?;
        shoal_proto::crash_point!(crash_points::LINK_BEFORE_ENTRY);
        if let Err(e) = self.add_entry(new_dir, new_name, h, rec.kind(), None).await {
            // An entry that may stand keeps its count: a count too high is
            // what fsck repairs, one too low would lose the file.
            if !e.may_have_been_applied() {
                self.uncount_link(h).await;
            }
            return Err(e);
        }
        self.getattr(h).await
    }

    /// Uncounts a link of `h`, whose entry is gone (an unlink, a rename
    /// over it); with its last link it goes, unless `keep` (see
    /// [`Client::unlink_keeping`]).
    pub(super) async fn drop_link(&self, h: Handle, keep: bool) -> Result<Unlinked> {
        let sent: Result<LinkReply> = self
            .pool()
            .call::<ops::Link>(
                server_of(h),
                self.cred,
                &LinkRequest {
                    handle: h,
                    drop: true,
                    keep_unlinked: keep,
                    ..Default::default()
                },
            )
            .await;
        self.forget(h);
        let reply = match sent {
            // Already gone (fsck reclaimed it): nothing left to do.
            Err(e) if e.errno == Errno::ENOENT => return Ok(Unlinked::Removed),
            r => r?,
        };
        if reply.removed {
            self.removed(h, reply.dist).await?;
            return Ok(Unlinked::Removed);
        }
        let links = reply.object.map_or(0, |o| o.links);
        Ok(Unlinked::left(h, links))
    }

    /// Counts a new link of `h` on its server, before the entry that is the
    /// new name exists.
    pub(super) async fn count_link(&self, h: Handle) -> Result<LinkReply> {
        self.pool()
            .call::<ops::Link>(
                server_of(h),
                self.cred,
                &LinkRequest {
                    handle: h,
                    ..Default::default()
                },
            )
            .await
    }

    /// Uncounts the link of `h` just counted, whose entry was refused
    /// (best effort: a count left one too high is fsck's).
    pub(super) async fn uncount_link(&self, h: Handle) {
        if let Err(undo) = self.drop_link(h, false).await {
            tracing::warn!("could not uncount the link of {h:#x} just counted: {undo}");
        }
    }
}
