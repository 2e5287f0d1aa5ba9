//! Renames: one atomic request within a directory; across directories a
//! directory moves by its `parent` (the commit point), anything else as a
//! hard link and an unlink.

use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::handle::{self, server_of, Handle};
use shoal_proto::msg::*;
use shoal_proto::names::check_name;
use shoal_proto::{crash_points, ops, ObjectKind};

use super::file_kind;
use crate::client::Client;
use crate::types::{FileKind, Unlinked};

/// One move of an entry: `dir/name`, naming `h` (an object of `kind`), to
/// `new_dir/new_name`.
#[derive(Clone, Copy)]
struct Move<'a> {
    dir: Handle,
    name: &'a str,
    new_dir: Handle,
    new_name: &'a str,
    h: Handle,
    kind: ObjectKind,
    no_replace: bool,
}

/// What a rename does to the object its new name names already.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Target {
    /// The name is free.
    Free,
    /// It names the object moved: two names of one object, and POSIX says
    /// nothing happens.
    Same,
    /// Another object that is not a directory: it loses that name.
    Object(Handle),
    /// An empty directory, replaced by a directory: it is marked so nothing
    /// can be added before the move, and removed after it.
    Directory(Handle),
}

/// What moving `h`, of `kind`, to `new_name` does to `target` (what that
/// name names, if anything), or the error POSIX gives: EEXIST with
/// `no_replace`, ENOTDIR for a directory over something else, EISDIR for
/// something else over a directory.
fn replacing(
    h: Handle,
    kind: FileKind,
    target: Option<(Handle, FileKind)>,
    no_replace: bool,
    new_name: &str,
) -> Result<Target> {
    let Some((t, tkind)) = target else {
        return Ok(Target::Free);
    };
    if t == h {
        return Ok(Target::Same);
    }
    if no_replace {
        return Err(ShoalError::new(
            Errno::EEXIST,
            format!("{new_name}: file exists"),
        ));
    }
    match (kind == FileKind::Directory, tkind == FileKind::Directory) {
        (true, false) => Err(ShoalError::new(
            Errno::ENOTDIR,
            format!("{new_name}: not a directory"),
        )),
        (false, true) => Err(ShoalError::new(
            Errno::EISDIR,
            format!("{new_name}: is a directory"),
        )),
        (true, true) => Ok(Target::Directory(t)),
        (false, false) => Ok(Target::Object(t)),
    }
}

/// The object a replaced entry named, from a reply's handle (0 if none)
/// and kind.
fn replaced_object(replaced: Option<(Handle, i32)>) -> Option<(Handle, ObjectKind)> {
    let kind_of = |k: i32| ObjectKind::try_from(k).unwrap_or(ObjectKind::Unspecified);
    replaced
        .filter(|(r, _)| *r != 0)
        .map(|(r, k)| (r, kind_of(k)))
}

