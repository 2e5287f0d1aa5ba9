//! The `fuser::Filesystem` implementation.
//!
//! Every handler that needs a server states its work and hands it to
//! `ShoalFs::serve`, which runs it as a task acting as the caller and
//! replies when done (fuser replies are `Send`; `Answer` says how each
//! kind of reply answers): the task's first step runs on the loop thread (it
//! sends the request, or answers from the client's caches), the rest on the
//! tokio runtime (`inline_task`), so no request ever waits behind an
//! unrelated one. Handlers
//! with nothing to ask a server (flush, release, releasedir, ioctl,
//! fallocate, and open and opendir when the client has the attributes to
//! check them against) answer in place, which is just as non-blocking.
//!
//! Handles are inode numbers. Each request acts with the caller's uid, gid
//! and supplementary groups (`Client::with_cred`, `groups`): the servers
//! check what reaches them, and the mount checks what it answers itself
//! (`access`; the mount does not use the kernel's `default_permissions`).

use std::ffi::OsStr;
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use fuser::{
    AccessFlags, BsdFileFlags, FileHandle, Filesystem, FopenFlags, Generation, INodeNo, InitFlags,
    IoctlFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyIoctl, ReplyLock, ReplyOpen,
    ReplyStatfs, ReplyWrite, ReplyXattr, Request, RequestId, TimeOrNow, WriteFlags,
};
use shoal_client::{Attr, Client, Cred, FileKind, SetAttr, SetTime, StatFs};
use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::time::to_ns;
use shoal_proto::Handle;

use crate::access::{self, R, W, X};
use crate::errors::{fail, name_str, ErrorReply};
use crate::inline_task;
use crate::locks::{self, KernelLock};
use crate::read_streams::ReadStreams;
use crate::readdir;
use crate::reads_in_place::{self, EntryLanding};
use crate::shared::Shared;
use crate::stats::{self, MountStats};
use crate::xattr::{name_list, reply_value, xattr_name};

/// Largest write the kernel may send in one request: big writes mean few
/// round trips, and 1 MiB is the default strip, so one request fills a strip.
const MAX_WRITE: u32 = 1 << 20;
/// Requested readahead; the kernel caps it at its own limit (see
/// `crate::readahead` for raising that limit after mounting).
const MAX_READAHEAD: u32 = 1 << 20;
/// Background requests (readahead, async reads) the kernel keeps in flight.
const MAX_BACKGROUND: u16 = 64;
/// `statfs` unit.
const STATFS_BSIZE: u64 = 4096;

/// How a kind of reply answers with what a handler's work yields.
trait Answer<T>: ErrorReply {
    fn answer(self, s: &Shared, v: T);
}

impl Answer<()> for ReplyEmpty {
    fn answer(self, _: &Shared, (): ()) {
        self.ok();
    }
}

impl Answer<Attr> for ReplyAttr {
    fn answer(self, s: &Shared, a: Attr) {
        let given = s.leases.give();
        let ttl = s.leases.attr_ttl(&s.client, a.handle, s.ttl);
        self.attr(&ttl, &s.attr(&a));
        s.leases.given(given, a.handle, None);
    }
}

/// What a lookup (or a create) found: `name` in `parent` names the object
/// of `attr`.
pub struct Found {
    parent: Handle,
    name: String,
    attr: Attr,
    /// Every user may search `parent`, so the kernel may keep the entry
    /// (`access::kernel_may_keep_entries`).
    keep: bool,
}

impl Found {
    /// `attr`, found as `name` in `parent`; the parent's attributes (the
    /// client's cache has them as a rule: the kernel walked through it)
    /// say whether the kernel may keep the entry.
    /// Infallible: a create that is done must not be answered as failed; if
    /// the parent cannot be read, the kernel just does not cache the entry.
    async fn new(c: &Client, parent: Handle, name: String, attr: Attr) -> Found {
        let keep = c
            .getattr(parent)
            .await
            .is_ok_and(|p| access::kernel_may_keep_entries(&p));
        Found {
            parent,
            name,
            attr,
            keep,
        }
    }

    /// The kernel's timeouts for what was found: its attributes' (the
    /// object's lease) and its entry's (the directory's, or none at all).
    fn ttls(&self, s: &Shared) -> (Duration, Duration) {
        let entry = if self.keep {
            s.leases
                .entry_ttl(&s.client, self.parent, &self.name, s.ttl)
        } else {
            Duration::ZERO
        };
        (s.leases.attr_ttl(&s.client, self.attr.handle, s.ttl), entry)
    }
}

/// A lookup's entry: cached by the kernel as long as the client's leases on
/// the directory (the name) and on the object (its attributes) last.
impl Answer<Found> for ReplyEntry {
    fn answer(self, s: &Shared, f: Found) {
        let given = s.leases.give();
        let (attr_ttl, entry_ttl) = f.ttls(s);
        self.entry_with_ttls(&attr_ttl, &entry_ttl, &s.attr(&f.attr), Generation(0));
        s.leases
            .given(given, f.attr.handle, Some((f.parent, &f.name)));
    }
}

