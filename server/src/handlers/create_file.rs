//! The augmented create and unstuff ([Carns 2009], sections III.A and III.B).
//!
//! `CreateFile` does, on the server that will hold the metafile, the first
//! three steps of the baseline create in ONE transaction and ONE durable
//! commit: allocate the metafile, take the remote datafiles from the precreate
//! pools (its own datafile is created locally), set the distribution. The
//! client then adds the directory entry: 2 messages instead of n+3.
//!
//! With stuffing, a new file gets only its first datafile, local, and the
//! distribution says `stuffed` with the `width` it will have. `Unstuff` gives
//! it the remaining datafiles (from the pools, or created on the peers when
//! precreate is off); datafile 0 stays, so the first strip's bytes do not
//! move. It runs under the store lock and is idempotent, so concurrent
//! unstuffs of one file agree on one distribution.
//!
//! Colocated (`colocate`), the create names its directory, which lives here:
//! the directory's hints ([Kuhn 2008]) decide the layout, and in a no_metafile
//! directory the file is one local datafile named by the entry, made in the
//! same single step.

use shoal_proto::error::{Errno, ShoalError};
use shoal_proto::handle::server_of;
use shoal_proto::hints::{check_write_threshold, new_file, NewFile};
use shoal_proto::msg::*;
use shoal_proto::ops;
use shoal_proto::{Handle, ObjectKind};
use std::time::Instant;

use super::hints;
use crate::auth::caps;
use crate::auth::perms::{self, W, X};
use crate::meta_store::{new_attrs, Txn};
use crate::partitions;
use crate::pools::FILL_WAIT;
use crate::request::{Request, Result};
use crate::service::{require, Reply, Service};

/// Whether a request whose pools were emptied by others (between its refill
/// and its transaction) may refill and try again.
fn may_retry(started: Instant) -> bool {
    started.elapsed() < FILL_WAIT
}

/// The servers holding datafiles 1.. of a file of `width` whose metafile (and
/// datafile 0) live on this server: the next ones round the ring, as the
/// baseline create places them.
fn remote_servers(s: &Service, width: u32) -> Vec<u32> {
    let n = s.config.num_servers();
    (1..width).map(|i| (s.id + i) % n).collect()
}

fn new_datafile(s: &Service, txn: &mut Txn) -> Handle {
    let h = s.meta.alloc(txn);
    txn.insert_object(&ObjectRecord {
        handle: h,
        kind: ObjectKind::Datafile as i32,
        ..Default::default()
    });
    h
}

/// A new file's metafile record `handle` (allocated by the caller),
/// inserted: its first datafile made here, the rest `taken` from the pools
/// (none if `stuffed`).
#[allow(clippy::too_many_arguments)]
pub(super) fn new_metafile(
    s: &Service,
    txn: &mut Txn,
    handle: Handle,
    attrs: Attributes,
    parent: Handle,
    layout: &NewFile,
    stuffed: bool,
    taken: &[Handle],
) -> ObjectRecord {
    let mut datafiles = vec![new_datafile(s, txn)];
    datafiles.extend_from_slice(taken);
    let rec = ObjectRecord {
        handle,
        kind: ObjectKind::Metafile as i32,
        attrs: Some(attrs),
        mtime_set_ns: attrs.mtime_ns,
        parent,
        links: 1,
        dist: Some(Distribution {
            strip_size: layout.strip_size,
            datafiles,
            stuffed,
            width: layout.num_dfiles,
            write_threshold: layout.write_threshold,
        }),
        ..Default::default()
    };
    txn.insert_object(&rec);
    rec
}

/// A new file of a no_metafile directory ([Kuhn 2008]), `handle`
/// (allocated by the caller), inserted: one datafile that keeps the file's
/// attributes.
pub(super) fn new_lone_datafile(
    txn: &mut Txn,
    handle: Handle,
    attrs: Attributes,
    parent: Handle,
) -> ObjectRecord {
    let rec = ObjectRecord {
        handle,
        kind: ObjectKind::Datafile as i32,
        attrs: Some(attrs),
        mtime_set_ns: attrs.mtime_ns,
        parent,
        links: 1,
        ..Default::default()
    };
    txn.insert_object(&rec);
    rec
}

fn pools_empty_error(what: &str) -> ShoalError {
    ShoalError::new(
        Errno(libc::EAGAIN),
        format!("{what}: the precreate pools were emptied faster than they refill; try again"),
    )
}

/// Whether a create stays in memory (see `Service::stays_in_memory`): a
/// change answered before its sync that takes nothing from the precreate
/// pools (a stuffed file's one datafile is made here), since an empty pool
/// waits for another server to fill it.
pub fn creates_in_memory(s: &Service, r: &Request) -> bool {
    let Ok(q) = r.decode::<ops::CreateFile>() else {
        return true;
    };
    s.answers_before_sync(r) && q.stuffed
}

