//! The calls behind the C entry points, on Rust types: paths resolved with
//! POSIX's symlink rules, open with its flags, permission checks at open,
//! directory streams with readdirplus batches, and attribute conversion to
//! `struct stat` and `struct statvfs`.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use shoal_client::{
    Attr, Client, Cred, DirEntry, FileKind, SetAttr, SetTime, ShoalError, Unlinked,
};
use shoal_proto::hints::{self, Hint};
use shoal_proto::names::split_path;
use shoal_proto::Handle;

use crate::error::{about, err, Result};
use crate::files::{self, DirStream, OpenFile};
use crate::held_attrs;
use crate::session::{self, Session};

/// Symlinks followed for one path, as Linux's limit.
const MAX_SYMLINKS: usize = 40;

/// `st_dev` of every Shoal object (one file system per process).
pub const SHOAL_DEV: u64 = 0x5348_4f4c;

/// The session, and the client acting as this process's caller.
pub fn session() -> Result<Arc<Session>> {
    session::current()
}

/// The lexical parent of `path` ("/" for a top-level name).
fn parent_of(path: &str) -> &str {
    let trimmed = path.trim_end_matches('/');
    match trimmed.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &trimmed[..i],
    }
}

/// Resolves `path`; a symlink as the last component is followed if
/// `follow` (or the path ends in '/'). A path ending in '/' must name a
/// directory.
pub async fn resolve(c: &Client, path: &str, follow: bool) -> Result<(Handle, FileKind)> {
    let (h, kind, _) = walk(c, path, follow, false).await?;
    Ok((h, kind))
}

/// The attributes of what `path` names, symlinks followed as in
/// [`resolve`]. The last component costs one lookup that brings its
/// attributes (one message with colocate), not a lookup and a getattr.
pub async fn resolve_attr(c: &Client, path: &str, follow: bool) -> Result<Attr> {
    let (_, _, attr) = walk(c, path, follow, true).await?;
    Ok(attr.expect("asked for"))
}

/// What `path` names, and with `want_attr` its attributes.
async fn walk(
    c: &Client,
    path: &str,
    follow: bool,
    want_attr: bool,
) -> Result<(Handle, FileKind, Option<Attr>)> {
    let slash = path.len() > 1 && path.ends_with('/');
    let mut current = path.to_string();
    for _ in 0..=MAX_SYMLINKS {
        let (h, kind, attr) = if want_attr {
            let a = lookup_attr(c, &current)
                .await
                .map_err(|e| match e.errno.0 {
                    libc::ENOENT => err(libc::ENOENT, format!("{path}: no such file or directory")),
                    _ => about(path)(e),
                })?;
            (a.handle, a.kind, Some(a))
        } else {
            let (h, kind) = c.resolve(&current).await.map_err(about(path))?;
            (h, kind, None)
        };
        if kind != FileKind::Symlink || !(follow || slash) {
            if slash && kind != FileKind::Directory {
                return Err(err(libc::ENOTDIR, format!("{path}: not a directory")));
            }
            return Ok((h, kind, attr));
        }
        let target = c.readlink(h).await.map_err(about(path))?;
        current = if target.starts_with('/') {
            target
        } else {
            format!("{}/{target}", parent_of(&current))
        };
    }
    Err(err(
        libc::ELOOP,
        format!("{path}: too many levels of symbolic links"),
    ))
}

/// The attributes of what `path` names, its last symlink not followed.
async fn lookup_attr(c: &Client, path: &str) -> Result<Attr> {
    if split_path(path)?.is_empty() {
        return c.getattr(c.root()).await;
    }
    let (dir, name) = c.resolve_parent(path).await?;
    c.lookup_attr(dir, name).await
}

/// The parent directory of `path` and its last name.
pub async fn resolve_parent<'p>(c: &Client, path: &'p str) -> Result<(Handle, &'p str)> {
    if path.trim_matches('/').is_empty() {
        return Err(err(libc::EBUSY, "/: the root cannot be changed so"));
    }
    c.resolve_parent(path).await.map_err(about(path))
}

/// TRACKED_UMASK before the first create of a process that tracks it.
const UNTRACKED: u32 = u32::MAX;
/// The umask as a front end that sees every umask(2) call (the preload
/// library) last told it, or as /proc said at the first create since it
/// tracks; UNTRACKED until then.
static TRACKED_UMASK: AtomicU32 = AtomicU32::new(UNTRACKED);
static TRACKING: AtomicBool = AtomicBool::new(false);

