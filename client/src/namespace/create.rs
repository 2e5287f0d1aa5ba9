//! Creates: regular files, laid out as their directory's hints say
//! ([Kuhn 2008]) by one of four protocols ([`Protocol`]), directories,
//! symlinks and special files.
//!
//! A file and a directory share one shell ([`Client::create_named`]): under
//! the directory's hints as last seen, the objects are made, then the entry
//! naming them (a crash in between leaves orphans for fsck, never an entry
//! naming nothing); a refused entry takes the objects away again, and one
//! refused because the hints changed (ESTALE) is made once more under the
//! new ones ([`Client::under_hints`]).

use std::future::Future;
use std::time::Instant;

use shoal_proto::cluster::Settings;
use shoal_proto::error::{Result, ShoalError};
use shoal_proto::handle::{server_of, Handle};
use shoal_proto::hints::{new_file, NewFile};
use shoal_proto::msg::*;
use shoal_proto::names::check_name;
use shoal_proto::{crash_points, ops, ObjectKind};

use crate::client::Client;
use crate::consistency::known_dirs::EntryChange;
use crate::types::{Attr, FileKind};

/// How a regular file is created: the ablation's matrix of settings and
/// directory hints, read in one place ([`Protocol::of`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Protocol {
    /// The baseline ([Carns 2009], section II), n+3 messages: the metafile,
    /// one datafile per server in the distribution, the distribution, then
    /// the directory entry.
    Baseline,
    /// A file of a no_metafile directory ([Kuhn 2008]), made by the client:
    /// one datafile, which keeps the file's attributes, on the next server
    /// round the ring, then the entry naming it directly: 2 messages, no
    /// metafile.
    NoMetafile,
    /// The augmented create (precreate / stuffing, [Carns 2009], sections
    /// III.A and III.B): one request makes the file on the next server round
    /// the ring, then the entry is added: 2 messages. `stuffed`: the file
    /// starts with one datafile, beside its metafile.
    Augmented { stuffed: bool },
    /// The augmented create with colocate: the file is made on the
    /// directory's server, which lays it out by the directory's hints
    /// (no_metafile included), and the entry goes in the same request: 1
    /// message.
    Colocated { stuffed: bool },
}

impl Protocol {
    /// The protocol of a new file under `settings`, in a directory whose
    /// hints say `no_metafile` or not.
    fn of(settings: &Settings, no_metafile: bool) -> Protocol {
        let augmented = settings.precreate || settings.stuffing;
        let stuffed = settings.stuffing;
        match (augmented, settings.colocate, no_metafile) {
            // The directory's server decides, no_metafile included.
            (true, true, _) => Protocol::Colocated { stuffed },
            (_, _, true) => Protocol::NoMetafile,
            (true, false, false) => Protocol::Augmented { stuffed },
            // Colocate places the augmented create only: the baseline's
            // objects go round the ring.
            (false, _, false) => Protocol::Baseline,
        }
    }
}

/// What a create made before the entry naming it.
struct Made {
    handle: Handle,
    kind: ObjectKind,
    /// The record of a file its server made whole (the augmented create),
    /// from which its attributes are taken.
    record: Option<ObjectRecord>,
    /// The lease its server granted on it with its reply, if any: the
    /// creator may cache its attributes until then (`leases`).
    lease: Option<Instant>,
    entry: Entry,
}

/// The entry of what a create made.
enum Entry {
    /// In already: made in the same request (colocate).
    Added,
    /// Still to add; if it is refused, the objects go again as `Undo` says.
    ToAdd(Undo),
}

/// How the objects of a create whose entry was refused are removed.
enum Undo {
    /// The object; its server's reply lists the datafiles to remove after it.
    Object,
    /// Each datafile of the distribution, then the metafile (the baseline:
    /// the client made them one by one and knows them).
    Parts(Distribution),
}

/// What a `CreateObject` made: the object's handle, and its record as made,
/// leased to this client until `lease` (what a GetAttr would answer).
struct NewObject {
    handle: Handle,
    record: ObjectRecord,
    lease: Option<Instant>,
}