pub fn create_file(
    s: &Service,
    r: &Request,
    q: CreateFileRequest,
) -> Result<Reply<CreateFileReply>> {
    let settings = &s.config.settings;
    if q.dir != 0 {
        shoal_proto::names::check_name(&q.name)?;
    }
    // Colocated, the directory is here and its hints decide the layout; the
    // transaction checks that they did not change meanwhile.
    let under = match q.dir {
        0 => None,
        d => Some(hints::of(&s.meta.get_dir(r, d)?)),
    };
    let layout = match &under {
        Some(h) => new_file(h, &s.config),
        None => requested_layout(s, &q)?,
    };
    let mode = q.attrs.as_ref().map(|a| a.mode).unwrap_or(0o644);
    let attrs = new_attrs(mode, r.cred.uid, r.cred.gid);
    if let (true, Some(under)) = (layout.no_metafile, &under) {
        return create_without_metafile(s, r, &q, attrs, under);
    }
    if !(settings.stuffing && q.stuffed) {
        require(settings.precreate, "precreate")?;
    }
    // A one-datafile file is the same stuffed or not: make it plain.
    let stuffed = q.stuffed && layout.num_dfiles > 1;
    let remote = if stuffed {
        Vec::new()
    } else {
        remote_servers(s, layout.num_dfiles)
    };
    let started = Instant::now();
    while may_retry(started) {
        s.pools.ensure(r, &s.meta, &remote)?;
        let (made, syncs) = s.change(r, |txn| {
            // Colocate: the entry goes in the same step; check it first so a
            // refused name takes nothing from the pools.
            let dir = match &under {
                Some(under) => Some(entry_dir(s, r, q.dir, &q.name, under)?),
                None => None,
            };
            let Some(taken) = s.pools.take(&s.meta, txn, &remote)? else {
                return Ok(None);
            };
            let parent = if q.parent != 0 { q.parent } else { q.dir };
            let h = s.meta.alloc(txn);
            let rec = new_metafile(s, txn, h, attrs, parent, &layout, stuffed, &taken);
            let dir = dir.map(|dir| {
                txn.put_entry_to_new(q.dir, &q.name, rec.handle, ObjectKind::Metafile);
                txn.touch_dir(dir, Some(ObjectKind::Metafile), None)
            });
            let reply = CreateFileReply {
                cap: caps::grant(s, &r.cred, &rec),
                object: Some(rec),
                dir,
            };
            txn.record_reply(&reply);
            Ok(Some((reply, taken)))
        })?;
        if let Some((reply, taken)) = made {
            s.pools.taken(&taken);
            if let Some(dir) = &reply.dir {
                partitions::grown(s, dir);
            }
            if let Some(rec) = &reply.object {
                offer_new(s, r, rec);
            }
            return Ok(Reply::new(reply).with_syncs(syncs));
        }
    }
    Err(pools_empty_error("create").into())
}

/// The layout a create that is not colocated asks for (the client took it
/// from the directory's hints).
fn requested_layout(s: &Service, q: &CreateFileRequest) -> Result<NewFile, ShoalError> {
    let settings = &s.config.settings;
    let strip_size = match q.strip_size {
        0 => settings.strip_size,
        x => x,
    };
    if !(4096..=1 << 30).contains(&strip_size) {
        return Err(ShoalError::invalid(format!(
            "strip size {strip_size} must be between 4096 and 1 GiB"
        )));
    }
    let num_dfiles = match q.num_dfiles {
        0 => s.config.dfiles_per_file(),
        w => w.min(s.config.num_servers()),
    };
    if let Some(t) = q.write_threshold {
        check_write_threshold(t)?;
    }
    Ok(NewFile {
        no_metafile: false,
        strip_size,
        num_dfiles,
        write_threshold: q.write_threshold,
    })
}

/// A colocated create in a no_metafile directory ([Kuhn 2008]): one local
/// datafile that keeps the file's attributes, and the entry naming it, in
/// one step. No metafile, no pools.
fn create_without_metafile(
    s: &Service,
    r: &Request,
    q: &CreateFileRequest,
    attrs: Attributes,
    under: &DirHints,
) -> Result<Reply<CreateFileReply>> {
    let (reply, syncs) = s.change(r, |txn| {
        let dir = entry_dir(s, r, q.dir, &q.name, under)?;
        let h = s.meta.alloc(txn);
        let rec = new_lone_datafile(txn, h, attrs, q.dir);
        txn.put_entry_to_new(q.dir, &q.name, rec.handle, ObjectKind::Datafile);
        let reply = CreateFileReply {
            dir: Some(txn.touch_dir(dir, Some(ObjectKind::Datafile), None)),
            object: Some(rec),
            cap: None,
        };
        txn.record_reply(&reply);
        Ok(reply)
    })?;
    if let Some(dir) = &reply.dir {
        partitions::grown(s, dir);
    }
    if let Some(rec) = &reply.object {
        offer_new(s, r, rec);
    }
    Ok(Reply::new(reply).with_syncs(syncs))
}

