//! Namespace operations, composed from the servers' one-object steps in the
//! order that keeps the crash invariant: objects are created before the entry
//! that names them, and an entry is removed before the objects it named. A
//! crash in between leaves orphans for `shoal fsck`, never a dangling entry.

use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::handle::{self, server_of, Handle};
use shoal_proto::hints::{new_file, NewFile};
use shoal_proto::msg::*;
use shoal_proto::names::{check_name, split_path};
use shoal_proto::{crash_points, ops, ObjectKind};

use crate::known_dirs::EntryChange;
use crate::{Attr, Client, DirEntry, FileKind, Unlinked};

/// Symlinks followed while resolving one path.
const MAX_SYMLINKS: usize = 40;

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

/// The attributes a create asks for: the mode (the server takes the owner
/// from the request and the times from its clock).
fn mode_only(mode: u32) -> Attributes {
    Attributes {
        mode,
        ..Default::default()
    }
}

impl Client {
    pub fn root(&self) -> Handle {
        handle::ROOT
    }

    /// Looks `name` up in directory `dir`.
    pub async fn lookup(&self, dir: Handle, name: &str) -> Result<(Handle, FileKind)> {
        let (h, kind) = self.lookup_entry(dir, name).await?;
        Ok((h, file_kind(kind)?))
    }

    /// The entry `name` of `dir`: the handle and the kind of object it names.
    async fn lookup_entry(&self, dir: Handle, name: &str) -> Result<(Handle, ObjectKind)> {
        check_name(name)?;
        if let Some(hit) = self.inner.names.get(dir, name, self.cred) {
            return Ok(hit);
        }
        self.known_absent(dir, name)?;
        let reply = self.lookup_request(dir, name, false).await?;
        let found = (reply.handle, entry_kind(reply.kind)?);
        self.inner.names.put(dir, name, self.cred, found);
        Ok(found)
    }

    /// Looks `name` up in `dir` and returns its attributes (what the kernel
    /// wants of a lookup). With colocate, a file's record sits beside its
    /// entry and comes back with the lookup: one message, not two.
    pub async fn lookup_attr(&self, dir: Handle, name: &str) -> Result<Attr> {
        check_name(name)?;
        if let Some((h, _)) = self.inner.names.get(dir, name, self.cred) {
            return self.getattr(h).await;
        }
        self.known_absent(dir, name)?;
        let want_attrs = self.config().settings.colocate;
        let reply = self.lookup_request(dir, name, want_attrs).await?;
        let (h, kind) = (reply.handle, entry_kind(reply.kind)?);
        self.inner.names.put(dir, name, self.cred, (h, kind));
        self.remember_cap(reply.cap.filter(|c| c.file == h));
        match reply.object.filter(|o| o.handle == h) {
            Some(rec) => self.attr_of(rec, &reply.sizes).await,
            None => self.getattr(h).await,
        }
    }

    /// Sends a change of `dir`'s entries (`send`, a request not yet sent) and
    /// tells `known_dirs` what came of it: the directory's record the reply
    /// carried (`dir_of`), or that the change failed. `tracked` false (the
    /// request changes no entry of `dir`) just sends it.
    async fn change_entries<R>(
        &self,
        dir: Handle,
        tracked: bool,
        send: impl std::future::Future<Output = Result<R>>,
        dir_of: impl Fn(&R) -> Option<&ObjectRecord>,
        change: EntryChange<'_>,
    ) -> Result<R> {
        if !tracked {
            return send.await;
        }
        self.inner.known_dirs.begin(dir);
        let reply = send.await;
        let after = reply.as_ref().ok().and_then(&dir_of);
        self.inner.known_dirs.finish(dir, after, change);
        reply
    }

    /// ENOENT, without a message, if `dir` is a directory whose every entry
    /// this client knows and `name` is not one (`known_dirs`).
    fn known_absent(&self, dir: Handle, name: &str) -> Result<()> {
        if self.inner.known_dirs.absent(dir, name, self.cred) {
            return Err(ShoalError::not_found(format!(
                "{name:?} in directory {dir:#x}"
            )));
        }
        Ok(())
    }

    async fn lookup_request(
        &self,
        dir: Handle,
        name: &str,
        want_attrs: bool,
    ) -> Result<LookupReply> {
        self.pool()
            .call::<ops::Lookup>(
                server_of(dir),
                self.cred,
                &LookupRequest {
                    dir,
                    name: name.to_string(),
                    want_attrs,
                },
            )
            .await
    }