impl Made {
    /// An object `CreateObject` made, which needs its entry and goes alone
    /// if that is refused.
    fn object(new: NewObject) -> Made {
        Made {
            handle: new.handle,
            kind: new.record.kind(),
            record: Some(new.record),
            lease: new.lease,
            entry: Entry::ToAdd(Undo::Object),
        }
    }
}

/// The attributes a create asks for: the mode (the server takes the owner
/// from the request and the times from its clock).
fn mode_only(mode: u32) -> Attributes {
    Attributes {
        mode,
        ..Default::default()
    }
}

impl Client {
    /// Creates a regular file, laid out as `dir`'s hints say ([Kuhn 2008]),
    /// by the protocol the settings and those hints choose ([`Protocol`]).
    pub async fn create(&self, dir: Handle, name: &str, mode: u32) -> Result<Attr> {
        if let Some(answered) = self.create_delegated(dir, name, mode).await {
            return answered;
        }
        let made = self
            .create_named(dir, name, |hints| self.make_file(dir, name, mode, hints))
            .await?;
        self.ask_delegation(dir);
        let h = made.handle;
        let Some(rec) = made.record else {
            // The baseline's: made piece by piece, leased by none.
            return Ok(self.new_file_attr(h, mode, None));
        };
        // The attributes and layout come from the record (a file without a
        // metafile's record is its one datafile's, which says so).
        let attr = self.made_file_attr(&rec)?;
        self.inner.attrs.put_leased(h, attr.clone(), made.lease);
        self.inner.undo_if_recalled([(h, made.lease)]);
        Ok(attr)
    }

    /// Creates a directory: the directory object, then its entry (2
    /// messages). It starts with a copy of its parent's hints.
    pub async fn mkdir(&self, dir: Handle, name: &str, mode: u32) -> Result<Attr> {
        let made = self
            .create_named(dir, name, |hints| async move {
                let made = CreateObjectRequest {
                    kind: ObjectKind::Directory as i32,
                    attrs: Some(mode_only(mode)),
                    parent: dir,
                    hints: Some(hints),
                    ..Default::default()
                };
                let new = self.create_object(self.pick_server(), made).await?;
                // Nobody else can name it before its entry exists.
                self.inner.known_dirs.created(new.handle, self.cred);
                Ok(Made::object(new))
            })
            .await?;
        let record = made
            .record
            .ok_or_else(|| ShoalError::protocol("a mkdir made no record"))?;
        self.attr_of(record, &[], made.lease).await
    }

    /// The shell of a create: `make` makes the objects under `dir`'s hints,
    /// then the entry naming them is added, made under those hints; if it is
    /// refused the objects go again, and if it was refused because the hints
    /// changed, all of it runs once more under the new ones.
    async fn create_named<F, Fut>(&self, dir: Handle, name: &str, make: F) -> Result<Made>
    where
        F: Fn(DirHints) -> Fut,
        Fut: Future<Output = Result<Made>>,
    {
        check_name(name)?;
        self.under_hints(dir, |hints| {
            let making = make(hints.clone());
            async move {
                let made = making.await?;
                if let Entry::ToAdd(undo) = &made.entry {
                    shoal_proto::crash_point!(crash_points::CREATE_BEFORE_ENTRY);
                    self.link_new(dir, name, made.handle, made.kind, undo, Some(hints))
                        .await?;
                }
                Ok(made)
            }
        })
        .await
    }

    /// The objects of a regular file in `dir` under its hints `hints`: the
    /// one `match` that runs the protocol chosen.
    async fn make_file(&self, dir: Handle, name: &str, mode: u32, hints: DirHints) -> Result<Made> {
        let layout = new_file(&hints, self.config());
        match Protocol::of(&self.config().settings, layout.no_metafile) {
            Protocol::Baseline => self.make_baseline(dir, mode, &layout).await,
            Protocol::NoMetafile => {
                let made = CreateObjectRequest {
                    kind: ObjectKind::Datafile as i32,
                    attrs: Some(mode_only(mode)),
                    parent: dir,
                    ..Default::default()
                };
                let new = self.create_object(self.pick_server(), made).await?;
                Ok(Made::object(new))
            }
            Protocol::Augmented { stuffed } => {
                self.make_augmented(dir, name, mode, &layout, stuffed, false)
                    .await
            }
            Protocol::Colocated { stuffed } => {
                self.make_augmented(dir, name, mode, &layout, stuffed, true)
                    .await
            }
        }
    }