/// From now on the umask is what [`track_umask`] says, not read from /proc
/// at each create (reading /proc/self/status cost a create through the
/// preload library a sixth of its time): only /proc's first answer is used.
pub fn start_tracking_umask() {
    TRACKING.store(true, Ordering::Relaxed);
}

/// The program set its umask to `mask`.
pub fn track_umask(mask: u32) {
    TRACKED_UMASK.store(mask & 0o777, Ordering::Relaxed);
}

/// This process's umask: tracked, or read (see [`start_tracking_umask`]).
fn umask() -> u32 {
    match TRACKED_UMASK.load(Ordering::Relaxed) {
        UNTRACKED => {
            let mask = process_umask();
            if TRACKING.load(Ordering::Relaxed) {
                // Unless a umask call was tracked meanwhile: it is newer.
                let _ = TRACKED_UMASK.compare_exchange(
                    UNTRACKED,
                    mask,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            }
            mask
        }
        mask => mask,
    }
}

/// This process's umask as the kernel has it (Linux has it in /proc since
/// 4.7; 022 otherwise). Read, not set and set back: that would briefly give
/// another thread's creates a umask of 0.
fn process_umask() -> u32 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0o022)
}

/// Whether `cred` may `want` (R_OK | W_OK | X_OK bits) object `a`, by
/// the servers' rule (`Cred::may`).
pub fn permitted(a: &Attr, cred: Cred, want: u32) -> bool {
    cred.may(
        a.mode & 0o7777,
        a.uid,
        a.gid,
        a.kind == FileKind::Directory,
        want,
    )
}

fn denied(path: &str) -> ShoalError {
    err(libc::EACCES, format!("{path}: permission denied"))
}

/// open(2): returns the new descriptor.
pub fn open(path: &str, flags: i32, mode: u32) -> Result<i32> {
    let s = session()?;
    let c = &s.client;
    let access = flags & libc::O_ACCMODE;
    let (readable, writable) = match access {
        libc::O_RDONLY => (true, false),
        libc::O_WRONLY => (false, true),
        libc::O_RDWR => (true, true),
        _ => return Err(err(libc::EINVAL, "bad access mode in flags")),
    };
    if flags & libc::O_TMPFILE == libc::O_TMPFILE {
        return Err(err(libc::EOPNOTSUPP, "O_TMPFILE is not supported by Shoal"));
    }
    let follow = flags & libc::O_NOFOLLOW == 0;
    let listing = flags & libc::O_DIRECTORY != 0 && !writable && flags & libc::O_CREAT == 0;
    let (attr, created, listed) = s.run(async {
        if flags & libc::O_CREAT != 0 {
            let (a, created) = open_or_create(c, path, flags, mode, follow).await?;
            return Ok((a, created, None));
        }
        if listing {
            if let Some((a, listed)) = open_listing(c, path, follow).await? {
                return Ok((a, false, Some(listed)));
            }
        }
        let a = resolve_attr(c, path, follow).await?;
        if a.kind == FileKind::Symlink {
            return Err(err(libc::ELOOP, format!("{path}: a symlink (O_NOFOLLOW)")));
        }
        Ok((a, false, None))
    })?;
    match attr.kind {
        FileKind::Directory if writable || flags & libc::O_CREAT != 0 => {
            return Err(err(libc::EISDIR, format!("{path}: is a directory")))
        }
        FileKind::File if flags & libc::O_DIRECTORY != 0 => {
            return Err(err(libc::ENOTDIR, format!("{path}: not a directory")))
        }
        _ => {}
    }
    if !created {
        let want = if readable { 4 } else { 0 } | if writable { 2 } else { 0 };
        if !permitted(&attr, c.cred(), want) {
            return Err(denied(path));
        }
        if flags & libc::O_TRUNC != 0 && writable && attr.kind == FileKind::File {
            s.run(c.truncate(attr.handle, 0)).map_err(about(path))?;
        }
    }
    let dir = (attr.kind == FileKind::Directory).then(|| Mutex::new(listed.unwrap_or_default()));
    files::insert(OpenFile {
        handle: attr.handle,
        kind: attr.kind,
        readable,
        writable,
        append: flags & libc::O_APPEND != 0,
        path: path.to_string(),
        offset: AtomicU64::new(0),
        dir,
        created: created.then_some(attr),
        read_ahead: Mutex::default(),
        fresh: AtomicBool::new(created),
    })
}

