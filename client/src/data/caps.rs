//! Capabilities on the client: the data rights a file's metafile server
//! grants a user with the file's attributes (`shoal_proto::capability`),
//! sent with every read, write, truncate, fsync and rendezvous to the
//! servers holding the file's datafiles, which check them.
//!
//! They come at no extra message with the replies that bring a file's
//! record anyway (getattr, lookup with attributes, create, set_dist,
//! unstuff) and are cached per (file, caller) for three quarters of their
//! lifetime; a data request without a usable one first asks the file's
//! server (a getattr, which also refreshes the file's layout). A refused
//! request (the capability expired, or the file was unstuffed since and
//! it does not name a new datafile) asks for a fresh one and tries once
//! more. Files without a metafile (no_metafile), root (unless squashed) and
//! clusters without a secret use none.

use std::future::Future;
use std::time::Duration;

use shoal_proto::capability::rights_name;
use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::msg::Capability;
use shoal_proto::Handle;

use crate::client::Client;

/// How long a capability is cached: three quarters of its lifetime, so that
/// it is replaced before a server would refuse it.
pub(crate) fn keep_for(capability_ttl_s: u32) -> Duration {
    Duration::from_secs(capability_ttl_s as u64) * 3 / 4
}

impl Client {
    /// Keeps a capability a reply brought for this client's caller.
    pub(crate) fn remember_cap(&self, cap: Option<Capability>) {
        if let Some(cap) = cap {
            self.inner.caps.put((cap.file, self.cred), cap);
        }
    }

    /// Whether data requests for file `h` carry a capability: on a cluster
    /// with a secret, unless `h` is a file without a metafile (its layout,
    /// known from its record, is its own one datafile) or the caller is root
    /// (not squashed), whom the servers let read and write anything.
    fn needs_cap(&self, h: Handle) -> bool {
        self.servers_check_caller() && !self.has_no_metafile(h)
    }

    /// Whether the servers check this caller's rights at all: on a cluster
    /// with a secret, for anyone but root (not squashed).
    fn servers_check_caller(&self) -> bool {
        let settings = &self.config().settings;
        let root = self.cred.is_root() && !settings.root_squash;
        self.config().secret_file.is_some() && !root
    }

    /// Whether `h` is known to be a file without a metafile.
    fn has_no_metafile(&self, h: Handle) -> bool {
        self.inner.dists.get(&h).is_some_and(|d| d.is_single(h))
    }

    /// Whether a write to file `h` could be refused by the server holding it
    /// with no capability to show the right beforehand: a file without a
    /// metafile on a cluster with a secret, written by anyone but root (its
    /// server checks the caller against the file's own record).
    pub(crate) fn checked_only_by_its_server(&self, h: Handle) -> bool {
        self.servers_check_caller() && self.has_no_metafile(h)
    }

    /// A capability of the caller for file `h` that grants `need` (a right,
    /// or `capability::ANY`): the one cached, else a fresh one from the file's
    /// server. EACCES if the caller does not have the right.
    pub(crate) async fn capability(&self, h: Handle, need: u32) -> Result<Option<Capability>> {
        if !self.needs_cap(h) {
            return Ok(None);
        }
        let key = (h, self.cred);
        if let Some(cap) = self
            .inner
            .caps
            .get(&key)
            .filter(|c| c.rights & need == need)
        {
            return Ok(Some(cap));
        }
        // The getattr that brings the capability also refreshes the layout.
        self.fresh_distribution(h).await?;
        if !self.needs_cap(h) {
            return Ok(None);
        }
        let Some(cap) = self.inner.caps.get(&key) else {
            // A server without the secret issues none (and checks none).
            return Ok(None);
        };
        if cap.rights & need != need {
            return Err(ShoalError::new(
                Errno::EACCES,
                format!(
                    "file {h:#x}: uid {} may not {} it (its server grants {})",
                    self.cred.uid,
                    rights_name(need),
                    rights_name(cap.rights)
                ),
            ));
        }
        Ok(Some(cap))
    }

    /// Runs the data operation `op` on file `h` with a capability that
    /// grants `need`; if a server refuses it, asks for a fresh one and runs
    /// `op` once more (it must be safe to repeat: reads, writes and
    /// truncates of the same bytes are).
    pub(crate) async fn with_capability<T, F, Fut>(&self, h: Handle, need: u32, op: F) -> Result<T>
    where
        F: Fn(Option<Capability>) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let cap = self.capability(h, need).await?;
        let held = cap.is_some();
        match op(cap).await {
            Err(e) if e.errno == Errno::EACCES && held => {
                tracing::debug!("capability for {h:#x} refused ({e}); asking for a fresh one");
                self.inner.caps.remove(&(h, self.cred));
                op(self.capability(h, need).await?).await
            }
            done => done,
        }
    }
}
