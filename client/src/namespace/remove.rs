//! Removes: a name (unlink), an empty directory (rmdir), a file unlinked
//! while open (reclaim), and the objects of a create whose entry was
//! refused. The entry goes first, then the objects it named.

use std::time::Instant;

use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::handle::{server_of, Handle};
use shoal_proto::msg::*;
use shoal_proto::names::check_name;
use shoal_proto::{crash_points, ops};

use super::kind_of;
use crate::client::Client;
use crate::consistency::known_dirs::EntryChange;
use crate::types::{FileKind, Unlinked};

impl Client {
    /// Removes a file, symlink or special file's name. The object goes with
    /// its last name (see [`Client::unlink_keeping`]).
    pub async fn unlink(&self, dir: Handle, name: &str) -> Result<()> {
        self.unlink_keeping(dir, name, false).await.map(|_| ())
    }

    /// Removes a name that is not a directory's: the entry, then the
    /// object's link (ObjectRecord.links); with its last link the object
    /// goes, and a file's datafiles after it (n+2 messages). With colocate,
    /// an object on the directory's server loses its link in the entry's
    /// own request (a stuffed file goes entirely in that one message).
    /// `keep`: the caller holds the file open, so an object left without a
    /// name stays, for [`Client::reclaim`] at its last close (POSIX: an open
    /// file stays readable after unlink until it is closed).
    pub async fn unlink_keeping(&self, dir: Handle, name: &str, keep: bool) -> Result<Unlinked> {
        if !keep {
            if let Some(answered) = self.unlink_delegated(dir, name) {
                return answered;
            }
        }
        check_name(name)?;
        let (reply, _) = self
            .remove_entry_reply(RmDirEntRequest {
                dir,
                name: name.to_string(),
                must_not_be_dir: true,
                drop_local_link: self.config().settings.colocate,
                keep_unlinked: keep,
                ..Default::default()
            })
            .await?;
        let h = reply.handle;
        if !reply.dropped {
            shoal_proto::crash_point!(crash_points::UNLINK_AFTER_ENTRY);
            return self.drop_link(h, keep).await;
        }
        if reply.removed {
            self.removed(h, reply.dist).await?;
            return Ok(Unlinked::Removed);
        }
        self.forget(h);
        Ok(Unlinked::left(h, reply.links))
    }

    /// Removes a file that lost its last name while open (an
    /// [`Unlinked::StillOpen`] object) at its last close; one given a name again
    /// meanwhile stays.
    pub async fn reclaim(&self, h: Handle) -> Result<()> {
        let reply = self
            .remove_object(
                h,
                RemoveRequest {
                    handle: h,
                    unlinked_only: true,
                    ..Default::default()
                },
            )
            .await?;
        if reply.stays {
            return Ok(());
        }
        self.removed(h, reply.dist).await
    }

    /// Removes an empty directory: mark it so nothing can be added (fails if
    /// not empty), remove its entry, remove the object.
    pub async fn rmdir(&self, dir: Handle, name: &str) -> Result<()> {
        check_name(name)?;
        let (h, kind) = self.lookup(dir, name).await?;
        if kind != FileKind::Directory {
            return Err(ShoalError::new(
                Errno::ENOTDIR,
                format!("{name}: not a directory"),
            ));
        }
        self.prepare_rmdir(h).await?;
        let removed = self
            .remove_entry(RmDirEntRequest {
                dir,
                name: name.to_string(),
                expect_handle: h,
                must_be_dir: true,
                ..Default::default()
            })
            .await;
        if let Err(e) = removed {
            self.abort_rmdir(h).await;
            return Err(e);
        }
        self.remove_dir_object(h, dir).await
    }

    /// Removes directory `h`, empty and marked, whose entry in `parent` is
    /// gone.
    pub(super) async fn remove_dir_object(&self, h: Handle, parent: Handle) -> Result<()> {
        let reply = self
            .remove_object(
                h,
                RemoveRequest {
                    handle: h,
                    expect_parent: parent,
                    ..Default::default()
                },
            )
            .await?;
        if reply.stays {
            // The entry was a leftover of an interrupted move: the directory
            // lives on under its true name.
            self.abort_rmdir(h).await;
            return Ok(());
        }
        // A split directory's other partitions, empty and marked too.
        for p in self.other_partitions(h) {
            self.remove_object(
                p,
                RemoveRequest {
                    handle: p,
                    ..Default::default()
                },
            )
            .await?;
        }
        Ok(())
    }

