//! Split directories (`shoal_proto::partitions`, [Patil 2011]): the
//! partitions this client knows of each split directory, which one a name
//! goes to, and what a request does when a server says the client's map is
//! old (`Errno::MOVED`: learn and go on) or the partition is splitting
//! (`Errno::SPLITTING`: wait a moment).
//!
//! What the client knows of the partitions is `consistency::partition_maps`.

use std::future::Future;
use std::time::{Duration, Instant};

use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::handle::{server_of, Handle};
use shoal_proto::hints::XATTR_PREFIX;
use shoal_proto::msg::{
    CrDirEntRequest, CreateFileRequest, GetAttrRequest, LookupRequest, ObjectRecord,
    ReaddirRequest, RemoveXattrRequest, RmDirEntRequest, RmdirRequest, SetAttrBits, SetAttrRequest,
    SetXattrRequest,
};
use shoal_proto::partitions as parts;
use shoal_proto::{ops, Operation};

use crate::client::Client;

/// Redirects one request may follow: each is one split deeper.
const MAX_MOVES: usize = 2 * parts::MAX_DEPTH as usize;
/// The longest pause between asks of a splitting partition.
const MAX_PAUSE: Duration = Duration::from_millis(50);

/// A request about entries of a directory, sent to one of its partitions.
pub(crate) trait ToPartition: Clone {
    /// This request, for partition `p` (`dir` in the message).
    fn to_partition(&self, p: Handle) -> Self;
}

macro_rules! to_partition {
    ($($request:ty),*) => {
        $(impl ToPartition for $request {
            fn to_partition(&self, p: Handle) -> Self {
                Self { dir: p, ..self.clone() }
            }
        })*
    };
}

to_partition!(
    LookupRequest,
    CrDirEntRequest,
    RmDirEntRequest,
    CreateFileRequest,
    ReaddirRequest
);

impl Client {
    /// Sends `request` about entry `name` of `dir` to the name's partition
    /// ([`Client::in_partition`]).
    pub(crate) async fn call_in_partition<O>(
        &self,
        dir: Handle,
        name: &str,
        request: &O::Request,
    ) -> Result<O::Reply>
    where
        O: Operation,
        O::Request: ToPartition,
    {
        self.in_partition(dir, name, |to| {
            let request = request.to_partition(to);
            async move {
                self.pool()
                    .call::<O>(server_of(to), self.cred, &request)
                    .await
            }
        })
        .await
    }

    /// [`Client::call_in_partition`] to the partition `pick` says (a MOVED
    /// answer returned unless `follow_moves`), with the lease the answer
    /// offers.
    pub(crate) async fn call_leasing_routed<O>(
        &self,
        dir: Handle,
        pick: impl Fn() -> Handle,
        follow_moves: bool,
        request: &O::Request,
    ) -> Result<(O::Reply, Option<Instant>)>
    where
        O: Operation,
        O::Request: ToPartition,
    {
        self.retried(dir, pick, follow_moves, |to| {
            let request = request.to_partition(to);
            async move {
                self.pool()
                    .call_leasing::<O>(server_of(to), self.cred, &request)
                    .await
            }
        })
        .await
    }

