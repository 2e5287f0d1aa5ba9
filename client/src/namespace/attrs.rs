//! Attributes: getattr (a file's size is computed from its datafiles), setattr,
//! extended attributes, capacity, layouts and server statistics.

use std::collections::BTreeMap;
use std::time::Instant;

use shoal_proto::dist;
use shoal_proto::error::{Result, ShoalError};
use shoal_proto::handle::{server_of, Handle};
use shoal_proto::msg::*;
use shoal_proto::{ops, ObjectKind};

use crate::client::Client;
use crate::types::{Attr, FileKind, Layout, SetAttr, SetTime, StatFs};

/// Fills a file's size and data times from its datafiles' sizes (`sizes` in
/// the order of the file's distribution `dist`). Shared by getattr and
/// readdirplus so both report exactly the same attributes.
fn apply_sizes(attr: &mut Attr, rec: &ObjectRecord, dist: &Distribution, sizes: &[DatafileSize]) {
    let strip_size = dist.strip_size;
    let locals: Vec<u64> = sizes.iter().map(|s| s.size).collect();
    attr.size = dist::file_size(strip_size.max(1), &locals);
    // Data written after mtime was last set explicitly (create or utimes) is
    // the newer mtime; a utimes after the write wins.
    let data_mtime = sizes.iter().map(|s| s.mtime_ns).max().unwrap_or(0);
    if data_mtime > rec.mtime_set_ns {
        attr.mtime_ns = data_mtime;
    }
    attr.ctime_ns = attr.ctime_ns.max(data_mtime);
}

impl Client {
    /// Attributes of `h` if the attribute cache holds them (no message).
    pub fn cached_attr(&self, h: Handle) -> Option<Attr> {
        self.inner.attrs.get(&h)
    }