/// An O_DIRECTORY open of `path` that names a directory: its attributes and
/// the first batch of its listing, from one Readdir that brings the
/// directory's record (the server checks the read permission open wants),
/// rather than a getattr now and the Readdir at the first readdir. None when
/// `path` is not known to be a directory, or its attributes are cached (the
/// open then costs no message, and a program that opens a directory only to
/// work relative to it, as `tar -C` does, never lists it): the caller opens
/// it as any path.
async fn open_listing(c: &Client, path: &str, follow: bool) -> Result<Option<(Attr, DirStream)>> {
    let (h, kind) = resolve(c, path, follow).await?;
    if kind != FileKind::Directory || c.cached_attr(h).is_some() {
        return Ok(None);
    }
    let batch = c.config().settings.readdir_batch.max(1);
    let (entries, done, attr) = c.open_listing(h, batch).await.map_err(about(path))?;
    let listed = DirStream {
        dots: 0,
        after: entries.last().map(|e| e.name.clone()).unwrap_or_default(),
        done: done || entries.is_empty(),
        buffered: entries.into(),
        attrs: Default::default(),
    };
    Ok(Some((attr, listed)))
}

/// The O_CREAT half of open: the attributes, and whether this call made it.
async fn open_or_create(
    c: &Client,
    path: &str,
    flags: i32,
    mode: u32,
    follow: bool,
) -> Result<(Attr, bool)> {
    let excl = flags & libc::O_EXCL != 0;
    if path.ends_with('/') {
        return Err(err(libc::EISDIR, format!("{path}: O_CREAT of a directory")));
    }
    for _ in 0..=MAX_SYMLINKS {
        let (dir, name) = resolve_parent(c, path).await?;
        match c.lookup_attr(dir, name).await {
            Ok(_) if excl => return Err(err(libc::EEXIST, format!("{path}: file exists"))),
            Ok(a) if a.kind == FileKind::Symlink => {
                if !follow {
                    return Err(err(libc::ELOOP, format!("{path}: a symlink (O_NOFOLLOW)")));
                }
                // The target may not exist yet: O_CREAT makes it.
                let target = c.readlink(a.handle).await.map_err(about(path))?;
                let next = if target.starts_with('/') {
                    target
                } else {
                    format!("{}/{target}", parent_of(path))
                };
                return Box::pin(open_or_create(c, &next, flags, mode, follow)).await;
            }
            Ok(a) => return Ok((a, false)),
            Err(e) if e.errno.0 == libc::ENOENT => {}
            Err(e) => return Err(about(path)(e)),
        }
        match c.create(dir, name, mode & 0o7777 & !umask()).await {
            Ok(a) => return Ok((a, true)),
            // Made by someone else since the lookup: open theirs.
            Err(e) if e.errno.0 == libc::EEXIST && !excl => continue,
            Err(e) => return Err(about(path)(e)),
        }
    }
    Err(err(
        libc::ELOOP,
        format!("{path}: too many levels of symbolic links"),
    ))
}

/// close(2). A file unlinked while open goes with its last descriptor.
/// Its buffered writes go first (another client that opens
/// the file next sees them), and close reports a send of them that failed.
pub fn close(fd: i32) -> Result<()> {
    let (file, reclaim) = files::remove(fd)?;
    let s = session()?;
    let sent = match file.writable {
        true => s
            .run(s.client.flush(file.handle))
            .map_err(about(&file.path)),
        false => Ok(()),
    };
    // The table held the other reference: this was the open file's last
    // descriptor.
    let last = Arc::strong_count(&file) == 1;
    let unlocked = crate::locks::closed(&file, last).map_err(about(&file.path));
    if reclaim {
        s.run(s.client.reclaim(file.handle))
            .map_err(about(&file.path))?;
    }
    sent.and(unlocked)
}

/// dup(2): a second descriptor for the same open file (offset shared).
pub fn dup(fd: i32) -> Result<i32> {
    files::insert_shared(files::get(fd)?)
}

