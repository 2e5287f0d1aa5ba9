//! Objects and directory entries: the baseline protocol's namespace steps, each
//! local to one server (create an object, add an entry, remove an entry, ...).
//! The client composes them; the ordering rules that keep a crash from leaving a
//! dangling entry live on the client side (objects before entries on create,
//! entries before objects on remove).
//!
//! Permissions are checked where the directory lives, on the steps that
//! touch its entries (lookup, readdir, adding, removing and renaming
//! entries; `perms`, `access`). The steps on objects alone (create an
//! object before its entry, remove it after, set a distribution) follow a
//! checked step of the same operation and check nothing themselves: the
//! trust model (README, "Permissions and users") trusts a client that holds
//! the cluster secret to compose them as the client library does.

use shoal_proto::error::{Errno, ShoalError};
use shoal_proto::handle;
use shoal_proto::msg::*;
use shoal_proto::names::check_name;
use shoal_proto::ops;
use shoal_proto::{Handle, ObjectKind};

use super::hints;
use super::links;
use crate::auth::access::{record_anywhere, Owners};
use crate::auth::caps;
use crate::auth::perms::{self, R, W, X};
use crate::meta_store::{new_attrs, touch_ctime, Txn};
use crate::partitions;
use crate::request::{Request, Result};
use crate::service::{Reply, Service};

/// Most datafiles one CreateDatafiles request may ask for.
const MAX_DATAFILES_PER_REQUEST: u32 = 4096;
/// Most entries one readdir reply carries.
const MAX_READDIR: u32 = 4096;

pub fn lookup(s: &Service, r: &Request, q: LookupRequest) -> Result<Reply<LookupReply>> {
    check_name(&q.name)?;
    let dir = partitions::dir_holding(s, r, q.dir, &q.name)?;
    perms::require(&r.cred, &dir, X, &format!("lookup of {:?}", q.name))?;
    let Some((handle, kind)) = s.meta.lookup(r, q.dir, &q.name)? else {
        partitions::not_found_after(s, r, &dir, &q.name)?;
        return Err(ShoalError::not_found(&q.name).into());
    };
    r.offer(q.dir, q.dir);
    let mut reply = LookupReply {
        handle,
        kind: kind as i32,
        ..Default::default()
    };
    if q.want_attrs && handle::server_of(handle) == s.id {
        // The entry is read without the store lock, so the object may have
        // gone since: then the client asks for it as it would have anyway.
        if let Some(rec) = s.meta.try_get(r, handle)? {
            let attrs = super::attrs::attributes(s, r, rec)?;
            reply.object = attrs.object;
            reply.sizes = attrs.sizes;
            reply.cap = attrs.cap;
        }
    }
    Ok(Reply::new(reply))
}

pub fn create_object(
    s: &Service,
    r: &Request,
    q: CreateObjectRequest,
) -> Result<Reply<CreateObjectReply>> {
    let kind = q.kind();
    let mode = q.attrs.as_ref().map(|a| a.mode).unwrap_or(0o644);
    let attrs = new_attrs(mode, r.cred.uid, r.cred.gid);
    let mut rec = ObjectRecord {
        kind: kind as i32,
        mtime_set_ns: attrs.mtime_ns,
        attrs: Some(attrs),
        // Counted before its entry exists (see ObjectRecord.links).
        links: u32::from(kind != ObjectKind::Directory),
        ..Default::default()
    };
    if q.parent != 0 || kind == ObjectKind::Directory {
        s.check_handle(q.parent)?;
        rec.parent = q.parent;
    }
    match kind {
        // A datafile made this way is a file of a no_metafile directory: it
        // keeps its own attributes, as no metafile holds them.
        ObjectKind::Metafile | ObjectKind::Datafile => {}
        ObjectKind::Directory => {
            rec.hints = q.hints;
            rec.entries_version = 1;
        }
        ObjectKind::Symlink => {
            if q.target.is_empty() || q.target.len() > shoal_proto::names::PATH_MAX {
                return Err(ShoalError::invalid("symlink target must be 1..4096 bytes").into());
            }
            rec.target = q.target;
            if let Some(a) = rec.attrs.as_mut() {
                a.mode = 0o777;
            }
        }
        ObjectKind::Fifo | ObjectKind::Socket => {}
        ObjectKind::CharDevice | ObjectKind::BlockDevice => rec.rdev = q.rdev,
        other => {
            return Err(
                ShoalError::invalid(format!("create_object cannot create a {other:?}")).into(),
            )
        }
    }
    let (reply, syncs) = s.change(r, |txn| {
        rec.handle = s.meta.alloc(txn);
        txn.insert_object(&rec);
        let reply = CreateObjectReply {
            handle: rec.handle,
            object: Some(rec),
        };
        txn.record_reply(&reply);
        Ok(reply)
    })?;
    r.offer(reply.handle, reply.handle);
    Ok(Reply::new(reply).with_syncs(syncs))
}