    /// Resolves an absolute Shoal path to a handle. Symlinks in the middle of
    /// the path are followed; a symlink as the last component is returned as is.
    pub async fn resolve(&self, path: &str) -> Result<(Handle, FileKind)> {
        let mut followed = 0;
        let mut pending: Vec<String> = split_path(path)?
            .into_iter()
            .rev()
            .map(String::from)
            .collect();
        let mut stack: Vec<Handle> = vec![handle::ROOT];
        let mut current = (handle::ROOT, FileKind::Directory);
        while let Some(name) = pending.pop() {
            if current.1 != FileKind::Directory {
                return Err(ShoalError::new(
                    Errno::ENOTDIR,
                    format!("{path}: not a directory"),
                ));
            }
            if name == ".." {
                if stack.len() > 1 {
                    stack.pop();
                }
                current = (*stack.last().unwrap(), FileKind::Directory);
                continue;
            }
            let next = self.lookup(current.0, &name).await.map_err(|e| {
                if e.errno == Errno::ENOENT {
                    ShoalError::not_found(path)
                } else {
                    e.context(path)
                }
            })?;
            if next.1 == FileKind::Symlink && !pending.is_empty() {
                followed += 1;
                if followed > MAX_SYMLINKS {
                    return Err(ShoalError::new(
                        Errno::ELOOP,
                        format!("{path}: too many symlinks"),
                    ));
                }
                let target = self.readlink(next.0).await?;
                if target.starts_with('/') {
                    stack.truncate(1);
                    current = (handle::ROOT, FileKind::Directory);
                }
                for part in target
                    .split('/')
                    .filter(|p| !p.is_empty() && *p != ".")
                    .rev()
                {
                    pending.push(part.to_string());
                }
                continue;
            }
            stack.push(next.0);
            current = next;
        }
        Ok(current)
    }

