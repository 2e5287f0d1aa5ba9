//! fsck: finds what a crash can leave behind and, when asked, reclaims it.
//!
//! Every server's objects and directory entries are scanned; reachability is
//! computed from the root over the entries (and from files to their
//! datafiles). A directory's `parent` says which of its entries is true: one
//! in another directory is the leftover of an interrupted move, dropped on
//! repair. Anything else may have several names (hard links): its link count
//! must be the number of entries naming it from reachable directories, and a
//! directory's `subdirs` the number of its entries naming directories; a
//! crash between a link's two steps leaves a count too high, which repair
//! sets right. An entry may name a datafile directly: a file without a
//! metafile (made in a no_metafile directory, [Kuhn 2008]), reachable like any
//! file and counted in the report. Creates add objects before the entry that names them and
//! removes drop the entry first, so a crash leaves only orphans (unreachable
//! objects), a directory left marked for removal, or local files no record
//! owns — never an entry naming nothing; such an entry is still reported.
//! Objects younger than `grace` are left alone: they may belong to a create
//! still in flight. Run `--repair` on a quiet cluster.

use std::collections::{HashMap, HashSet, VecDeque};
use std::time::Duration;

use bytes::Bytes;
use shoal_proto::error::{Errno, Result};
use shoal_proto::handle::{self, server_of, Handle};
use shoal_proto::msg::*;
use shoal_proto::time::now_ns;
use shoal_proto::{ops, ObjectKind};

use crate::client::Client;

/// Items per scan page.
const PAGE: u32 = 4096;

#[derive(Clone, Debug, Default)]
pub struct FsckReport {
    pub objects: u64,
    pub entries: u64,
    /// Reachable files without a metafile (entries naming a datafile).
    pub no_metafile_files: u64,
    /// Objects no path reaches.
    pub orphans: Vec<(Handle, ObjectKind)>,
    /// Entries naming an object that does not exist: (dir, name, handle).
    pub dangling: Vec<(Handle, String, Handle)>,
    /// Entries left by a move to another directory that was interrupted:
    /// the object's true entry is in its `parent` directory; this one is
    /// not (dir, name, handle).
    pub leftover_entries: Vec<(Handle, String, Handle)>,
    /// Directories whose `parent` directory has no entry for them, named
    /// from another directory only: (directory, that other directory).
    pub stale_parents: Vec<(Handle, Handle)>,
    /// Objects whose count of names is not what the entries say: (object,
    /// the count found, the count recorded): a file's links, a directory's
    /// subdirectories.
    pub wrong_counts: Vec<(Handle, u32, u32)>,
    /// Reachable directories left marked for removal by an interrupted rmdir.
    pub stale_marks: Vec<Handle>,
    /// Local datafile files no record owns: (server, handle).
    pub orphan_files: Vec<(u32, Handle)>,
    /// Whether the problems found were reclaimed.
    pub repaired: bool,
}

impl FsckReport {
    pub fn problems(&self) -> usize {
        self.orphans.len()
            + self.dangling.len()
            + self.leftover_entries.len()
            + self.stale_parents.len()
            + self.wrong_counts.len()
            + self.stale_marks.len()
            + self.orphan_files.len()
    }
}

/// Everything one server stores, as fsck needs it.
#[derive(Default)]
struct Inventory {
    objects: Vec<ObjectRecord>,
    entries: Vec<ScannedEntry>,
    /// Datafiles precreated on other servers and held in this one's pools.
    pooled: Vec<Handle>,
}

impl Client {
    async fn scan_all(&self, server: u32, what: ScanWhat) -> Result<ScanReply> {
        let mut all = ScanReply::default();
        let mut after = Bytes::new();
        loop {
            let page: ScanReply = self
                .pool()
                .call::<ops::Scan>(
                    server,
                    self.cred,
                    &ScanRequest {
                        what: what as i32,
                        after: after.clone(),
                        max: PAGE,
                        repair: false,
                    },
                )
                .await?;
            all.objects.extend(page.objects);
            all.entries.extend(page.entries);
            all.handles.extend(page.handles);
            if page.done {
                return Ok(all);
            }
            after = page.next;
        }
    }