pub fn create_datafiles(
    s: &Service,
    r: &Request,
    q: CreateDatafilesRequest,
) -> Result<Reply<CreateDatafilesReply>> {
    if q.count == 0 || q.count > MAX_DATAFILES_PER_REQUEST {
        return Err(ShoalError::invalid(format!(
            "datafile count {} must be 1..={MAX_DATAFILES_PER_REQUEST}",
            q.count
        ))
        .into());
    }
    let (reply, syncs) = s.change(r, |txn| {
        let handles = (0..q.count)
            .map(|_| {
                let h = s.meta.alloc(txn);
                txn.insert_object(&ObjectRecord {
                    handle: h,
                    kind: ObjectKind::Datafile as i32,
                    // Creation time, so fsck can tell a datafile of a create
                    // still in flight from an orphan. data_mtime_ns stays 0:
                    // never written, no data change.
                    attrs: Some(new_attrs(0, 0, 0)),
                    ..Default::default()
                });
                h
            })
            .collect::<Vec<u64>>();
        let reply = CreateDatafilesReply { handles };
        txn.record_reply(&reply);
        Ok(reply)
    })?;
    Ok(Reply::new(reply).with_syncs(syncs))
}

pub fn set_dist(s: &Service, r: &Request, q: SetDistRequest) -> Result<Reply<SetDistReply>> {
    let dist = q
        .dist
        .ok_or_else(|| ShoalError::invalid("set_dist without a distribution"))?;
    if dist.strip_size == 0
        || dist.datafiles.is_empty()
        || dist.datafiles.len() > s.config.servers.len() * 64
    {
        return Err(ShoalError::invalid("set_dist: invalid distribution").into());
    }
    for h in &dist.datafiles {
        s.check_handle(*h)?;
    }
    if let Some(t) = dist.write_threshold {
        shoal_proto::hints::check_write_threshold(t)?;
    }
    let (reply, syncs) = s.change(r, |txn| {
        let mut rec = s.meta.get(r, q.handle)?;
        if rec.kind() != ObjectKind::Metafile {
            return Err(
                ShoalError::invalid(format!("object {:#x} is not a file", q.handle)).into(),
            );
        }
        // Its creator sets it, right after making the object: no one else
        // may point a file at other datafiles.
        let owner = rec.attrs.as_ref().map_or(0, |a| a.uid);
        if !r.cred.is_root() && r.cred.uid != owner {
            return Err(ShoalError::new(
                Errno::EPERM,
                format!("set_dist: {:#x} belongs to uid {owner}", q.handle),
            )
            .into());
        }
        rec.dist = Some(dist);
        txn.put_object(&rec);
        let reply = SetDistReply {
            cap: caps::grant(s, &r.cred, &rec),
        };
        txn.record_reply(&reply);
        Ok(reply)
    })?;
    Ok(Reply::new(reply).with_syncs(syncs))
}

/// POSIX rename rules for replacing an existing entry.
fn check_replace(new: ObjectKind, old: ObjectKind, name: &str) -> Result<(), ShoalError> {
    match (new == ObjectKind::Directory, old == ObjectKind::Directory) {
        (true, false) => Err(ShoalError::new(
            Errno::ENOTDIR,
            format!("{name}: not a directory"),
        )),
        (false, true) => Err(ShoalError::new(
            Errno::EISDIR,
            format!("{name}: is a directory"),
        )),
        _ => Ok(()),
    }
}