    pub(super) async fn remove_entry(&self, req: RmDirEntRequest) -> Result<(Handle, FileKind)> {
        let (reply, kind) = self.remove_entry_reply(req).await?;
        Ok((reply.handle, kind))
    }

    pub(super) async fn remove_entry_reply(
        &self,
        req: RmDirEntRequest,
    ) -> Result<(RmDirEntReply, FileKind)> {
        let (dir, name) = (req.dir, req.name.clone());
        let send = self.call_in_partition::<ops::RmDirEnt>(dir, &name, &req);
        let asked = Instant::now();
        let reply = self
            .change_entries(
                dir,
                !req.check_only,
                send,
                |r| r.dir.as_ref(),
                EntryChange::Removed(&name),
            )
            .await?;
        if !req.check_only {
            self.inner.names.remove(dir, &name);
        }
        self.refresh_dir(reply.dir.clone(), asked);
        let kind = kind_of(reply.kind)?;
        Ok((reply, kind))
    }

    /// Removes object `h` as `req` says (see RemoveRequest: a directory
    /// whose entry in `expect_parent` was removed, or anything else that no
    /// entry names).
    async fn remove_object(&self, h: Handle, req: RemoveRequest) -> Result<RemoveReply> {
        debug_assert_eq!(req.handle, h);
        let reply: RemoveReply = self
            .pool()
            .call::<ops::Remove>(server_of(h), self.cred, &req)
            .await?;
        self.forget(h);
        Ok(reply)
    }

    /// One `RemoveFiles` message: unlinks of `names` in `dir`, each of the
    /// object `expected` says (unlinks answered here under a delegation:
    /// the names are already out of what `known_dirs` holds). Returns one
    /// result per name, in order; the outer error fails the message whole.
    pub(super) async fn remove_batch(
        &self,
        dir: Handle,
        names: &[String],
        expected: &[Handle],
    ) -> Result<Vec<Result<RmDirEntReply>>> {
        let request = RemoveFilesRequest {
            dir,
            names: names.to_vec(),
            expected: expected.to_vec(),
        };
        self.inner.known_dirs.begin(dir, true);
        let asked = Instant::now();
        let sent = self
            .pool()
            .call::<ops::RemoveFiles>(server_of(dir), self.cred, &request)
            .await;
        let answered = sent.as_ref().ok().filter(|r| r.files.len() == names.len());
        let removed: Vec<&str> = answered.map_or_else(Vec::new, |r| {
            let removed = names
                .iter()
                .zip(&r.files)
                .filter(|(_, f)| f.entry.is_some());
            removed.map(|(name, _)| name.as_str()).collect()
        });
        let after = answered.and_then(|r| r.dir.as_ref());
        self.inner
            .known_dirs
            .finish(dir, after, EntryChange::UnsentUnlinks(removed), self.cred);
        let reply = sent?;
        if reply.files.len() != names.len() {
            return Err(ShoalError::protocol(format!(
                "remove_files answered {} of {} names",
                reply.files.len(),
                names.len()
            )));
        }
        self.refresh_dir(reply.dir, asked);
        let results = reply.files.into_iter().map(|f| match f.entry {
            Some(entry) => Ok(entry),
            None => Err(ShoalError::new(Errno(f.errno), f.error)),
        });
        Ok(results.collect())
    }

    /// Removes an object outright (one that no entry names: a create's
    /// leftovers, a datafile).
    pub(super) async fn remove_unnamed_object(&self, h: Handle) -> Result<RemoveReply> {
        self.remove_object(
            h,
            RemoveRequest {
                handle: h,
                ..Default::default()
            },
        )
        .await
    }

    /// Removes a datafile of a removed file.
    async fn remove_datafiles(&self, datafiles: &[Handle]) -> Result<()> {
        futures::future::try_join_all(datafiles.iter().map(|d| self.remove_unnamed_object(*d)))
            .await?;
        Ok(())
    }

    /// What is left to do once object `h` went on its server: the
    /// datafiles its reply listed (none for a stuffed file: its server
    /// removed the one it had).
    pub(super) async fn removed(&self, h: Handle, dist: Option<Distribution>) -> Result<()> {
        self.forget(h);
        self.inner.uncommitted_writes.forget(h);
        self.discard_buffered(h);
        self.remove_datafiles(&dist.map(|d| d.datafiles).unwrap_or_default())
            .await
    }

    /// Removes objects no entry names yet (a create whose entry failed).
    pub(super) async fn remove_objects(&self, h: Handle) -> Result<()> {
        let reply = self.remove_unnamed_object(h).await?;
        self.removed(h, reply.dist).await
    }
}
