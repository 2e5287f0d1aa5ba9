//! What every request task needs, shared by the loop thread and the tasks:
//! the client, how attributes are shown to the kernel, and the mount's own
//! tables (open directories, directories' parents, open files, callers'
//! groups).

use std::future::Future;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fuser::FileAttr;
use shoal_client::{Attr, Client, OpenFiles, TableSize, Unlinked};
use shoal_proto::cluster::SyncMode;
use shoal_proto::Handle;

use crate::attr::{blksize_for, file_attr};
use crate::dirs::{OpenDirs, Parents};
use crate::groups::CallerGroups;
use crate::kernel_leases::KernelLeases;
use crate::read_streams::ReadStreams;
use crate::sweeps::Sweeps;

pub struct Shared {
    pub client: Client,
    /// How long the kernel may keep entries and attributes.
    pub ttl: Duration,
    blksize: u32,
    /// The cluster runs with `sync = "full"`: every entry change was
    /// durable when acknowledged, so fsyncdir has nothing to do.
    pub durable_replies: bool,
    pub dirs: OpenDirs,
    pub parents: Parents,
    /// Files the kernel holds open (an unlinked one goes at its last close).
    pub open: Mutex<OpenFiles>,
    pub groups: CallerGroups,
    /// What the kernel caches under the client's leases.
    pub leases: Arc<KernelLeases>,
    /// Large files opened read-only, read past the page cache.
    pub streams: ReadStreams,
    /// `fs.protected_hardlinks` was on when the mount started.
    pub hardlinks_protected: bool,
    /// A record lock was asked for through this mount: opens send their
    /// FLUSH from then on (`locks`).
    pub locking: AtomicBool,
    /// Lock requests waiting, for their interrupts.
    pub lock_waits: crate::lock_waits::Waits,
    /// The write epoch of each file's last drop after a lock grant.
    pub lock_epochs: crate::lock_epochs::LockEpochs,
    /// Memory given back after many forgets.
    pub sweeps: Arc<Sweeps>,
}

impl Shared {
    pub fn new(client: Client, ttl: Duration) -> Shared {
        let settings = &client.config().settings;
        let blksize = blksize_for(settings.strip_size);
        let durable_replies = settings.sync == SyncMode::Full;
        let streams = ReadStreams::new(settings.strip_size, u64::from(settings.stream_reads));
        let entries = settings.cache_entries as usize;
        let leases = KernelLeases::start(entries);
        let sweeps = Sweeps::new(client.clone(), leases.clone());
        Shared {
            client,
            ttl,
            blksize,
            durable_replies,
            dirs: OpenDirs::default(),
            parents: Parents::new(entries),
            open: Mutex::default(),
            groups: CallerGroups::default(),
            leases,
            streams,
            hardlinks_protected: crate::access::hardlinks_protected(),
            locking: AtomicBool::new(false),
            lock_waits: Default::default(),
            lock_epochs: Default::default(),
            sweeps,
        }
    }

    /// Runs `change` of file `ino`, dropping what streamed reads fetched of
    /// it before and after (a fetch may have crossed the change).
    pub async fn changing<T>(&self, ino: u64, change: impl Future<Output = T>) -> T {
        self.streams.changed(ino);
        let out = change.await;
        self.streams.changed(ino);
        out
    }

    /// The kernel forgot `inodes`: what the mount and its client keep of
    /// them goes (what the kernel was given under leases stays until its
    /// timeouts end, see `kernel_leases`).
    pub fn forgotten(&self, inodes: &[Handle]) {
        self.client.forget_many(inodes);
        self.parents.forget(inodes);
    }

    /// Every bounded table of the mount and its client, with its size.
    pub fn table_sizes(&self) -> Vec<TableSize> {
        let mut sizes = self.client.table_sizes();
        let entries = self.client.config().settings.cache_entries as usize;
        sizes.push(TableSize::new("parents", self.parents.len(), entries));
        sizes.extend(self.leases.sizes());
        sizes
    }

    pub fn attr(&self, a: &Attr) -> FileAttr {
        file_attr(a, self.blksize)
    }

    /// What follows an unlink or a rename over a file: one that lost its
    /// last name while open here is reclaimed at its last close, or now if
    /// that came meanwhile. The name is gone whatever comes of this, and the
    /// kernel must hear so (given an error, it would keep the name): a
    /// reclaim that fails is logged, and the object left for fsck.
    pub async fn after_unlink(&self, c: &Client, unlinked: Unlinked) {
        if let Unlinked::StillOpen(h) = unlinked {
            if !self.open.lock().unwrap().doom(h) {
                if let Err(e) = c.reclaim(h).await {
                    tracing::warn!("reclaiming {h:#x}, which lost its last name: {e}");
                }
            }
        }
    }
}
