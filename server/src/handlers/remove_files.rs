//! Many unlinks in one directory in one transaction (`RemoveFiles`, beyond
//! the papers): what a directory delegation's holder sends of the unlinks
//! it answered itself (client/src/consistency/delegations.rs), as `CreateFiles`
//! is for its creates. Each name is removed as an `RmDirEnt` with
//! `must_not_be_dir` and `drop_local_link` removes it (and, if given, the
//! handle it must name as `expect_handle`), and refused alone;
//! all that are removed are one change: one apply, one commit, one reply
//! (stored whole in the reply cache, so a resend after a restart gets the
//! same answer for every name).

use std::collections::HashSet;

use shoal_proto::error::{Errno, ShoalError};
use shoal_proto::msg::*;
use shoal_proto::names::check_name;
use shoal_proto::{ops, ObjectKind};

use super::namespace::{changes_dir_in_memory, may_free_local_files, remove_entry};
use crate::auth::access::Owners;
use crate::auth::perms::{self, W, X};
use crate::delegations::Stop;
use crate::partitions;
use crate::request::{Request, Result};
use crate::service::{Reply, Service};

/// The most names one request may carry.
pub const MAX_NAMES: usize = 4096;

/// Whether the batch stays in memory (see `Service::stays_in_memory`): as
/// a single unlink, no file it removes may keep bytes in a local file.
pub fn removes_in_memory(s: &Service, r: &Request) -> bool {
    let Ok(q) = r.decode::<ops::RemoveFiles>() else {
        return true;
    };
    changes_dir_in_memory(s, r, q.dir)
        && !q.names.iter().any(|n| may_free_local_files(s, r, q.dir, n))
}

pub fn remove_files(
    s: &Service,
    r: &Request,
    q: RemoveFilesRequest,
) -> Result<Reply<RemoveFilesReply>> {
    if q.names.is_empty() || q.names.len() > MAX_NAMES {
        return Err(ShoalError::invalid(format!(
            "remove_files takes 1 to {MAX_NAMES} names, not {}",
            q.names.len()
        ))
        .into());
    }
    let names: Vec<&str> = q.names.iter().map(String::as_str).collect();
    let owners = Owners::prefetch(s, r, q.dir, &names)?;
    // Each name as an unlink of it alone would be.
    let single = RmDirEntRequest {
        dir: q.dir,
        must_not_be_dir: true,
        drop_local_link: s.config.settings.colocate,
        ..Default::default()
    };
    let ((reply, gone), syncs) = s.change(r, |txn| {
        let doing = format!("removing {} names", q.names.len());
        // The directory is read and checked once; each removal then
        // changes the record the next one starts from.
        let mut dir = s.meta.get_dir(r, q.dir)?;
        perms::require(&r.cred, &dir, W | X, &doing)?;
        for name in &q.names {
            partitions::check_name(s, &dir, name)?;
        }
        let mut given = HashSet::with_capacity(q.names.len());
        let mut files = Vec::with_capacity(q.names.len());
        let mut gone = Vec::new();
        if !q.expected.is_empty() && q.expected.len() != q.names.len() {
            return Err(ShoalError::invalid(format!(
                "remove_files: {} handles for {} names",
                q.expected.len(),
                q.names.len()
            ))
            .into());
        }
        for (i, name) in q.names.iter().enumerate() {
            let removed = check_name(name)
                .and_then(|()| match given.insert(name.as_str()) {
                    true => Ok(()),
                    false => Err(ShoalError::invalid(format!("{name:?} given twice"))),
                })
                .map_err(Stop::from)
                .and_then(|()| {
                    let (handle, kind) = s
                        .meta
                        .lookup(r, q.dir, name)?
                        .ok_or_else(|| ShoalError::not_found(name))?;
                    owners.check(s, r, &dir, handle, &format!("removing {name:?}"))?;
                    if q.expected.get(i).is_some_and(|&h| h != handle) {
                        return Err(ShoalError::new(
                            Errno::ESTALE,
                            format!("{name}: entry changed"),
                        )
                        .into());
                    }
                    if kind == ObjectKind::Directory {
                        return Err(ShoalError::new(
                            Errno::EISDIR,
                            format!("{name}: is a directory"),
                        )
                        .into());
                    }
                    Ok((handle, kind))
                });
            // A refusal is the name's own; a failure once its entry is
            // removed fails the whole batch (nothing applied), as it fails
            // an rmdirent.
            match removed.map(|object| remove_entry(s, r, txn, dir.clone(), name, object, &single))
            {
                Ok(done) => {
                    let (entry, freed) = done?;
                    dir = entry.dir.clone().expect("remove_entry gives the directory");
                    gone.extend(freed);
                    files.push(RemovedFile {
                        entry: Some(entry),
                        ..Default::default()
                    });
                }
                Err(stop) => {
                    // A delegation met is no refusal: it stops the batch.
                    let e = stop.refusal()?;
                    files.push(RemovedFile {
                        errno: e.errno.0,
                        error: e.message,
                        ..Default::default()
                    })
                }
            }
        }
        let reply = RemoveFilesReply {
            files,
            dir: Some(dir),
        };
        txn.record_reply(&reply);
        Ok((reply, gone))
    })?;
    s.data.remove_files(&gone)?;
    Ok(Reply::new(reply).with_syncs(syncs))
}
