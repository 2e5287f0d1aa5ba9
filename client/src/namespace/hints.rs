//! Directory hints on the client ([Kuhn 2008]): reading and changing them, and
//! making new objects under them.
//!
//! A directory's hints travel in its record, so the client learns them from
//! every getattr, lookup or listing of the directory and from the replies of
//! entry changes. It keeps the last copy seen without a time limit: only
//! creates use hints, and the directory's server refuses an entry made under
//! hints that are no longer current (ESTALE); the client then reads them
//! again and makes the object once more ([`Client::under_hints`]). A stale
//! copy so costs one retry, never a file of the wrong form. A directory not
//! seen yet is taken to have no hints, so a create costs no extra message.
//!
//! Hints are changed as the extended attributes `user.shoal.<hint>` (which is
//! also how they appear on the mount); the servers validate every value.

use std::future::Future;

use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::hints::{self, Hint};
use shoal_proto::msg::{DirHints, ObjectRecord};
use shoal_proto::{Handle, ObjectKind};

use crate::client::Client;

/// Times an object is made again after its directory's hints changed under it.
const MAX_HINT_RETRIES: usize = 3;

impl Client {
    /// The hints of `dir` as this client last saw them (none if never seen).
    pub(crate) fn known_hints(&self, dir: Handle) -> DirHints {
        self.inner.hints.get(&dir).unwrap_or_default()
    }

    /// Keeps the hints of a directory record that passed by.
    pub(crate) fn remember_hints(&self, rec: &ObjectRecord) {
        if rec.kind() == ObjectKind::Directory {
            self.inner
                .hints
                .put(rec.handle, rec.hints.clone().unwrap_or_default());
        }
    }

    /// The current hints of directory `dir`, from its server.
    pub async fn hints(&self, dir: Handle) -> Result<DirHints> {
        let rec = self.get_record(dir).await?;
        if rec.kind() != ObjectKind::Directory {
            return Err(ShoalError::new(
                Errno::ENOTDIR,
                format!("{dir:#x}: hints are set on directories, and this is not one"),
            ));
        }
        self.remember_hints(&rec);
        Ok(rec.hints.unwrap_or_default())
    }

    /// Sets hint `hint` of directory `dir` to `value` (validated by the
    /// server: a bad value is EINVAL naming the hint and what it accepts).
    pub async fn set_hint(&self, dir: Handle, hint: Hint, value: &str) -> Result<()> {
        self.setxattr(dir, &hint.xattr(), value.as_bytes(), false, false)
            .await
    }

    /// Clears hint `hint` of directory `dir`; ENODATA if it was not set.
    pub async fn unset_hint(&self, dir: Handle, hint: Hint) -> Result<()> {
        self.removexattr(dir, &hint.xattr()).await
    }

    /// After this client changed the xattr `name` of `h`: if it is a hint,
    /// the same change to the known copy, so that this client's next create
    /// there follows it without a retry.
    pub(crate) fn hint_xattr_changed(&self, h: Handle, name: &str, value: Option<&[u8]>) {
        let Some(Ok(hint)) = Hint::from_xattr(name) else {
            return;
        };
        let mut known = self.known_hints(h);
        let applied = match value {
            Some(v) => std::str::from_utf8(v)
                .is_ok_and(|text| hints::set(&mut known, hint, text, self.num_servers()).is_ok()),
            None => {
                hints::unset(&mut known, hint);
                true
            }
        };
        if applied {
            self.inner.hints.put(h, known);
        }
    }

    /// Runs `make`, which makes an object in `dir` under the hints it is
    /// given and adds its entry (undoing its work if the entry is refused).
    /// If the server refuses the entry because `dir`'s hints changed, reads
    /// them again and runs `make` once more.
    pub(crate) async fn under_hints<T, F, Fut>(&self, dir: Handle, make: F) -> Result<T>
    where
        F: Fn(DirHints) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut hints = self.known_hints(dir);
        let mut retries = 0;
        loop {
            match make(hints).await {
                Err(e) if e.errno == Errno::ESTALE && retries < MAX_HINT_RETRIES => {
                    retries += 1;
                    hints = self.hints(dir).await?;
                }
                done => return done,
            }
        }
    }
}