/// The file handle of an open that may write (any other is 0): its close
/// sends the file's buffered writes and reports a send of them that failed; a
/// reader's close has nothing to send and must not take a writer's error.
const WRITER: FileHandle = FileHandle(1);

/// A create answers with the new file, open (for writing, as creates are),
/// its entry and attributes cached by the kernel while the client's leases
/// on the directory and the file last (one timeout covers both here).
impl Answer<Found> for ReplyCreate {
    fn answer(self, s: &Shared, f: Found) {
        let h = f.attr.handle;
        s.open.lock().unwrap().opened(h);
        let given = s.leases.give();
        let (attr_ttl, entry_ttl) = f.ttls(s);
        let ttl = attr_ttl.min(entry_ttl);
        self.created(
            &ttl,
            &s.attr(&f.attr),
            Generation(0),
            WRITER,
            FopenFlags::empty(),
        );
        s.leases.given(given, h, Some((f.parent, &f.name)));
    }
}

/// A file's data.
impl Answer<Bytes> for ReplyData {
    fn answer(self, _: &Shared, data: Bytes) {
        self.data(&data);
    }
}

/// A symlink's target.
impl Answer<String> for ReplyData {
    fn answer(self, _: &Shared, target: String) {
        self.data(target.as_bytes());
    }
}

impl Answer<StatFs> for ReplyStatfs {
    fn answer(self, _: &Shared, st: StatFs) {
        let blocks = st.total_bytes / STATFS_BSIZE;
        let bfree = st.free_bytes / STATFS_BSIZE;
        let bavail = st.avail_bytes / STATFS_BSIZE;
        // Objects have no fixed table: as many more fit as free blocks
        // (a small file's bytes live next to its attributes).
        let ffree = bavail;
        let files = st.objects.saturating_add(ffree);
        let bsize = STATFS_BSIZE as u32;
        let namelen = shoal_proto::names::NAME_MAX as u32;
        self.statfs(blocks, bfree, bavail, files, ffree, bsize, namelen, bsize);
    }
}

pub struct ShoalFs {
    shared: Arc<Shared>,
    rt: tokio::runtime::Handle,
    /// Every request's wait, for `shoal stats --mount` (see `crate::stats`).
    stats: Arc<MountStats>,
}

impl ShoalFs {
    /// What the kernel caches under leases, for the session's notifier.
    pub fn kernel_leases(&self) -> Arc<crate::kernel_leases::KernelLeases> {
        self.shared.leases.clone()
    }

    pub fn new(client: Client, rt: tokio::runtime::Handle, ttl: Duration) -> ShoalFs {
        ShoalFs {
            shared: Arc::new(Shared::new(client, ttl)),
            rt,
            stats: Arc::new(MountStats::new()),
        }
    }

    /// What `/metrics` serves of this mount (`crate::metrics_endpoint`).
    pub fn metrics_registry(&self, mountpoint: &Path) -> shoal_metrics::exposition::Registry {
        crate::metrics_endpoint::registry(self.stats.clone(), self.shared.clone(), mountpoint)
    }

    /// The process that made `req`, as requests name it.
    fn cred(&self, req: &Request) -> Cred {
        let groups = self.shared.groups.of(req.pid(), req.uid(), req.gid());
        Cred::new(req.uid(), req.gid()).with_groups(&groups)
    }

    /// The client acting as the process that made `req`.
    fn caller(&self, req: &Request) -> Client {
        self.shared.client.with_cred(self.cred(req))
    }

    /// The process that made `req` as the servers see it (root squashed
    /// if the cluster says so), for the mount's own checks.
    fn checked_cred(&self, req: &Request) -> Cred {
        access::as_servers_see(self.cred(req), &self.shared.client)
    }

    /// Answers an open of `ino` (a file with `flags`, or a directory) once
    /// the caller has `want` on it: at once from the attributes the client
    /// caches (the kernel looked the file up just before, so as a rule it
    /// does), else after asking for them. `opened` makes the handle.
    fn open_checked<O>(
        &self,
        req: &Request,
        op: &'static str,
        ino: u64,
        want: u32,
        reply: ReplyOpen,
        opened: O,
    ) where
        O: FnOnce(&Shared) -> (FileHandle, FopenFlags) + Send + 'static,
    {
        let t0 = Instant::now();
        let cred = self.checked_cred(req);
        if let Some(a) = self.shared.client.cached_attr(ino) {
            if let Err(e) = access::require(&cred, &a, want, op) {
                return fail(op, reply, e);
            }
            let (fh, flags) = opened(&self.shared);
            reply.opened(fh, flags);
            return self.answered(op, t0);
        }
        self.serve_then(
            req,
            op,
            reply,
            move |c, _| async move { access::require(&cred, &c.getattr(ino).await?, want, op) },
            move |reply, s, ()| {
                let (fh, flags) = opened(s);
                reply.opened(fh, flags);
            },
        );
    }