    /// The baseline's objects ([Carns 2009], section II): the metafile on
    /// one server, one datafile on each of the next servers round the ring,
    /// in parallel, then the distribution on the metafile (n+2 messages; the
    /// entry is the last). If any step fails, what was made goes again.
    async fn make_baseline(&self, dir: Handle, mode: u32, layout: &NewFile) -> Result<Made> {
        let meta_server = self.pick_server();
        let meta = self
            .create_object(
                meta_server,
                CreateObjectRequest {
                    kind: ObjectKind::Metafile as i32,
                    attrs: Some(mode_only(mode)),
                    parent: dir,
                    ..Default::default()
                },
            )
            .await?
            .handle;
        let servers: Vec<u32> = (0..layout.num_dfiles)
            .map(|i| (meta_server + i) % self.num_servers())
            .collect();
        let created = futures::future::join_all(servers.iter().map(|s| async move {
            let reply: CreateDatafilesReply = self
                .pool()
                .call::<ops::CreateDatafiles>(*s, self.cred, &CreateDatafilesRequest { count: 1 })
                .await?;
            reply
                .handles
                .first()
                .copied()
                .ok_or_else(|| ShoalError::protocol("create_datafiles returned no handle"))
        }))
        .await;
        let dist = Distribution {
            strip_size: layout.strip_size,
            write_threshold: layout.write_threshold,
            datafiles: created
                .iter()
                .filter_map(|r| r.as_ref().ok().copied())
                .collect(),
            ..Default::default()
        };
        let set = match created.into_iter().find_map(|r| r.err()) {
            Some(e) => Err(e),
            None => self
                .pool()
                .call::<ops::SetDist>(
                    meta_server,
                    self.cred,
                    &SetDistRequest {
                        handle: meta,
                        dist: Some(dist.clone()),
                    },
                )
                .await
                .map(|reply| self.remember_cap(reply.cap)),
        };
        if let Err(e) = set {
            self.remove_unnamed(meta, &dist).await;
            return Err(e);
        }
        self.inner.dists.put(meta, dist.clone());
        Ok(Made {
            handle: meta,
            kind: ObjectKind::Metafile,
            record: None,
            lease: None,
            entry: Entry::ToAdd(Undo::Parts(dist)),
        })
    }

    /// The augmented create (precreate / stuffing): one request makes the
    /// file, and the entry is added after it — or, with `colocate`, the file
    /// is made on the directory's server, which lays it out by the
    /// directory's hints, and the entry goes in the same request.
    async fn make_augmented(
        &self,
        dir: Handle,
        name: &str,
        mode: u32,
        layout: &NewFile,
        stuffed: bool,
        colocate: bool,
    ) -> Result<Made> {
        let request = CreateFileRequest {
            attrs: Some(mode_only(mode)),
            num_dfiles: layout.num_dfiles,
            strip_size: layout.strip_size,
            stuffed,
            dir: if colocate { dir } else { 0 },
            parent: dir,
            name: if colocate {
                name.to_string()
            } else {
                String::new()
            },
            write_threshold: layout.write_threshold,
        };
        // With colocate the file is made beside its entry, on the server of
        // the name's partition; else on any server.
        let send = async {
            if !colocate {
                return self
                    .pool()
                    .call_leasing::<ops::CreateFile>(self.pick_server(), self.cred, &request)
                    .await;
            }
            let route = || self.inner.partitions.route(dir, name);
            self.call_leasing_routed::<ops::CreateFile>(dir, route, true, &request)
                .await
        };
        // With colocate the entry is made in the same request.
        let asked = Instant::now();
        let (reply, lease) = self
            .change_entries(
                dir,
                colocate,
                send,
                |(r, _)| r.dir.as_ref(),
                EntryChange::Added(name),
            )
            .await?;
        self.remember_cap(reply.cap);
        let rec = reply
            .object
            .ok_or_else(|| ShoalError::protocol("create_file reply without an object"))?;
        let (h, kind) = (rec.handle, rec.kind());
        let entry = if colocate {
            self.refresh_dir(reply.dir, asked);
            let lease = self.inner.leases.until(dir);
            self.inner.names.put(dir, name, self.cred, (h, kind), lease);
            self.inner.undo_if_recalled_after(dir, asked);
            Entry::Added
        } else {
            Entry::ToAdd(Undo::Object)
        };
        self.inner.leases.note(h, lease);
        self.inner.undo_if_recalled([(h, lease)]);
        Ok(Made {
            handle: h,
            kind,
            record: Some(rec),
            lease,
            entry,
        })
    }