/// The file behind `fd`, checked to be open for reading (or writing) and
/// not a directory.
fn open_for(fd: i32, writing: bool) -> Result<Arc<OpenFile>> {
    let file = files::get(fd)?;
    let (allowed, what) = match writing {
        true => (file.writable, "writing"),
        false => (file.readable, "reading"),
    };
    if !allowed {
        return Err(err(libc::EBADF, format!("{fd}: not open for {what}")));
    }
    if file.kind == FileKind::Directory {
        return Err(err(libc::EISDIR, format!("{}: is a directory", file.path)));
    }
    Ok(file)
}

/// pread(2); `at` None reads at the descriptor's offset (read(2)).
pub fn read(fd: i32, buf: &mut [u8], at: Option<u64>) -> Result<usize> {
    let file = open_for(fd, false)?;
    if buf.is_empty() {
        return Ok(0);
    }
    let s = session()?;
    let len = buf.len() as u64;
    let start = at.unwrap_or_else(|| file.reserve(len));
    let lock_ra = || file.read_ahead.lock().unwrap_or_else(|e| e.into_inner());
    let (served, fetch) = {
        let mut ra = lock_ra();
        (ra.serve(start, buf), ra.fetch_len(start, buf.len()))
    };
    if let Some(n) = served {
        return Ok(n);
    }
    // The window's lock is not held across the request: concurrent reads
    // of one descriptor proceed together.
    let got = s.run(s.client.read(file.handle, start, fetch));
    let n = got.as_ref().map_or(0, |d| d.len().min(buf.len()));
    if at.is_none() {
        file.settle(start, len, n as u64);
    }
    let data = got.map_err(about(&file.path))?;
    buf[..n].copy_from_slice(&data[..n]);
    lock_ra().fetched(start, data, n);
    Ok(n)
}

/// pwrite(2); `at` None writes at the descriptor's offset (write(2)), or at
/// the end of the file with O_APPEND.
pub fn write(fd: i32, buf: &[u8], at: Option<u64>) -> Result<usize> {
    let file = open_for(fd, true)?;
    if buf.is_empty() {
        return Ok(0);
    }
    let s = session()?;
    let c = &s.client;
    let len = buf.len() as u64;
    let data = Bytes::copy_from_slice(buf);
    let start = match at {
        Some(off) => off,
        None if file.append => {
            // Appends go at the size the servers report now (another
            // client's appends included), and leave the offset at the end.
            c.forget(file.handle);
            let size = s
                .run(c.getattr(file.handle))
                .map_err(about(&file.path))?
                .size;
            file.offset.store(size + len, Ordering::SeqCst);
            size
        }
        None => file.reserve(len),
    };
    let done = s.run(c.write(file.handle, start, data));
    // After the write: a read racing with it cannot leave older bytes
    // in a window.
    files::data_changed(file.handle, Some(&file));
    if at.is_none() && !file.append {
        file.settle(start, len, *done.as_ref().unwrap_or(&0) as u64);
    }
    done.map_err(about(&file.path))
}

/// lseek(2).
pub fn lseek(fd: i32, offset: i64, whence: i32) -> Result<i64> {
    let file = files::get(fd)?;
    let invalid = || {
        err(
            libc::EINVAL,
            format!("lseek({offset}, whence {whence}): bad offset"),
        )
    };
    if let Some(dir) = &file.dir {
        // A listing can only start over.
        if whence != libc::SEEK_SET || offset != 0 {
            return Err(invalid());
        }
        dir.lock().unwrap_or_else(|e| e.into_inner()).rewind();
        return Ok(0);
    }
    let size = || -> Result<i64> {
        let s = session()?;
        s.client.forget(file.handle);
        let a = s
            .run(s.client.getattr(file.handle))
            .map_err(about(&file.path))?;
        Ok(a.size as i64)
    };
    let target = match whence {
        libc::SEEK_SET => offset,
        libc::SEEK_CUR => {
            // One atomic step, so concurrent seeks each move the offset.
            let mut out = Err(invalid());
            let _ = file
                .offset
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |cur| {
                    let next = (cur as i64).checked_add(offset).filter(|n| *n >= 0)?;
                    out = Ok(next);
                    Some(next as u64)
                });
            return out;
        }
        libc::SEEK_END => size()?.checked_add(offset).ok_or_else(invalid)?,
        // No holes are tracked: data runs to the end of the file.
        libc::SEEK_DATA | libc::SEEK_HOLE => {
            let end = size()?;
            if offset < 0 || offset >= end {
                return Err(err(libc::ENXIO, format!("offset {offset} is past the end")));
            }
            if whence == libc::SEEK_DATA {
                offset
            } else {
                end
            }
        }
        _ => return Err(invalid()),
    };
    if target < 0 {
        return Err(invalid());
    }
    file.offset.store(target as u64, Ordering::SeqCst);
    Ok(target)
}

