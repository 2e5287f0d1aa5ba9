//! Split directories on this server (GIGA+ [Patil 2011]; the arithmetic is
//! `shoal_proto::partitions`): which names a partition answers for, and the
//! split that hands half of a partition's entries to a new partition on
//! another server.
//!
//! A split of partition `X` (index `i`, depth `d`) into `i + 2^d`:
//!
//! 1. Freeze: one transaction sets `X.split_pending`, durably, and recalls
//!    every lease on `X`. From then on `X` answers nothing about its
//!    entries (`Errno::SPLITTING`: the client asks again in a moment), and
//!    none of them changes.
//! 2. The entries whose hash has bit `d` set go to the new partition's
//!    server (`PutPartition`), which makes the partition and stores them
//!    durably.
//! 3. The directory's record, if `X` is not it, lists the new partition
//!    (`AddPartition`), durably.
//! 4. One transaction here deletes the moved entries, deepens `X` and
//!    lists the new partition among those split from it, clearing
//!    `split_pending`: `X` answers again, `Errno::MOVED` for the names
//!    that left.
//!
//! An entry therefore always has a partition that answers for it. A crash
//! before step 4 leaves `split_pending` set: the first request that meets
//! it queues the split again, and steps 2 and 3, done again, change nothing
//! twice. A directory delegated to a client does not split (its creates
//! come from that client, many to a message), and a split one is never
//! delegated (`delegate_dir`).

use std::sync::Arc;
use std::time::Duration;

use shoal_proto::error::{Errno, ShoalError};
use shoal_proto::handle::{self, Handle};
use shoal_proto::msg::{
    AddPartitionRequest, DirEntry, Empty, ObjectRecord, PutPartitionReply, PutPartitionRequest,
};
use shoal_proto::partitions::{self as parts, name_hash};
use shoal_proto::{ops, ObjectKind};

use crate::delegations::ServerItself;
use crate::keys;
use crate::request::{Request, Result};
use crate::service::{Reply, Service};

/// Entries one `PutPartition` carries.
const MOVE_BATCH: usize = 4096;
/// How long a peer may take over one step of a split.
const PEER_WAIT: Duration = Duration::from_secs(30);
/// How long a failed split waits before it is tried again.
const RETRY: Duration = Duration::from_secs(1);

/// The directory a partition's record belongs to (itself if unsplit).
pub fn directory_of(rec: &ObjectRecord) -> Handle {
    match rec.partition_of {
        0 => rec.handle,
        d => d,
    }
}

/// Ok if partition `dir` may answer about its entries as a whole (a
/// listing, an emptiness check): it is not splitting.
pub fn check_whole(s: &Service, dir: &ObjectRecord) -> Result<(), ShoalError> {
    if dir.split_pending != 0 {
        s.splits.queue(dir.handle);
        return Err(ShoalError::new(
            Errno::SPLITTING,
            format!("directory {:#x} is splitting", directory_of(dir)),
        ));
    }
    Ok(())
}

/// Ok unless `dir` is a split directory's own record (MOVED: its client
/// did not know, and goes to the other partitions first).
pub fn check_unsplit(dir: &ObjectRecord) -> Result<(), ShoalError> {
    if dir.partitions.iter().any(|p| *p != 0 && *p != dir.handle) {
        return Err(ShoalError::new(
            Errno::MOVED,
            format!("directory {:#x} is split", dir.handle),
        ));
    }
    Ok(())
}

/// Ok if partition `dir` answers for `name`: it is not splitting, and the
/// name's hash falls in its range.
pub fn check_name(s: &Service, dir: &ObjectRecord, name: &str) -> Result<(), ShoalError> {
    check_whole(s, dir)?;
    // Depth 0 (a directory not split) holds every name: no hash needed.
    if dir.partition_depth > 0
        && !parts::holds(dir.partition_index, dir.partition_depth, name_hash(name))
    {
        return Err(ShoalError::new(
            Errno::MOVED,
            format!(
                "{name:?} is in another partition of directory {:#x}",
                directory_of(dir)
            ),
        ));
    }
    Ok(())
}

/// Directory (partition) `dir` for a request about its entry `name`.
pub fn dir_holding(s: &Service, r: &Request, dir: Handle, name: &str) -> Result<ObjectRecord> {
    let rec = s.meta.get_dir(r, dir)?;
    check_name(s, &rec, name)?;
    Ok(rec)
}

/// An entry was not found in partition `dir` as read at first (`before`):
/// if a split moved entries out meanwhile, the answer is the split's.
pub fn not_found_after(s: &Service, r: &Request, before: &ObjectRecord, name: &str) -> Result<()> {
    if !may_split(s, before) {
        return Ok(());
    }
    let now = s.meta.get_dir(r, before.handle)?;
    if (now.partition_depth, now.split_pending) != (before.partition_depth, before.split_pending) {
        check_name(s, &now, name)?;
    }
    Ok(())
}

