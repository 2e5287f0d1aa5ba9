//! Link counts of objects that are not directories (ObjectRecord.links):
//! hard links count one before their entry is added, unlinks and renames
//! over an object uncount one after its entry is gone. So a crash between
//! the two steps leaves a count too high, which fsck sets right, and never
//! an entry that the count misses, which would let the object go while a
//! name still names it.

use shoal_proto::error::{Errno, ShoalError};
use shoal_proto::msg::*;
use shoal_proto::ObjectKind;

use crate::meta_store::{touch_ctime, Txn};
use crate::request::{Request, Result};
use crate::service::{Reply, Service};

/// Most names one object may have (as ext4).
pub const MAX_LINKS: u32 = 65_000;

/// What uncounting a link did.
pub(super) struct Dropped {
    /// The object as stored, unless it went: it had no link left and
    /// nobody asked to keep it.
    pub left: Option<ObjectRecord>,
    /// If removed: the file's datafiles still to remove on other servers.
    pub dist: Option<Distribution>,
    /// Deleted datafiles whose local files go once the transaction applied.
    pub gone: Vec<ObjectRecord>,
}

pub fn link(s: &Service, r: &Request, q: LinkRequest) -> Result<Reply<LinkReply>> {
    let ((reply, gone), syncs) = s.change(r, |txn| {
        let (reply, gone) = link_change(s, r, txn, q)?;
        txn.record_reply(&reply);
        Ok((reply, gone))
    })?;
    s.data.remove_files(&gone)?;
    Ok(Reply::new(reply).with_syncs(syncs))
}

/// What link request `r` changes (in `txn`), its reply, and the local
/// files of datafiles it deleted.
fn link_change(
    s: &Service,
    r: &Request,
    txn: &mut Txn,
    q: LinkRequest,
) -> Result<(LinkReply, Vec<ObjectRecord>)> {
    let rec = s.meta.get(r, q.handle)?;
    if let Some(count) = q.fsck_set {
        return Ok((
            LinkReply {
                object: Some(set_count(txn, rec, count)),
                ..Default::default()
            },
            Vec::new(),
        ));
    }
    if rec.kind() == ObjectKind::Directory {
        return Err(ShoalError::new(
            Errno::EPERM,
            format!(
                "{:#x} is a directory: directories have no hard links",
                q.handle
            ),
        )
        .into());
    }
    if !q.drop {
        return Ok((
            LinkReply {
                object: Some(count_link(txn, rec)?),
                ..Default::default()
            },
            Vec::new(),
        ));
    }
    let dropped = drop_link(s, txn, rec, q.keep_unlinked)?;
    Ok((
        LinkReply {
            removed: dropped.left.is_none(),
            object: dropped.left,
            dist: dropped.dist,
        },
        dropped.gone,
    ))
}

/// fsck's repair: `rec`'s count made `count`, the names fsck found (a
/// directory's subdirectories, anything else's entries).
fn set_count(txn: &mut Txn, mut rec: ObjectRecord, count: u32) -> ObjectRecord {
    if rec.kind() == ObjectKind::Directory {
        rec.subdirs = count.into();
    } else {
        rec.links = count;
    }
    txn.put_object(&rec);
    rec
}

/// Counts a new link of `rec` in `txn`; returns the record as stored.
fn count_link(txn: &mut Txn, mut rec: ObjectRecord) -> Result<ObjectRecord, ShoalError> {
    if rec.links == 0 {
        return Err(ShoalError::not_found(format!(
            "{:#x} (unlinked: no name left to link to)",
            rec.handle
        )));
    }
    if rec.links >= MAX_LINKS {
        return Err(ShoalError::new(
            Errno::EMLINK,
            format!("{:#x} has {MAX_LINKS} links already", rec.handle),
        ));
    }
    rec.links += 1;
    touch_ctime(&mut rec);
    txn.put_object(&rec);
    Ok(rec)
}

/// Uncounts a link of `rec` (not a directory) in `txn`, whose entry is
/// gone; removes the object with its last link unless `keep` (a client
/// holds it open and removes it at its last close).
pub(super) fn drop_link(
    s: &Service,
    txn: &mut Txn,
    mut rec: ObjectRecord,
    keep: bool,
) -> Result<Dropped, ShoalError> {
    debug_assert_ne!(rec.kind(), ObjectKind::Directory);
    rec.links = rec.links.saturating_sub(1);
    if rec.links > 0 || keep {
        touch_ctime(&mut rec);
        txn.put_object(&rec);
        return Ok(Dropped {
            left: Some(rec),
            dist: None,
            gone: Vec::new(),
        });
    }
    let (dist, gone) = s.meta.remove_object(txn, rec)?;
    Ok(Dropped {
        left: None,
        dist,
        gone,
    })
}