/// Offers the creator (`r`'s client) a lease on the file it made and on
/// its datafiles that live here (a stuffed file's one datafile).
pub(super) fn offer_new(s: &Service, r: &Request, rec: &ObjectRecord) {
    r.offer(rec.handle, rec.handle);
    let datafiles = rec.dist.iter().flat_map(|d| &d.datafiles);
    for d in datafiles.filter(|d| server_of(**d) == s.id) {
        r.offer(*d, rec.handle);
    }
}

/// The directory `dir` (owned here) that a new entry `name` may go into:
/// the caller may write and search it, it is not being removed, it has no
/// entry of that name yet, and it still has the hints `under` the file was
/// laid out by.
fn entry_dir(
    s: &Service,
    r: &Request,
    dir: u64,
    name: &str,
    under: &DirHints,
) -> Result<ObjectRecord> {
    let rec = writable_dir(s, r, dir, name)?;
    partitions::check_name(s, &rec, name)?;
    hints::check_unchanged(&rec, under, name)?;
    name_free(s, r, dir, name)?;
    Ok(rec)
}

/// The directory `dir` (owned here) that new entries may go into: the
/// caller may write and search it, and it is not being removed (`what`:
/// the name or names, for the errors).
pub(super) fn writable_dir(s: &Service, r: &Request, dir: u64, what: &str) -> Result<ObjectRecord> {
    let rec = s.meta.get_dir(r, dir)?;
    perms::require(&r.cred, &rec, W | X, &format!("create {what:?}"))?;
    if rec.removing {
        return Err(ShoalError::not_found(format!("directory {dir:#x} (being removed)")).into());
    }
    Ok(rec)
}

/// EEXIST if `dir` has an entry `name` (read for `r`).
pub(super) fn name_free(s: &Service, r: &Request, dir: u64, name: &str) -> Result<()> {
    if s.meta.lookup(r, dir, name)?.is_some() {
        return Err(
            ShoalError::new(shoal_proto::Errno::EEXIST, format!("{name}: file exists")).into(),
        );
    }
    Ok(())
}

pub fn unstuff(s: &Service, r: &Request, q: UnstuffRequest) -> Result<Reply<UnstuffReply>> {
    let file = s.meta.get(r, q.handle)?;
    let dist = file_dist(q.handle, &file)?;
    let reply = |dist: Distribution| {
        let mut file = file.clone();
        file.dist = Some(dist.clone());
        Reply::new(UnstuffReply {
            cap: caps::grant(s, &r.cred, &file),
            dist: Some(dist),
        })
    };
    if perms::data_rights(&r.cred, &file) & shoal_proto::capability::WRITE == 0 {
        return Err(ShoalError::new(
            Errno::EACCES,
            format!(
                "unstuff of file {:#x}: uid {} may not write it",
                q.handle, r.cred.uid
            ),
        )
        .into());
    }
    if !dist.stuffed {
        return Ok(reply(dist));
    }
    let n = s.config.num_servers();
    let width = match dist.width {
        0 => s.config.dfiles_per_file(),
        w => w.min(n),
    };
    let remote = remote_servers(s, width);
    if s.config.settings.precreate {
        let started = Instant::now();
        while may_retry(started) {
            s.pools.ensure(r, &s.meta, &remote)?;
            let (done, syncs) = s.change(r, |txn| {
                let mut rec = s.meta.get(r, q.handle)?;
                let mut dist = rec.dist.clone().unwrap_or_default();
                if !dist.stuffed {
                    return Ok(Some((dist, Vec::new())));
                }
                let Some(taken) = s.pools.take(&s.meta, txn, &remote)? else {
                    return Ok(None);
                };
                dist.datafiles.truncate(1);
                dist.datafiles.extend_from_slice(&taken);
                dist.stuffed = false;
                dist.width = width;
                rec.dist = Some(dist.clone());
                txn.put_object(&rec);
                Ok(Some((dist, taken)))
            })?;
            if let Some((dist, taken)) = done {
                s.pools.taken(&taken);
                return Ok(reply(dist).with_syncs(syncs));
            }
        }
        return Err(pools_empty_error("unstuff").into());
    }
    // Without precreate: create the remote datafiles now, then set them
    // unless another unstuff got there first (then they are not needed).
    let created = s.pools.create_remote(r, &remote)?;
    shoal_proto::crash_point!(shoal_proto::crash_points::UNSTUFF_AFTER_CREATE);
    let ((dist, used), syncs) = s.change(r, |txn| {
        let mut rec = s.meta.get(r, q.handle)?;
        let mut dist = rec.dist.clone().unwrap_or_default();
        if !dist.stuffed {
            return Ok((dist, false));
        }
        dist.datafiles.truncate(1);
        dist.datafiles.extend_from_slice(&created);
        dist.stuffed = false;
        dist.width = width;
        rec.dist = Some(dist.clone());
        txn.put_object(&rec);
        Ok((dist, true))
    })?;
    if !used {
        s.pools.discard(created);
    }
    Ok(reply(dist).with_syncs(syncs))
}