    /// Runs `call` with the partition of `dir` that holds `name`: again with
    /// another when the server says the name moved, and again after a
    /// moment while the partition splits (at most `restart_wait_ms`, as for
    /// a server that restarts).
    pub(crate) async fn in_partition<T, F, Fut>(
        &self,
        dir: Handle,
        name: &str,
        call: F,
    ) -> Result<T>
    where
        F: Fn(Handle) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        self.retried(dir, || self.inner.partitions.route(dir, name), true, call)
            .await
    }

    /// [`Client::in_partition`] for a request to the partition `pick` says;
    /// a MOVED answer is followed if `follow_moves`, else returned.
    pub(crate) async fn retried<T, F, Fut>(
        &self,
        dir: Handle,
        pick: impl Fn() -> Handle,
        follow_moves: bool,
        call: F,
    ) -> Result<T>
    where
        F: Fn(Handle) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let give_up =
            Instant::now() + Duration::from_millis(self.config().settings.restart_wait_ms.into());
        let mut pause = Duration::from_millis(1);
        let mut moves = 0;
        loop {
            let to = pick();
            match call(to).await {
                Err(e) if e.errno == Errno::MOVED && !follow_moves => return Err(e),
                Err(e) if e.errno == Errno::MOVED && moves < MAX_MOVES => {
                    moves += 1;
                    self.learn_partitions(dir, to).await?;
                }
                Err(e) if e.errno == Errno::SPLITTING && Instant::now() < give_up => {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(MAX_PAUSE);
                }
                Err(e) if e.errno == Errno::MOVED || e.errno == Errno::SPLITTING => {
                    return Err(ShoalError::io(format!(
                        "directory {dir:#x}: no partition answered: {}",
                        e.message
                    )))
                }
                other => return other,
            }
        }
    }

    /// Reads the records of partition `asked` and of `dir` for what they
    /// say of `dir`'s partitions.
    pub(crate) async fn learn_partitions(&self, dir: Handle, asked: Handle) -> Result<()> {
        for h in [asked, dir] {
            let rec = self.partition_record(h).await?;
            self.inner.partitions.learn(dir, &rec);
            if h == dir {
                break;
            }
        }
        Ok(())
    }

    /// The record of directory (partition) `h`, from its server.
    async fn partition_record(&self, h: Handle) -> Result<ObjectRecord> {
        let reply = self
            .pool()
            .call::<ops::GetAttr>(server_of(h), self.cred, &GetAttrRequest { handle: h })
            .await?;
        reply
            .object
            .ok_or_else(|| ShoalError::io(format!("no record of directory {h:#x}")))
    }

    /// Every partition of directory `dir` as its record lists them now,
    /// itself first.
    async fn all_partitions(&self, dir: Handle) -> Result<Vec<Handle>> {
        let rec = self.partition_record(dir).await?;
        self.inner.partitions.learn(dir, &rec);
        let mut all = vec![dir];
        all.extend(rec.partitions.iter().filter(|p| **p != 0 && **p != dir));
        Ok(all)
    }

    /// After a setattr of directory `h` (now `rec`): a split directory's
    /// other partitions take its new mode and owner, which their servers
    /// check its entries' changes against. A crash in between leaves a
    /// partition with the old ones until the next setattr.
    pub(super) async fn set_partitions_attrs(
        &self,
        h: Handle,
        rec: &ObjectRecord,
        req: &SetAttrRequest,
    ) -> Result<()> {
        let owner_bits =
            SetAttrBits::SetMode as u32 | SetAttrBits::SetUid as u32 | SetAttrBits::SetGid as u32;
        if rec.partitions.is_empty() || req.mask & owner_bits == 0 {
            return Ok(());
        }
        self.inner.partitions.learn(h, rec);
        let request = SetAttrRequest {
            mask: req.mask & owner_bits,
            ..*req
        };
        for p in rec.partitions.iter().filter(|p| **p != 0 && **p != h) {
            let request = SetAttrRequest {
                handle: *p,
                ..request
            };
            self.pool()
                .call::<ops::SetAttr>(server_of(*p), self.cred, &request)
                .await?;
        }
        Ok(())
    }

    /// After a directory hint of `h` was set (`value`) or removed: a split
    /// directory's other partitions, which lay out the files made in them,
    /// take it too.
    pub(super) async fn hint_to_partitions(
        &self,
        h: Handle,
        name: &str,
        value: Option<&[u8]>,
    ) -> Result<()> {
        if !name.starts_with(XATTR_PREFIX) {
            return Ok(());
        }
        let rec = self.partition_record(h).await?;
        for p in rec.partitions.iter().filter(|p| **p != 0 && **p != h) {
            let done = match value {
                Some(value) => {
                    let request = SetXattrRequest {
                        handle: *p,
                        name: name.to_string(),
                        value: value.to_vec().into(),
                        ..Default::default()
                    };
                    self.pool()
                        .call::<ops::SetXattr>(server_of(*p), self.cred, &request)
                        .await
                        .map(|_| ())
                }
                None => {
                    let request = RemoveXattrRequest {
                        handle: *p,
                        name: name.to_string(),
                    };
                    let removed = self
                        .pool()
                        .call::<ops::RemoveXattr>(server_of(*p), self.cred, &request)
                        .await;
                    removed.map(|_| ()).or_else(|e| match e.errno {
                        Errno::ENODATA => Ok(()),
                        _ => Err(e),
                    })
                }
            };
            done?;
        }
        Ok(())
    }

    /// Marks directory `h` as being removed (it must be empty): one
    /// message, unless it is split (the server answers MOVED), when every
    /// other partition is marked first, its own record last. On a refusal
    /// the marks made are cleared. A partition split off meanwhile shows in
    /// the record read again.
    pub(super) async fn prepare_rmdir(&self, h: Handle) -> Result<()> {
        match self.mark_removing(h, h, false).await {
            Err(e) if e.errno == Errno::MOVED => {}
            done => return done,
        }
        let mut marked: Vec<Handle> = Vec::new();
        loop {
            let rec = self.partition_record(h).await?;
            self.inner.partitions.learn(h, &rec);
            let left: Vec<Handle> = rec
                .partitions
                .iter()
                .copied()
                .filter(|p| *p != 0 && *p != h && !marked.contains(p))
                .collect();
            let marking = match left.is_empty() {
                true => self.mark_removing(h, h, true).await,
                false => self.mark_all(h, &left, &mut marked).await,
            };
            match marking {
                Ok(()) if left.is_empty() => return Ok(()),
                Ok(()) => {}
                Err(e) => {
                    for m in &marked {
                        self.abort_rmdir_one(*m).await;
                    }
                    return Err(e);
                }
            }
        }
    }

    async fn mark_all(
        &self,
        h: Handle,
        partitions: &[Handle],
        marked: &mut Vec<Handle>,
    ) -> Result<()> {
        for p in partitions {
            self.mark_removing(h, *p, true).await?;
            marked.push(*p);
        }
        Ok(())
    }

    /// One RmdirPrepare of partition `p` of directory `h`, asked again while
    /// it splits.
    async fn mark_removing(&self, h: Handle, p: Handle, partitions_marked: bool) -> Result<()> {
        let request = RmdirRequest {
            dir: p,
            partitions_marked,
        };
        self.retried(
            h,
            || p,
            false,
            |to| {
                debug_assert_eq!(to, p);
                self.pool()
                    .call::<ops::RmdirPrepare>(server_of(p), self.cred, &request)
            },
        )
        .await
        .map(|_| ())
    }

    /// Clears the removal marks of every partition of directory `h`.
    pub(super) async fn abort_rmdir(&self, h: Handle) {
        let all = self
            .inner
            .partitions
            .known(h)
            .map(|k| k.into_iter().filter(|p| *p != 0).collect())
            .unwrap_or_else(|| vec![h]);
        for p in all {
            self.abort_rmdir_one(p).await;
        }
    }

    async fn abort_rmdir_one(&self, h: Handle) {
        if let Err(e) = self
            .pool()
            .call::<ops::RmdirAbort>(
                server_of(h),
                self.cred,
                &RmdirRequest {
                    dir: h,
                    ..Default::default()
                },
            )
            .await
        {
            tracing::warn!("could not clear the removal mark of {h:#x}: {e}");
        }
    }

    /// The partitions of directory `h` other than its own record, known
    /// after `prepare_rmdir`.
    pub(super) fn other_partitions(&self, h: Handle) -> Vec<Handle> {
        self.inner
            .partitions
            .known(h)
            .map(|k| k.into_iter().filter(|p| *p != 0 && *p != h).collect())
            .unwrap_or_default()
    }
}

impl Client {
    /// The records of every partition of directory `dir`, by index: one,
    /// its own, for a directory that is not split (`shoal stat --layout`).
    pub async fn dir_partitions(&self, dir: Handle) -> Result<Vec<ObjectRecord>> {
        let mut records = Vec::new();
        for p in self.all_partitions(dir).await? {
            records.push(self.partition_record(p).await?);
        }
        records.sort_by_key(|r| r.partition_index);
        Ok(records)
    }
}
