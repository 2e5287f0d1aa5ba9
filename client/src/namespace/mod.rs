//! Namespace operations, composed from the servers' one-object steps in the
//! order that keeps the crash invariant: objects are created before the entry
//! that names them, and an entry is removed before the objects it named. A
//! crash in between leaves orphans for `shoal fsck`, never a dangling entry.
//!
//! One module per family of operations, as the server's handlers: `lookup`
//! (and path resolution), `create` (files, directories, symlinks, special
//! files), `remove` (unlink, rmdir, reclaim), `link` (hard links and the
//! link count), `rename`, `readdir`. This module holds what they share: the
//! kinds an entry may name, and the entry changes that `known_dirs` follows.

pub(crate) mod attrs;
mod create;
mod create_files;
pub(crate) mod delegated;
pub(crate) mod fetched_ahead;
pub(crate) mod hints;
mod link;
pub(crate) mod listings_ahead;
mod lookup;
pub(crate) mod open_files;
pub(crate) mod partitions;
mod readdir;
pub(crate) mod readdirplus;
mod remove;
mod rename;

use std::future::Future;
use std::time::Instant;

use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::handle::Handle;
use shoal_proto::msg::*;
use shoal_proto::{ops, ObjectKind};

use crate::client::Client;
use crate::consistency::known_dirs::EntryChange;
use crate::types::FileKind;

/// The kind of object a directory entry names, checked to be one an entry
/// may name (a file is a metafile, or a datafile without one).
fn entry_kind(kind: i32) -> Result<ObjectKind> {
    ObjectKind::try_from(kind)
        .ok()
        .filter(|k| FileKind::from_object(*k).is_some())
        .ok_or_else(|| ShoalError::protocol(format!("directory entry of unknown kind {kind}")))
}

/// What users see of the kind of object an entry names.
fn kind_of(kind: i32) -> Result<FileKind> {
    entry_kind(kind).and_then(file_kind)
}

fn file_kind(kind: ObjectKind) -> Result<FileKind> {
    FileKind::from_object(kind)
        .ok_or_else(|| ShoalError::protocol(format!("directory entry of kind {kind:?}")))
}

impl Client {
    /// Sends a change of `dir`'s entries (`send`, a request not yet sent) and
    /// tells `known_dirs` what came of it: the directory's record the reply
    /// carried (`dir_of`), or that the change failed. `tracked` false (the
    /// request changes no entry of `dir`) just sends it.
    async fn change_entries<R>(
        &self,
        dir: Handle,
        tracked: bool,
        send: impl Future<Output = Result<R>>,
        dir_of: impl Fn(&R) -> Option<&ObjectRecord>,
        change: EntryChange<'_>,
    ) -> Result<R> {
        if !tracked {
            return send.await;
        }
        self.inner.known_dirs.begin(dir, false);
        self.inner.delegated.entries_changing(dir, change.names());
        let reply = send.await;
        match &reply {
            // Refused before anything changed, for a reason that agrees
            // with the names known (an unlink of a directory, a
            // permission): they stay known. Any other failure forgets them:
            // it may follow a change applied (ENOSPC at the commit, EIO),
            // or say that a name is there or not against what is known, or
            // that the hints moved (ESTALE).
            Err(e)
                if matches!(
                    e.errno,
                    Errno::EACCES
                        | Errno::EPERM
                        | Errno::EISDIR
                        | Errno::ENOTDIR
                        | Errno::ENOTEMPTY
                        | Errno::EINVAL
                        | Errno::ENAMETOOLONG
                ) =>
            {
                self.inner.known_dirs.unchanged(dir)
            }
            _ => {
                let after = reply.as_ref().ok().and_then(&dir_of);
                self.inner.known_dirs.finish(dir, after, change, self.cred)
            }
        }
        reply
    }

    /// Adds the entry naming an object (new, or with its link just counted)
    /// made under the directory hints `created_under` (ESTALE if they are not
    /// `dir`'s any more).
    async fn add_entry(
        &self,
        dir: Handle,
        name: &str,
        handle: Handle,
        kind: ObjectKind,
        created_under: Option<DirHints>,
    ) -> Result<()> {
        let request = CrDirEntRequest {
            dir,
            name: name.to_string(),
            handle,
            kind: kind as i32,
            replace: false,
            created_under,
        };
        let send = self.call_in_partition::<ops::CrDirEnt>(dir, name, &request);
        let asked = Instant::now();
        let reply = self
            .change_entries(
                dir,
                true,
                send,
                |r| r.dir.as_ref(),
                EntryChange::Added(name),
            )
            .await?;
        self.refresh_dir(reply.dir, asked);
        let lease = self.inner.leases.until(dir);
        self.inner
            .names
            .put(dir, name, self.cred, (handle, kind), lease);
        self.inner.undo_if_recalled_after(dir, asked);
        Ok(())
    }
}

/// A client of a cluster of `servers` that no test starts: connections open
/// lazily, so what needs no message can be tried on it.
#[cfg(test)]
pub(crate) fn test_client(servers: u32, settings: shoal_proto::cluster::Settings) -> Client {
    use shoal_proto::cluster::{ClusterConfig, ServerEntry};
    Client::new(ClusterConfig {
        secret_file: None,
        broker_socket: None,
        loaded_from: None,
        settings,
        servers: (0..servers)
            .map(|id| ServerEntry {
                id,
                addr: "127.0.0.1:1".parse().unwrap(),
                data: std::path::PathBuf::from("/nonexistent"),
                metrics_addr: None,
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_names_files_directories_symlinks_and_special_files() {
        for kind in [
            ObjectKind::Metafile,
            ObjectKind::Datafile,
            ObjectKind::Directory,
            ObjectKind::Symlink,
        ] {
            assert_eq!(entry_kind(kind as i32).unwrap(), kind);
        }
        assert_eq!(
            kind_of(ObjectKind::Datafile as i32).unwrap(),
            FileKind::File,
            "a datafile without a metafile (no_metafile) is a file"
        );
        assert!(entry_kind(ObjectKind::Unspecified as i32).is_err());
        assert!(entry_kind(9999).is_err());
    }
}