/// A listing of partition `dir` read before (`before`) and after its
/// entries: a split in between answers SPLITTING, and the client asks again.
pub fn listed_whole(s: &Service, r: &Request, before: &ObjectRecord) -> Result<()> {
    if !may_split(s, before) {
        return Ok(());
    }
    let now = s.meta.get_dir(r, before.handle)?;
    if (now.partition_depth, now.split_pending) != (before.partition_depth, before.split_pending) {
        return Err(ShoalError::new(
            Errno::SPLITTING,
            format!("directory {:#x} split meanwhile", directory_of(before)),
        )
        .into());
    }
    Ok(())
}

/// Whether partition `dir`, as read, is or may become split: a directory
/// that never splits (the default) needs no second read of its record
/// around a lookup or a listing.
fn may_split(s: &Service, dir: &ObjectRecord) -> bool {
    dir.partition_depth > 0 || dir.split_pending != 0 || limit(s, dir) > 0
}

/// The entry limit past which partition `dir` splits (0: never): its
/// directory's hint, else the cluster's setting.
fn limit(s: &Service, dir: &ObjectRecord) -> u64 {
    let hint = dir.hints.as_ref().and_then(|h| h.split_entries);
    hint.unwrap_or(s.config.settings.split_entries)
}

/// After a change stored `dir` with more entries: queues a split if it has
/// grown past `split_entries` and may split.
pub fn grown(s: &Service, dir: &ObjectRecord) {
    let limit = limit(s, dir);
    if limit > 0
        && dir.entry_count > limit
        && dir.split_pending == 0
        && parts::split_off(dir.partition_index, dir.partition_depth, servers(s)).is_some()
    {
        s.splits.queue(dir.handle);
    }
}

fn servers(s: &Service) -> u32 {
    s.config.servers.len() as u32
}

/// Splits the partitions queued, one after another, for as long as the
/// server runs.
pub async fn split_loop(s: Arc<Service>) {
    loop {
        for dir in s.splits.next().await {
            if let Err(e) = split(&s, dir).await {
                tracing::warn!("split of directory partition {dir:#x}: {e}; trying again");
                let s = s.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(RETRY).await;
                    s.splits.queue(dir);
                });
            }
        }
    }
}

/// What a split moves, decided at its freeze.
struct Plan {
    /// The partition splitting, as frozen.
    rec: ObjectRecord,
    /// The new partition's index and server.
    index: u32,
    server: u32,
}

async fn split(s: &Arc<Service>, dir: Handle) -> Result<(), ShoalError> {
    let Some(plan) = blocking(s, move |s| freeze(s, dir)).await? else {
        return Ok(());
    };
    let home = directory_of(&plan.rec);
    let depth = plan.rec.partition_depth + 1;
    let moving = blocking(s, {
        let (index, depth) = (plan.index, depth);
        move |s| entries_moving(s, dir, index, depth)
    })
    .await?;
    let template = ObjectRecord {
        attrs: plan.rec.attrs,
        hints: plan.rec.hints.clone(),
        parent: plan.rec.parent,
        ..Default::default()
    };
    let mut made = 0;
    // The first call makes the partition even when nothing moves.
    for batch in moving
        .chunks(MOVE_BATCH)
        .chain(moving.is_empty().then_some(&[][..]))
    {
        let q = PutPartitionRequest {
            dir: home,
            index: plan.index,
            depth,
            template: Some(template.clone()),
            entries: batch.to_vec(),
        };
        let reply = s
            .pools
            .peers
            .call::<ops::PutPartition>(plan.server, &q, PEER_WAIT)
            .await?;
        made = reply.handle;
    }
    shoal_proto::crash_point!(shoal_proto::crash_points::SPLIT_AFTER_MOVE);
    if home != dir {
        let q = AddPartitionRequest {
            dir: home,
            index: plan.index,
            handle: made,
        };
        s.pools
            .peers
            .call::<ops::AddPartition>(handle::server_of(home), &q, PEER_WAIT)
            .await?;
    }
    blocking(s, move |s| finish(s, plan, made, moving)).await
}

/// Runs `f` on the blocking pool: the store's lock and syncs are no work
/// for the runtime's threads.
async fn blocking<T: Send + 'static>(
    s: &Arc<Service>,
    f: impl FnOnce(&Service) -> Result<T, ShoalError> + Send + 'static,
) -> Result<T, ShoalError> {
    let s = s.clone();
    tokio::task::spawn_blocking(move || f(&s))
        .await
        .map_err(|e| ShoalError::io(format!("split task: {e}")))?
}