pub fn crdirent(s: &Service, r: &Request, q: CrDirEntRequest) -> Result<Reply<CrDirEntReply>> {
    check_name(&q.name)?;
    s.check_handle(q.handle)?;
    let kind = q.kind();
    // A DATAFILE entry is a file without a metafile (no_metafile).
    if !names_an_entry(kind) {
        return Err(ShoalError::invalid(
            "a directory entry must name a directory, file, symlink or special file",
        )
        .into());
    }
    let doing = format!("adding entry {:?}", q.name);
    let owners = Owners::prefetch(s, r, q.dir, &[&q.name])?;
    let (reply, syncs) = s.change(r, |txn| {
        let dir = partitions::dir_holding(s, r, q.dir, &q.name)?;
        perms::require(&r.cred, &dir, W | X, &doing)?;
        if dir.removing {
            return Err(
                ShoalError::not_found(format!("directory {:#x} (being removed)", q.dir)).into(),
            );
        }
        if let Some(under) = &q.created_under {
            hints::check_unchanged(&dir, under, &q.name)?;
        }
        let mut reply = CrDirEntReply::default();
        let mut replaced = None;
        if let Some((old, old_kind)) = s.meta.lookup(r, q.dir, &q.name)? {
            if !q.replace {
                return Err(
                    ShoalError::new(Errno::EEXIST, format!("{}: file exists", q.name)).into(),
                );
            }
            check_replace(kind, old_kind, &q.name)?;
            owners.check(s, r, &dir, old, &doing)?;
            reply.replaced_handle = old;
            reply.replaced_kind = old_kind as i32;
            replaced = Some(old_kind);
        }
        txn.put_entry(q.dir, &q.name, q.handle, kind);
        reply.dir = Some(txn.touch_dir(dir, Some(kind), replaced));
        txn.record_reply(&reply);
        Ok(reply)
    })?;
    if let Some(dir) = &reply.dir {
        partitions::grown(s, dir);
    }
    Ok(Reply::new(reply).with_syncs(syncs))
}

/// Whether a change to directory `dir`'s entries stays in memory (see
/// `Service::stays_in_memory`): a change answered before its sync, in a
/// directory whose sticky rule cannot send it to another server to learn
/// who owns an entry.
pub(super) fn changes_dir_in_memory(s: &Service, r: &Request, dir: Handle) -> bool {
    s.answers_before_sync(r) && !sticky_or_unknown(s, r, dir)
}

/// Whether adding an entry stays in memory.
pub fn adds_in_memory(s: &Service, r: &Request) -> bool {
    r.decode::<ops::CrDirEnt>()
        .map_or(true, |q| changes_dir_in_memory(s, r, q.dir))
}

/// Whether renaming an entry within its directory stays in memory.
pub fn renames_in_memory(s: &Service, r: &Request) -> bool {
    r.decode::<ops::RenameEntry>()
        .map_or(true, |q| changes_dir_in_memory(s, r, q.dir))
}

/// Whether removing an entry stays in memory: the object it unlinks must
/// keep no bytes in a local file, which would be deleted from the disk.
pub fn removes_in_memory(s: &Service, r: &Request) -> bool {
    let Ok(q) = r.decode::<ops::RmDirEnt>() else {
        return true;
    };
    if q.check_only || !changes_dir_in_memory(s, r, q.dir) {
        return false;
    }
    !q.drop_local_link || !may_free_local_files(s, r, q.dir, &q.name)
}

/// Whether the sticky rule applies to the caller in `dir`, or `dir` cannot
/// be read here (its handler then says why, wherever it runs).
fn sticky_or_unknown(s: &Service, r: &Request, dir: Handle) -> bool {
    !matches!(s.meta.try_get(r, dir), Ok(Some(d)) if !perms::sticky_applies(&r.cred, &d))
}

