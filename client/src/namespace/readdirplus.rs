//! Readdirplus ([Carns 2009], section III-E): a directory listing with the
//! attributes of every entry, at the cost of a few messages per batch of
//! entries instead of a getattr (n+1 messages) per entry.
//!
//! One batch costs: one `Readdir` to the directory's server; one `ListAttr` to
//! each server holding some of the batch's objects (all in parallel), which
//! returns their records and the sizes of their datafiles that live on that
//! same server (a stuffed file's whole size); then one `GetSizes` to each
//! server holding datafiles whose sizes are still missing (striped files),
//! again in parallel. On N servers that is at most 1 + N + N messages per
//! batch, whatever the batch size.
//!
//! With the `readdirplus` switch off (or a server that answers ENOTSUP), the
//! attributes come from one getattr per entry: the baseline.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Instant;

use futures::StreamExt;
use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::handle::{server_of, Handle};
use shoal_proto::msg::*;
use shoal_proto::{ops, ObjectKind};

use crate::client::Client;
use crate::types::{Attr, DirEntry};

/// Most handles in one ListAttr request (the servers' limit).
const MAX_LISTATTR_HANDLES: usize = 16384;
/// Getattrs in flight at once when attributes are fetched one entry at a time.
const GETATTR_CONCURRENCY: usize = 64;

/// Records and local datafile sizes gathered from the ListAttr round.
#[derive(Default)]
struct Gathered {
    records: HashMap<Handle, ObjectRecord>,
    sizes: HashMap<Handle, DatafileSize>,
    /// Until when each record's server leased it (and the sizes it sent).
    leases: HashMap<Handle, Instant>,
}

/// An object removed since its entry was read.
fn is_gone(e: &ShoalError) -> bool {
    e.errno == Errno::ENOENT || e.errno == Errno::ESTALE
}

impl Client {
    /// One batch of at most `max` entries of `dir` after `start_after`, each
    /// with its attributes, and whether the listing is complete. Entries whose
    /// object was removed since the entries were read are left out. The
    /// attributes go into the attribute cache.
    pub async fn readdir_plus(
        &self,
        dir: Handle,
        start_after: &str,
        max: u32,
    ) -> Result<(Vec<(DirEntry, Attr)>, bool)> {
        let (listed, _, done) = self.readdir_plus_batch(dir, start_after, max).await?;
        Ok((listed, done))
    }

    /// Every entry of `dir` with its attributes, in batches of the cluster's
    /// readdir size.
    pub async fn readdir_plus_all(&self, dir: Handle) -> Result<Vec<(DirEntry, Attr)>> {
        let batch = self.config().settings.readdir_batch.max(1);
        let mut all = Vec::new();
        let mut after = String::new();
        loop {
            let (listed, last, done) = self.readdir_plus_batch(dir, &after, batch).await?;
            all.extend(listed);
            match last {
                Some(name) if !done => after = name,
                // An empty batch that claims more would loop forever.
                _ => return Ok(all),
            }
        }
    }

    /// A readdirplus batch and the last name read (which may be an entry left
    /// out as removed: the next batch starts after it).
    async fn readdir_plus_batch(
        &self,
        dir: Handle,
        start_after: &str,
        max: u32,
    ) -> Result<(Vec<(DirEntry, Attr)>, Option<String>, bool)> {
        let (entries, done) = self.readdir(dir, start_after, max).await?;
        let last = entries.last().map(|e| e.name.clone());
        let handles: Vec<Handle> = entries.iter().map(|e| e.handle).collect();
        let attrs = self.listattr(&handles).await?;
        let listed = entries
            .into_iter()
            .zip(attrs)
            .filter_map(|(e, a)| a.map(|a| (e, a)))
            .collect();
        Ok((listed, last, done))
    }

    /// Attributes of many objects, index-aligned with `handles`; `None` for an
    /// object that no longer exists. Fresh cached attributes are used as they
    /// are; the rest cost one ListAttr per server holding some of them and one
    /// GetSizes per server holding datafiles whose sizes the ListAttr replies
    /// did not carry. Results go into the attribute cache. With `readdirplus`
    /// off, one getattr per object (the baseline).
    pub async fn listattr(&self, handles: &[Handle]) -> Result<Vec<Option<Attr>>> {
        let mut out: Vec<Option<Attr>> = self.inner.attrs.get_many(handles);
        let missing: BTreeSet<Handle> = handles
            .iter()
            .zip(&out)
            .filter(|(_, a)| a.is_none())
            .map(|(h, _)| *h)
            .collect();
        if missing.is_empty() {
            return Ok(out);
        }
        let fetched = if self.config().settings.readdirplus {
            match self.listattr_uncached(&missing).await {
                Err(e) if e.errno == Errno::ENOTSUP => {
                    tracing::debug!("listattr refused ({e}); one getattr per entry");
                    self.getattr_each(&missing).await?
                }
                other => other?,
            }
        } else {
            self.getattr_each(&missing).await?
        };
        for (h, a) in handles.iter().zip(out.iter_mut()) {
            if a.is_none() {
                *a = fetched.get(h).cloned();
            }
        }
        Ok(out)
    }

    /// The baseline: one getattr per object, a bounded number in flight.
    async fn getattr_each(&self, handles: &BTreeSet<Handle>) -> Result<HashMap<Handle, Attr>> {
        let mut found = HashMap::with_capacity(handles.len());
        let mut replies = futures::stream::iter(handles.iter().copied().map(|h| async move {
            match self.getattr(h).await {
                Ok(a) => Ok(Some((h, a))),
                Err(e) if is_gone(&e) => Ok(None),
                Err(e) => Err(e),
            }
        }))
        .buffer_unordered(GETATTR_CONCURRENCY);
        while let Some(r) = replies.next().await {
            if let Some((h, a)) = r? {
                found.insert(h, a);
            }
        }
        Ok(found)
    }