    /// The client that creates objects in `parent` for the caller `c` acts
    /// for, and the mode bits a new
    /// directory inherits: in a setgid directory new objects take the
    /// directory's group and new directories stay setgid, as on Linux file
    /// systems. The create then acts with the directory's group as its
    /// primary group, which the servers also use to check the directory, so
    /// the caller's own right to write there is checked here first: with
    /// the directory's group, a caller outside it would get the group's
    /// bits (mode 2775 would let anyone create).
    async fn creator(c: Client, parent: u64) -> Result<(Client, u32)> {
        let p = c.getattr(parent).await?;
        if p.mode & libc::S_ISGID == 0 {
            return Ok((c, 0));
        }
        let caller = access::caller_of(&c);
        access::require(&caller, &p, W | X, "create in a setgid directory")?;
        let cred = c.cred().with_gid(p.gid);
        Ok((c.with_cred(cred), libc::S_ISGID))
    }

    /// The mount's check of an extended attribute `name` of `ino`
    /// (`access::xattr_wants`): the client answers some `user.*` ones
    /// itself, without a server to check them.
    async fn check_xattr(c: &Client, ino: u64, name: &str, change: bool) -> Result<()> {
        match access::xattr_wants(name, change) {
            Some(want) => {
                let a = c.getattr(ino).await?;
                access::require(&access::caller_of(c), &a, want, "xattr")
            }
            None => Ok(()),
        }
    }

