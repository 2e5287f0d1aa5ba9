//! Lookups: one name in a directory (from the name cache, from
//! `known_dirs` when the directory's every entry is known, else one
//! message), and whole paths, symlinks followed.

use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::handle::{self, Handle};
use shoal_proto::msg::*;
use shoal_proto::names::{check_name, split_path};
use shoal_proto::{ops, ObjectKind};
use std::time::Instant;

use super::{entry_kind, file_kind};
use crate::client::Client;
use crate::types::{Attr, FileKind};

/// Symlinks followed while resolving one path.
const MAX_SYMLINKS: usize = 40;

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
    pub(super) async fn lookup_entry(
        &self,
        dir: Handle,
        name: &str,
    ) -> Result<(Handle, ObjectKind)> {
        check_name(name)?;
        if let Some(hit) = self.inner.names.get(dir, name, self.cred) {
            return Ok(hit);
        }
        self.known_absent(dir, name)?;
        let (reply, lease) = self.lookup_request(dir, name, false).await?;
        let found = (reply.handle, entry_kind(reply.kind)?);
        self.inner.names.put(dir, name, self.cred, found, lease);
        self.inner.undo_if_recalled([(dir, lease)]);
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
        let (reply, lease) = self.lookup_request(dir, name, want_attrs).await?;
        let (h, kind) = (reply.handle, entry_kind(reply.kind)?);
        self.inner.names.put(dir, name, self.cred, (h, kind), lease);
        self.inner.undo_if_recalled([(dir, lease)]);
        self.remember_cap(reply.cap.filter(|c| c.file == h));
        match reply.object.filter(|o| o.handle == h) {
            // The lease covers the object the reply carries.
            Some(rec) => self.attr_of(rec, &reply.sizes, lease).await,
            None => self.getattr(h).await,
        }
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
    ) -> Result<(LookupReply, Option<Instant>)> {
        let request = LookupRequest {
            dir,
            name: name.to_string(),
            want_attrs,
        };
        let route = || self.inner.partitions.route(dir, name);
        let (reply, lease) = self
            .call_leasing_routed::<ops::Lookup>(dir, route, true, &request)
            .await?;
        self.inner.leases.note(dir, lease);
        Ok((reply, lease))
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

    pub async fn readlink(&self, h: Handle) -> Result<String> {
        let rec = self.get_record(h).await?;
        if rec.kind() != ObjectKind::Symlink {
            return Err(ShoalError::invalid(format!(
                "object {h:#x} is not a symlink"
            )));
        }
        Ok(rec.target)
    }
}