    async fn inventory(&self, server: u32) -> Result<Inventory> {
        Ok(Inventory {
            objects: self.scan_all(server, ScanWhat::ScanObjects).await?.objects,
            entries: self.scan_all(server, ScanWhat::ScanEntries).await?.entries,
            pooled: self.scan_all(server, ScanWhat::ScanPools).await?.handles,
        })
    }

    /// Checks the whole cluster; with `repair`, reclaims what it finds.
    pub async fn fsck(&self, repair: bool, grace: Duration) -> Result<FsckReport> {
        let servers: Vec<u32> = (0..self.num_servers()).collect();
        let inventories =
            futures::future::try_join_all(servers.iter().map(|s| self.inventory(*s))).await?;
        let objects: HashMap<Handle, ObjectRecord> = inventories
            .iter()
            .flat_map(|i| i.objects.iter().map(|o| (o.handle, o.clone())))
            .collect();
        let mut children: HashMap<Handle, Vec<&ScannedEntry>> = HashMap::new();
        // The directories whose entries name each object.
        let mut named_from: HashMap<Handle, Vec<Handle>> = HashMap::new();
        for e in inventories.iter().flat_map(|i| &i.entries) {
            children.entry(e.dir).or_default().push(e);
            named_from.entry(e.handle).or_default().push(e.dir);
        }
        // A split directory's partitions, each a directory record of its
        // own (also one a split made and had not listed when it stopped).
        let mut partitions: HashMap<Handle, Vec<Handle>> = HashMap::new();
        for o in objects.values().filter(|o| o.partition_of != 0) {
            partitions.entry(o.partition_of).or_default().push(o.handle);
        }
        let mut report = FsckReport {
            objects: objects.len() as u64,
            entries: children.values().map(|c| c.len() as u64).sum(),
            ..Default::default()
        };

        // Reachability from the root, over entries and distributions; a
        // pooled datafile is held by its pool.
        let mut reachable: HashSet<Handle> = inventories
            .iter()
            .flat_map(|i| i.pooled.iter().copied())
            .chain([handle::ROOT])
            .collect();
        let mut queue = VecDeque::from([handle::ROOT]);
        // Names found of each object, from reachable directories: a
        // directory's subdirectories, anything else's entries.
        let mut names: HashMap<Handle, u32> = HashMap::new();
        while let Some(dir) = queue.pop_front() {
            names.entry(dir).or_default();
            let parts = partitions.get(&dir).map(Vec::as_slice).unwrap_or_default();
            reachable.extend(parts);
            // An interrupted split leaves an entry in two partitions: one
            // name.
            let mut seen: HashSet<&str> = HashSet::new();
            let own = [dir];
            let entries = own
                .iter()
                .chain(parts)
                .flat_map(|d| children.get(d))
                .flatten();
            for e in entries.filter(|e| parts.is_empty() || seen.insert(e.name.as_str())) {
                let Some(obj) = objects.get(&e.handle) else {
                    report.dangling.push((dir, e.name.clone(), e.handle));
                    continue;
                };
                let is_dir = obj.kind() == ObjectKind::Directory;
                if is_dir && obj.parent != 0 && obj.parent != dir && e.handle != handle::ROOT {
                    if named_from[&e.handle].contains(&obj.parent) {
                        // Its true entry is in `parent`; this one is the
                        // leftover of an interrupted move.
                        report
                            .leftover_entries
                            .push((dir, e.name.clone(), e.handle));
                        continue;
                    }
                    report.stale_parents.push((e.handle, dir));
                }
                *names
                    .entry(if is_dir { dir } else { e.handle })
                    .or_default() += 1;
                if !reachable.insert(e.handle) {
                    continue;
                }
                match obj.kind() {
                    ObjectKind::Directory => {
                        if obj.removing {
                            report.stale_marks.push(e.handle);
                        }
                        queue.push_back(e.handle);
                    }
                    ObjectKind::Metafile => {
                        for d in obj.dist.iter().flat_map(|d| &d.datafiles) {
                            reachable.insert(*d);
                        }
                    }
                    ObjectKind::Datafile => report.no_metafile_files += 1,
                    _ => {}
                }
            }
        }
        for (h, found) in &names {
            let Some(obj) = objects.get(h) else { continue };
            let recorded = match obj.kind() {
                ObjectKind::Directory => {
                    let parts = partitions.get(h).into_iter().flatten();
                    let of_parts = parts.filter_map(|p| objects.get(p)).map(|p| p.subdirs);
                    (obj.subdirs + of_parts.sum::<u64>()).min(u32::MAX.into()) as u32
                }
                _ => obj.links,
            };
            if recorded != *found {
                report.wrong_counts.push((*h, *found, recorded));
            }
        }
        report.wrong_counts.sort();
        let young = now_ns() - grace.as_nanos() as i64;
        let mut orphans: Vec<&ObjectRecord> = objects
            .values()
            .filter(|o| !reachable.contains(&o.handle))
            .filter(|o| o.attrs.map(|a| a.ctime_ns).unwrap_or(0) < young)
            .collect();
        orphans.sort_by_key(|o| o.handle);
        report.orphans = orphans.iter().map(|o| (o.handle, o.kind())).collect();
        // An orphan's datafiles are orphans too, whatever their age.
        for o in &orphans {
            for d in o.dist.iter().flat_map(|d| &d.datafiles) {
                if !reachable.contains(d) && !report.orphans.iter().any(|(h, _)| h == d) {
                    if let Some(rec) = objects.get(d) {
                        report.orphans.push((*d, rec.kind()));
                    }
                }
            }
        }

        for s in &servers {
            let files: ScanReply = self
                .pool()
                .call::<ops::Scan>(
                    *s,
                    self.cred,
                    &ScanRequest {
                        what: ScanWhat::ScanOrphanFiles as i32,
                        repair,
                        ..Default::default()
                    },
                )
                .await?;
            report
                .orphan_files
                .extend(files.handles.iter().map(|h| (*s, *h)));
        }

        if repair {
            self.repair(&report, &children).await?;
            report.repaired = true;
        }
        Ok(report)
    }