/// Whether removing entry `name` of `dir` could delete a local file: it
/// names an object of this server that keeps bytes in one. A failed read
/// counts as yes.
pub(super) fn may_free_local_files(s: &Service, r: &Request, dir: Handle, name: &str) -> bool {
    let handle = match s.meta.lookup(r, dir, name) {
        Ok(Some((h, _))) => h,
        Ok(None) => return false,
        Err(_) => return true,
    };
    if handle::server_of(handle) != s.id {
        return false;
    }
    match s.meta.try_get(r, handle) {
        Ok(Some(rec)) => s.data.keeps_local_files(&s.meta, &rec),
        Ok(None) => false,
        Err(_) => true,
    }
}

pub fn rmdirent(s: &Service, r: &Request, q: RmDirEntRequest) -> Result<Reply<RmDirEntReply>> {
    check_name(&q.name)?;
    if q.check_only {
        return check_move_out(s, r, &q);
    }
    let doing = format!("removing entry {:?}", q.name);
    let owners = Owners::prefetch(s, r, q.dir, &[&q.name])?;
    let (reply, syncs) = s.change(r, |txn| {
        let (dir, handle, kind) = entry_to_change(s, r, q.dir, &q.name, &doing)?;
        owners.check(s, r, &dir, handle, &doing)?;
        if q.expect_handle != 0 && q.expect_handle != handle {
            return Err(
                ShoalError::new(Errno::ESTALE, format!("{}: entry changed", q.name)).into(),
            );
        }
        let is_dir = kind == ObjectKind::Directory;
        if q.must_be_dir && !is_dir {
            return Err(
                ShoalError::new(Errno::ENOTDIR, format!("{}: not a directory", q.name)).into(),
            );
        }
        if q.must_not_be_dir && is_dir {
            return Err(
                ShoalError::new(Errno::EISDIR, format!("{}: is a directory", q.name)).into(),
            );
        }
        let (reply, gone) = remove_entry(s, r, txn, dir, &q.name, (handle, kind), &q)?;
        txn.record_reply(&reply);
        Ok((reply, gone))
    })?;
    let (reply, gone) = reply;
    s.data.remove_files(&gone)?;
    Ok(Reply::new(reply).with_syncs(syncs))
}

/// Removes entry `name` of directory `dir` (its record as the transaction
/// has it), which names `object`, for request `r`: with
/// `q.drop_local_link`, the object's link too if it lives here (with its
/// last link, the object). Returns the reply, whose `dir` is the
/// directory's new record, and the local files to delete once the
/// transaction is applied.
pub(super) fn remove_entry(
    s: &Service,
    r: &Request,
    txn: &mut Txn,
    dir: ObjectRecord,
    name: &str,
    (handle, kind): (Handle, ObjectKind),
    q: &RmDirEntRequest,
) -> Result<(RmDirEntReply, Vec<ObjectRecord>)> {
    txn.delete_entry(dir.handle, name);
    let mut reply = RmDirEntReply {
        handle,
        kind: kind as i32,
        dir: Some(txn.touch_dir(dir, None, Some(kind))),
        ..Default::default()
    };
    let mut gone = Vec::new();
    let is_dir = kind == ObjectKind::Directory;
    if q.drop_local_link && !is_dir && handle::server_of(handle) == s.id {
        if let Some(rec) = s.meta.try_get(r, handle)? {
            let dropped = links::drop_link(s, txn, rec, q.keep_unlinked)?;
            reply.dropped = true;
            reply.links = dropped.left.as_ref().map_or(0, |k| k.links);
            reply.removed = dropped.left.is_none();
            reply.dist = dropped.dist;
            gone = dropped.gone;
        }
    }
    Ok((reply, gone))
}

/// Directory `dir` and what its entry `name` names, for a request that
/// removes, renames or moves the entry: the caller must be able to write
/// and search the directory (`doing` says what it asked, for the refusal).
fn entry_to_change(
    s: &Service,
    r: &Request,
    dir: Handle,
    name: &str,
    doing: &str,
) -> Result<(ObjectRecord, Handle, ObjectKind)> {
    let rec = partitions::dir_holding(s, r, dir, name)?;
    perms::require(&r.cred, &rec, W | X, doing)?;
    let Some((h, kind)) = s.meta.lookup(r, dir, name)? else {
        partitions::not_found_after(s, r, &rec, name)?;
        return Err(ShoalError::not_found(name).into());
    };
    Ok((rec, h, kind))
}