    /// Runs `work` on the runtime and answers with `done` or with its error.
    /// If the runtime is gone the task (and `reply`) is dropped, and fuser
    /// answers EIO for a dropped reply: never a hang, never a panic. The
    /// request's wait, from now to its answer, is counted as `op`.
    fn run<R, T, W, D>(&self, op: &'static str, reply: R, work: W, done: D)
    where
        R: ErrorReply,
        T: Send + 'static,
        W: Future<Output = Result<T>> + Send + 'static,
        D: FnOnce(R, T) + Send + 'static,
    {
        let t0 = Instant::now();
        let stats = self.stats.clone();
        inline_task::spawn(&self.rt, async move {
            match work.await {
                Ok(v) => done(reply, v),
                Err(e) => fail(op, reply, e),
            }
            stats.record(op, t0);
        });
    }

    /// Runs a task that answers its reply itself (a listing, a read in
    /// place), counting its wait as `op`.
    fn run_answering(&self, op: &'static str, task: impl Future<Output = ()> + Send + 'static) {
        let t0 = Instant::now();
        let stats = self.stats.clone();
        inline_task::spawn(&self.rt, async move {
            task.await;
            stats.record(op, t0);
        });
    }

    /// Counts a request answered in place, which arrived at `t0`.
    fn answered(&self, op: &'static str, t0: Instant) {
        self.stats.record(op, t0);
    }

    /// The shell of every handler that asks the servers: `work`, given the
    /// client acting as the caller of `req` and the shared state, runs as a
    /// task, and `reply` answers with its result (see `Answer`) or with its
    /// error.
    fn serve<R, T, F, W>(&self, req: &Request, op: &'static str, reply: R, work: F)
    where
        R: Answer<T>,
        T: Send + 'static,
        F: FnOnce(Client, Arc<Shared>) -> W,
        W: Future<Output = Result<T>> + Send + 'static,
    {
        self.serve_then(req, op, reply, work, R::answer);
    }

    /// `ShoalFs::serve`, answering with `done` (for replies that need more
    /// than the result, such as the size the caller's buffer has).
    fn serve_then<R, T, F, W, D>(&self, req: &Request, op: &'static str, reply: R, work: F, done: D)
    where
        R: ErrorReply,
        T: Send + 'static,
        F: FnOnce(Client, Arc<Shared>) -> W,
        W: Future<Output = Result<T>> + Send + 'static,
        D: FnOnce(R, &Shared, T) + Send + 'static,
    {
        let s = self.shared.clone();
        let work = work(self.caller(req), s.clone());
        self.run(op, reply, work, move |reply, v| done(reply, &s, v));
    }

    fn dir_read(&self, req: &Request, ino: INodeNo, fh: FileHandle, offset: u64) -> readdir::Read {
        readdir::Read {
            shared: self.shared.clone(),
            client: self.caller(req),
            listing: self.shared.dirs.get(fh.0, ino.0),
            dir: ino.0,
            offset,
        }
    }
}

/// The value of `$checked`, or (its error answered to `$reply`) the handler returns.
macro_rules! or_reply {
    ($op:expr, $checked:expr, $reply:ident) => {
        match $checked {
            Ok(v) => v,
            Err(e) => return fail($op, $reply, e),
        }
    };
}

/// An entry name as an owned `String`, or the handler returns its error.
macro_rules! name_or_reply {
    ($op:expr, $name:expr, $reply:ident) => {
        or_reply!($op, name_str($name).map(str::to_owned), $reply)
    };
}

/// A time the kernel asks to set. "Now" stays now (the server's clock), as
/// POSIX lets anyone who may write a file set its times to now but only its
/// owner to a given time.
fn set_time(t: TimeOrNow) -> SetTime {
    match t {
        TimeOrNow::SpecificTime(t) => SetTime::At(to_ns(t)),
        TimeOrNow::Now => SetTime::Now,
    }
}

/// The handle and flags of an open of file `ino` with `flags`, which the
/// caller may make (checked), counted as open.
///
/// Stateless: reads and writes name the inode. O_TRUNC arrives as a
/// setattr(size = 0) because FUSE_ATOMIC_O_TRUNC is not negotiated.
/// FOPEN_KEEP_CACHE only while the file is leased: nobody else has changed
/// it since its pages were read (a change would have recalled the lease,
/// and the recall dropped them). Otherwise every open drops cached pages,
/// so a file opened after another client closed it shows that client's
/// data (close-to-open consistency, as NFS gives).
///
/// A reader's close has nothing to send (`flush` answers it at once), so
/// FOPEN_NOFLUSH spares it the FLUSH round trip: an open+read+close is then
/// three requests to this process, not four. Not once the mount has taken
/// record locks: a FLUSH is how a close lets its owner's locks go
/// (`locks`).
///
/// A large file opened read-only is read past the page cache, with the
/// mount's own read-ahead (`read_streams`), if its size is known (the
/// kernel looked it up just before, so it usually is).
fn open_file(s: &Shared, ino: u64, flags: OpenFlags) -> (FileHandle, FopenFlags) {
    s.open.lock().unwrap().opened(ino);
    let streams = || {
        s.streams
            .streams(ino, || s.client.cached_attr(ino).map(|a| a.size))
    };
    let (fh, mut opened) = match flags.0 & libc::O_ACCMODE {
        libc::O_RDONLY if streams() => (
            FileHandle(s.streams.open(ino)),
            FopenFlags::FOPEN_DIRECT_IO | FopenFlags::FOPEN_NOFLUSH,
        ),
        libc::O_RDONLY => (FileHandle(0), FopenFlags::FOPEN_NOFLUSH),
        _ => (WRITER, FopenFlags::empty()),
    };
    if s.locking.load(std::sync::atomic::Ordering::Relaxed) {
        opened.remove(FopenFlags::FOPEN_NOFLUSH);
    }
    if s.leases.keep_pages(&s.client, ino) {
        opened |= FopenFlags::FOPEN_KEEP_CACHE;
    }
    (fh, opened)
}

/// What a RELEASE lets go of the file's locks.
enum Unlock {
    Nothing,
    /// The file's last close on this mount: every lock left.
    All,
    /// The open file's flock lock (its owner).
    Flock(u64),
}

impl Filesystem for ShoalFs {
    fn destroy(&mut self) {
        let c = self.shared.client.clone();
        if let Err(e) = self.rt.block_on(c.flush_all()) {
            tracing::warn!("writes acknowledged before they landed were lost at unmount: {e}");
        }
        // Files unlinked while open and still open when the mount ends.
        let doomed = self.shared.open.lock().unwrap().take_doomed();
        for h in doomed {
            if let Err(e) = self.rt.block_on(c.reclaim(h)) {
                tracing::warn!("could not reclaim unlinked file {h:#x}: {e}");
            }
        }
    }

    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // Answer listings with attributes ([Carns 2009]'s readdirplus), only when
        // the cluster has the technique on: with it off the kernel lists with
        // READDIR and then looks up and stats each entry (the baseline). With
        // AUTO the kernel asks for attributes on a directory's first read
        // and afterwards only if its entries were looked up in between, so a
        // reader that never stats (find, rm -r) stops paying for them.
        if self.shared.client.config().settings.readdirplus {
            for flag in [
                InitFlags::FUSE_DO_READDIRPLUS,
                InitFlags::FUSE_READDIRPLUS_AUTO,
            ] {
                if let Err(missing) = config.add_capabilities(flag) {
                    tracing::debug!("the kernel does not offer {missing:?}");
                }
            }
        }
        let wanted = [
            // Lookups and creates in one directory run concurrently.
            InitFlags::FUSE_PARALLEL_DIROPS,
            InitFlags::FUSE_ASYNC_READ,
            InitFlags::FUSE_BIG_WRITES,
            InitFlags::FUSE_MAX_PAGES,
            // A symlink's target never changes in place: let the kernel cache it.
            InitFlags::FUSE_CACHE_SYMLINKS,
            // fcntl and flock locks come here, to be taken for the whole
            // cluster (`locks`).
            InitFlags::FUSE_POSIX_LOCKS,
            InitFlags::FUSE_FLOCK_LOCKS,
        ];
        for flag in wanted {
            if let Err(missing) = config.add_capabilities(flag) {
                tracing::debug!("the kernel does not offer {missing:?}");
            }
        }
        // Requests and replies through io_uring rings instead of reads and
        // writes of /dev/fuse (`fuse_io_uring`; offered once the fuse
        // module's enable_uring is on).
        if self.shared.client.config().settings.fuse_io_uring {
            match config.add_capabilities(InitFlags::FUSE_OVER_IO_URING) {
                Ok(()) => tracing::info!("serving FUSE requests through io_uring rings"),
                Err(_) => tracing::info!(
                    "the kernel does not offer FUSE over io_uring \
                     (/sys/module/fuse/parameters/enable_uring): serving /dev/fuse"
                ),
            }
        }
        // A file opened past the page cache (`read_streams`) may still be
        // mapped shared; without this grant such a map fails, so nothing
        // streams then.
        if config
            .add_capabilities(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP)
            .is_err()
        {
            tracing::debug!("the kernel cannot map direct-I/O files: reads use the page cache");
            self.shared.streams.unmappable();
        }
        if let Err(max) = config.set_max_write(MAX_WRITE) {
            let _ = config.set_max_write(max);
        }
        if let Err(max) = config.set_max_readahead(MAX_READAHEAD) {
            let _ = config.set_max_readahead(max);
        }
        let _ = config.set_max_background(MAX_BACKGROUND);
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let name = name_or_reply!("lookup", name, reply);
        self.serve(req, "lookup", reply, |c, s| async move {
            let attr = c.lookup_attr(parent.0, &name).await?;
            if attr.kind == FileKind::Directory {
                s.parents.set(attr.handle, parent.0);
            }
            Ok(Found::new(&c, parent.0, name, attr).await)
        });
    }

    fn getattr(&self, req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        self.serve(req, "getattr", reply, |c, _| async move {
            c.getattr(ino.0).await
        });
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        // ctime is not settable (the server stamps it); the BSD-only times
        // and flags do not exist on Linux.
        let set = SetAttr {
            mode: mode.map(|m| m & 0o7777),
            uid,
            gid,
            size,
            atime: atime.map(set_time),
            mtime: mtime.map(set_time),
        };
        // A truncate needs the write right, unless it comes through a
        // descriptor open for writing, whose open was checked: a truncate by
        // path has no handle, nor has the one the kernel sends for O_TRUNC
        // (fuse_setattr drops it for ATTR_OPEN, whatever the access mode).
        // (The servers check the rest of a setattr.)
        let truncating = size.is_some() && fh != Some(WRITER);
        self.serve(req, "setattr", reply, move |c, s| async move {
            if truncating {
                let a = c.getattr(ino.0).await?;
                access::require(&access::caller_of(&c), &a, W, "truncate")?;
            }
            let a = s.changing(ino.0, c.setattr(ino.0, &set)).await?;
            if set.mode.is_some()
                && a.kind == FileKind::Directory
                && !access::kernel_may_keep_entries(&a)
            {
                // Some users may no longer search it: the entries the
                // kernel keeps under it go (those given the short TTL
                // expire with it).
                s.leases.take_entries_of(ino.0);
            }
            Ok(a)
        });
    }

    fn readlink(&self, req: &Request, ino: INodeNo, reply: ReplyData) {
        self.serve(req, "readlink", reply, |c, _| async move {
            c.readlink(ino.0).await
        });
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        // FIFOs, sockets and devices are stored as what they are; opening
        // one is the local kernel's business (it sends no OPEN for them).
        let special = FileKind::special_from_mode(mode);
        let kind = mode & libc::S_IFMT;
        if special.is_none() && kind != 0 && kind != libc::S_IFREG {
            let e = ShoalError::invalid(format!("mknod of unknown file type {kind:#o}"));
            return fail("mknod", reply, e);
        }
        let name = name_or_reply!("mknod", name, reply);
        self.serve(req, "mknod", reply, |c, _| async move {
            let (c, _) = Self::creator(c, parent.0).await?;
            let made = match special {
                Some(k) => {
                    c.mknod(parent.0, &name, k, mode & 0o7777, rdev.into())
                        .await?
                }
                None => c.create(parent.0, &name, mode & 0o7777).await?,
            };
            Ok(Found::new(&c, parent.0, name, made).await)
        });
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        // The kernel has already applied the umask (FUSE_DONT_MASK is not set).
        let name = name_or_reply!("mkdir", name, reply);
        self.serve(req, "mkdir", reply, |c, s| async move {
            let (c, inherited) = Self::creator(c, parent.0).await?;
            let a = c
                .mkdir(parent.0, &name, (mode & 0o7777) | inherited)
                .await?;
            s.parents.set(a.handle, parent.0);
            Ok(Found::new(&c, parent.0, name, a).await)
        });
    }

    fn unlink(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let name = name_or_reply!("unlink", name, reply);
        self.serve(req, "unlink", reply, |c, s| async move {
            // A file nobody holds open goes with its last name, in as few
            // messages as the cluster allows (one, with colocate); the name
            // is usually in the client's cache from the kernel's lookup just
            // before.
            let open = match c.lookup(parent.0, &name).await {
                Ok((h, _)) => s.open.lock().unwrap().is_open(h),
                Err(_) => true,
            };
            let unlinked = c.unlink_keeping(parent.0, &name, open).await?;
            s.after_unlink(&c, unlinked).await;
            Ok(())
        });
    }

    fn rmdir(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let name = name_or_reply!("rmdir", name, reply);
        self.serve(req, "rmdir", reply, |c, _| async move {
            c.rmdir(parent.0, &name).await
        });
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let name = name_or_reply!("symlink", link_name, reply);
        let Some(target) = target.to_str().map(str::to_owned) else {
            let e = ShoalError::invalid("symlink target is not UTF-8; Shoal stores UTF-8");
            return fail("symlink", reply, e);
        };
        self.serve(req, "symlink", reply, |c, _| async move {
            let (c, _) = Self::creator(c, parent.0).await?;
            let a = c.symlink(parent.0, &name, &target).await?;
            Ok(Found::new(&c, parent.0, name, a).await)
        });
    }

    fn rename(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        // RENAME_EXCHANGE and RENAME_WHITEOUT have no Shoal equivalent.
        if !(flags - RenameFlags::RENAME_NOREPLACE).is_empty() {
            let e = ShoalError::invalid(format!("rename flags {flags:?} are not supported"));
            return fail("rename", reply, e);
        }
        let no_replace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        let name = name_or_reply!("rename", name, reply);
        let newname = name_or_reply!("rename", newname, reply);
        let entry_move = (parent.0, name.clone(), newparent.0, newname.clone());
        // Before the request: a recall that passes while it is under way
        // may miss the entry the kernel is about to move.
        let given = self.shared.leases.give();
        let work = |c: Client, s: Arc<Shared>| async move {
            // Usually answered from the client's name cache (the kernel has
            // just looked the name up), and the rename needs it anyway.
            let moved = c.lookup(parent.0, &name).await.ok();
            let open = |h| s.open.lock().unwrap().is_open(h);
            let replaced = c
                .rename_keeping(parent.0, &name, newparent.0, &newname, no_replace, open)
                .await?;
            if let Some(unlinked) = replaced {
                s.after_unlink(&c, unlinked).await;
            }
            if let Some((h, FileKind::Directory)) = moved {
                s.parents.set(h, newparent.0);
            }
            Ok(())
        };
        self.serve_then(req, "rename", reply, work, move |reply, s, ()| {
            let (dir, name, new_dir, new_name) = entry_move;
            reply.ok();
            s.leases
                .renamed(&s.client, given, (dir, &name), (new_dir, &new_name));
        });
    }

    fn link(
        &self,
        req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let name = name_or_reply!("link", newname, reply);
        let protected = self.shared.hardlinks_protected;
        self.serve(req, "link", reply, move |c, _| async move {
            if protected {
                let a = c.getattr(ino.0).await?;
                access::require_hardlink(&access::caller_of(&c), &a)?;
            }
            let a = c.link(ino.0, newparent.0, &name).await?;
            Ok(Found::new(&c, newparent.0, name, a).await)
        });
    }

    fn open(&self, req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let want = access::open_wants(flags.0);
        self.open_checked(req, "open", ino.0, want, reply, move |s| {
            open_file(s, ino.0, flags)
        });
    }

    fn read(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        if ReadStreams::is_stream(fh.0) {
            return self.serve(req, "read", reply, |c, s| async move {
                s.streams.read(&c, fh.0, ino.0, offset, size as usize).await
            });
        }
        let size = size as usize;
        match reply.into_buffer(size) {
            Ok(buffer) => {
                let c = self.caller(req);
                let stats = self.stats.clone();
                self.run_answering("read", async move {
                    let landing = EntryLanding(buffer);
                    let (landing, read) = c.read_into(ino.0, offset, size, landing).await;
                    reads_in_place::answer(landing, read, &stats);
                });
            }
            Err(reply) => {
                self.serve(req, "read", reply, |c, _| async move {
                    c.read(ino.0, offset, size).await
                });
            }
        }
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        // The one copy of the data in this process, and it cannot go: fuser
        // 0.18 lends `data` from the loop thread's receive buffer, which the
        // next request read from /dev/fuse overwrites, and has no write that
        // hands over an owned buffer (nor splice). The write below outlives
        // this call (it awaits the layout, a capability, perhaps a
        // rendezvous), so it must own its bytes. From here on none is copied:
        // the client slices this buffer per datafile and the connection
        // writes the slices to the socket as they are.
        let data = Bytes::copy_from_slice(data);
        let c = self.caller(req);
        let s = self.shared.clone();
        self.run(
            "write",
            reply,
            async move { s.changing(ino.0, c.write(ino.0, offset, data)).await },
            |reply, n| reply.written(u32::try_from(n).unwrap_or(u32::MAX)),
        );
    }

    fn flush(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        let locked = self.shared.client.holds_locks(ino.0);
        if fh != WRITER && !locked {
            reply.ok();
            return self.answered("flush", Instant::now());
        }
        // close(2) of a writer: the file's buffered writes go to the
        // servers before close returns, and close reports a send that
        // failed. (Answered even on a mount whose threshold is 0:
        // a file's layout or xattr may give it one.) A close lets go of its
        // owner's record locks on the file.
        self.serve(req, "flush", reply, move |c, _| async move {
            let flushed = if fh == WRITER {
                c.flush(ino.0).await
            } else {
                Ok(())
            };
            if locked {
                c.unlock_owner(ino.0, lock_owner.0, false).await?;
            }
            flushed
        });
    }

    fn release(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        flock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        if ReadStreams::is_stream(fh.0) {
            self.shared.streams.close(fh.0);
        }
        let (reclaim, unlock) = {
            let mut open = self.shared.open.lock().unwrap();
            let reclaim = open.closed(ino.0);
            let last = !open.is_open(ino.0);
            if last {
                self.shared.client.closed(ino.0);
            }
            // The file's last close here: what locks are left (taken
            // through a descriptor that sent no FLUSH) go (`locks`). Else
            // the open file's flock lock, if it took one.
            let locked = self.shared.client.holds_locks(ino.0);
            let unlock = match (locked, last, flock_owner) {
                (false, _, _) => Unlock::Nothing,
                (true, true, _) => Unlock::All,
                (true, false, Some(owner)) => Unlock::Flock(owner.0),
                (true, false, None) => Unlock::Nothing,
            };
            (reclaim, unlock)
        };
        if !reclaim && matches!(unlock, Unlock::Nothing) {
            reply.ok();
            return self.answered("release", Instant::now());
        }
        self.serve(req, "release", reply, move |c, _| async move {
            match unlock {
                Unlock::All => c.unlock_all(ino.0).await?,
                Unlock::Flock(owner) => c.unlock_owner(ino.0, owner, true).await?,
                Unlock::Nothing => {}
            }
            if reclaim {
                c.reclaim(ino.0).await?;
            }
            Ok(())
        });
    }

    fn getlk(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        reply: ReplyLock,
    ) {
        let lock = KernelLock {
            owner: lock_owner.0,
            start,
            end,
            typ,
            pid,
            flock: false,
        };
        self.serve_then(
            req,
            "getlk",
            reply,
            move |c, _| locks::test(c, ino.0, lock),
            |reply, _, t| reply.locked(t.start, t.end, t.typ, t.pid),
        );
    }

    fn setlk(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        flock: bool,
        reply: ReplyEmpty,
    ) {
        let lock = KernelLock {
            owner: lock_owner.0,
            start,
            end,
            typ,
            pid,
            flock,
        };
        let unique = req.unique().0;
        self.serve(req, "setlk", reply, move |c, s| {
            locks::set(c, s, ino.0, lock, sleep, unique)
        });
    }

    fn interrupt(
        &self,
        _req: &Request,
        unique: RequestId,
    ) -> std::result::Result<(), fuser::Errno> {
        // Only a lock's wait is long enough to be worth ending early.
        self.shared.lock_waits.interrupt(unique.0);
        Ok(())
    }

    fn fsync(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.serve(
            req,
            "fsync",
            reply,
            |c, _| async move { c.fsync(ino.0).await },
        );
    }

    fn opendir(&self, req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        // No FOPEN_CACHE_DIR even for a leased directory: a listing from
        // the kernel's cache brings no attributes, and after writes the
        // kernel wants fresh ones (blocks) for every stat, which the
        // READDIRPLUS of a listing not cached gives at once (measured:
        // stats after writing 4x faster without it).
        self.open_checked(req, "opendir", ino.0, R, reply, move |s| {
            (FileHandle(s.dirs.open(ino.0)), FopenFlags::empty())
        });
    }

    fn readdir(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        let read = self.dir_read(req, ino, fh, offset);
        self.run_answering("readdir", readdir::readdir(read, reply));
    }

    fn readdirplus(
        &self,
        req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        let read = self.dir_read(req, ino, fh, offset);
        self.run_answering("readdirplus", readdir::readdirplus(read, reply));
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        let t0 = Instant::now();
        self.shared.dirs.release(fh.0);
        reply.ok();
        self.answered("releasedir", t0);
    }

    fn fsyncdir(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        // With sync = "full" every entry change was durable before it was
        // acknowledged. Otherwise the client's fsync sends what it answered
        // itself (delegated creates and unlinks) and waits until every change
        // it made is durable, with the directory's own record.
        if self.shared.durable_replies {
            reply.ok();
            return self.answered("fsyncdir", Instant::now());
        }
        self.serve(req, "fsyncdir", reply, |c, _| async move {
            c.fsync(ino.0).await
        });
    }

    fn statfs(&self, req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        self.serve(req, "statfs", reply, |c, _| async move { c.statfs().await });
    }

    fn setxattr(
        &self,
        req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        let name = or_reply!("setxattr", xattr_name(name), reply);
        if ino == INodeNo::ROOT && name == stats::XATTR {
            // `shoal stats --mount DIR --reset`: not stored, not counted;
            // by root or the user the mount runs as.
            let who = self.checked_cred(req);
            if !who.is_root() && who.uid != self.shared.client.cred().uid {
                let e = ShoalError::new(
                    Errno::EPERM,
                    format!(
                        "{name}: only root or uid {} may reset the mount's statistics",
                        self.shared.client.cred().uid
                    ),
                );
                return fail("setxattr", reply, e);
            }
            if value != b"reset" {
                let e =
                    ShoalError::invalid(format!("{name}: the only value it takes is \"reset\""));
                return fail("setxattr", reply, e);
            }
            self.stats.reset();
            return reply.ok();
        }
        let create_only = flags & libc::XATTR_CREATE != 0;
        let replace_only = flags & libc::XATTR_REPLACE != 0;
        let value = value.to_vec();
        self.serve(req, "setxattr", reply, move |c, _| async move {
            Self::check_xattr(&c, ino.0, &name, true).await?;
            c.setxattr(ino.0, &name, &value, create_only, replace_only)
                .await
        });
    }

    fn getxattr(&self, req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        let name = or_reply!("getxattr", xattr_name(name), reply);
        if ino == INodeNo::ROOT && name == stats::XATTR {
            // `shoal stats --mount DIR`: the table, not counted, and which
            // path the mount's writes took and how its read replies were filled.
            let paths = stats::write_paths_line(&self.shared.client.write_paths());
            let tables = stats::tables_line(&self.shared.table_sizes());
            let text = self.stats.table() + &paths + &self.stats.ring_reads_line() + &tables;
            return reply_value(reply, size, text.as_bytes());
        }
        self.serve_then(
            req,
            "getxattr",
            reply,
            move |c, _| async move {
                Self::check_xattr(&c, ino.0, &name, false).await?;
                c.getxattr(ino.0, &name).await
            },
            move |reply, _, value| reply_value(reply, size, &value),
        );
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        self.serve_then(
            req,
            "listxattr",
            reply,
            |c, _| async move { c.listxattr(ino.0).await },
            move |reply, _, names| reply_value(reply, size, &name_list(&names)),
        );
    }

    fn removexattr(&self, req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let name = or_reply!("removexattr", xattr_name(name), reply);
        self.serve(req, "removexattr", reply, move |c, _| async move {
            Self::check_xattr(&c, ino.0, &name, true).await?;
            c.removexattr(ino.0, &name).await
        });
    }

    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        // Shoal files have no ioctls. The common caller is isatty() (TCGETS,
        // e.g. on every Python open()); ENOTTY is its expected answer, given
        // here without a log line per call.
        reply.error(fuser::Errno::ENOTTY);
        self.answered("ioctl", Instant::now());
    }

    fn fallocate(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _offset: u64,
        _length: u64,
        _mode: i32,
        reply: ReplyEmpty,
    ) {
        // Servers allocate as data arrives and cannot reserve space ahead;
        // with EOPNOTSUPP, posix_fallocate() falls back to writing zeros.
        reply.error(fuser::Errno::from_i32(libc::EOPNOTSUPP));
        self.answered("fallocate", Instant::now());
    }

    fn forget(&self, _req: &Request, ino: INodeNo, _nlookup: u64) {
        self.shared.forgotten(&[ino.0]);
        self.shared.sweeps.forgotten(&self.rt, 1);
    }

    /// The kernel dropped these inodes (each FORGET names an inode the
    /// kernel evicted, whatever its count): what is cached of them goes.
    fn batch_forget(&self, _req: &Request, nodes: &[fuser::ForgetOne]) {
        let inodes: Vec<u64> = nodes.iter().map(|n| n.nodeid().0).collect();
        self.shared.forgotten(&inodes);
        self.shared.sweeps.forgotten(&self.rt, inodes.len());
    }

    fn access(&self, req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        // access(2), faccessat(2) and chdir: the rights asked for (none for
        // F_OK: the lookup that led here found the object).
        let want = (mask.bits() & 0o7) as u32;
        self.serve(req, "access", reply, move |c, _| async move {
            if want == 0 {
                return Ok(());
            }
            let a = c.getattr(ino.0).await?;
            access::require(&access::caller_of(&c), &a, want, "access")
        });
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let name = name_or_reply!("create", name, reply);
        self.serve(req, "create", reply, |c, _| async move {
            let (c, _) = Self::creator(c, parent.0).await?;
            match c.create(parent.0, &name, mode & 0o7777).await {
                // The kernel's lookup just before found no such name (perhaps
                // from what the client knew of the directory, `known_dirs`,
                // while another client made it). Without O_EXCL the open must
                // find that file: ESTALE has the kernel walk the path again,
                // asking the servers.
                Err(e) if e.errno == Errno::EEXIST && flags & libc::O_EXCL == 0 => {
                    c.forget(parent.0);
                    Err(ShoalError::new(
                        Errno::ESTALE,
                        format!("{name:?} was made meanwhile: look it up again"),
                    ))
                }
                made => Ok(Found::new(&c, parent.0, name, made?).await),
            }
        });
    }
}