    /// Resolves the parent directory of `path` and returns it with the last name.
    pub async fn resolve_parent<'p>(&self, path: &'p str) -> Result<(Handle, &'p str)> {
        let parts = split_path(path)?;
        let Some((name, _)) = parts.split_last() else {
            return Err(ShoalError::invalid(format!(
                "{path}: the root has no parent"
            )));
        };
        let parent = &path[..path.rfind(name).unwrap_or(0)];
        let (dir, kind) = self
            .resolve(if parent.is_empty() { "/" } else { parent })
            .await?;
        if kind != FileKind::Directory {
            return Err(ShoalError::new(
                Errno::ENOTDIR,
                format!("{parent}: not a directory"),
            ));
        }
        Ok((dir, name))
    }

    async fn create_object(&self, server: u32, req: CreateObjectRequest) -> Result<Handle> {
        let reply: CreateObjectReply = self
            .pool()
            .call::<ops::CreateObject>(server, self.cred, &req)
            .await?;
        Ok(reply.handle)
    }

    /// Adds the entry naming a new object made under the directory hints
    /// `created_under` (ESTALE if they are not `dir`'s any more).
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
        let send = self
            .pool()
            .call::<ops::CrDirEnt>(server_of(dir), self.cred, &request);
        let reply = self
            .change_entries(
                dir,
                true,
                send,
                |r| r.dir.as_ref(),
                EntryChange::Added(name),
            )
            .await?;
        self.refresh_dir(reply.dir);
        self.inner.names.put(dir, name, self.cred, (handle, kind));
        Ok(())
    }

    /// Adds the entry for freshly created objects; if that fails (EEXIST, ...)
    /// the objects are removed again so nothing is orphaned.
    async fn link_new(
        &self,
        dir: Handle,
        name: &str,
        handle: Handle,
        kind: ObjectKind,
        created_under: Option<DirHints>,
    ) -> Result<()> {
        if let Err(e) = self.add_entry(dir, name, handle, kind, created_under).await {
            if let Err(cleanup) = self.remove_objects(handle).await {
                tracing::warn!("could not remove orphan {handle:#x}: {cleanup}");
            }
            return Err(e);
        }
        Ok(())
    }

    /// Creates a regular file, laid out as `dir`'s hints say ([Kuhn 2008]):
    ///
    /// - with precreate or stuffing on: one augmented create to the chosen
    ///   server, then the directory entry (2 messages); with colocate the
    ///   server is the directory's and the entry goes in the same request (1),
    ///   and there the directory's hints decide, no_metafile included;
    /// - in a no_metafile directory otherwise: one datafile, then the entry
    ///   naming it (2 messages, no metafile anywhere);
    /// - otherwise the baseline: metafile, one datafile per server in the
    ///   distribution, the distribution, then the directory entry (n+3).
    pub async fn create(&self, dir: Handle, name: &str, mode: u32) -> Result<Attr> {
        check_name(name)?;
        self.under_hints(dir, |hints| self.create_under(dir, name, mode, hints))
            .await
    }

    async fn create_under(
        &self,
        dir: Handle,
        name: &str,
        mode: u32,
        hints: DirHints,
    ) -> Result<Attr> {
        let settings = &self.config().settings;
        let layout = new_file(&hints, self.config());
        let augmented = settings.precreate || settings.stuffing;
        if layout.no_metafile && !(augmented && settings.colocate) {
            return self.create_without_metafile(dir, name, mode, hints).await;
        }
        if augmented {
            return self.create_augmented(dir, name, mode, &layout, hints).await;
        }
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
            .await?;
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
        shoal_proto::crash_point!(crash_points::CREATE_BEFORE_ENTRY);
        let linked = self
            .add_entry(dir, name, meta, ObjectKind::Metafile, Some(hints))
            .await;
        if let Err(e) = linked {
            self.remove_unnamed(meta, &dist).await;
            return Err(e);
        }
        Ok(self.new_file_attr(meta, mode))
    }

    /// The attributes of a file this client has just made, cached.
    fn new_file_attr(&self, h: Handle, mode: u32) -> Attr {
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
        self.inner.attrs.put(h, attr.clone());
        attr
    }

    /// A file of a no_metafile directory ([Kuhn 2008]), made by the client: one
    /// datafile, which keeps the file's attributes, on the next server round
    /// the ring, then the entry naming it directly: 2 messages, no metafile.
    async fn create_without_metafile(
        &self,
        dir: Handle,
        name: &str,
        mode: u32,
        hints: DirHints,
    ) -> Result<Attr> {
        let made = CreateObjectRequest {
            kind: ObjectKind::Datafile as i32,
            attrs: Some(mode_only(mode)),
            ..Default::default()
        };
        let h = self.create_linked(dir, name, made, hints).await?;
        self.inner.dists.put(h, Distribution::single(h));
        Ok(self.new_file_attr(h, mode))
    }

    /// The augmented create (precreate / stuffing): one request makes the
    /// file, then the entry is added — or, with colocate, the file is made on
    /// the directory's server, which lays it out by the directory's hints,
    /// and the entry goes in the same request. If the entry cannot be added
    /// (EEXIST, ...) the objects go again.
    async fn create_augmented(
        &self,
        dir: Handle,
        name: &str,
        mode: u32,
        layout: &NewFile,
        hints: DirHints,
    ) -> Result<Attr> {
        let settings = &self.config().settings;
        let colocate = settings.colocate;
        let server = if colocate {
            server_of(dir)
        } else {
            self.pick_server()
        };
        let request = CreateFileRequest {
            attrs: Some(mode_only(mode)),
            num_dfiles: layout.num_dfiles,
            strip_size: layout.strip_size,
            stuffed: settings.stuffing,
            dir: if colocate { dir } else { 0 },
            parent: dir,
            name: if colocate {
                name.to_string()
            } else {
                String::new()
            },
        };
        let send = self
            .pool()
            .call::<ops::CreateFile>(server, self.cred, &request);
        // With colocate the entry is made in the same request.
        let reply = self
            .change_entries(
                dir,
                colocate,
                send,
                |r| r.dir.as_ref(),
                EntryChange::Added(name),
            )
            .await?;
        self.remember_cap(reply.cap);
        let rec = reply
            .object
            .ok_or_else(|| ShoalError::protocol("create_file reply without an object"))?;
        let (h, kind) = (rec.handle, rec.kind());
        if colocate {
            self.refresh_dir(reply.dir);
            self.inner.names.put(dir, name, self.cred, (h, kind));
        } else {
            shoal_proto::crash_point!(crash_points::CREATE_BEFORE_ENTRY);
            self.link_new(dir, name, h, kind, Some(hints)).await?;
        }
        // A new file's datafiles are empty.
        let attr = self
            .attr_with(&rec, |d| {
                Some(DatafileSize {
                    handle: d,
                    ..Default::default()
                })
            })?
            .ok_or_else(|| ShoalError::protocol("create_file reply without a file"))?;
        self.inner.attrs.put(h, attr.clone());
        Ok(attr)
    }

    /// Makes the object `made` on the next server round the ring, then the
    /// entry naming it, made under `dir`'s hints `hints` (if the entry is
    /// refused the object goes again).
    async fn create_linked(
        &self,
        dir: Handle,
        name: &str,
        mut made: CreateObjectRequest,
        hints: DirHints,
    ) -> Result<Handle> {
        made.parent = dir;
        let kind = made.kind();
        let h = self.create_object(self.pick_server(), made).await?;
        if kind == ObjectKind::Directory {
            // Nobody else can name it before the entry below exists.
            self.inner.known_dirs.created(h, self.cred);
        }
        shoal_proto::crash_point!(crash_points::CREATE_BEFORE_ENTRY);
        self.link_new(dir, name, h, kind, Some(hints)).await?;
        Ok(h)
    }

    /// Best-effort removal of a file's objects that no entry names yet.
    async fn remove_unnamed(&self, meta: Handle, dist: &Distribution) {
        for h in dist.datafiles.iter().copied().chain([meta]) {
            if let Err(e) = self.remove_unnamed_object(h).await {
                tracing::warn!("could not remove orphan {h:#x}: {e}");
            }
        }
    }

    /// Creates a directory: the directory object, then its entry (2
    /// messages). It starts with a copy of its parent's hints.
    pub async fn mkdir(&self, dir: Handle, name: &str, mode: u32) -> Result<Attr> {
        check_name(name)?;
        self.under_hints(dir, |hints| self.mkdir_under(dir, name, mode, hints))
            .await
    }

    async fn mkdir_under(
        &self,
        dir: Handle,
        name: &str,
        mode: u32,
        hints: DirHints,
    ) -> Result<Attr> {
        let made = CreateObjectRequest {
            kind: ObjectKind::Directory as i32,
            attrs: Some(mode_only(mode)),
            parent: dir,
            hints: Some(hints.clone()),
            ..Default::default()
        };
        let h = self.create_linked(dir, name, made, hints).await?;
        self.getattr(h).await
    }

    /// Creates a symbolic link to `target` (2 messages).
    pub async fn symlink(&self, dir: Handle, name: &str, target: &str) -> Result<Attr> {
        check_name(name)?;
        let h = self
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
        self.link_new(dir, name, h, ObjectKind::Symlink, None)
            .await?;
        self.getattr(h).await
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
        let h = self
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
        self.link_new(dir, name, h, object, None).await?;
        self.getattr(h).await
    }

    pub async fn readlink(&self, h: Handle) -> Result<String> {
        let rec = self.get_record(h).await?;
        if rec.kind() != ObjectKind::Symlink {
            return Err(ShoalError::invalid(format!(
                "object {h:#x} is not a symlink"
            )));
        }
        Ok(rec.target)
    }

    async fn remove_entry(&self, req: RmDirEntRequest) -> Result<(Handle, FileKind)> {
        let (reply, kind) = self.remove_entry_reply(req).await?;
        Ok((reply.handle, kind))
    }

    async fn remove_entry_reply(&self, req: RmDirEntRequest) -> Result<(RmDirEntReply, FileKind)> {
        let (dir, name) = (req.dir, req.name.clone());
        let send = self
            .pool()
            .call::<ops::RmDirEnt>(server_of(dir), self.cred, &req);
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
        self.refresh_dir(reply.dir.clone());
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

    /// Removes an object outright (one that no entry names: a create's
    /// leftovers, a datafile).
    async fn remove_unnamed_object(&self, h: Handle) -> Result<RemoveReply> {
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
    async fn removed(&self, h: Handle, dist: Option<Distribution>) -> Result<()> {
        self.forget(h);
        self.inner.unstable.forget(h);
        self.remove_datafiles(&dist.map(|d| d.datafiles).unwrap_or_default())
            .await
    }

    /// Removes objects no entry names yet (a create whose entry failed).
    async fn remove_objects(&self, h: Handle) -> Result<()> {
        let reply = self.remove_unnamed_object(h).await?;
        self.removed(h, reply.dist).await
    }

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

    /// Uncounts a link of `h`, whose entry is gone (an unlink, a rename
    /// over it); with its last link it goes, unless `keep` (see
    /// [`Client::unlink_keeping`]).
    async fn drop_link(&self, h: Handle, keep: bool) -> Result<Unlinked> {
        let sent: Result<LinkReply> = self
            .pool()
            .call::<ops::Link>(
                server_of(h),
                self.cred,
                &LinkRequest {
                    handle: h,
                    drop: true,
                    keep_unlinked: keep,
                    ..Default::default()
                },
            )
            .await;
        self.forget(h);
        let reply = match sent {
            // Already gone (fsck reclaimed it): nothing left to do.
            Err(e) if e.errno == Errno::ENOENT => return Ok(Unlinked::Removed),
            r => r?,
        };
        if reply.removed {
            self.removed(h, reply.dist).await?;
            return Ok(Unlinked::Removed);
        }
        let links = reply.object.map_or(0, |o| o.links);
        Ok(Unlinked::left(h, links))
    }

    /// Removes a file that lost its last name while open (an
    /// [`Unlinked::Kept`] object) at its last close; one given a name again
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
        if reply.kept {
            return Ok(());
        }
        self.removed(h, reply.dist).await
    }

    /// Makes `new_dir/new_name` another name of `h` (a hard link; not of a
    /// directory, EPERM): the link is counted on `h`'s server, then the
    /// entry added (2 messages, and the attributes), so a crash in between
    /// leaves a count one too high for fsck, never a name the count misses.
    pub async fn link(&self, h: Handle, new_dir: Handle, new_name: &str) -> Result<Attr> {
        check_name(new_name)?;
        let reply: LinkReply = self
            .pool()
            .call::<ops::Link>(
                server_of(h),
                self.cred,
                &LinkRequest {
                    handle: h,
                    ..Default::default()
                },
            )
            .await?;
        self.forget(h);
        let rec = reply
            .object
            .ok_or_else(|| ShoalError::protocol("link reply without the object"))?;
        shoal_proto::crash_point!(crash_points::LINK_BEFORE_ENTRY);
        if let Err(e) = self.add_entry(new_dir, new_name, h, rec.kind(), None).await {
            if let Err(undo) = self.drop_link(h, false).await {
                tracing::warn!("could not uncount the link of {h:#x} just counted: {undo}");
            }
            return Err(e);
        }
        self.getattr(h).await
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
    async fn remove_dir_object(&self, h: Handle, parent: Handle) -> Result<()> {
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
        if reply.kept {
            // The entry was a leftover of an interrupted move: the directory
            // lives on under its true name.
            self.abort_rmdir(h).await;
        }
        Ok(())
    }

    async fn prepare_rmdir(&self, h: Handle) -> Result<()> {
        self.pool()
            .call::<ops::RmdirPrepare>(server_of(h), self.cred, &RmdirRequest { dir: h })
            .await
            .map(|_| ())
    }

    async fn abort_rmdir(&self, h: Handle) {
        if let Err(e) = self
            .pool()
            .call::<ops::RmdirAbort>(server_of(h), self.cred, &RmdirRequest { dir: h })
            .await
        {
            tracing::warn!("could not clear the removal mark of {h:#x}: {e}");
        }
    }

    /// Renames `dir/name` to `new_dir/new_name`, replacing a compatible target
    /// as POSIX says. Within one directory it is one atomic request; across
    /// directories a crash can leave the object named twice, never lost
    /// (see [`Client::rename_keeping`]).
    pub async fn rename(
        &self,
        dir: Handle,
        name: &str,
        new_dir: Handle,
        new_name: &str,
        no_replace: bool,
    ) -> Result<()> {
        self.rename_keeping(dir, name, new_dir, new_name, no_replace, |_| false)
            .await
            .map(|_| ())
    }

    /// Like [`Client::rename`]; a replaced object that is not a directory
    /// loses that name, and with its last one it goes, unless `keep(it)`
    /// says the caller holds it open (see [`Client::unlink_keeping`]).
    /// Returns what became of a replaced object, if any.
    ///
    /// Across directories a directory moves in three steps: the new entry,
    /// its `parent` (the commit point), the old entry removed; a crash in
    /// between leaves two names, and `parent` says which is true. Anything
    /// else moves as a hard link and an unlink: its link counted, the new
    /// entry, the old entry removed, the link uncounted; a crash in between
    /// leaves two true names, or a count one too high for fsck.
    pub async fn rename_keeping(
        &self,
        dir: Handle,
        name: &str,
        new_dir: Handle,
        new_name: &str,
        no_replace: bool,
        keep: impl Fn(Handle) -> bool,
    ) -> Result<Option<Unlinked>> {
        check_name(name)?;
        check_name(new_name)?;
        let (h, entry) = self.lookup_entry(dir, name).await?;
        let kind = file_kind(entry)?;
        let target = match self.lookup(new_dir, new_name).await {
            Ok(t) => Some(t),
            Err(e) if e.errno == Errno::ENOENT => None,
            Err(e) => return Err(e),
        };
        if dir != new_dir {
            // A move to another directory takes several steps on up to
            // three servers; ask first whether the entry may leave `dir`, so
            // that a refused move changes nothing.
            self.check_move_out(dir, name, h).await?;
        }
        // Before the target is marked for removal, so an EINVAL leaves no mark.
        if kind == FileKind::Directory && dir != new_dir {
            self.check_not_inside(h, new_dir).await?;
        }
        if let Some((t, tkind)) = target {
            if t == h {
                // Two names of one object: POSIX says nothing happens.
                return Ok(None);
            }
            if no_replace {
                return Err(ShoalError::new(
                    Errno::EEXIST,
                    format!("{new_name}: file exists"),
                ));
            }
            match (kind == FileKind::Directory, tkind == FileKind::Directory) {
                (true, false) => {
                    return Err(ShoalError::new(
                        Errno::ENOTDIR,
                        format!("{new_name}: not a directory"),
                    ))
                }
                (false, true) => {
                    return Err(ShoalError::new(
                        Errno::EISDIR,
                        format!("{new_name}: is a directory"),
                    ))
                }
                (true, true) => self.prepare_rmdir(t).await?,
                _ => {}
            }
        }
        let moved = self
            .move_entry(dir, name, new_dir, new_name, h, entry, no_replace)
            .await;
        let replaced = match moved {
            Ok(r) => r,
            Err(e) => {
                if let Some((t, FileKind::Directory)) = target {
                    self.abort_rmdir(t).await;
                }
                return Err(e);
            }
        };
        match replaced {
            None => Ok(None),
            // A replaced directory is empty and marked: remove it now.
            Some((d, ObjectKind::Directory)) => {
                self.remove_dir_object(d, new_dir).await?;
                Ok(Some(Unlinked::Removed))
            }
            Some((f, _)) => self.drop_link(f, keep(f)).await.map(Some),
        }
    }

    /// Moves the entry; returns the object a replaced entry named, if any,
    /// with its kind. The new entry names the same kind of object as the old
    /// one: a file without a metafile (no_metafile) stays one wherever it
    /// moves, since hints apply to new files only.
    #[allow(clippy::too_many_arguments)]
    async fn move_entry(
        &self,
        dir: Handle,
        name: &str,
        new_dir: Handle,
        new_name: &str,
        h: Handle,
        kind: ObjectKind,
        no_replace: bool,
    ) -> Result<Option<(Handle, ObjectKind)>> {
        let moved = self
            .move_entry_steps(dir, name, new_dir, new_name, h, kind, no_replace)
            .await;
        // Whatever came of it, for every caller: what this client knew of
        // both names, both directories and the object is out of date.
        self.inner.names.remove(dir, name);
        self.inner.names.remove(new_dir, new_name);
        self.forget(dir);
        self.forget(new_dir);
        self.forget(h);
        let replaced = moved?;
        let kind_of = |k: i32| ObjectKind::try_from(k).unwrap_or(ObjectKind::Unspecified);
        Ok(replaced
            .filter(|(r, _)| *r != 0)
            .map(|(r, k)| (r, kind_of(k))))
    }

    /// The steps of [`Client::move_entry`]; returns the replaced handle (0
    /// if none) and its kind.
    #[allow(clippy::too_many_arguments)]
    async fn move_entry_steps(
        &self,
        dir: Handle,
        name: &str,
        new_dir: Handle,
        new_name: &str,
        h: Handle,
        kind: ObjectKind,
        no_replace: bool,
    ) -> Result<Option<(Handle, i32)>> {
        if dir == new_dir {
            let reply: RenameEntryReply = self
                .pool()
                .call::<ops::RenameEntry>(
                    server_of(dir),
                    self.cred,
                    &RenameEntryRequest {
                        dir,
                        old_name: name.to_string(),
                        new_name: new_name.to_string(),
                        no_replace,
                    },
                )
                .await?;
            if !reply.touched {
                // The object lives elsewhere: its ctime changes there.
                self.set_parent(h, dir).await?;
            }
            return Ok(Some((reply.replaced_handle, reply.replaced_kind)));
        }
        let is_dir = kind == ObjectKind::Directory;
        if !is_dir {
            // The new name is counted before it exists.
            self.pool()
                .call::<ops::Link>(
                    server_of(h),
                    self.cred,
                    &LinkRequest {
                        handle: h,
                        ..Default::default()
                    },
                )
                .await?;
        }
        let added: Result<CrDirEntReply> = self
            .pool()
            .call::<ops::CrDirEnt>(
                server_of(new_dir),
                self.cred,
                &CrDirEntRequest {
                    dir: new_dir,
                    name: new_name.to_string(),
                    handle: h,
                    kind: kind as i32,
                    replace: !no_replace,
                    created_under: None,
                },
            )
            .await;
        let added = match added {
            Ok(a) => a,
            Err(e) => {
                if !is_dir {
                    if let Err(undo) = self.drop_link(h, false).await {
                        tracing::warn!("could not uncount the link of {h:#x} just counted: {undo}");
                    }
                }
                return Err(e);
            }
        };
        shoal_proto::crash_point!(crash_points::MOVE_AFTER_LINK);
        if is_dir {
            // The commit point: from here the new entry is the true one.
            self.set_parent(h, new_dir).await?;
            shoal_proto::crash_point!(crash_points::MOVE_AFTER_PARENT);
        }
        let (removed, _) = self
            .remove_entry_reply(RmDirEntRequest {
                dir,
                name: name.to_string(),
                expect_handle: h,
                drop_local_link: !is_dir,
                ..Default::default()
            })
            .await?;
        if !is_dir && !removed.dropped {
            self.drop_link(h, false).await?;
        }
        Ok(Some((added.replaced_handle, added.replaced_kind)))
    }

    /// Sets the directory that names `h` (and its ctime, see
    /// SetParentRequest).
    async fn set_parent(&self, h: Handle, parent: Handle) -> Result<()> {
        self.pool()
            .call::<ops::SetParent>(
                server_of(h),
                self.cred,
                &SetParentRequest { dir: h, parent },
            )
            .await
            .map(|_| ())
    }

    /// Whether the caller may move entry `name` of `dir` (naming `h`) to
    /// another directory: write and search permission on `dir`, its sticky
    /// rule, and write permission on `h` if it is a directory (one message,
    /// RmDirEnt with `check_only`: nothing changes).
    async fn check_move_out(&self, dir: Handle, name: &str, h: Handle) -> Result<()> {
        self.remove_entry(RmDirEntRequest {
            dir,
            name: name.to_string(),
            expect_handle: h,
            check_only: true,
            ..Default::default()
        })
        .await
        .map(|_| ())
    }

    /// EINVAL if `dir` is `ancestor` or lies below it (a directory cannot be
    /// moved into itself).
    async fn check_not_inside(&self, ancestor: Handle, mut dir: Handle) -> Result<()> {
        for _ in 0..4096 {
            if dir == ancestor {
                return Err(ShoalError::invalid("cannot move a directory into itself"));
            }
            if dir == handle::ROOT {
                return Ok(());
            }
            dir = self.get_record(dir).await?.parent;
        }
        Err(ShoalError::new(Errno::ELOOP, "directory tree too deep"))
    }

    /// One batch of entries of `dir` after `start_after`, and whether the
    /// listing is complete.
    pub async fn readdir(
        &self,
        dir: Handle,
        start_after: &str,
        max: u32,
    ) -> Result<(Vec<DirEntry>, bool)> {
        let reply: ReaddirReply = self
            .pool()
            .call::<ops::Readdir>(
                server_of(dir),
                self.cred,
                &ReaddirRequest {
                    dir,
                    start_after: start_after.to_string(),
                    max,
                },
            )
            .await?;
        let entries = reply
            .entries
            .into_iter()
            .map(|e| {
                let kind = entry_kind(e.kind)?;
                if reply.searchable {
                    self.inner
                        .names
                        .put(dir, &e.name, self.cred, (e.handle, kind));
                }
                Ok(DirEntry {
                    name: e.name,
                    handle: e.handle,
                    kind: file_kind(kind)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((entries, reply.done))
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