    /// The two rounds of readdirplus for `handles`, none of them cached.
    async fn listattr_uncached(&self, handles: &BTreeSet<Handle>) -> Result<HashMap<Handle, Attr>> {
        // Round 1: one ListAttr per server holding some of the objects.
        let mut by_server: BTreeMap<u32, Vec<Handle>> = BTreeMap::new();
        for h in handles {
            by_server.entry(server_of(*h)).or_default().push(*h);
        }
        let replies =
            futures::future::try_join_all(by_server.into_iter().flat_map(|(server, hs)| {
                hs.chunks(MAX_LISTATTR_HANDLES)
                    .map(|c| self.listattr_on(server, c.to_vec()))
                    .collect::<Vec<_>>()
            }))
            .await?;
        let mut got = Gathered::default();
        for (reply, lease) in replies {
            if let Some(until) = lease {
                got.leases
                    .extend(reply.objects.iter().map(|o| (o.handle, until)));
            }
            got.records
                .extend(reply.objects.into_iter().map(|o| (o.handle, o)));
            got.sizes
                .extend(reply.sizes.into_iter().map(|s| (s.handle, s)));
        }

        // Round 2: one GetSizes per server holding datafiles still unknown.
        let mut unknown: BTreeMap<u32, BTreeSet<Handle>> = BTreeMap::new();
        for rec in got.records.values() {
            if rec.kind() != ObjectKind::Metafile {
                continue;
            }
            for d in rec.dist.iter().flat_map(|d| &d.datafiles) {
                if !got.sizes.contains_key(d) {
                    unknown.entry(server_of(*d)).or_default().insert(*d);
                    // Sizes asked for many files at once lease nothing.
                    got.leases.remove(&rec.handle);
                }
            }
        }
        let rounds =
            futures::future::join_all(unknown.into_iter().map(|(server, hs)| async move {
                let handles: Vec<Handle> = hs.into_iter().collect();
                let reply = self
                    .pool()
                    .call::<ops::GetSizes>(
                        server,
                        self.cred,
                        &GetSizesRequest {
                            handles: handles.clone(),
                            file: 0,
                        },
                    )
                    .await;
                (handles, reply)
            }))
            .await;
        // A datafile removed meanwhile fails its server's whole GetSizes: the
        // files with datafiles there are then asked one getattr each, which
        // finds them removed (a file's metafile goes before its datafiles).
        let mut recheck: BTreeSet<Handle> = BTreeSet::new();
        for (asked, reply) in rounds {
            match reply {
                Ok(r) => got.sizes.extend(r.sizes.into_iter().map(|s| (s.handle, s))),
                Err(e) if is_gone(&e) => {
                    let asked: BTreeSet<Handle> = asked.into_iter().collect();
                    recheck.extend(
                        got.records
                            .values()
                            .filter(|r| {
                                r.dist
                                    .iter()
                                    .flat_map(|d| &d.datafiles)
                                    .any(|d| asked.contains(d))
                            })
                            .map(|r| r.handle),
                    );
                }
                Err(e) => return Err(e),
            }
        }

        let mut attrs = HashMap::with_capacity(got.records.len());
        let mut dists = Vec::with_capacity(got.records.len());
        for (h, rec) in &got.records {
            if recheck.contains(h) {
                continue;
            }
            let (attr, dist) = self
                .attr_and_dist(rec, |d| got.sizes.get(&d).cloned())?
                .ok_or_else(|| ShoalError::io(format!("no size for a datafile of {h:#x}")))?;
            dists.extend(dist.map(|d| (*h, d)));
            attrs.insert(*h, attr);
        }
        // The batch's caching under one lock per cache.
        self.inner.dists.put_many(dists);
        let leased = |h: &Handle| got.leases.get(h).copied();
        self.inner
            .attrs
            .put_many_leased(attrs.iter().map(|(h, a)| (*h, a.clone(), leased(h))));
        self.inner
            .leases
            .note_many(attrs.keys().map(|h| (*h, leased(h))));
        self.inner
            .undo_if_recalled(attrs.keys().map(|h| (*h, leased(h))));
        for h in &recheck {
            self.forget(*h);
        }
        attrs.extend(self.getattr_each(&recheck).await?);
        Ok(attrs)
    }

    /// A ListAttr to `server`, and until when its lease lasts; a reply too
    /// large for one frame is asked for in halves.
    fn listattr_on(
        &self,
        server: u32,
        handles: Vec<Handle>,
    ) -> futures::future::BoxFuture<'_, Result<(ListAttrReply, Option<Instant>)>> {
        Box::pin(async move {
            let request = ListAttrRequest {
                handles: handles.clone(),
            };
            let reply = self
                .pool()
                .call_leasing::<ops::ListAttr>(server, self.cred, &request)
                .await;
            match reply {
                Err(e) if e.errno == Errno::E2BIG && handles.len() > 1 => {
                    let (a, b) = handles.split_at(handles.len() / 2);
                    let ((a, lease_a), (b, lease_b)) = futures::future::try_join(
                        self.listattr_on(server, a.to_vec()),
                        self.listattr_on(server, b.to_vec()),
                    )
                    .await?;
                    let mut all = a;
                    all.objects.extend(b.objects);
                    all.sizes.extend(b.sizes);
                    Ok((
                        all,
                        crate::consistency::lease_ledger::both(lease_a, lease_b),
                    ))
                }
                other => other,
            }
        })
    }
}
