//! The network side of creates answered under a directory delegation
//! (`delegations` holds the unsent changes and the rules): asking for a
//! delegation, answering a create, sending the unsent changes, the fence
//! every other request waits behind, and a recall.

use std::ops::Range;
use std::sync::{Arc, Weak};

use futures::future::BoxFuture;
use futures::FutureExt;
use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::handle::{server_of, Handle};
use shoal_proto::hints::{new_file, NewFile};
use shoal_proto::msg::DelegateDirRequest;
use shoal_proto::names::check_name;
use shoal_proto::ops;

use super::create_files::PER_MESSAGE;
use crate::client::{Client, Inner};
use crate::consistency::delegations::{Answered, Batch, Send, RESERVE};
use crate::types::{Attr, Unlinked};

tokio::task_local! {
    /// Set while unsent changes are being sent: their own messages do not
    /// wait behind the fence.
    static SENDING_UNSENT: ();
}

/// Whether `CreateFiles` makes the new files of a directory laid out as
/// `layout` (else the server refuses the batch, see create_files.rs).
fn batched(settings: &shoal_proto::cluster::Settings, layout: &NewFile) -> bool {
    settings.colocate
        && (layout.no_metafile
            || (settings.stuffing && layout.num_dfiles > 1)
            || (settings.precreate && layout.num_dfiles == 1))
}

impl Client {
    /// Answers a create of `name` in `dir` here if this client holds the
    /// directory's delegation (None: it goes to the server).
    pub(crate) async fn create_delegated(
        &self,
        dir: Handle,
        name: &str,
        mode: u32,
    ) -> Option<Result<Attr>> {
        if !self.config().settings.delegates_dirs() {
            return None;
        }
        // A create of this client's sent while the delegation it asked for
        // is on its way would move the directory on and void the grant;
        // creates one after another would then never see it held. The
        // answer comes in about one round trip, once per directory.
        self.inner.delegated.ask_ended(dir).await;
        if let Err(e) = check_name(name) {
            return Some(Err(e));
        }
        let known = &self.inner.known_dirs;
        let answered = self
            .inner
            .delegated
            .answer(dir, name, mode & 0o7777, self.cred, || {
                known.add_answered(dir, name, self.cred)
            });
        match answered {
            Answered::Made { handle, send, low } => {
                self.schedule_send(dir, send);
                if low {
                    let c = self.clone();
                    tokio::spawn(async move { c.reserve_again(dir).await });
                }
                // Nobody else can see the file before its create lands, and
                // the server leases it to this client then: until that
                // answer, what this client caches of it stays true as long
                // as it holds the directory. Noted as the file's lease, so
                // that the mount's kernel keeps its attributes as long (a
                // stat of it asks nobody), as for a create its server
                // answered.
                let lease = self.inner.leases.until(dir);
                self.inner.leases.note(handle, lease);
                Some(Ok(self.new_file_attr(handle, mode, lease)))
            }
            Answered::Exists => Some(Err(ShoalError::new(
                Errno::EEXIST,
                format!("{name}: file exists"),
            ))),
            Answered::NotHeld => None,
        }
    }

    /// Answers an unlink of `name` in `dir` here if this client holds the
    /// directory's delegation and made the file under it (None: it goes to
    /// the server). The caller does not hold the file open.
    pub(crate) fn unlink_delegated(&self, dir: Handle, name: &str) -> Option<Result<Unlinked>> {
        if !self.config().settings.delegates_dirs() {
            return None;
        }
        if let Err(e) = check_name(name) {
            return Some(Err(e));
        }
        let known = &self.inner.known_dirs;
        let (handle, send) = self
            .inner
            .delegated
            .answer_unlink(dir, name, self.cred, || {
                known.remove_answered(dir, name, self.cred)
            })?;
        self.inner.names.remove(dir, name);
        self.forget(handle);
        self.inner.uncommitted_writes.forget(handle);
        self.discard_buffered(handle);
        self.schedule_send(dir, send);
        Some(Ok(Unlinked::Removed))
    }