/// The first step of a move to another directory (RmDirEnt with
/// `check_only`): whether the caller may take the entry out of `q.dir` (write
/// and search on it, the sticky rule), and for a directory, write permission
/// on it (its ".." changes). Nothing changes; the reply names the entry.
fn check_move_out(s: &Service, r: &Request, q: &RmDirEntRequest) -> Result<Reply<RmDirEntReply>> {
    let doing = format!("moving entry {:?}", q.name);
    let (dir, handle, kind) = entry_to_change(s, r, q.dir, &q.name, &doing)?;
    let is_dir = kind == ObjectKind::Directory;
    if is_dir || perms::sticky_applies(&r.cred, &dir) {
        let object = record_anywhere(s, r, handle)?;
        let owner = object.attrs.unwrap_or_default().uid;
        perms::check_sticky(&r.cred, &dir, owner, &doing)?;
        if is_dir {
            perms::require(&r.cred, &object, W, &doing)?;
        }
    }
    Ok(Reply::new(RmDirEntReply {
        handle,
        kind: kind as i32,
        ..Default::default()
    }))
}

pub fn rename_entry(
    s: &Service,
    r: &Request,
    q: RenameEntryRequest,
) -> Result<Reply<RenameEntryReply>> {
    check_name(&q.old_name)?;
    check_name(&q.new_name)?;
    let doing = format!("renaming {:?} to {:?}", q.old_name, q.new_name);
    let owners = Owners::prefetch(s, r, q.dir, &[&q.old_name, &q.new_name])?;
    let (reply, syncs) = s.change(r, |txn| {
        let (dir, h, kind) = entry_to_change(s, r, q.dir, &q.old_name, &doing)?;
        // Both names in this partition: the client renames across
        // partitions as across directories.
        partitions::check_name(s, &dir, &q.new_name)?;
        let mut reply = RenameEntryReply::default();
        if q.old_name == q.new_name {
            txn.record_reply(&reply);
            return Ok(reply);
        }
        let mut replaced = None;
        owners.check(s, r, &dir, h, &doing)?;
        if let Some((old, old_kind)) = s.meta.lookup(r, q.dir, &q.new_name)? {
            if q.no_replace {
                return Err(
                    ShoalError::new(Errno::EEXIST, format!("{}: file exists", q.new_name)).into(),
                );
            }
            check_replace(kind, old_kind, &q.new_name)?;
            owners.check(s, r, &dir, old, &doing)?;
            reply.replaced_handle = old;
            reply.replaced_kind = old_kind as i32;
            replaced = Some(old_kind);
        }
        txn.delete_entry(q.dir, &q.old_name);
        txn.put_entry(q.dir, &q.new_name, h, kind);
        txn.touch_dir(dir, None, replaced);
        if let Some(mut moved) = s.meta.try_get(r, h)? {
            touch_ctime(&mut moved);
            txn.put_object(&moved);
            reply.touched = true;
        }
        txn.record_reply(&reply);
        Ok(reply)
    })?;
    Ok(Reply::new(reply).with_syncs(syncs))
}

pub fn readdir(s: &Service, r: &Request, q: ReaddirRequest) -> Result<Reply<ReaddirReply>> {
    let dir = s.meta.get_dir(r, q.dir)?;
    partitions::check_whole(s, &dir)?;
    perms::require(&r.cred, &dir, R, "listing")?;
    let max = q.max.clamp(1, MAX_READDIR) as usize;
    let (entries, done) = s.meta.readdir(r, q.dir, &q.start_after, max)?;
    partitions::listed_whole(s, r, &dir)?;
    r.offer(q.dir, q.dir);
    Ok(Reply::new(ReaddirReply {
        entries,
        done,
        searchable: perms::allows(&r.cred, &dir, X),
        dir: q.with_dir.then_some(dir),
    }))
}