/// The distribution of file `h`, whose record this server holds is `rec`.
fn file_dist(h: Handle, rec: &ObjectRecord) -> Result<Distribution, ShoalError> {
    if rec.kind() != ObjectKind::Metafile {
        return Err(ShoalError::new(
            if rec.kind() == ObjectKind::Directory {
                Errno::EISDIR
            } else {
                Errno::EINVAL
            },
            format!("object {h:#x} is not a regular file"),
        ));
    }
    rec.dist
        .clone()
        .filter(|d| !d.datafiles.is_empty())
        // A metafile made without its distribution (a create that died
        // half way) is the caller's mistake to name, not an I/O failure.
        .ok_or_else(|| ShoalError::invalid(format!("file {h:#x} has no distribution")))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;

    use crate::kv::MemEngine;
    use crate::pools::tests::config;
    use crate::service::Service;

    /// A create that waits for an empty pool's refill (a peer) leaves the
    /// commit queue's scheduling queue, so a request applied meanwhile syncs
    /// at once instead of being deferred behind it until the stall limit
    /// (the safety valve, counted in `commit_stalls`).
    #[test]
    fn a_create_waiting_for_a_refill_does_not_hold_back_other_commits() {
        use bytes::Bytes;
        use prost::Message;
        use shoal_proto::frame::Frame;
        use shoal_proto::msg::CreateFileRequest;
        use shoal_proto::{Cred, Op};
        use std::io::Read;

        // Server 1 is a peer that takes requests and never answers.
        let peer = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut config = config(2);
        config.servers[1].addr = peer.local_addr().unwrap();
        let (asked_tx, asked) = std::sync::mpsc::channel();
        let silent = std::thread::spawn(move || {
            let (mut conn, _) = peer.accept().unwrap();
            let mut byte = [0u8; 1];
            conn.read_exact(&mut byte).unwrap();
            asked_tx.send(()).unwrap();
            conn
        });
        let dir = tempfile::tempdir().unwrap();
        let s = Arc::new(
            Service::with_engine(config, 0, Arc::new(MemEngine::default()), dir.path()).unwrap(),
        );
        assert!(s.config.settings.coalescing && s.config.settings.precreate);
        assert_eq!(s.pools.count(1), 0);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let request =
            |op: Op, body: Vec<u8>| Frame::request(op, 1, Cred::ROOT, body.into(), Bytes::new());

        // A create of a two-datafile file: its pool for server 1 is empty,
        // so it waits on server 1.
        let create = request(
            Op::CreateFile,
            CreateFileRequest {
                num_dfiles: 2,
                ..Default::default()
            }
            .encode_to_vec(),
        );
        let waiting = rt.spawn_blocking({
            let s = s.clone();
            move || {
                let ticket = s.commit.schedule(Op::CreateFile);
                s.handle_scheduled(&create, ticket)
            }
        });
        asked.recv().unwrap();
        assert_eq!(s.commit.scheduled(), 0, "the waiting create left the queue");

        // Meanwhile another request changes metadata here.
        let other = request(
            Op::CreateDatafiles,
            shoal_proto::msg::CreateDatafilesRequest { count: 1 }.encode_to_vec(),
        );
        let reply = s.handle_scheduled(&other, s.commit.schedule(Op::CreateDatafiles));
        assert_eq!(reply.header.status, 0);
        assert_eq!(
            s.stats.commit_stalls.load(Ordering::Relaxed),
            0,
            "the request waited for the stall limit behind the create"
        );

        // The peer goes away: the create fails, clearly.
        drop(silent.join().unwrap());
        let failed = rt.block_on(waiting).unwrap();
        assert_ne!(failed.header.status, 0);
    }
}
