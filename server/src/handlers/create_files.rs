//! Many creates in one directory in one transaction (`CreateFiles`, beyond
//! the papers).
//!
//! A colocated create ([`super::create_file`]) is one message, one
//! transaction and one reply per file; what a server spends on each is
//! mostly the message and the transaction, not the file (a probe:
//! bench/results/changes.md). Here a client sends many names of
//! one directory at once. The directory is read and checked once; each name
//! is then made or refused on its own, so one name already taken does not
//! fail the others; and all that are made are one change: one apply, one
//! commit, one reply (stored whole in the reply cache, so a resend after a
//! restart gets the same answer for every name).
//!
//! Only files that take nothing from the precreate pools are made here
//! (stuffed, one datafile, or of a no_metafile directory): a pool emptied
//! halfway would leave a batch half made for a reason that is not the
//! names'. The layout is read in the batch's own transaction, so a hint
//! changed meanwhile cannot refuse it (a single create checks the hints it
//! was laid out by, and its client tries again).

use std::collections::HashSet;

use shoal_proto::error::{Errno, ShoalError};
use shoal_proto::hints::{new_file, NewFile};
use shoal_proto::msg::*;
use shoal_proto::names::check_name;
use shoal_proto::ObjectKind;

use super::create_file::{name_free, new_lone_datafile, new_metafile, offer_new, writable_dir};
use super::hints;
use crate::auth::caps;
use crate::delegations::Stop;
use crate::meta_store::new_attrs;
use crate::partitions;
use crate::request::{Request, Result};
use crate::service::{require, Reply, Service};

/// The most names one request may carry.
pub const MAX_NAMES: usize = 4096;

/// Whether the batch stays in memory (see `Service::stays_in_memory`): it
/// takes nothing from the pools, so only its sync could touch the disk.
pub fn creates_in_memory(s: &Service, r: &Request) -> bool {
    s.answers_before_sync(r)
}

pub fn create_files(
    s: &Service,
    r: &Request,
    q: CreateFilesRequest,
) -> Result<Reply<CreateFilesReply>> {
    if q.names.is_empty() || q.names.len() > MAX_NAMES {
        return Err(ShoalError::invalid(format!(
            "create_files takes 1 to {MAX_NAMES} names, not {}",
            q.names.len()
        ))
        .into());
    }
    let mode = q.attrs.as_ref().map(|a| a.mode).unwrap_or(0o644);
    let attrs = new_attrs(mode, r.cred.uid, r.cred.gid);
    let (reply, syncs) = s.change(r, |txn| {
        // The layout comes from the directory as this transaction reads it:
        // no hint can change in between.
        let mut dir = writable_dir(s, r, q.dir, &format!("{} names", q.names.len()))?;
        // A name of another partition sends the whole batch back, unmade.
        for name in &q.names {
            partitions::check_name(s, &dir, name)?;
        }
        let layout = new_file(&hints::of(&dir), &s.config);
        let stuffed = s.config.settings.stuffing && q.stuffed && layout.num_dfiles > 1;
        takes_nothing_from_the_pools(s, q.dir, &layout, stuffed)?;
        if !q.handles.is_empty() && q.handles.len() != q.names.len() {
            return Err(ShoalError::invalid(format!(
                "create_files: {} handles for {} names",
                q.handles.len(),
                q.names.len()
            ))
            .into());
        }
        let client = r.header.client.client;
        let mut given = HashSet::with_capacity(q.names.len());
        let mut handles_given = HashSet::with_capacity(q.handles.len());
        let mut files = Vec::with_capacity(q.names.len());
        for (i, name) in q.names.iter().enumerate() {
            let free = check_name(name)
                .map_err(Stop::from)
                .and_then(|()| name_free(s, r, q.dir, name))
                .and_then(|()| match given.insert(name.as_str()) {
                    true => Ok(()),
                    false => Err(ShoalError::invalid(format!("{name:?} given twice")).into()),
                })
                .and_then(|()| match q.handles.get(i) {
                    // A delegation's holder names the handle it answered with.
                    Some(&h) if !handles_given.insert(h) => {
                        Err(ShoalError::invalid(format!("handle {h:#x} given twice")).into())
                    }
                    Some(&h) => Ok(s.meta.alloc_given(txn, h, |h| {
                        s.meta.delegations.reserved_for(client, h)
                            || s.meta.from_before_this_start(h)
                    })?),
                    None => Ok(s.meta.alloc(txn)),
                });
            let h = match free {
                Ok(h) => h,
                Err(stop) => {
                    // A refused name is the name's own; a delegation met
                    // stops the whole batch.
                    let e = stop.refusal()?;
                    files.push(CreatedFile {
                        errno: e.errno.0,
                        error: e.message,
                        ..Default::default()
                    });
                    continue;
                }
            };
            let (rec, kind) = if layout.no_metafile {
                let rec = new_lone_datafile(txn, h, attrs, q.dir);
                (rec, ObjectKind::Datafile)
            } else {
                let rec = new_metafile(s, txn, h, attrs, q.dir, &layout, stuffed, &[]);
                (rec, ObjectKind::Metafile)
            };
            txn.put_entry_to_new(q.dir, name, rec.handle, kind);
            dir = txn.touch_dir(dir, Some(kind), None);
            files.push(CreatedFile {
                cap: (kind == ObjectKind::Metafile)
                    .then(|| caps::grant(s, &r.cred, &rec))
                    .flatten(),
                object: Some(rec),
                ..Default::default()
            });
        }
        let reply = CreateFilesReply {
            files,
            dir: Some(dir),
        };
        txn.record_reply(&reply);
        Ok(reply)
    })?;
    // Creates a holder sends because its delegation of the directory is
    // being recalled were answered by it under the delegation, and another
    // client wants the directory now: leasing the files to their maker
    // would have that client's unlink or write of each one wait for a
    // recall of its own (mdtest -N 1 removes every file another process
    // made). The maker drops the lease it noted under the delegation.
    if let Some(dir) = &reply.dir {
        partitions::grown(s, dir);
    }
    if !s.leases.recalling_delegation(q.dir, r.header.client.client) {
        for rec in reply.files.iter().filter_map(|f| f.object.as_ref()) {
            offer_new(s, r, rec);
        }
    }
    Ok(Reply::new(reply).with_syncs(syncs))
}

/// ENOTSUP unless the new files of directory `dir`, laid out as `layout`,
/// take nothing from the precreate pools: a no_metafile directory's, a
/// stuffed file's (one local datafile), or a one-datafile file's where
/// precreate is on (as a single create, which refuses it otherwise).
fn takes_nothing_from_the_pools(
    s: &Service,
    dir: u64,
    layout: &NewFile,
    stuffed: bool,
) -> Result<(), ShoalError> {
    if layout.no_metafile || stuffed {
        return Ok(());
    }
    require(s.config.settings.precreate, "precreate")?;
    if layout.num_dfiles == 1 {
        return Ok(());
    }
    Err(ShoalError::new(
        Errno::ENOTSUP,
        format!(
            "the files of directory {dir:#x} take datafiles from the precreate pools: \
             create them one by one"
        ),
    ))
}