pub fn remove(s: &Service, r: &Request, q: RemoveRequest) -> Result<Reply<RemoveReply>> {
    if q.handle == handle::ROOT {
        return Err(ShoalError::new(Errno::EBUSY, "the root directory cannot be removed").into());
    }
    let ((reply, gone), syncs) = s.change(r, |txn| {
        let rec = s.meta.get(r, q.handle)?;
        let is_dir = rec.kind() == ObjectKind::Directory;
        let keep = if is_dir {
            q.expect_parent != 0 && !named_from(&rec, q.expect_parent)
        } else {
            q.unlinked_only && rec.links > 0
        };
        let (reply, gone) = if keep {
            let stays = RemoveReply {
                stays: true,
                ..Default::default()
            };
            (stays, Vec::new())
        } else {
            if is_dir && !s.meta.is_empty_dir(r, q.handle)? {
                return Err(ShoalError::new(Errno::ENOTEMPTY, "directory not empty").into());
            }
            let (dist, gone) = s.meta.remove_object(txn, rec)?;
            (RemoveReply { dist, stays: false }, gone)
        };
        txn.record_reply(&reply);
        Ok((reply, gone))
    })?;
    s.data.remove_files(&gone)?;
    Ok(Reply::new(reply).with_syncs(syncs))
}

/// Whether an entry of directory `dir` is a true name of the directory
/// `rec`: the one its `parent` says, or any if it does not say (a record
/// older than that field). The other entry of an interrupted move is not.
fn named_from(rec: &ObjectRecord, dir: shoal_proto::Handle) -> bool {
    rec.parent == 0 || rec.parent == dir
}

fn set_removing(s: &Service, r: &Request, q: RmdirRequest, removing: bool) -> Result<Reply<Empty>> {
    if q.dir == handle::ROOT {
        return Err(ShoalError::new(Errno::EBUSY, "the root directory cannot be removed").into());
    }
    let ((), syncs) = s.change(r, |txn| {
        let mut dir = s.meta.get_dir(r, q.dir)?;
        partitions::check_whole(s, &dir)?;
        if removing && !q.partitions_marked {
            partitions::check_unsplit(&dir)?;
        }
        if removing && !s.meta.is_empty_dir(r, q.dir)? {
            return Err(ShoalError::new(Errno::ENOTEMPTY, "directory not empty").into());
        }
        dir.removing = removing;
        txn.put_object(&dir);
        txn.record_reply(&Empty {});
        Ok(())
    })?;
    Ok(Reply::default().with_syncs(syncs))
}

pub fn rmdir_prepare(s: &Service, r: &Request, q: RmdirRequest) -> Result<Reply<Empty>> {
    set_removing(s, r, q, true)
}

pub fn rmdir_abort(s: &Service, r: &Request, q: RmdirRequest) -> Result<Reply<Empty>> {
    set_removing(s, r, q, false)
}

pub fn set_parent(s: &Service, r: &Request, q: SetParentRequest) -> Result<Reply<Empty>> {
    s.check_handle(q.parent)?;
    let ((), syncs) = s.change(r, |txn| {
        let mut rec = s.meta.get(r, q.dir)?;
        if rec.kind() == ObjectKind::Directory && rec.parent != q.parent {
            perms::require(&r.cred, &rec, W, "moving a directory to another parent")?;
        }
        if !names_an_entry(rec.kind()) {
            return Err(ShoalError::invalid(format!("object {:#x} has no parent", q.dir)).into());
        }
        rec.parent = q.parent;
        touch_ctime(&mut rec);
        txn.put_object(&rec);
        txn.record_reply(&Empty {});
        Ok(())
    })?;
    Ok(Reply::default().with_syncs(syncs))
}

/// Whether a directory entry may name an object of `kind`: a directory, a
/// file (a metafile, or a datafile without one: no_metafile), a symlink or a
/// special file.
pub(crate) fn names_an_entry(kind: ObjectKind) -> bool {
    !matches!(kind, ObjectKind::Unspecified)
}
