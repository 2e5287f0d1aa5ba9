//! Listings: a directory's entries in batches (each entry's name cached in the
//! name cache when the caller may search the directory).

use shoal_proto::error::{Result, ShoalError};
use shoal_proto::handle::Handle;
use shoal_proto::msg::*;
use shoal_proto::ops;
use shoal_proto::partitions::{self as parts, name_hash};
use shoal_proto::ObjectKind;
use std::time::Instant;

use super::{entry_kind, file_kind};
use crate::client::Client;
use crate::types::{Attr, DirEntry};

impl Client {
    /// One batch of entries of `dir` after `start_after`, and whether the
    /// listing is complete.
    pub async fn readdir(
        &self,
        dir: Handle,
        start_after: &str,
        max: u32,
    ) -> Result<(Vec<DirEntry>, bool)> {
        let (entries, done, _, _) = self.readdir_request(dir, start_after, max, false).await?;
        Ok((entries, done))
    }

    /// The first batch of `dir`'s entries, whether that is all of them, and
    /// the directory's own attributes, in one message: an opendir's (the
    /// server refuses a caller without read permission, as open would).
    pub async fn open_listing(&self, dir: Handle, max: u32) -> Result<(Vec<DirEntry>, bool, Attr)> {
        let (entries, done, rec, lease) = self.readdir_request(dir, "", max, true).await?;
        // The server read it to check the caller's permission (a directory:
        // no datafile sizes to add).
        let attr = rec
            .and_then(|rec| self.attr_with(&rec, |_| None).transpose())
            .transpose()?
            .ok_or_else(|| ShoalError::io(format!("no record of directory {dir:#x}")))?;
        self.inner.attrs.put_leased(dir, attr.clone(), lease);
        self.inner.undo_if_recalled([(dir, lease)]);
        Ok((entries, done, attr))
    }

    /// A batch of `dir`'s entries after `start_after` (with the directory's
    /// record if `with_dir`), and until when the reply leases them: a first
    /// batch read ahead if there is a good one (`listings_ahead`), else
    /// asked for.
    async fn readdir_request(
        &self,
        dir: Handle,
        start_after: &str,
        max: u32,
        with_dir: bool,
    ) -> Result<(Vec<DirEntry>, bool, Option<ObjectRecord>, Option<Instant>)> {
        if start_after.is_empty() {
            if let Some(f) = self.listing_ahead(dir, max).await {
                return Ok((f.entries.clone(), f.done, f.dir.clone(), Some(f.leased)));
            }
        }
        self.readdir_request_sent(dir, start_after, max, with_dir)
            .await
    }

    /// [`readdir_request`](Self::readdir_request), always asked for. A
    /// split directory's partitions are listed one after another in hash
    /// order (`shoal_proto::partitions`), each from the place in that order
    /// where the batch stands, so that `start_after` stays a good cookie
    /// across splits.
    pub(crate) async fn readdir_request_sent(
        &self,
        dir: Handle,
        start_after: &str,
        max: u32,
        with_dir: bool,
    ) -> Result<(Vec<DirEntry>, bool, Option<ObjectRecord>, Option<Instant>)> {
        // A change of this client's sent or answered while the listing is
        // on its way may be newer than it, and its own changes are not
        // recalled from it: its names are then not cached (a read-ahead's
        // reply comes while the program goes on, unlinking or renaming).
        let changes = self.pool().metadata_changes();
        let mut listed = Listed::default();
        // Where in hash order the batch stands.
        let mut at = match start_after {
            "" => 0,
            name => name_hash(name),
        };
        let done = loop {
            let after = listed
                .entries
                .last()
                .map_or(start_after, |e| e.name.as_str());
            let request = ReaddirRequest {
                dir,
                start_after: after.to_string(),
                max: max - listed.entries.len() as u32,
                with_dir: true,
            };
            let pick = || match self.inner.partitions.known(dir) {
                Some(known) => known[parts::route(&known, at) as usize],
                None => dir,
            };
            let (reply, lease) = self
                .call_leasing_routed::<ops::Readdir>(dir, pick, false, &request)
                .await?;
            self.inner.leases.note(dir, lease);
            let part = reply
                .dir
                .clone()
                .ok_or_else(|| ShoalError::protocol(format!("no record with listing {dir:#x}")))?;
            self.inner.partitions.learn(dir, &part);
            let (index, depth) = (part.partition_index, part.partition_depth);
            if !parts::holds(index, depth, at) {
                // Split off since this client knew of it: its record names
                // the partitions split from it.
                continue;
            }
            listed.add(reply, lease, at)?;
            if part.handle == dir {
                listed.dir = Some(part);
            }
            if !listed.last_done {
                break false;
            }
            match parts::last_hash(index, depth) {
                u64::MAX => break true,
                last => at = last + 1,
            }
            if listed.entries.len() as u32 >= max {
                break false;
            }
        };
        let Listed {
            entries,
            named,
            searchable,
            lease,
            dir: record,
            ..
        } = listed;
        if searchable && self.pool().metadata_changes() == changes {
            let names = entries.iter().map(|e| e.name.as_str());
            self.inner
                .names
                .put_many(dir, self.cred, names.zip(named), lease);
        }
        self.inner.undo_if_recalled([(dir, lease)]);
        Ok((entries, done, record.filter(|_| with_dir), lease))
    }

    /// Every entry of `dir`, fetched in batches of the cluster's readdir size.
    pub async fn readdir_all(&self, dir: Handle) -> Result<Vec<DirEntry>> {
        let batch = self.config().settings.readdir_batch;
        let mut all: Vec<DirEntry> = Vec::new();
        loop {
            let after = all.last().map(|e| e.name.clone()).unwrap_or_default();
            let (entries, done) = self.readdir(dir, &after, batch).await?;
            all.extend(entries);
            if done {
                return Ok(all);
            }
        }
    }
}

/// A batch gathered from one or more partitions of a directory.
struct Listed {
    entries: Vec<DirEntry>,
    named: Vec<(Handle, ObjectKind)>,
    /// Whether the caller may search every partition listed.
    searchable: bool,
    /// The earliest lease of the partitions' replies.
    lease: Option<Instant>,
    /// The directory's own record, if listed.
    dir: Option<ObjectRecord>,
    /// Whether the last partition listed is through.
    last_done: bool,
    /// Partitions' replies added.
    replies: usize,
}

impl Default for Listed {
    fn default() -> Listed {
        Listed {
            entries: Vec::new(),
            named: Vec::new(),
            searchable: true,
            lease: None,
            dir: None,
            last_done: false,
            replies: 0,
        }
    }
}

impl Listed {
    /// Adds one partition's reply, leased until `lease`; entries before
    /// `at` in hash order are ones listed already.
    fn add(&mut self, reply: ReaddirReply, lease: Option<Instant>, at: u64) -> Result<()> {
        self.searchable &= reply.searchable;
        self.lease = match self.replies {
            0 => lease,
            _ => self.lease.zip(lease).map(|(a, b)| a.min(b)),
        };
        self.replies += 1;
        self.last_done = reply.done;
        for e in reply
            .entries
            .into_iter()
            .filter(|e| name_hash(&e.name) >= at)
        {
            let kind = entry_kind(e.kind)?;
            self.named.push((e.handle, kind));
            self.entries.push(DirEntry {
                name: e.name,
                handle: e.handle,
                kind: file_kind(kind)?,
            });
        }
        Ok(())
    }
}