pub fn fsync(fd: i32) -> Result<()> {
    let file = files::get(fd)?;
    let s = session()?;
    s.run(s.client.fsync(file.handle))
        .map_err(about(&file.path))
}

pub fn ftruncate(fd: i32, length: i64) -> Result<()> {
    let file = files::get(fd)?;
    if !file.writable || file.kind != FileKind::File {
        return Err(err(
            libc::EINVAL,
            format!("{fd}: not a file open for writing"),
        ));
    }
    truncate_handle(file.handle, length, &file.path)
}

pub fn truncate(path: &str, length: i64) -> Result<()> {
    let s = session()?;
    let attr = s.run(resolve_attr(&s.client, path, true))?;
    match attr.kind {
        FileKind::Directory => return Err(err(libc::EISDIR, format!("{path}: is a directory"))),
        _ if !permitted(&attr, s.client.cred(), 2) => return Err(denied(path)),
        _ => {}
    }
    truncate_handle(attr.handle, length, path)
}

fn truncate_handle(h: Handle, length: i64, path: &str) -> Result<()> {
    let size = u64::try_from(length)
        .map_err(|_| err(libc::EINVAL, format!("negative length {length}")))?;
    let s = session()?;
    let done = s.run(s.client.truncate(h, size)).map_err(about(path));
    files::data_changed(h, None);
    done
}

/// The object a path or descriptor names.
pub enum Target<'a> {
    Path { path: &'a str, follow: bool },
    Fd(i32),
}

impl Target<'_> {
    fn name(&self) -> String {
        match self {
            Target::Path { path, .. } => path.to_string(),
            Target::Fd(fd) => format!("descriptor {fd}"),
        }
    }

    pub async fn handle(&self, c: &Client) -> Result<Handle> {
        match self {
            Target::Path { path, follow } => Ok(resolve(c, path, *follow).await?.0),
            Target::Fd(fd) => Ok(files::get(*fd)?.handle),
        }
    }

    pub fn attr(&self) -> Result<Attr> {
        let s = session()?;
        match self {
            Target::Path { path, follow } => s.run(resolve_attr(&s.client, path, *follow)),
            Target::Fd(fd) => {
                let file = files::get(*fd)?;
                s.run(s.client.getattr(file.handle))
                    .map_err(about(&file.path))
            }
        }
    }

    /// Runs `f` on the object's handle.
    pub fn with<T: Send, F>(&self, f: impl FnOnce(Client, Handle) -> F + Send) -> Result<T>
    where
        F: std::future::Future<Output = shoal_proto::error::Result<T>> + Send,
    {
        let s = session()?;
        s.run(async {
            let h = self.handle(&s.client).await?;
            f(s.client.clone(), h).await
        })
        .map_err(about(&self.name()))
    }
}

/// Fills `st` from `a`.
pub fn fill_stat(st: &mut libc::stat, a: &Attr, blksize: u64) {
    // SAFETY: struct stat is plain data; all zeros is a valid value.
    *st = unsafe { std::mem::zeroed() };
    st.st_dev = SHOAL_DEV;
    st.st_ino = a.handle;
    st.st_mode = a.kind.mode_bits() | (a.mode & 0o7777);
    st.st_nlink = a.nlink as _;
    st.st_uid = a.uid;
    st.st_gid = a.gid;
    st.st_size = a.size as i64;
    st.st_blksize = blksize.clamp(4096, 16 << 20) as _;
    st.st_blocks = a.size.div_ceil(512) as _;
    let split = |ns: i64| (ns.div_euclid(1_000_000_000), ns.rem_euclid(1_000_000_000));
    (st.st_atime, st.st_atime_nsec) = split(a.atime_ns);
    (st.st_mtime, st.st_mtime_nsec) = split(a.mtime_ns);
    (st.st_ctime, st.st_ctime_nsec) = split(a.ctime_ns);
}