/// Step 1: freezes partition `dir` if it still should split (or already
/// is, after a restart), and says what moves where.
fn freeze(s: &Service, dir: Handle) -> Result<Option<Plan>, ShoalError> {
    let mut frozen = None;
    s.change_itself(|txn| {
        let Some(mut rec) = s.meta.try_get(&ServerItself, dir)? else {
            return Ok(());
        };
        if rec.kind() != ObjectKind::Directory || rec.removing {
            return Ok(());
        }
        let index = match rec.split_pending {
            0 if rec.entry_count <= limit(s, &rec) || limit(s, &rec) == 0 => return Ok(()),
            // Its holder fills it alone: no split while it holds it.
            0 if s.meta.delegations.held_by(dir).is_some() => return Ok(()),
            0 => match parts::split_off(rec.partition_index, rec.partition_depth, servers(s)) {
                Some(index) => index,
                None => return Ok(()),
            },
            pending => pending,
        };
        if rec.split_pending == 0 {
            rec.split_pending = index;
            txn.put_object(&rec);
        }
        let server = parts::server_of(handle::server_of(directory_of(&rec)), index, servers(s));
        frozen = Some(Plan { rec, index, server });
        Ok(())
    })?;
    Ok(frozen)
}

/// Step 2's entries: those of `dir` that fall in partition `index` at `depth`.
fn entries_moving(
    s: &Service,
    dir: Handle,
    index: u32,
    depth: u32,
) -> Result<Vec<DirEntry>, ShoalError> {
    let mut moving = Vec::new();
    let mut after = String::new();
    loop {
        let (batch, done) = s.meta.readdir(&ServerItself, dir, &after, MOVE_BATCH)?;
        after = batch.last().map(|e| e.name.clone()).unwrap_or_default();
        moving.extend(
            batch
                .into_iter()
                .filter(|e| parts::holds(index, depth, name_hash(&e.name))),
        );
        if done {
            return Ok(moving);
        }
    }
}

/// Step 4: the moved entries leave `plan.rec`, which deepens and answers
/// again.
fn finish(s: &Service, plan: Plan, made: Handle, moved: Vec<DirEntry>) -> Result<(), ShoalError> {
    s.change_itself(|txn| {
        let mut rec = s.meta.get_dir(&ServerItself, plan.rec.handle)?;
        debug_assert_eq!(rec.split_pending, plan.index, "one split at a time");
        for e in &moved {
            txn.delete_entry(rec.handle, &e.name);
            let is_dir = e.kind == ObjectKind::Directory as i32;
            rec.subdirs = rec.subdirs.saturating_sub(u64::from(is_dir));
        }
        rec.entry_count = rec.entry_count.saturating_sub(moved.len() as u64);
        rec.partition_depth += 1;
        rec.split_pending = 0;
        set_partition(&mut rec, plan.index, made);
        txn.put_object(&rec);
        Ok(())
    })
}

/// Lists partition `index`, `handle` in `rec`'s partitions (the directory's
/// own record lists itself as partition 0).
fn set_partition(rec: &mut ObjectRecord, index: u32, handle: Handle) {
    let mut known = vec![0; index as usize + 1];
    if rec.partition_of == 0 {
        known[0] = rec.handle;
    }
    known[index as usize] = handle;
    parts::merge(&mut rec.partitions, &known);
}

/// `PutPartition`: makes partition `q.index` of `q.dir` here if there is
/// none, and adds the entries (those it has already stay).
pub fn put_partition(
    s: &Service,
    _r: &Request,
    q: PutPartitionRequest,
) -> Result<Reply<PutPartitionReply>> {
    let mut made = 0;
    s.change_itself(|txn| {
        let key = keys::partition(q.dir, q.index);
        let earlier = match s.meta.kv().get(&key)? {
            Some(v) => s.meta.try_get(&ServerItself, keys::decode_u64(&v))?,
            None => None,
        };
        let mut rec = match earlier {
            Some(rec) => rec,
            None => {
                let template = q.template.clone().unwrap_or_default();
                let rec = ObjectRecord {
                    handle: s.meta.alloc(txn),
                    kind: ObjectKind::Directory as i32,
                    attrs: template.attrs,
                    hints: template.hints,
                    parent: template.parent,
                    partition_of: q.dir,
                    partition_index: q.index,
                    partition_depth: q.depth,
                    ..Default::default()
                };
                txn.insert_object(&rec);
                txn.batch.put(key, keys::encode_u64(rec.handle));
                rec
            }
        };
        for e in &q.entries {
            if s.meta.lookup(&ServerItself, rec.handle, &e.name)?.is_none() {
                txn.put_entry(rec.handle, &e.name, e.handle, e.kind());
                rec.entry_count += 1;
                rec.subdirs += u64::from(e.kind() == ObjectKind::Directory);
            }
        }
        txn.put_object(&rec);
        made = rec.handle;
        Ok(())
    })?;
    Ok(Reply::new(PutPartitionReply { handle: made }))
}

/// `AddPartition`: the directory's record lists a new partition.
pub fn add_partition(s: &Service, _r: &Request, q: AddPartitionRequest) -> Result<Reply<Empty>> {
    s.change_itself(|txn| {
        let mut rec = s.meta.get_dir(&ServerItself, q.dir)?;
        set_partition(&mut rec, q.index, q.handle);
        txn.put_object(&rec);
        Ok(())
    })?;
    Ok(Reply::new(Empty {}))
}