    /// Creates a symbolic link to `target` (2 messages).
    pub async fn symlink(&self, dir: Handle, name: &str, target: &str) -> Result<Attr> {
        check_name(name)?;
        let new = self
            .create_object(
                server_of(dir),
                CreateObjectRequest {
                    kind: ObjectKind::Symlink as i32,
                    target: target.to_string(),
                    parent: dir,
                    ..Default::default()
                },
            )
            .await?;
        self.link_new(
            dir,
            name,
            new.handle,
            ObjectKind::Symlink,
            &Undo::Object,
            None,
        )
        .await?;
        self.attr_of(new.record, &[], new.lease).await
    }

    /// Creates a special file (a FIFO, socket or device, `kind`) with
    /// permission bits `mode` and, for a device, number `rdev` (2 messages,
    /// as a symlink). Opening it is the local kernel's business.
    pub async fn mknod(
        &self,
        dir: Handle,
        name: &str,
        kind: FileKind,
        mode: u32,
        rdev: u64,
    ) -> Result<Attr> {
        check_name(name)?;
        let object = kind.special_object().ok_or_else(|| {
            ShoalError::invalid(format!("mknod makes special files, not a {kind:?}"))
        })?;
        let new = self
            .create_object(
                server_of(dir),
                CreateObjectRequest {
                    kind: object as i32,
                    attrs: Some(mode_only(mode)),
                    parent: dir,
                    rdev,
                    ..Default::default()
                },
            )
            .await?;
        self.link_new(dir, name, new.handle, object, &Undo::Object, None)
            .await?;
        self.attr_of(new.record, &[], new.lease).await
    }

    async fn create_object(&self, server: u32, req: CreateObjectRequest) -> Result<NewObject> {
        let (reply, lease): (CreateObjectReply, _) = self
            .pool()
            .call_leasing::<ops::CreateObject>(server, self.cred, &req)
            .await?;
        let record = reply
            .object
            .filter(|o| o.handle == reply.handle)
            .ok_or_else(|| ShoalError::protocol("a create_object reply without its object"))?;
        self.inner.leases.note(reply.handle, lease);
        Ok(NewObject {
            handle: reply.handle,
            record,
            lease,
        })
    }

    /// Adds the entry for freshly created objects; if that fails (EEXIST, ...)
    /// the objects are removed again as `undo` says, so nothing is orphaned.
    async fn link_new(
        &self,
        dir: Handle,
        name: &str,
        handle: Handle,
        kind: ObjectKind,
        undo: &Undo,
        created_under: Option<DirHints>,
    ) -> Result<()> {
        let Err(e) = self.add_entry(dir, name, handle, kind, created_under).await else {
            return Ok(());
        };
        match undo {
            Undo::Object => {
                if let Err(cleanup) = self.remove_objects(handle).await {
                    tracing::warn!("could not remove orphan {handle:#x}: {cleanup}");
                }
            }
            Undo::Parts(dist) => self.remove_unnamed(handle, dist).await,
        }
        Err(e)
    }