/// `st_blksize`: the cluster's strip size, the unit one server stores.
pub fn blksize() -> u64 {
    session().map_or(1 << 20, |s| s.client.config().settings.strip_size)
}

/// access(2) for the real uid and gid.
pub fn access(path: &str, mode: i32) -> Result<()> {
    if mode & !(libc::R_OK | libc::W_OK | libc::X_OK) != 0 {
        return Err(err(libc::EINVAL, format!("bad access mode {mode}")));
    }
    let a = Target::Path { path, follow: true }.attr()?;
    let s = session()?;
    if permitted(&a, s.client.cred(), mode as u32) {
        Ok(())
    } else {
        Err(denied(path))
    }
}

pub fn mkdir(path: &str, mode: u32) -> Result<()> {
    if path.trim_matches('/').is_empty() {
        // The root is there already, as mkdir(2) of a mount point answers
        // (fio makes each directory of its file names, ignoring EEXIST).
        return Err(err(libc::EEXIST, format!("{path}: file exists")));
    }
    let s = session()?;
    s.run(async {
        let (dir, name) = resolve_parent(&s.client, path).await?;
        s.client.mkdir(dir, name, mode & 0o7777 & !umask()).await
    })
    .map(|_| ())
    .map_err(about(path))
}

pub fn rmdir(path: &str) -> Result<()> {
    let s = session()?;
    s.run(async {
        let (dir, name) = resolve_parent(&s.client, path).await?;
        s.client.rmdir(dir, name).await
    })
    .map_err(about(path))
}

/// unlink(2). A file some descriptor of this process has open loses its
/// entry now and its objects at its last close.
pub fn unlink(path: &str) -> Result<()> {
    let s = session()?;
    let c = &s.client;
    s.run(async {
        let (dir, name) = resolve_parent(c, path).await?;
        if !files::any_non_dir_open() {
            // Nothing open here to keep (a directory's entry is not taken by
            // unlink): the one-step unlink (EISDIR for a directory comes
            // from its server).
            return c.unlink(dir, name).await;
        }
        let (h, kind) = c.lookup(dir, name).await?;
        if kind == FileKind::Directory {
            return Err(err(libc::EISDIR, format!("{path}: is a directory")));
        }
        let unlinked = c.unlink_keeping(dir, name, files::is_open(h)).await?;
        reclaim_unless_open(c, unlinked).await
    })
    .map_err(about(path))
}

/// A file that lost its last name while open here goes at its last close
/// (or now, if that came meanwhile).
async fn reclaim_unless_open(c: &Client, unlinked: Unlinked) -> shoal_proto::error::Result<()> {
    match unlinked {
        Unlinked::StillOpen(h) if files::doom(h) => c.reclaim(h).await,
        _ => Ok(()),
    }
}

/// rename(2), replacing a compatible target atomically.
pub fn rename(from: &str, to: &str) -> Result<()> {
    let s = session()?;
    let c = &s.client;
    s.run(async {
        let (dir, name) = resolve_parent(c, from).await?;
        let (new_dir, new_name) = resolve_parent(c, to).await?;
        if let Some(replaced) = c
            .rename_keeping(dir, name, new_dir, new_name, false, files::is_open)
            .await?
        {
            reclaim_unless_open(c, replaced).await?;
        }
        Ok(())
    })
    .map_err(about(from))
}

/// link(2): `to` becomes another name of what `from` names (its last
/// symlink followed only if `follow`, as linkat's AT_SYMLINK_FOLLOW).
pub fn link(from: &str, to: &str, follow: bool) -> Result<()> {
    let s = session()?;
    let c = &s.client;
    s.run(async {
        let (h, _) = resolve(c, from, follow).await?;
        let (dir, name) = resolve_parent(c, to).await.map_err(about(to))?;
        c.link(h, dir, name).await.map(|_| ())
    })
    .map_err(about(from))
}

pub fn symlink(target: &str, link: &str) -> Result<()> {
    let s = session()?;
    s.run(async {
        let (dir, name) = resolve_parent(&s.client, link).await?;
        s.client.symlink(dir, name, target).await
    })
    .map(|_| ())
    .map_err(about(link))
}

