//! Listings: a directory's entries in batches (each entry's name cached in the
//! name cache when the caller may search the directory).

use shoal_proto::error::{Result, ShoalError};
use shoal_proto::handle::{server_of, Handle};
use shoal_proto::msg::*;
use shoal_proto::ops;
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

    /// [`readdir_request`](Self::readdir_request), always asked for.
    pub(crate) async fn readdir_request_sent(
        &self,
        dir: Handle,
        start_after: &str,
        max: u32,
        with_dir: bool,
    ) -> Result<(Vec<DirEntry>, bool, Option<ObjectRecord>, Option<Instant>)> {
        let request = ReaddirRequest {
            dir,
            start_after: start_after.to_string(),
            max,
            with_dir,
        };
        // A change of this client's sent or answered while the listing is
        // on its way may be newer than it, and its own changes are not
        // recalled from it: its names are then not cached (a read-ahead's
        // reply comes while the program goes on, unlinking or renaming).
        let changes = self.pool().metadata_changes();
        let (reply, lease) = self
            .pool()
            .call_leasing::<ops::Readdir>(server_of(dir), self.cred, &request)
            .await?;
        self.inner.leases.note(dir, lease);
        let mut named = Vec::with_capacity(reply.entries.len());
        let entries = reply
            .entries
            .into_iter()
            .map(|e| {
                let kind = entry_kind(e.kind)?;
                named.push((e.handle, kind));
                Ok(DirEntry {
                    name: e.name,
                    handle: e.handle,
                    kind: file_kind(kind)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        if reply.searchable && self.pool().metadata_changes() == changes {
            let names = entries.iter().map(|e| e.name.as_str());
            self.inner
                .names
                .put_many(dir, self.cred, names.zip(named), lease);
        }
        self.inner.undo_if_recalled([(dir, lease)]);
        Ok((entries, reply.done, reply.dir, lease))
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