    async fn repair(
        &self,
        report: &FsckReport,
        children: &HashMap<Handle, Vec<&ScannedEntry>>,
    ) -> Result<()> {
        for (dir, name, h) in report.dangling.iter().chain(&report.leftover_entries) {
            self.drop_entry(*dir, name, *h).await?;
        }
        for (h, dir) in &report.stale_parents {
            ignore_missing(
                self.pool()
                    .call::<ops::SetParent>(
                        server_of(*h),
                        self.cred,
                        &SetParentRequest {
                            dir: *h,
                            parent: *dir,
                        },
                    )
                    .await,
            )?;
        }
        for (h, found, _) in &report.wrong_counts {
            ignore_missing(
                self.pool()
                    .call::<ops::Link>(
                        server_of(*h),
                        self.cred,
                        &LinkRequest {
                            handle: *h,
                            fsck_set: Some(*found),
                            ..Default::default()
                        },
                    )
                    .await,
            )?;
            self.forget(*h);
        }
        for d in &report.stale_marks {
            ignore_missing(
                self.pool()
                    .call::<ops::RmdirAbort>(
                        server_of(*d),
                        self.cred,
                        &RmdirRequest {
                            dir: *d,
                            ..Default::default()
                        },
                    )
                    .await,
            )?;
        }
        // Orphan directories are emptied first (their children are orphans
        // too and are reclaimed below), then everything is removed.
        for (h, kind) in &report.orphans {
            if *kind == ObjectKind::Directory {
                for e in children.get(h).into_iter().flatten() {
                    self.drop_entry(*h, &e.name, e.handle).await?;
                }
            }
        }
        for (h, _) in &report.orphans {
            let removed = self
                .pool()
                .call::<ops::Remove>(
                    server_of(*h),
                    self.cred,
                    &RemoveRequest {
                        handle: *h,
                        ..Default::default()
                    },
                )
                .await;
            ignore_missing(removed)?;
            self.forget(*h);
        }
        Ok(())
    }

    async fn drop_entry(&self, dir: Handle, name: &str, h: Handle) -> Result<()> {
        let removed = self
            .pool()
            .call::<ops::RmDirEnt>(
                server_of(dir),
                self.cred,
                &RmDirEntRequest {
                    dir,
                    name: name.to_string(),
                    expect_handle: h,
                    ..Default::default()
                },
            )
            .await;
        ignore_missing(removed)
    }
}

/// Something already gone is what repair wanted.
fn ignore_missing<T>(r: Result<T>) -> Result<()> {
    match r {
        Ok(_) => Ok(()),
        Err(e) if e.errno == Errno::ENOENT => Ok(()),
        Err(e) => Err(e),
    }
}