pub fn readlink(path: &str) -> Result<String> {
    let s = session()?;
    s.run(async {
        let (h, kind) = resolve(&s.client, path, false).await?;
        if kind != FileKind::Symlink {
            return Err(err(libc::EINVAL, format!("{path}: not a symbolic link")));
        }
        s.client.readlink(h).await
    })
    .map_err(about(path))
}

pub fn setattr(t: &Target, set: SetAttr) -> Result<()> {
    t.with(|c, h| async move {
        files::attributes_changed(h);
        c.setattr(h, &set).await.map(|_| ())
    })
}

/// fchmod, fchown and futimens: held back if it may be (`held_attrs`),
/// else sent now, after any change held.
pub fn setattr_fd(fd: i32, set: SetAttr) -> Result<()> {
    let file = files::get(fd)?;
    if held_attrs::hold(file, session()?.client.cred(), &set)? {
        return Ok(());
    }
    held_attrs::flush()?;
    setattr(&Target::Fd(fd), set)
}

/// utimensat(2)'s times: NULL sets both to now.
pub fn times(times: Option<&[libc::timespec; 2]>) -> Result<SetAttr> {
    let one = |t: &libc::timespec| -> Result<Option<SetTime>> {
        match t.tv_nsec {
            libc::UTIME_NOW => Ok(Some(SetTime::Now)),
            libc::UTIME_OMIT => Ok(None),
            0..=999_999_999 => Ok(Some(SetTime::At(
                t.tv_sec
                    .checked_mul(1_000_000_000)
                    .and_then(|ns| ns.checked_add(t.tv_nsec))
                    .ok_or_else(|| err(libc::EINVAL, "time out of range"))?,
            ))),
            n => Err(err(libc::EINVAL, format!("tv_nsec {n} is out of range"))),
        }
    };
    Ok(match times {
        None => SetAttr {
            atime: Some(SetTime::Now),
            mtime: Some(SetTime::Now),
            ..Default::default()
        },
        Some([a, m]) => SetAttr {
            atime: one(a)?,
            mtime: one(m)?,
            ..Default::default()
        },
    })
}

/// What attributes a listing brings with its entries.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum ListAttrs {
    None,
    /// Those this process holds already (leased, or within the cache TTL):
    /// no message for attributes, so a listing nobody stats costs its
    /// batches alone, and one right after this process made the entries
    /// (whose creates leased it their attributes) costs the same and needs
    /// nothing more for its stats.
    Held,
    /// Every entry's (a readdirplus): one ListAttr round per batch for the
    /// attributes not held.
    All,
}

/// Entries a listing hands on at a time. A listing's reply can hold
/// thousands of entries; handing them on through small buffers, reused,
/// keeps a process's first listing from touching (and the kernel from
/// zeroing) a fresh page for every few entries, which cost a listing of
/// 2,000 entries over a hundred page faults.
const CHUNK: usize = 64;

