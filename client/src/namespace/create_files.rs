//! Many regular files in one directory at once ([`Client::create_files`]):
//! with colocate, one `CreateFiles` message per [`PER_MESSAGE`] names to
//! the directory's server, applied there as one transaction
//! (server/src/handlers/create_files.rs). Where that cannot be (colocate
//! off, or a directory whose files take datafiles from the precreate pools:
//! the server says ENOTSUP), each file is created on its own: the same
//! files, except that a name given twice is then EEXIST the second time,
//! not EINVAL.

use std::time::Instant;

use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::handle::{server_of, Handle};
use shoal_proto::msg::*;
use shoal_proto::ops;

use crate::client::Client;
use crate::consistency::known_dirs::EntryChange;
use crate::types::Attr;

/// Names per message: the server takes at most 4096; fewer keep a reply
/// (one record per file), and with `sync = "replay"` the request the
/// client keeps until it is durable, well under the frame limit.
pub(super) const PER_MESSAGE: usize = 1024;

impl Client {
    /// Creates a regular file of each of `names` in `dir`, with permission
    /// bits `mode`. Returns one result per name, in order: a name taken or
    /// invalid fails alone (EEXIST, EINVAL) and the others are made. The
    /// outer error is for what fails the first message whole (the
    /// directory is gone, no permission, the server unreachable): nothing
    /// was made. Such a failure of a later message is the error of each of
    /// its names and of every name after them (the earlier ones were made).
    pub async fn create_files(
        &self,
        dir: Handle,
        names: &[String],
        mode: u32,
    ) -> Result<Vec<Result<Attr>>> {
        let settings = &self.config().settings;
        // A split directory's names go to their partitions one by one.
        let mut batched = settings.colocate
            && (settings.precreate || settings.stuffing)
            && self.inner.partitions.known(dir).is_none();
        let mut out = Vec::with_capacity(names.len());
        for chunk in names.chunks(PER_MESSAGE) {
            let made = match batched {
                true => self.create_batch(dir, chunk, mode, &[]).await,
                false => Err(ShoalError::new(Errno::ENOTSUP, "not batched")),
            };
            match made {
                Ok(made) => out.extend(made),
                Err(e) if [Errno::ENOTSUP, Errno::MOVED, Errno::SPLITTING].contains(&e.errno) => {
                    // The directory's files take from the pools, or it is
                    // split: so will the next chunk's be.
                    batched = false;
                    for name in chunk {
                        out.push(self.create(dir, name, mode).await);
                    }
                }
                Err(e) if out.is_empty() => return Err(e),
                Err(e) => out.resize(names.len(), Err(e)),
            }
        }
        Ok(out)
    }

    /// One `CreateFiles` message, and what its reply says into the caches,
    /// as a colocated create's (`create`). `handles`: the files' own, of a
    /// delegation's reservation, or none.
    pub(super) async fn create_batch(
        &self,
        dir: Handle,
        names: &[String],
        mode: u32,
        handles: &[Handle],
    ) -> Result<Vec<Result<Attr>>> {
        let request = CreateFilesRequest {
            dir,
            names: names.to_vec(),
            attrs: Some(Attributes {
                mode: mode & 0o7777,
                ..Default::default()
            }),
            stuffed: self.config().settings.stuffing,
            handles: handles.to_vec(),
        };
        // As `change_entries`, but what the change did to the entries is
        // known only from the reply: the names it made.
        let unsent = !handles.is_empty();
        self.inner.known_dirs.begin(dir, unsent);
        let asked = Instant::now();
        let sent = self
            .pool()
            .call_leasing::<ops::CreateFiles>(server_of(dir), self.cred, &request)
            .await;
        let answered = sent
            .as_ref()
            .ok()
            .filter(|(r, _)| r.files.len() == names.len());
        let made: Vec<&str> = answered.map_or_else(Vec::new, |(r, _)| {
            let made = names
                .iter()
                .zip(&r.files)
                .filter(|(_, f)| f.object.is_some());
            made.map(|(name, _)| name.as_str()).collect()
        });
        let after = answered.and_then(|(r, _)| r.dir.as_ref());
        let change = match unsent {
            true => EntryChange::UnsentCreates(made),
            false => EntryChange::AddedMany(made),
        };
        match &sent {
            // Refused before it changed anything: what is known stands
            // (creates answered here were not made: it is forgotten).
            Err(e) if e.errno == Errno::ENOTSUP && !unsent => self.inner.known_dirs.unchanged(dir),
            _ => self.inner.known_dirs.finish(dir, after, change, self.cred),
        }
        let (reply, lease) = sent?;
        if reply.files.len() != names.len() {
            return Err(ShoalError::protocol(format!(
                "create_files answered {} of {} names",
                reply.files.len(),
                names.len()
            )));
        }
        self.refresh_dir(reply.dir, asked);
        let dir_lease = self.inner.leases.until(dir);
        let mut out = Vec::with_capacity(names.len());
        let mut leased = Vec::new();
        let mut newer = Vec::new();
        for (name, file) in names.iter().zip(reply.files) {
            let Some(rec) = file.object else {
                out.push(Err(ShoalError::new(Errno(file.errno), file.error)));
                continue;
            };
            self.remember_cap(file.cap);
            let h = rec.handle;
            let attr = match self.made_file_attr(&rec) {
                Ok(attr) => attr,
                Err(e) => {
                    out.push(Err(e));
                    continue;
                }
            };
            shoal_proto::fail::fail_point!(shoal_proto::crash_points::CREATE_FILES_BEFORE_CACHING);
            self.inner
                .names
                .put(dir, name, self.cred, (h, rec.kind()), dir_lease);
            // A file of an unsent create may be written before its batch's
            // reply is read: what the write left cached is newer than this
            // reply, and stays, under the reply's lease instead.
            if !self.inner.changed_since(h, asked) {
                self.inner.attrs.put_leased(h, attr.clone(), lease);
                leased.push((h, lease));
            } else if self.inner.attrs.extend(&h, lease) {
                newer.push((h, lease));
            }
            out.push(Ok(attr));
        }
        self.inner.leases.note_many(leased.iter().copied());
        if unsent && lease.is_none() {
            let made = out.iter().filter_map(|a| a.as_ref().ok().map(|a| a.handle));
            self.inner.not_leased(made.collect()).await;
        }
        self.inner.undo_if_recalled_after(dir, asked);
        self.inner.undo_if_recalled(leased);
        self.inner.undo_if_recalled_elsewhere(newer);
        Ok(out)
    }
}