    /// [`cached_attr`](Self::cached_attr) of each handle, index-aligned,
    /// under one lock: what a listing's batch may bring for free.
    pub fn cached_attrs<'a>(&self, hs: impl IntoIterator<Item = &'a Handle>) -> Vec<Option<Attr>> {
        self.inner.attrs.get_many(hs)
    }

    /// Attributes of `h`. For a file: one request to its metafile's server and
    /// one per server holding its datafiles (n+1 messages), unless cached.
    pub async fn getattr(&self, h: Handle) -> Result<Attr> {
        if let Some(a) = self.cached_attr(h) {
            return Ok(a);
        }
        let (reply, lease) = self
            .pool()
            .call_leasing::<ops::GetAttr>(server_of(h), self.cred, &GetAttrRequest { handle: h })
            .await?;
        self.remember_cap(reply.cap);
        let rec = reply
            .object
            .ok_or_else(|| ShoalError::protocol("getattr reply without an object"))?;
        self.attr_of(rec, &reply.sizes, lease).await
    }

    /// The attributes of the object `rec` (as its server sent it, leased
    /// until `lease` if it was), given the sizes of its datafiles on that
    /// server; caches them. A file whose datafiles all live there (a
    /// stuffed file) needs no other message.
    pub(crate) async fn attr_of(
        &self,
        rec: ObjectRecord,
        local: &[DatafileSize],
        lease: Option<Instant>,
    ) -> Result<Attr> {
        let found =
            |sizes: &[DatafileSize], d: Handle| sizes.iter().find(|s| s.handle == d).cloned();
        let (attr, lease) = match self.attr_with(&rec, |d| found(local, d))? {
            Some(attr) => (attr, lease),
            None => {
                let dist = rec.dist.clone().unwrap_or_default();
                let (sizes, sizes_lease) = self.datafile_sizes(&dist, rec.handle).await?;
                let attr = self.attr_with(&rec, |d| found(&sizes, d))?.ok_or_else(|| {
                    ShoalError::io(format!("no size for a datafile of {:#x}", rec.handle))
                })?;
                (
                    attr,
                    crate::consistency::lease_ledger::both(lease, sizes_lease),
                )
            }
        };
        self.inner.attrs.put_leased(rec.handle, attr.clone(), lease);
        self.inner.leases.note(rec.handle, lease);
        self.inner.undo_if_recalled([(rec.handle, lease)]);
        Ok(attr)
    }

    /// An object's attributes from its record and its datafiles' sizes
    /// (`size_of`), or None if a datafile's size is missing. Remembers a
    /// file's distribution and a directory's hints. Shared by getattr, lookup
    /// and readdirplus so that all report exactly the same attributes.
    ///
    /// A file without a metafile (no_metafile, [Kuhn 2008]) is its datafile's
    /// record, which carries the file's own attributes and, as its server
    /// sends it, its size: nothing else to ask.
    pub(crate) fn attr_with(
        &self,
        rec: &ObjectRecord,
        size_of: impl Fn(Handle) -> Option<DatafileSize>,
    ) -> Result<Option<Attr>> {
        let Some((attr, dist)) = self.attr_and_dist(rec, size_of)? else {
            return Ok(None);
        };
        if let Some(dist) = dist {
            self.inner.dists.put(rec.handle, dist);
        }
        Ok(Some(attr))
    }

    /// [`attr_with`](Self::attr_with) leaving a file's distribution to the
    /// caller to remember (readdirplus remembers a batch's at once).
    pub(crate) fn attr_and_dist(
        &self,
        rec: &ObjectRecord,
        size_of: impl Fn(Handle) -> Option<DatafileSize>,
    ) -> Result<Option<(Attr, Option<Distribution>)>> {
        let h = rec.handle;
        let kind = FileKind::from_object(rec.kind()).ok_or_else(|| {
            ShoalError::invalid(format!("object {h:#x} is not a file, directory or symlink"))
        })?;
        let mut attr = Attr::from_record(rec, kind);
        let dist = match rec.kind() {
            ObjectKind::Datafile => {
                let own = DatafileSize {
                    handle: h,
                    size: rec.size,
                    mtime_ns: rec.data_mtime_ns,
                };
                let dist = Distribution::single(h);
                apply_sizes(&mut attr, rec, &dist, &[own]);
                Some(dist)
            }
            ObjectKind::Metafile => {
                let dist = rec.dist.clone().unwrap_or_default();
                let Some(sizes) = dist
                    .datafiles
                    .iter()
                    .map(|d| size_of(*d))
                    .collect::<Option<Vec<_>>>()
                else {
                    return Ok(None);
                };
                apply_sizes(&mut attr, rec, &dist, &sizes);
                Some(dist)
            }
            _ => {
                self.remember_hints(rec);
                self.inner.known_dirs.seen(rec, self.cred);
                None
            }
        };
        if let Some(end) = self.buffered_end(h) {
            // Writes this client buffered or put behind make the file
            // longer than its servers know yet.
            attr.size = attr.size.max(end);
        }
        Ok(Some((attr, dist)))
    }

    /// Caches a directory's record as the reply to a change of its entries
    /// sent at `asked` returned it (its new mtime, its hints), so nobody
    /// has to ask for it again.
    pub(crate) fn refresh_dir(&self, rec: Option<ObjectRecord>, asked: Instant) {
        if let Some(rec) = rec.filter(|r| r.kind() == ObjectKind::Directory) {
            self.remember_hints(&rec);
            // A change keeps its client's own lease on the directory.
            let lease = self.inner.leases.until(rec.handle);
            let attr = Attr::from_record(&rec, FileKind::Directory);
            self.inner.attrs.put_leased(rec.handle, attr, lease);
            self.inner.undo_if_recalled_after(rec.handle, asked);
        }
    }

    pub(crate) async fn get_record(&self, h: Handle) -> Result<ObjectRecord> {
        let reply: GetAttrReply = self
            .pool()
            .call::<ops::GetAttr>(server_of(h), self.cred, &GetAttrRequest { handle: h })
            .await?;
        self.remember_cap(reply.cap);
        reply
            .object
            .ok_or_else(|| ShoalError::protocol("getattr reply without an object"))
    }

    /// Sizes of the datafiles of `file`'s distribution `dist`, in
    /// distribution order: one request per server holding some of them, all
    /// in parallel; and until when every one of those servers leased them.
    pub(crate) async fn datafile_sizes(
        &self,
        dist: &Distribution,
        file: Handle,
    ) -> Result<(Vec<DatafileSize>, Option<Instant>)> {
        let mut by_server: BTreeMap<u32, Vec<Handle>> = BTreeMap::new();
        for h in &dist.datafiles {
            by_server.entry(server_of(*h)).or_default().push(*h);
        }
        let replies = futures::future::try_join_all(by_server.into_iter().map(
            |(server, handles)| async move {
                let request = GetSizesRequest { handles, file };
                let (reply, lease) = self
                    .pool()
                    .call_leasing::<ops::GetSizes>(server, self.cred, &request)
                    .await?;
                Ok::<_, ShoalError>((reply.sizes, lease))
            },
        ))
        .await?;
        let lease = replies
            .iter()
            .map(|(_, lease)| *lease)
            .reduce(crate::consistency::lease_ledger::both)
            .flatten();
        let found: BTreeMap<Handle, DatafileSize> = replies
            .into_iter()
            .flat_map(|(sizes, _)| sizes)
            .map(|s| (s.handle, s))
            .collect();
        let sizes = dist
            .datafiles
            .iter()
            .map(|h| {
                found
                    .get(h)
                    .cloned()
                    .ok_or_else(|| ShoalError::io(format!("no size for datafile {h:#x}")))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((sizes, lease))
    }

    /// The distribution of file `h` (cached: see `DistCache` for how long).
    pub async fn distribution(&self, h: Handle) -> Result<Distribution> {
        if let Some(d) = self.inner.dists.get(&h) {
            return Ok(d);
        }
        // A file whose create was answered here is not on its server until
        // the create is sent, and the reply to that brings its layout: the
        // fence would send it before asking anyway, so send it first and
        // ask only if the reply did not say.
        if self.inner.delegated.unsettled() {
            self.settle_unsent_changes().await;
            if let Some(d) = self.inner.dists.get(&h) {
                return Ok(d);
            }
        }
        self.fresh_distribution(h).await
    }

    /// Where file `h`'s bytes live: its strip size and datafiles.
    pub async fn layout(&self, h: Handle) -> Result<Layout> {
        // A write of this client's in flight may be the one that unstuffs
        // the file: the layout is the one after it.
        self.inner.write_behind.settle(h).await;
        let dist = self.distribution(h).await?;
        Ok(Layout {
            strip_size: dist.strip_size,
            datafiles: dist.datafiles.iter().map(|d| (*d, server_of(*d))).collect(),
            no_metafile: dist.is_single(h),
        })
    }

    /// Changes attributes; a size change truncates or extends the file.
    /// A change of mode or owner drops this caller's capability for the
    /// file, so that its next data request has the rights the new mode
    /// gives.
    pub async fn setattr(&self, h: Handle, set: &SetAttr) -> Result<Attr> {
        self.stop_answering(h);
        if set.uid.is_some() || set.gid.is_some() {
            // A file made here whose owner changes may not be this
            // client's to unlink any more (a sticky directory).
            self.inner.delegated.not_made_here(h);
        }
        // No write in flight may land after a time set here.
        self.inner.write_behind.settle(h).await;
        self.settle(h, crate::data::write::Settle::Push).await?;
        if let Some(size) = set.size {
            self.truncate(h, size).await?;
        }
        let at = |t: Option<SetTime>| match t {
            Some(SetTime::At(ns)) => ns,
            _ => 0,
        };
        let req = SetAttrRequest {
            handle: h,
            mask: [
                (set.mode.is_some(), SetAttrBits::SetMode),
                (set.uid.is_some(), SetAttrBits::SetUid),
                (set.gid.is_some(), SetAttrBits::SetGid),
                (
                    matches!(set.atime, Some(SetTime::At(_))),
                    SetAttrBits::SetAtime,
                ),
                (
                    matches!(set.mtime, Some(SetTime::At(_))),
                    SetAttrBits::SetMtime,
                ),
                (set.atime == Some(SetTime::Now), SetAttrBits::SetAtimeNow),
                (set.mtime == Some(SetTime::Now), SetAttrBits::SetMtimeNow),
            ]
            .into_iter()
            .filter(|(on, _)| *on)
            .fold(0, |mask, (_, bit)| mask | bit as u32),
            mode: set.mode.unwrap_or(0),
            uid: set.uid.unwrap_or(0),
            gid: set.gid.unwrap_or(0),
            atime_ns: at(set.atime),
            mtime_ns: at(set.mtime),
        };
        if req.mask != 0 {
            let reply: SetAttrReply = self
                .pool()
                .call::<ops::SetAttr>(server_of(h), self.cred, &req)
                .await?;
            if let Some(rec) = reply.object {
                self.set_partitions_attrs(h, &rec, &req).await?;
            }
        }
        if set.mode.is_some() || set.uid.is_some() || set.gid.is_some() {
            self.inner.caps.remove(&(h, self.cred));
            // Names under a directory are cached per caller, each checked
            // against the old mode when it was looked up: a new mode or
            // owner may take search away.
            self.inner.names.remove_dir(h);
        }
        self.inner.changed_here(h);
        self.forget(h);
        self.getattr(h).await
    }

    pub async fn setxattr(
        &self,
        h: Handle,
        name: &str,
        value: &[u8],
        create_only: bool,
        replace_only: bool,
    ) -> Result<()> {
        self.stop_answering(h);
        if let Some(done) = self.threshold_xattr(h, name, Some(value)).await {
            return done;
        }
        self.pool()
            .call::<ops::SetXattr>(
                server_of(h),
                self.cred,
                &SetXattrRequest {
                    handle: h,
                    name: name.to_string(),
                    value: value.to_vec().into(),
                    create_only,
                    replace_only,
                },
            )
            .await?;
        self.hint_xattr_changed(h, name, Some(value));
        self.hint_to_partitions(h, name, Some(value)).await
    }

    pub async fn getxattr(&self, h: Handle, name: &str) -> Result<Vec<u8>> {
        if let Some(value) = self.threshold_xattr_value(h, name).await {
            return Ok(value);
        }
        let reply: GetXattrReply = self
            .pool()
            .call::<ops::GetXattr>(
                server_of(h),
                self.cred,
                &GetXattrRequest {
                    handle: h,
                    name: name.to_string(),
                },
            )
            .await?;
        Ok(reply.value.to_vec())
    }

    pub async fn listxattr(&self, h: Handle) -> Result<Vec<String>> {
        let reply: ListXattrReply = self
            .pool()
            .call::<ops::ListXattr>(server_of(h), self.cred, &ListXattrRequest { handle: h })
            .await?;
        Ok(reply.names)
    }

    pub async fn removexattr(&self, h: Handle, name: &str) -> Result<()> {
        self.stop_answering(h);
        if let Some(done) = self.threshold_xattr(h, name, None).await {
            return done;
        }
        self.pool()
            .call::<ops::RemoveXattr>(
                server_of(h),
                self.cred,
                &RemoveXattrRequest {
                    handle: h,
                    name: name.to_string(),
                },
            )
            .await?;
        self.hint_xattr_changed(h, name, None);
        self.hint_to_partitions(h, name, None).await
    }

    /// Capacity summed over every server.
    pub async fn statfs(&self) -> Result<StatFs> {
        let replies = futures::future::try_join_all((0..self.num_servers()).map(|s| async move {
            self.pool()
                .call::<ops::Statfs>(s, self.cred, &Empty {})
                .await
        }))
        .await?;
        Ok(replies.iter().fold(
            StatFs {
                servers: self.num_servers(),
                ..Default::default()
            },
            |mut t, r| {
                t.total_bytes += r.total_bytes;
                t.free_bytes += r.free_bytes;
                t.avail_bytes += r.avail_bytes;
                t.objects += r.objects;
                t
            },
        ))
    }

    /// Per-operation counters of `server`.
    pub async fn server_stats(&self, server: u32) -> Result<StatsReply> {
        self.pool()
            .call::<ops::Stats>(server, self.cred, &Empty {})
            .await
    }
}