/// Up to `max` next entries of a listing, each given to `each` with its
/// attributes as `attrs` says; how many (0 at the end). `each` runs while
/// the listing is locked: it must not call into this library.
pub fn readdir_each(
    fd: i32,
    attrs: ListAttrs,
    max: usize,
    mut each: impl FnMut(&DirEntry, Option<&Attr>),
) -> Result<usize> {
    let plus = attrs == ListAttrs::All;
    let file = files::get(fd)?;
    let dir = file
        .dir
        .as_ref()
        .ok_or_else(|| err(libc::ENOTDIR, format!("{fd}: not a directory")))?;
    let s = session()?;
    let c = &s.client;
    let batch = c.config().settings.readdir_batch.max(1);
    let mut st = dir.lock().unwrap_or_else(|e| e.into_inner());
    if plus {
        // Attributes an earlier call fetched are asked for again (from
        // libshoal's cache, which a recall since has emptied of what
        // changed): the caller caches what this call returns as of now.
        st.attrs.clear();
    }
    let mut given = 0;
    let mut chunk = Vec::with_capacity(CHUNK.min(max));
    // What a walk of the tree opens next: read ahead once the process walks.
    let mut subdirs = Vec::new();
    let mut hand_on = |chunk: &mut Vec<(DirEntry, Option<Attr>)>| {
        if attrs == ListAttrs::Held {
            let held = c.cached_attrs(chunk.iter().map(|(e, _)| &e.handle));
            for ((_, a), held) in chunk.iter_mut().zip(held) {
                *a = held;
            }
        }
        for (e, a) in chunk.drain(..) {
            if e.kind == FileKind::Directory && e.name != "." && e.name != ".." {
                subdirs.push(e.handle);
            }
            each(&e, a.as_ref());
            given += 1;
        }
    };
    while chunk.len() < max && st.dots < 2 {
        let dot = st.dots == 0;
        let name = if dot { "." } else { ".." };
        let h = if dot || file.path.trim_matches('/').is_empty() {
            file.handle
        } else {
            s.run(resolve(c, parent_of(&file.path), true))?.0
        };
        let attr = match plus {
            true => Some(s.run(c.getattr(h)).map_err(about(&file.path))?),
            false => None,
        };
        st.dots += 1;
        let entry = DirEntry {
            name: name.into(),
            handle: h,
            kind: FileKind::Directory,
        };
        chunk.push((entry, attr));
    }
    let mut wanted = max - chunk.len();
    while wanted > 0 {
        if st.buffered.is_empty() {
            if st.done {
                break;
            }
            let (entries, done) = s
                .run(c.readdir(file.handle, &st.after, batch))
                .map_err(about(&file.path))?;
            st.done = done || entries.is_empty();
            if let Some(last) = entries.last() {
                st.after = last.name.clone();
            }
            st.buffered.extend(entries);
            continue;
        }
        if plus && st.attrs.is_empty() {
            // Attributes for every buffered entry at once: the batch's
            // ListAttr round, not a getattr per entry.
            let handles: Vec<Handle> = st.buffered.iter().map(|e| e.handle).collect();
            let attrs = s.run(c.listattr(&handles)).map_err(about(&file.path))?;
            // Entries whose object went since the listing are left out.
            let listed = std::mem::take(&mut st.buffered).into_iter().zip(attrs);
            (st.buffered, st.attrs) = listed.filter(|(_, a)| a.is_some()).unzip();
            continue;
        }
        assert!(
            st.attrs.is_empty() || st.attrs.len() == st.buffered.len(),
            "attributes are fetched for every buffered entry at once"
        );
        if chunk.len() == CHUNK {
            hand_on(&mut chunk);
        }
        let n = wanted.min(CHUNK - chunk.len()).min(st.buffered.len());
        let st = &mut *st;
        let mut attrs = st.attrs.drain(..n.min(st.attrs.len()));
        let entries = st.buffered.drain(..n);
        chunk.extend(entries.map(|e| (e, attrs.next().flatten())));
        wanted -= n;
    }
    hand_on(&mut chunk);
    if !subdirs.is_empty() {
        // In the runtime: a read-ahead is a task of it.
        s.run_quietly(async { c.listed_subdirectories(&subdirs, batch, plus) });
    }
    Ok(given)
}

/// A hint named `name` of directory `path`, the directory's handle and the
/// client.
fn hint_dir(path: &str, name: Option<&str>) -> Result<(Arc<Session>, Handle, Option<Hint>)> {
    let hint = name.map(Hint::parse).transpose()?;
    let s = session()?;
    let (h, kind) = s.run(resolve(&s.client, path, true))?;
    if kind != FileKind::Directory {
        return Err(err(
            libc::ENOTDIR,
            format!("{path}: hints are set on directories, and this is not one"),
        ));
    }
    Ok((s, h, hint))
}

pub fn hint_list(path: &str) -> Result<Vec<(Hint, String)>> {
    let (s, h, _) = hint_dir(path, None)?;
    let set = s.run(s.client.hints(h)).map_err(about(path))?;
    Ok(hints::list(&set))
}

pub fn hint_get(path: &str, name: &str) -> Result<String> {
    let wanted = Hint::parse(name)?;
    hint_list(path)?
        .into_iter()
        .find(|(h, _)| *h == wanted)
        .map(|(_, v)| v)
        .ok_or_else(|| err(libc::ENODATA, format!("{path}: hint {name} is not set")))
}

pub fn hint_set(path: &str, name: &str, value: Option<&str>) -> Result<()> {
    let (s, h, hint) = hint_dir(path, Some(name))?;
    let hint = hint.expect("asked for");
    s.run(async {
        match value {
            Some(v) => s.client.set_hint(h, hint, v).await,
            None => s.client.unset_hint(h, hint).await,
        }
    })
    .map_err(about(path))
}