    /// Best-effort removal of a file's objects that no entry names yet.
    async fn remove_unnamed(&self, meta: Handle, dist: &Distribution) {
        for h in dist.datafiles.iter().copied().chain([meta]) {
            if let Err(e) = self.remove_unnamed_object(h).await {
                tracing::warn!("could not remove orphan {h:#x}: {e}");
            }
        }
    }

    /// The attributes of a file its server has just made, from its record
    /// (its datafiles are empty).
    pub(super) fn made_file_attr(&self, rec: &ObjectRecord) -> Result<Attr> {
        self.attr_with(rec, |d| {
            Some(DatafileSize {
                handle: d,
                ..Default::default()
            })
        })?
        .ok_or_else(|| ShoalError::protocol("a create's reply without a file"))
    }

    /// The attributes of a file this client has just made, cached (until
    /// `lease` if that is later than the cache's time).
    pub(super) fn new_file_attr(&self, h: Handle, mode: u32, lease: Option<Instant>) -> Attr {
        let now = shoal_proto::time::now_ns();
        // The servers give it to the caller, root squashed if so set.
        let owner = if self.config().settings.root_squash {
            self.cred.squashed()
        } else {
            self.cred
        };
        let attr = Attr {
            handle: h,
            kind: FileKind::File,
            mode: mode & 0o7777,
            uid: owner.uid,
            gid: owner.gid,
            size: 0,
            atime_ns: now,
            mtime_ns: now,
            ctime_ns: now,
            nlink: 1,
            rdev: 0,
        };
        self.inner.attrs.put_leased(h, attr.clone(), lease);
        attr
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every combination of the switches that matter to a create and the
    /// directory's no_metafile hint, with the protocol it must choose.
    #[test]
    fn the_whole_matrix() {
        use Protocol::*;
        // (precreate, stuffing, colocate, no_metafile) -> protocol
        let matrix = [
            ((false, false, false, false), Baseline),
            ((false, false, false, true), NoMetafile),
            ((false, false, true, false), Baseline),
            ((false, false, true, true), NoMetafile),
            ((false, true, false, false), Augmented { stuffed: true }),
            ((false, true, false, true), NoMetafile),
            ((false, true, true, false), Colocated { stuffed: true }),
            ((false, true, true, true), Colocated { stuffed: true }),
            ((true, false, false, false), Augmented { stuffed: false }),
            ((true, false, false, true), NoMetafile),
            ((true, false, true, false), Colocated { stuffed: false }),
            ((true, false, true, true), Colocated { stuffed: false }),
            ((true, true, false, false), Augmented { stuffed: true }),
            ((true, true, false, true), NoMetafile),
            ((true, true, true, false), Colocated { stuffed: true }),
            ((true, true, true, true), Colocated { stuffed: true }),
        ];
        for ((precreate, stuffing, colocate, no_metafile), want) in matrix {
            let settings = Settings {
                precreate,
                stuffing,
                colocate,
                ..Settings::default()
            };
            assert_eq!(
                Protocol::of(&settings, no_metafile),
                want,
                "precreate {precreate} stuffing {stuffing} colocate {colocate} \
                 no_metafile {no_metafile}"
            );
        }
    }

    #[test]
    fn the_named_setups() {
        assert_eq!(
            Protocol::of(&Settings::default(), false),
            Protocol::Colocated { stuffed: true },
            "everything on by default"
        );
        assert_eq!(
            Protocol::of(&Settings::baseline(), false),
            Protocol::Baseline
        );
        assert_eq!(
            Protocol::of(&Settings::baseline(), true),
            Protocol::NoMetafile
        );
    }

    /// A file made in `mode` is cached with it, owned by the caller.
    #[test]
    fn a_new_file_is_cached_as_made() {
        let client = super::super::test_client(2, Settings::default());
        let attr = client.new_file_attr(0x42, 0o100644, None);
        assert_eq!(
            (attr.kind, attr.mode, attr.size),
            (FileKind::File, 0o644, 0)
        );
        assert_eq!((attr.uid, attr.gid), (client.cred.uid, client.cred.gid));
        assert_eq!(client.inner.attrs.get(&0x42), Some(attr));
    }
}