    /// Sends `dir`'s unsent changes as a change answered here asks.
    fn schedule_send(&self, dir: Handle, send: Send) {
        if send.first {
            let c = self.clone();
            let delay = self.inner.delegated.delay;
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                c.send_unsent_changes(dir).await;
            });
        }
        if send.full {
            let c = self.clone();
            tokio::spawn(async move { c.send_unsent_changes(dir).await });
        }
    }

    /// Asks for `dir`'s delegation in the background, if delegations are
    /// on, this client knows all its entries and `CreateFiles` can make its
    /// files (after a create there went to the server).
    pub(crate) fn ask_delegation(&self, dir: Handle) {
        let settings = &self.config().settings;
        if !settings.delegates_dirs() {
            return;
        }
        let Some(version) = self.inner.known_dirs.version(dir, self.cred) else {
            return;
        };
        let layout = new_file(&self.known_hints(dir), self.config());
        if !batched(settings, &layout) {
            return;
        }
        let Some(in_flight) = self.inner.delegated.begin_asking(dir) else {
            return;
        };
        let c = self.clone();
        tokio::spawn(async move {
            let handles = c.delegate(dir, version).await;
            // Held only if nothing changed the names known meanwhile.
            let known = &c.inner.known_dirs;
            c.inner
                .delegated
                .granted(dir, c.cred, handles, || known.pin(dir, version));
            drop(in_flight);
        });
    }

    /// Asks for more handles for `dir`'s delegation.
    async fn reserve_again(&self, dir: Handle) {
        let handles = self.delegate(dir, 0).await;
        self.inner.delegated.reserved(dir, handles);
    }

    /// One `DelegateDir` for `dir` as of `entries_version` (0: a holder
    /// asking for handles): the handles reserved, None if refused or
    /// failed. One ask per server at a time, each after making room for
    /// its reservation (see `delegations`).
    async fn delegate(&self, dir: Handle, entries_version: u64) -> Option<Range<Handle>> {
        let server = server_of(dir);
        let asks = self.inner.delegated.asks(server);
        let _one = asks.lock().await;
        if self.inner.delegated.make_room(server) {
            self.settle_unsent_changes().await;
        }
        let asked = DelegateDirRequest {
            dir,
            entries_version,
            handles: RESERVE,
        };
        let reply = self
            .pool()
            .call::<ops::DelegateDir>(server, self.cred, &asked)
            .await;
        let reserved = reply.ok().map(|r| match r.granted {
            true => r.first_handle..r.first_handle + r.handles as u64,
            false => 0..0,
        });
        self.inner.delegated.asked(server, reserved.clone());
        reserved.filter(|r| !r.is_empty())
    }

    /// Sends every unsent change of `dir`, after any message of `dir`'s
    /// already in flight.
    pub(crate) async fn send_unsent_changes(&self, dir: Handle) {
        let Some(sending) = self.inner.delegated.sending(dir) else {
            return;
        };
        let guard = sending.lock().await;
        while let Some(batch) = self.inner.delegated.take(dir, PER_MESSAGE) {
            let (who, creates) = match batch {
                Batch::Creates(who, creates) => (who, creates),
                Batch::Unlinks(who, unlinks) => {
                    let c = self.with_cred(who);
                    SENDING_UNSENT
                        .scope((), c.send_unsent_unlinks(dir, &unlinks))
                        .await;
                    self.inner.delegated.settled(unlinks.len(), Vec::new());
                    continue;
                }
            };
            let c = self.with_cred(who);
            let names: Vec<String> = creates.iter().map(|k| k.name.clone()).collect();
            let handles: Vec<Handle> = creates.iter().map(|k| k.handle).collect();
            let made = SENDING_UNSENT
                .scope((), c.create_batch(dir, &names, creates[0].mode, &handles))
                .await;
            let mut failed = Vec::new();
            for (i, k) in creates.iter().enumerate() {
                let error = match &made {
                    Err(e) => Some(e.clone()),
                    Ok(files) => match &files[i] {
                        Err(e) => Some(e.clone()),
                        Ok(attr) if attr.handle != k.handle => Some(ShoalError::protocol(format!(
                            "{:?} was made as {:#x}, not {:#x}",
                            k.name, attr.handle, k.handle
                        ))),
                        Ok(_) => None,
                    },
                };
                if let Some(e) = error {
                    tracing::error!(
                        "the create of {:?} in directory {dir:#x}, answered as made, failed \
                         when sent: {e} (its fsync and close report it)",
                        k.name
                    );
                    self.inner.known_dirs.answered_failed(dir, &k.name);
                    self.inner.attrs.remove(&k.handle);
                    self.inner.leases.forget(&[k.handle]);
                    failed.push((k.handle, ShoalError::new(Errno::EIO, e.message)));
                }
            }
            self.inner.delegated.settled(creates.len(), failed);
        }
        drop(guard);
        drop(sending);
        self.inner.delegated.tidy(dir);
    }

    /// Sends unsent unlinks of `dir`'s files, then removes the
    /// datafiles elsewhere of those that went (as an unlink does). One
    /// that fails was answered as done: it is logged, and the directory's
    /// names are no longer taken as known.
    async fn send_unsent_unlinks(&self, dir: Handle, unlinks: &[(String, Handle)]) {
        let names: Vec<String> = unlinks.iter().map(|(n, _)| n.clone()).collect();
        let expected: Vec<Handle> = unlinks.iter().map(|(_, h)| *h).collect();
        let done = self.remove_batch(dir, &names, &expected).await;
        for (i, (name, h)) in unlinks.iter().enumerate() {
            let result = match &done {
                Err(e) => Err(e.clone()),
                Ok(results) => results[i].clone(),
            };
            match result {
                Ok(entry) if entry.removed => {
                    if let Err(e) = self.removed(*h, entry.dist).await {
                        tracing::warn!("removing the datafiles of {name:?} ({h:#x}): {e}");
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::error!(
                        "the unlink of {name:?} in directory {dir:#x}, answered as done, \
                         failed when sent: {e}"
                    );
                    self.inner.known_dirs.forget(dir);
                }
            }
        }
    }

    /// Sends every unsent change anywhere and waits for their answers.
    pub(crate) async fn settle_unsent_changes(&self) {
        let dirs = self.inner.delegated.unsent_dirs();
        futures::future::join_all(dirs.into_iter().map(|d| self.send_unsent_changes(d))).await;
    }

    /// `h`'s attributes or extended attributes are about to change: if it
    /// is a directory whose delegation this client holds, it stops
    /// answering changes there, which its mode, owner, ACL or layout hints
    /// might now refuse (the server still counts it as the holder until it
    /// recalls; a later create there asks again, and is checked again).
    pub(crate) fn stop_answering(&self, h: Handle) {
        self.inner.delegated.ended(h);
    }

    /// Whether this client holds `dir`'s delegation (answers creates there).
    pub fn holds_delegation(&self, dir: Handle) -> bool {
        self.inner.delegated.holds(dir)
    }

    /// The error of a create answered here as `h` that failed when sent.
    pub fn create_failure(&self, h: Handle) -> Result<()> {
        match self.inner.delegated.failure(h) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// The fence of a pool whose client is `inner`: before a request other
/// than one of unsent changes is sent, every change answered here is sent
/// and answered (None: nothing to wait for).
pub(crate) fn fence(inner: Weak<Inner>) -> crate::transport::pool::Fence {
    Arc::new(move || {
        if SENDING_UNSENT.try_with(|_| ()).is_ok() {
            return None;
        }
        let inner = inner.upgrade()?;
        if !inner.delegated.unsettled() {
            return None;
        }
        let c = Client::of(inner);
        Some(async move { c.settle_unsent_changes().await }.boxed())
    })
}

/// A server recalled the delegations of `dirs`: nothing more is answered
/// there, and the unsent changes are sent before the recall is answered.
pub(crate) fn recalled(inner: Arc<Inner>, dirs: Vec<Handle>) -> BoxFuture<'static, ()> {
    for dir in &dirs {
        inner.delegated.ended(*dir);
        inner.known_dirs.unpin(*dir);
    }
    let c = Client::of(inner);
    async move {
        futures::future::join_all(dirs.into_iter().map(|d| c.send_unsent_changes(d))).await;
    }
    .boxed()
}

/// A server's connection ended: every delegation ends with it (its server
/// no longer holds it); the unsent changes are still sent.
pub(crate) fn all_ended(inner: &Inner) {
    for dir in inner.delegated.all_ended() {
        inner.known_dirs.unpin(dir);
    }
}