impl Client {
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
        // Its steps are not tracked as the directories' entry changes: no
        // create or unlink may be answered locally there meanwhile.
        self.stop_answering(dir);
        self.stop_answering(new_dir);
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
        let target = replacing(h, kind, target, no_replace, new_name)?;
        match target {
            Target::Same => return Ok(None),
            Target::Directory(t) => self.prepare_rmdir(t).await?,
            Target::Free | Target::Object(_) => {}
        }
        let moving = Move {
            dir,
            name,
            new_dir,
            new_name,
            h,
            kind: entry,
            no_replace,
        };
        let moved = self.move_entry(moving).await;
        let replaced = match moved {
            Ok(r) => r,
            Err(e) => {
                if let Target::Directory(t) = target {
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
    async fn move_entry(&self, m: Move<'_>) -> Result<Option<(Handle, ObjectKind)>> {
        let moved = self.move_entry_steps(m).await;
        self.forget_moved(m);
        Ok(replaced_object(moved?))
    }

    /// Whatever came of a move, for every caller: what this client knew of
    /// both names, both directories and the object is out of date.
    fn forget_moved(&self, m: Move<'_>) {
        self.inner.names.remove(m.dir, m.name);
        self.inner.names.remove(m.new_dir, m.new_name);
        self.forget(m.dir);
        self.forget(m.new_dir);
        self.forget(m.h);
    }

    /// The steps of [`Client::move_entry`]; returns the replaced handle (0
    /// if none) and its kind.
    async fn move_entry_steps(&self, m: Move<'_>) -> Result<Option<(Handle, i32)>> {
        let Move {
            dir,
            name,
            new_dir,
            new_name,
            h,
            kind,
            no_replace,
        } = m;
        if dir == new_dir {
            if let Some(reply) = self
                .rename_in_partition(dir, name, new_name, no_replace)
                .await?
            {
                if !reply.touched {
                    // The object lives elsewhere: its ctime changes there.
                    self.set_parent(h, dir).await?;
                }
                return Ok(Some((reply.replaced_handle, reply.replaced_kind)));
            }
            // The names are in different partitions of a split directory:
            // moved as between two directories.
        }
        let is_dir = kind == ObjectKind::Directory;
        if !is_dir {
            // The new name is counted before it exists.
            self.count_link(h).await?;
        }
        let request = CrDirEntRequest {
            dir: new_dir,
            name: new_name.to_string(),
            handle: h,
            kind: kind as i32,
            replace: !no_replace,
            created_under: None,
        };
        let added = self
            .call_in_partition::<ops::CrDirEnt>(new_dir, new_name, &request)
            .await;
        let added = match added {
            Ok(a) => a,
            Err(e) => {
                // As in link: an entry that may stand keeps its count.
                if !is_dir && !e.may_have_been_applied() {
                    self.uncount_link(h).await;
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

    /// Renames `name` to `new_name` in `dir` with one `RenameEntry` when both
    /// names are in one partition (always, unless `dir` is split); None
    /// when they are not.
    async fn rename_in_partition(
        &self,
        dir: Handle,
        name: &str,
        new_name: &str,
        no_replace: bool,
    ) -> Result<Option<RenameEntryReply>> {
        let partitions = &self.inner.partitions;
        loop {
            let to = partitions.route(dir, name);
            if to != partitions.route(dir, new_name) {
                return Ok(None);
            }
            let request = RenameEntryRequest {
                dir: to,
                old_name: name.to_string(),
                new_name: new_name.to_string(),
                no_replace,
            };
            let asked = self
                .retried(
                    dir,
                    || to,
                    false,
                    |to| {
                        self.pool()
                            .call::<ops::RenameEntry>(server_of(to), self.cred, &request)
                    },
                )
                .await;
            match asked {
                Err(e) if e.errno == Errno::MOVED => self.learn_partitions(dir, to).await?,
                other => return other.map(Some),
            }
        }
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Attr;
    use shoal_proto::cluster::Settings;

    #[test]
    fn what_a_rename_does_to_its_target() {
        use FileKind::{Directory as D, File as F, Symlink as S};
        use Target::*;
        let (h, t) = (0x10, 0x20);
        // (kind moved, what the new name names, no_replace) -> outcome
        let cases = [
            ((F, None, false), Ok(Free)),
            ((F, None, true), Ok(Free)),
            // Two names of one object: nothing, even with no_replace.
            ((F, Some((h, F)), true), Ok(Same)),
            ((D, Some((h, D)), false), Ok(Same)),
            // no_replace comes before the kinds.
            ((F, Some((t, F)), true), Err(Errno::EEXIST)),
            ((F, Some((t, D)), true), Err(Errno::EEXIST)),
            ((D, Some((t, F)), true), Err(Errno::EEXIST)),
            ((D, Some((t, D)), true), Err(Errno::EEXIST)),
            ((F, Some((t, S)), false), Ok(Object(t))),
            ((S, Some((t, F)), false), Ok(Object(t))),
            ((D, Some((t, F)), false), Err(Errno::ENOTDIR)),
            ((F, Some((t, D)), false), Err(Errno::EISDIR)),
            ((D, Some((t, D)), false), Ok(Directory(t))),
        ];
        for ((kind, target, no_replace), want) in cases {
            assert_eq!(
                replacing(h, kind, target, no_replace, "b").map_err(|e| e.errno),
                want,
                "{kind:?} over {target:?}, no_replace {no_replace}"
            );
        }
    }

    #[test]
    fn a_replaced_entry_is_none_for_handle_zero() {
        assert_eq!(replaced_object(None), None);
        assert_eq!(
            replaced_object(Some((0, ObjectKind::Metafile as i32))),
            None
        );
        assert_eq!(
            replaced_object(Some((7, ObjectKind::Directory as i32))),
            Some((7, ObjectKind::Directory))
        );
        assert_eq!(
            replaced_object(Some((7, 9999))),
            Some((7, ObjectKind::Unspecified))
        );
    }

    /// After a move, whatever came of it, this client knows nothing of the
    /// two names, the two directories or the object; the other names of
    /// both directories stay cached.
    #[test]
    fn a_move_forgets_both_names_both_directories_and_the_object() {
        let settings = Settings {
            cache_ttl_ms: 60_000,
            ..Settings::default()
        };
        let client = super::super::test_client(2, settings);
        let (dir, new_dir, h, other) = (0x100, 0x200, 0x300, 0x400);
        let cred = client.cred;
        let names = &client.inner.names;
        names.put(dir, "a", cred, (h, ObjectKind::Metafile), None);
        names.put(new_dir, "b", cred, (other, ObjectKind::Metafile), None);
        names.put(dir, "c", cred, (other, ObjectKind::Metafile), None);
        names.put(new_dir, "d", cred, (other, ObjectKind::Metafile), None);
        let attr = |handle| Attr {
            handle,
            kind: FileKind::Directory,
            mode: 0o755,
            uid: 0,
            gid: 0,
            size: 0,
            atime_ns: 0,
            mtime_ns: 0,
            ctime_ns: 0,
            nlink: 2,
            rdev: 0,
        };
        for x in [dir, new_dir, h, other] {
            client.inner.attrs.put(x, attr(x));
        }
        client.inner.known_dirs.created(dir, cred);
        client.inner.known_dirs.created(new_dir, cred);
        assert!(client.inner.known_dirs.absent(dir, "x", cred));

        client.forget_moved(Move {
            dir,
            name: "a",
            new_dir,
            new_name: "b",
            h,
            kind: ObjectKind::Metafile,
            no_replace: false,
        });

        assert_eq!(names.get(dir, "a", cred), None);
        assert_eq!(names.get(new_dir, "b", cred), None);
        assert_eq!(
            names.get(dir, "c", cred),
            Some((other, ObjectKind::Metafile))
        );
        assert_eq!(
            names.get(new_dir, "d", cred),
            Some((other, ObjectKind::Metafile))
        );
        for x in [dir, new_dir, h] {
            assert_eq!(client.inner.attrs.get(&x), None, "{x:#x}");
        }
        assert_eq!(client.inner.attrs.get(&other), Some(attr(other)));
        assert!(!client.inner.known_dirs.absent(dir, "x", cred));
        assert!(!client.inner.known_dirs.absent(new_dir, "x", cred));
    }
}
