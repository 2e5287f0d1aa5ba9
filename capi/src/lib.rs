//! libshoal: the C interface of Shoal's native client (`shoal.h`, generated
//! from this crate by cbindgen; see capi/README.md).
//!
//! The rules every function follows:
//! - paths are absolute paths inside the Shoal namespace ("/dir/file"),
//!   NUL-terminated UTF-8;
//! - on failure a function returns -1 (or NULL) and sets `errno` to a POSIX
//!   error number; `shoal_last_error()` gives this thread's message for it;
//! - every function is thread-safe; the process has one connection per
//!   server, shared by all descriptors and threads;
//! - descriptors are small integers of libshoal's own (not kernel
//!   descriptors), the lowest free one first;
//! - a NULL pointer is EFAULT, a descriptor that is not open EBADF, and a
//!   panic inside the library EIO: nothing unwinds into C;
//! - after fork the child gets its own connections on its first call; its
//!   descriptors stay open, with offsets copied rather than shared.
//!
//! Pointer arguments must be NULL or valid for the call as the C prototype
//! says (the usual contract of the POSIX call each function mirrors).

#![allow(clippy::missing_safety_doc)]

mod error;
mod ffi;
mod files;
mod fork;
mod held_attrs;
mod held_back;
mod lock_wait;
mod locks;
mod ops;
mod read_ahead;
mod recall_listener;
mod session;

use std::path::Path;

use libc::{c_char, c_int, c_void, gid_t, mode_t, off_t, size_t, ssize_t, uid_t};
use shoal_client::{Attr, DirEntry, FileKind, SetAttr};

use error::err;
use ffi::{c_path, c_str, call, call_keeping_held, copy_sized, in_buf, out_buf, out_struct};
use ops::{ListAttrs, Target};

/// Longest entry name, in bytes (without the NUL).
pub const SHOAL_NAME_MAX: usize = 255;

/// `f_type` that `shoal_statfs` reports ("SHOL").
pub const SHOAL_SUPER_MAGIC: i64 = 0x5348_4f4c;

/// One directory entry, as `shoal_readdir` and `shoal_readdirplus` return it.
#[repr(C)]
#[derive(Clone, Copy)]
#[allow(non_camel_case_types)]
pub struct shoal_dirent {
    /// The object's handle (`st_ino` of its `struct stat`).
    pub d_ino: u64,
    /// DT_DIR, DT_REG or DT_LNK.
    pub d_type: u8,
    /// NUL-terminated name.
    pub d_name: [c_char; 256],
}

/// How many writes and bytes took each path of the write threshold
/// [Hildebrand 2006] in this process so far (`shoal_write_paths`).
#[repr(C)]
#[derive(Clone, Copy, Default)]
#[allow(non_camel_case_types)]
pub struct shoal_write_paths {
    pub direct_writes: u64,
    pub direct_bytes: u64,
    /// Writes under the threshold, buffered and joined.
    pub gathered_writes: u64,
    pub gathered_bytes: u64,
    /// The writes the buffered ones were sent as.
    pub gathered_sends: u64,
}

/// Where a file's bytes live.
#[repr(C)]
#[allow(non_camel_case_types)]
pub struct shoal_layout {
    /// Bytes of one strip: the file is striped round robin over its datafiles.
    pub strip_size: u64,
    /// Datafiles (servers) the file is striped over.
    pub num_datafiles: u32,
    /// 1 if the file has no metafile (made under the no_metafile hint).
    pub no_metafile: u32,
}

/// This thread's message for the last call that failed on it ("" if none).
/// Valid until the next failing call on the same thread.
#[no_mangle]
pub extern "C" fn shoal_last_error() -> *const c_char {
    ffi::last_error()
}

/// The library's version, e.g. "0.1.0".
#[no_mangle]
pub extern "C" fn shoal_version() -> *const c_char {
    static VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");
    VERSION.as_ptr() as *const c_char
}

/// Connects this process to the cluster described by `cluster_file` (as
/// `shoal up` writes it) and checks that every server answers. Calling it
/// again with the same file counts one more user (each needs its own
/// `shoal_disconnect`); with another file it fails with EISCONN.
#[no_mangle]
pub unsafe extern "C" fn shoal_connect(cluster_file: *const c_char) -> c_int {
    call("shoal_connect", -1, || {
        connect(cluster_file, true, session::Flavor::Threads)
    })
}

/// `shoal_connect` without checking that every server answers: nothing is
/// sent until a call needs a server, and then only that server is connected
/// to (an unreachable server fails that call, with ECONNREFUSED or the
/// like). For short-lived processes that touch a few servers, such as
/// those `libshoal_preload.so` serves: a `stat` of one file connects to the
/// one or two servers it asks instead of all of them.
#[no_mangle]
pub unsafe extern "C" fn shoal_connect_lazy(cluster_file: *const c_char) -> c_int {
    call("shoal_connect_lazy", -1, || {
        connect(cluster_file, false, session::Flavor::Threads)
    })
}

/// `shoal_connect_lazy` for `libshoal_preload.so` (Rust only, not in
/// shoal.h): each calling thread drives the sockets while it waits, and one
/// thread of the library's own answers lease recalls between calls (see
/// `session::Flavor::Caller`). `forget` runs on every recall before it is
/// answered, so that the preload library's own caches go too.
///
/// # Safety
/// `cluster_file` as for `shoal_connect`.
#[doc(hidden)]
pub unsafe fn connect_for_preload(cluster_file: *const c_char, forget: fn()) -> c_int {
    call("shoal_connect_lazy", -1, || {
        connect(cluster_file, false, session::Flavor::Caller { forget })
    })
}

/// The connects' body: the fork handlers and the send at exit of what is
/// held back (`fork`, `held_back`; once each), then `session::connect`.
unsafe fn connect(
    cluster_file: *const c_char,
    check: bool,
    flavor: session::Flavor,
) -> error::Result<c_int> {
    let file = c_str(cluster_file, "cluster_file")?;
    fork::install_handlers();
    held_back::register_exit_send();
    session::connect(Path::new(file), check, flavor).map(|_| 0)
}

/// Installs libshoal's fork handlers now instead of at the first connect
/// (once; a later call does nothing), for `libshoal_preload.so`, which
/// registers handlers of its own on either side of them (Rust only).
#[doc(hidden)]
pub fn install_fork_handlers() {
    fork::install_handlers()
}

/// libshoal takes the process's umask from [`track_umask`] calls from now
/// on (from /proc/self/status once, until the first), rather than reading
/// /proc at each create: for `libshoal_preload.so`, which sees every
/// umask(2) call (Rust only).
#[doc(hidden)]
pub fn start_tracking_umask() {
    ops::start_tracking_umask()
}

/// The program set its umask to `mask` (see [`start_tracking_umask`]).
#[doc(hidden)]
pub fn track_umask(mask: u32) {
    ops::track_umask(mask)
}

/// The settings of the cluster this process is connected to, for
/// `libshoal_preload.so` (its own caches follow `cache_ttl_ms` and
/// `cache_entries`; not part of shoal.h: Rust only).
#[doc(hidden)]
pub fn connected_settings() -> Option<shoal_proto::cluster::Settings> {
    session::settings()
}

/// How this process's session proves itself, for `libshoal_preload.so`'s
/// statistics: `Some(uid)` with a user credential from the node's broker
/// (acting as that uid only), None with the cluster secret or not connected
/// (Rust only).
#[doc(hidden)]
pub fn connected_credential_uid() -> Option<u32> {
    session::ours()?.client.credential_user().map(|c| c.uid)
}

/// Drops one user of the connection; the last one closes every descriptor
/// and the connections. ENOTCONN if not connected.
#[no_mangle]
pub extern "C" fn shoal_disconnect() -> c_int {
    call("shoal_disconnect", -1, || session::disconnect().map(|_| 0))
}

/// 1 if this process is connected, 0 if not.
#[no_mangle]
pub extern "C" fn shoal_is_connected() -> c_int {
    call("shoal_is_connected", 0, || {
        Ok(session::is_connected() as c_int)
    })
}

/// open(2): O_RDONLY/O_WRONLY/O_RDWR with O_CREAT, O_EXCL, O_TRUNC,
/// O_APPEND, O_DIRECTORY, O_NOFOLLOW (others are accepted and ignored,
/// O_TMPFILE is EOPNOTSUPP). `mode` (less the umask) applies to a new file.
/// Returns a libshoal descriptor.
#[no_mangle]
pub unsafe extern "C" fn shoal_open(path: *const c_char, flags: c_int, mode: mode_t) -> c_int {
    call("shoal_open", -1, || ops::open(c_path(path)?, flags, mode))
}

/// creat(2): open(path, O_CREAT | O_WRONLY | O_TRUNC, mode).
#[no_mangle]
pub unsafe extern "C" fn shoal_creat(path: *const c_char, mode: mode_t) -> c_int {
    call("shoal_creat", -1, || {
        ops::open(
            c_path(path)?,
            libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
            mode,
        )
    })
}

/// close(2). The descriptor is released even when it fails.
#[no_mangle]
pub extern "C" fn shoal_close(fd: c_int) -> c_int {
    call_keeping_held("shoal_close", -1, || {
        let sent = held_attrs::flush();
        ops::close(fd)?;
        sent.map(|_| 0)
    })
}

/// fcntl(2)'s record locks: `cmd` is F_GETLK, F_SETLK, F_SETLKW or one of
/// their OFD forms (F_OFD_GETLK, F_OFD_SETLK, F_OFD_SETLKW), on `lock`.
/// The locks hold for the whole cluster: they exclude processes on every
/// client, a mount's included. A close of any descriptor of the file lets
/// the process's POSIX locks on it go; OFD locks go with the open file's
/// last close. F_SETLK of a range another owner holds: EAGAIN; F_SETLKW
/// waits, or fails with EDEADLK if the owner in the way waits for this one.
#[no_mangle]
pub unsafe extern "C" fn shoal_fcntl_lock(fd: c_int, cmd: c_int, lock: *mut libc::flock) -> c_int {
    call("shoal_fcntl_lock", -1, || {
        // SAFETY: the caller's struct flock, or null.
        let lock = unsafe { lock.as_mut() }.ok_or_else(|| err(libc::EFAULT, "lock is null"))?;
        locks::fcntl(fd, cmd, lock).map(|_| 0)
    })
}

/// flock(2): LOCK_SH, LOCK_EX (LOCK_NB: EWOULDBLOCK instead of a wait) and
/// LOCK_UN. A whole-file lock of the open file for the whole cluster, as
/// NFS makes flock: unlike on a local disk, it meets fcntl locks of the
/// same file.
#[no_mangle]
pub extern "C" fn shoal_flock(fd: c_int, op: c_int) -> c_int {
    call("shoal_flock", -1, || locks::flock(fd, op).map(|_| 0))
}

/// Sends what libshoal holds back. Attribute changes: a chmod that widens
/// access, a chown that changes nothing and utimens, through a descriptor
/// whose open created the file, wait for the process's next call of another
/// kind, so that `tar` and `cp -p` pay one round trip for the three they make
/// per file. Writes under the cluster's `write_threshold`: buffered and joined,
/// and sent when a file's buffer fills, at its close or fsync, on a read of
/// them, or on a write `gather_delay_ms` later. exit(3), exec through the
/// preload library and shoal_disconnect send both; a program that ends with
/// `_exit` calls this first. Fails with the error of a send that failed
/// (of this call or an earlier one not reported by a close or fsync).
#[no_mangle]
pub extern "C" fn shoal_flush() -> c_int {
    call_keeping_held("shoal_flush", -1, || {
        held_back::send_everything().map(|_| 0)
    })
}

/// Fills `out` with how many writes and bytes of this process took each
/// path of the write threshold so far. ENOTCONN before `shoal_connect`.
#[no_mangle]
pub unsafe extern "C" fn shoal_write_paths(out: *mut shoal_write_paths) -> c_int {
    call("shoal_write_paths", -1, || {
        let out = out_struct(out, "out")?;
        let p = session::current()?.client.write_paths();
        *out = shoal_write_paths {
            direct_writes: p.direct_writes,
            direct_bytes: p.direct_bytes,
            gathered_writes: p.gathered_writes,
            gathered_bytes: p.gathered_bytes,
            gathered_sends: p.gathered_sends,
        };
        Ok(0)
    })
}

/// dup(2): a new descriptor sharing `fd`'s open file and offset.
#[no_mangle]
pub extern "C" fn shoal_dup(fd: c_int) -> c_int {
    call("shoal_dup", -1, || ops::dup(fd))
}

/// read(2).
#[no_mangle]
pub unsafe extern "C" fn shoal_read(fd: c_int, buf: *mut c_void, count: size_t) -> ssize_t {
    call("shoal_read", -1, || {
        Ok(ops::read(fd, out_buf(buf, count)?, None)? as ssize_t)
    })
}

/// write(2).
#[no_mangle]
pub unsafe extern "C" fn shoal_write(fd: c_int, buf: *const c_void, count: size_t) -> ssize_t {
    call("shoal_write", -1, || {
        Ok(ops::write(fd, in_buf(buf, count)?, None)? as ssize_t)
    })
}

/// The object a path argument names (its last symlink followed or not).
unsafe fn path_target<'a>(path: *const c_char, follow: bool) -> error::Result<Target<'a>> {
    Ok(Target::Path {
        path: c_path(path)?,
        follow,
    })
}

fn offset(off: off_t) -> error::Result<u64> {
    u64::try_from(off).map_err(|_| err(libc::EINVAL, format!("negative offset {off}")))
}

/// pread(2).
#[no_mangle]
pub unsafe extern "C" fn shoal_pread(
    fd: c_int,
    buf: *mut c_void,
    count: size_t,
    off: off_t,
) -> ssize_t {
    call("shoal_pread", -1, || {
        let buf = out_buf(buf, count)?;
        Ok(ops::read(fd, buf, Some(offset(off)?))? as ssize_t)
    })
}

/// pwrite(2).
#[no_mangle]
pub unsafe extern "C" fn shoal_pwrite(
    fd: c_int,
    buf: *const c_void,
    count: size_t,
    off: off_t,
) -> ssize_t {
    call("shoal_pwrite", -1, || {
        let buf = in_buf(buf, count)?;
        Ok(ops::write(fd, buf, Some(offset(off)?))? as ssize_t)
    })
}

/// lseek(2): SEEK_SET, SEEK_CUR, SEEK_END, SEEK_DATA, SEEK_HOLE. On a
/// directory descriptor only lseek(fd, 0, SEEK_SET), which rewinds it.
#[no_mangle]
pub extern "C" fn shoal_lseek(fd: c_int, off: off_t, whence: c_int) -> off_t {
    call("shoal_lseek", -1, || ops::lseek(fd, off, whence))
}

/// fsync(2): the file's data (and in scratch mode its metadata) durable on
/// every server holding it.
#[no_mangle]
pub extern "C" fn shoal_fsync(fd: c_int) -> c_int {
    call("shoal_fsync", -1, || ops::fsync(fd).map(|_| 0))
}

/// fdatasync(2): as shoal_fsync.
#[no_mangle]
pub extern "C" fn shoal_fdatasync(fd: c_int) -> c_int {
    call("shoal_fdatasync", -1, || ops::fsync(fd).map(|_| 0))
}

/// ftruncate(2).
#[no_mangle]
pub extern "C" fn shoal_ftruncate(fd: c_int, length: off_t) -> c_int {
    call("shoal_ftruncate", -1, || {
        ops::ftruncate(fd, length).map(|_| 0)
    })
}

/// truncate(2).
#[no_mangle]
pub unsafe extern "C" fn shoal_truncate(path: *const c_char, length: off_t) -> c_int {
    call("shoal_truncate", -1, || {
        ops::truncate(c_path(path)?, length).map(|_| 0)
    })
}

unsafe fn stat_of(name: &str, t: error::Result<Target>, st: *mut libc::stat) -> c_int {
    call(name, -1, || {
        let t = t?;
        let st = out_struct(st, "stat buffer")?;
        let a = t.attr()?;
        ops::fill_stat(st, &a, ops::blksize());
        Ok(0)
    })
}

/// stat(2): follows a symlink.
#[no_mangle]
pub unsafe extern "C" fn shoal_stat(path: *const c_char, st: *mut libc::stat) -> c_int {
    stat_of("shoal_stat", path_target(path, true), st)
}

/// lstat(2): a symlink itself.
#[no_mangle]
pub unsafe extern "C" fn shoal_lstat(path: *const c_char, st: *mut libc::stat) -> c_int {
    stat_of("shoal_lstat", path_target(path, false), st)
}

/// fstat(2).
#[no_mangle]
pub unsafe extern "C" fn shoal_fstat(fd: c_int, st: *mut libc::stat) -> c_int {
    stat_of("shoal_fstat", Ok(Target::Fd(fd)), st)
}

/// access(2) for the real uid and gid (F_OK, R_OK, W_OK, X_OK).
#[no_mangle]
pub unsafe extern "C" fn shoal_access(path: *const c_char, mode: c_int) -> c_int {
    call("shoal_access", -1, || {
        ops::access(c_path(path)?, mode).map(|_| 0)
    })
}

/// mkdir(2); `mode` less the umask.
#[no_mangle]
pub unsafe extern "C" fn shoal_mkdir(path: *const c_char, mode: mode_t) -> c_int {
    call("shoal_mkdir", -1, || {
        ops::mkdir(c_path(path)?, mode).map(|_| 0)
    })
}

/// rmdir(2).
#[no_mangle]
pub unsafe extern "C" fn shoal_rmdir(path: *const c_char) -> c_int {
    call("shoal_rmdir", -1, || ops::rmdir(c_path(path)?).map(|_| 0))
}

/// unlink(2). A file open in this process stays readable until its last
/// descriptor here closes.
#[no_mangle]
pub unsafe extern "C" fn shoal_unlink(path: *const c_char) -> c_int {
    call("shoal_unlink", -1, || ops::unlink(c_path(path)?).map(|_| 0))
}

/// rename(2): replaces an existing target of a compatible kind atomically.
#[no_mangle]
pub unsafe extern "C" fn shoal_rename(from: *const c_char, to: *const c_char) -> c_int {
    call("shoal_rename", -1, || {
        ops::rename(c_path(from)?, c_path(to)?).map(|_| 0)
    })
}

/// link(2)/linkat(2): makes `newpath` another name of the file `oldpath`
/// names (a hard link; EPERM for a directory). A symlink as the last
/// component of `oldpath` is followed only if `follow` is non-zero.
#[no_mangle]
pub unsafe extern "C" fn shoal_link(
    oldpath: *const c_char,
    newpath: *const c_char,
    follow: c_int,
) -> c_int {
    call("shoal_link", -1, || {
        ops::link(c_path(oldpath)?, c_path(newpath)?, follow != 0).map(|_| 0)
    })
}

/// symlink(2): makes `linkpath` a symlink holding `target` (any text).
#[no_mangle]
pub unsafe extern "C" fn shoal_symlink(target: *const c_char, linkpath: *const c_char) -> c_int {
    call("shoal_symlink", -1, || {
        ops::symlink(c_str(target, "target")?, c_path(linkpath)?).map(|_| 0)
    })
}

/// readlink(2): copies at most `size` bytes of the target, without a NUL;
/// returns the bytes copied.
#[no_mangle]
pub unsafe extern "C" fn shoal_readlink(
    path: *const c_char,
    buf: *mut c_char,
    size: size_t,
) -> ssize_t {
    call("shoal_readlink", -1, || {
        let path = c_path(path)?;
        if size == 0 {
            return Err(err(libc::EINVAL, "buffer size 0"));
        }
        let buf = out_buf(buf as *mut c_void, size)?;
        let target = ops::readlink(path)?;
        let n = target.len().min(buf.len());
        buf[..n].copy_from_slice(&target.as_bytes()[..n]);
        Ok(n as ssize_t)
    })
}

fn chmod_set(mode: mode_t) -> SetAttr {
    SetAttr {
        mode: Some(mode & 0o7777),
        ..Default::default()
    }
}

fn chown_set(uid: uid_t, gid: gid_t) -> SetAttr {
    SetAttr {
        uid: (uid != uid_t::MAX).then_some(uid),
        gid: (gid != gid_t::MAX).then_some(gid),
        ..Default::default()
    }
}

/// chmod(2).
#[no_mangle]
pub unsafe extern "C" fn shoal_chmod(path: *const c_char, mode: mode_t) -> c_int {
    call("shoal_chmod", -1, || {
        ops::setattr(&path_target(path, true)?, chmod_set(mode)).map(|_| 0)
    })
}

/// fchmod(2).
#[no_mangle]
pub extern "C" fn shoal_fchmod(fd: c_int, mode: mode_t) -> c_int {
    call_keeping_held("shoal_fchmod", -1, || {
        ops::setattr_fd(fd, chmod_set(mode)).map(|_| 0)
    })
}

/// chown(2): (uid_t)-1 or (gid_t)-1 leaves that id as it is.
#[no_mangle]
pub unsafe extern "C" fn shoal_chown(path: *const c_char, uid: uid_t, gid: gid_t) -> c_int {
    call("shoal_chown", -1, || {
        ops::setattr(&path_target(path, true)?, chown_set(uid, gid)).map(|_| 0)
    })
}

/// lchown(2): a symlink itself.
#[no_mangle]
pub unsafe extern "C" fn shoal_lchown(path: *const c_char, uid: uid_t, gid: gid_t) -> c_int {
    call("shoal_lchown", -1, || {
        ops::setattr(&path_target(path, false)?, chown_set(uid, gid)).map(|_| 0)
    })
}

/// fchown(2).
#[no_mangle]
pub extern "C" fn shoal_fchown(fd: c_int, uid: uid_t, gid: gid_t) -> c_int {
    call_keeping_held("shoal_fchown", -1, || {
        ops::setattr_fd(fd, chown_set(uid, gid)).map(|_| 0)
    })
}

unsafe fn times_arg<'a>(times: *const libc::timespec) -> Option<&'a [libc::timespec; 2]> {
    (times as *const [libc::timespec; 2]).as_ref()
}

/// utimensat(2) on a path: `times` NULL sets both to now, else
/// {atime, mtime}, each possibly UTIME_NOW or UTIME_OMIT. `flags` 0 or
/// AT_SYMLINK_NOFOLLOW.
#[no_mangle]
pub unsafe extern "C" fn shoal_utimens(
    path: *const c_char,
    times: *const libc::timespec,
    flags: c_int,
) -> c_int {
    call("shoal_utimens", -1, || {
        if flags & !libc::AT_SYMLINK_NOFOLLOW != 0 {
            return Err(err(libc::EINVAL, format!("bad flags {flags:#x}")));
        }
        let t = Target::Path {
            path: c_path(path)?,
            follow: flags & libc::AT_SYMLINK_NOFOLLOW == 0,
        };
        ops::setattr(&t, ops::times(times_arg(times))?).map(|_| 0)
    })
}

/// futimens(3).
#[no_mangle]
pub unsafe extern "C" fn shoal_futimens(fd: c_int, times: *const libc::timespec) -> c_int {
    call_keeping_held("shoal_futimens", -1, || {
        ops::setattr_fd(fd, ops::times(times_arg(times))?).map(|_| 0)
    })
}

/// opendir(3) as a descriptor: open(path, O_RDONLY | O_DIRECTORY). Read it
/// with shoal_readdir or shoal_readdirplus, close it with shoal_closedir.
#[no_mangle]
pub unsafe extern "C" fn shoal_opendir(path: *const c_char) -> c_int {
    call("shoal_opendir", -1, || {
        ops::open(c_path(path)?, libc::O_RDONLY | libc::O_DIRECTORY, 0)
    })
}

/// The `d_type` of an object of this kind.
fn d_type(kind: FileKind) -> u8 {
    match kind {
        FileKind::Directory => libc::DT_DIR,
        FileKind::File => libc::DT_REG,
        FileKind::Symlink => libc::DT_LNK,
        FileKind::Fifo => libc::DT_FIFO,
        FileKind::Socket => libc::DT_SOCK,
        FileKind::CharDevice => libc::DT_CHR,
        FileKind::BlockDevice => libc::DT_BLK,
    }
}

/// Fills `ent` (and `st`, if given, with `blksize`) from a listed entry.
fn fill_entry(
    ent: &mut shoal_dirent,
    e: &DirEntry,
    st: Option<&mut libc::stat>,
    attr: Option<&Attr>,
    blksize: u64,
) {
    ent.d_ino = e.handle;
    ent.d_type = d_type(e.kind);
    let bytes = e.name.as_bytes();
    let n = bytes.len().min(SHOAL_NAME_MAX);
    for (d, s) in ent.d_name.iter_mut().zip(&bytes[..n]) {
        *d = *s as c_char;
    }
    ent.d_name[n] = 0;
    match (st, attr) {
        (Some(st), Some(a)) => ops::fill_stat(st, a, blksize),
        // Attributes asked for and not brought (shoal_readdir_held).
        (Some(st), None) => st.st_ino = 0,
        (None, _) => {}
    }
}

/// Up to `max` entries into `ents` (and their attributes into `sts` if not
/// NULL): the count, 0 at the end.
unsafe fn next_entries(
    name: &str,
    fd: c_int,
    ents: *mut shoal_dirent,
    sts: *mut libc::stat,
    max: size_t,
    attrs: ListAttrs,
) -> ssize_t {
    call(name, -1, || {
        if ents.is_null() {
            return Err(err(libc::EFAULT, "entry buffer is NULL"));
        }
        if sts.is_null() != (attrs == ListAttrs::None) {
            return Err(err(libc::EFAULT, "stat buffer is NULL"));
        }
        let blksize = ops::blksize();
        let mut i = 0;
        let listed = ops::readdir_each(fd, attrs, max, |e, attr| {
            assert!(i < max, "a listing gives at most the entries asked for");
            // SAFETY: the caller passes room for `max` entries (and stats),
            // and i < max.
            let (ent, st) = unsafe { (&mut *ents.add(i), sts.as_mut().map(|_| &mut *sts.add(i))) };
            fill_entry(ent, e, st, attr, blksize);
            i += 1;
        })?;
        Ok(listed as ssize_t)
    })
}
/// readdir(3): fills `ent` with the next entry ("." and ".." first) and
/// returns 1; returns 0 at the end, -1 on an error.
#[no_mangle]
pub unsafe extern "C" fn shoal_readdir(dirfd: c_int, ent: *mut shoal_dirent) -> c_int {
    next_entries(
        "shoal_readdir",
        dirfd,
        ent,
        std::ptr::null_mut(),
        1,
        ListAttrs::None,
    ) as c_int
}

/// As shoal_readdir, and fills `st` with the entry's attributes (what
/// shoal_lstat would give), fetched for a whole batch of entries at a time.
#[no_mangle]
pub unsafe extern "C" fn shoal_readdirplus(
    dirfd: c_int,
    ent: *mut shoal_dirent,
    st: *mut libc::stat,
) -> c_int {
    next_entries("shoal_readdirplus", dirfd, ent, st, 1, ListAttrs::All) as c_int
}

/// Up to `max` next entries of directory `dirfd` into `ents[0..]` and, if
/// `sts` is not NULL, their attributes into `sts[0..]` (as shoal_readdirplus
/// gives them): the number filled, 0 at the end, -1 on an error. One call
/// per batch, for a caller that serves getdents(2) or buffers a listing.
#[no_mangle]
pub unsafe extern "C" fn shoal_readdir_many(
    dirfd: c_int,
    ents: *mut shoal_dirent,
    sts: *mut libc::stat,
    max: size_t,
) -> ssize_t {
    let attrs = match sts.is_null() {
        true => ListAttrs::None,
        false => ListAttrs::All,
    };
    next_entries("shoal_readdir_many", dirfd, ents, sts, max, attrs)
}

/// One entry as [`readdir_each`] hands it on.
#[doc(hidden)]
pub struct ListedEntry<'a> {
    pub name: &'a [u8],
    /// `d_ino` and `d_type`, as a shoal_dirent has them.
    pub ino: u64,
    pub kind: u8,
    /// Its attributes as shoal_readdirplus gives them; None where a
    /// listing of held attributes has none.
    pub attrs: Option<&'a libc::stat>,
}

/// shoal_readdir_many with attributes (shoal_readdir_held with `held`),
/// each entry handed to `each` instead of copied into arrays: for
/// `libshoal_preload.so`, which keeps a listing more compactly than arrays
/// of shoal_dirent (Rust only). `each` must not call into libshoal.
#[doc(hidden)]
pub fn readdir_each(
    dirfd: c_int,
    held: bool,
    max: usize,
    mut each: impl FnMut(ListedEntry),
) -> ssize_t {
    let name = if held {
        "shoal_readdir_held"
    } else {
        "shoal_readdir_many"
    };
    call(name, -1, || {
        let attrs = if held {
            ListAttrs::Held
        } else {
            ListAttrs::All
        };
        let blksize = ops::blksize();
        // SAFETY: struct stat is plain data; all zeros is a valid value.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        let n = ops::readdir_each(dirfd, attrs, max, |e, a| {
            let attrs = match a {
                Some(a) => {
                    ops::fill_stat(&mut st, a, blksize);
                    Some(&st)
                }
                None => None,
            };
            each(ListedEntry {
                name: e.name.as_bytes(),
                ino: e.handle,
                kind: d_type(e.kind),
                attrs,
            })
        })?;
        Ok(n as ssize_t)
    })
}

/// As shoal_readdir_many with attributes, but only those this process
/// holds already (leased to it, or fetched within the cache TTL); an entry
/// whose attributes it does not hold gets `st_ino` 0 (fetch them with
/// shoal_stat_handles if need be). Never a message for attributes: a
/// listing of entries this process just made (whose creates gave it their
/// attributes) brings them all for the cost of the listing alone. `sts`
/// must not be NULL.
#[no_mangle]
pub unsafe extern "C" fn shoal_readdir_held(
    dirfd: c_int,
    ents: *mut shoal_dirent,
    sts: *mut libc::stat,
    max: size_t,
) -> ssize_t {
    next_entries("shoal_readdir_held", dirfd, ents, sts, max, ListAttrs::Held)
}

/// The attributes of `n` objects named by their handles (`d_ino` of a
/// shoal_dirent, `st_ino` of a stat) into `sts[0..n]`, fetched together: one
/// ListAttr per server holding some of them, as shoal_readdirplus does for a
/// batch. An object that no longer exists gets `st_ino` 0. This lets a
/// program list with shoal_readdir and fetch attributes only if it needs
/// them. Returns 0, or -1 with errno (EINVAL for n over 4096).
#[no_mangle]
pub unsafe extern "C" fn shoal_stat_handles(
    handles: *const u64,
    n: size_t,
    sts: *mut libc::stat,
) -> c_int {
    const MAX: usize = 4096;
    call("shoal_stat_handles", -1, || {
        if n > MAX {
            return Err(err(libc::EINVAL, format!("{n} handles, at most {MAX}")));
        }
        if n == 0 {
            return Ok(0);
        }
        if handles.is_null() || sts.is_null() {
            return Err(err(libc::EFAULT, "handles or stat array is NULL"));
        }
        // SAFETY: the caller passes n handles and room for n stats.
        let (handles, sts) = unsafe {
            (
                std::slice::from_raw_parts(handles, n),
                std::slice::from_raw_parts_mut(sts, n),
            )
        };
        let s = ops::session()?;
        let attrs = s.run(s.client.listattr(handles))?;
        for (st, a) in sts.iter_mut().zip(attrs) {
            match a {
                Some(a) => ops::fill_stat(st, &a, ops::blksize()),
                // SAFETY: struct stat is plain data; all zeros is valid.
                None => *st = unsafe { std::mem::zeroed() },
            }
        }
        Ok(0)
    })
}

/// rewinddir(3): the next shoal_readdir starts over.
#[no_mangle]
pub extern "C" fn shoal_rewinddir(dirfd: c_int) -> c_int {
    call("shoal_rewinddir", -1, || {
        ops::lseek(dirfd, 0, libc::SEEK_SET).map(|_| 0)
    })
}

/// closedir(3).
#[no_mangle]
pub extern "C" fn shoal_closedir(dirfd: c_int) -> c_int {
    call("shoal_closedir", -1, || {
        if files::get(dirfd)?.dir.is_none() {
            return Err(err(libc::ENOTDIR, format!("{dirfd}: not a directory")));
        }
        ops::close(dirfd).map(|_| 0)
    })
}

unsafe fn getxattr(
    name: &str,
    t: error::Result<Target>,
    attr: *const c_char,
    value: *mut c_void,
    size: size_t,
) -> ssize_t {
    call(name, -1, || {
        let t = t?;
        let attr = c_str(attr, "name")?.to_string();
        let buf = out_buf(value, size)?;
        let v = t.with(|c, h| async move { c.getxattr(h, &attr).await })?;
        copy_sized(&v, buf, "value")
    })
}

unsafe fn setxattr(
    name: &str,
    t: error::Result<Target>,
    attr: *const c_char,
    value: *const c_void,
    size: size_t,
    flags: c_int,
) -> c_int {
    call(name, -1, || {
        let t = t?;
        let attr = c_str(attr, "name")?.to_string();
        let v = in_buf(value, size)?.to_vec();
        if flags & !(libc::XATTR_CREATE | libc::XATTR_REPLACE) != 0 {
            return Err(err(libc::EINVAL, format!("bad flags {flags:#x}")));
        }
        let (create, replace) = (
            flags & libc::XATTR_CREATE != 0,
            flags & libc::XATTR_REPLACE != 0,
        );
        t.with(|c, h| async move { c.setxattr(h, &attr, &v, create, replace).await })?;
        Ok(0)
    })
}

unsafe fn listxattr(
    name: &str,
    t: error::Result<Target>,
    list: *mut c_char,
    size: size_t,
) -> ssize_t {
    call(name, -1, || {
        let t = t?;
        let buf = out_buf(list as *mut c_void, size)?;
        let names = t.with(|c, h| async move { c.listxattr(h).await })?;
        let mut all = Vec::new();
        for n in names {
            all.extend_from_slice(n.as_bytes());
            all.push(0);
        }
        copy_sized(&all, buf, "name list")
    })
}

unsafe fn removexattr(name: &str, t: error::Result<Target>, attr: *const c_char) -> c_int {
    call(name, -1, || {
        let t = t?;
        let attr = c_str(attr, "name")?.to_string();
        t.with(|c, h| async move { c.removexattr(h, &attr).await })?;
        Ok(0)
    })
}

/// getxattr(2): with `size` 0 returns the value's length; ERANGE if it
/// does not fit; ENODATA if not set.
#[no_mangle]
pub unsafe extern "C" fn shoal_getxattr(
    path: *const c_char,
    name: *const c_char,
    value: *mut c_void,
    size: size_t,
) -> ssize_t {
    getxattr("shoal_getxattr", path_target(path, true), name, value, size)
}

/// lgetxattr(2).
#[no_mangle]
pub unsafe extern "C" fn shoal_lgetxattr(
    path: *const c_char,
    name: *const c_char,
    value: *mut c_void,
    size: size_t,
) -> ssize_t {
    getxattr(
        "shoal_lgetxattr",
        path_target(path, false),
        name,
        value,
        size,
    )
}

/// fgetxattr(2).
#[no_mangle]
pub unsafe extern "C" fn shoal_fgetxattr(
    fd: c_int,
    name: *const c_char,
    value: *mut c_void,
    size: size_t,
) -> ssize_t {
    getxattr("shoal_fgetxattr", Ok(Target::Fd(fd)), name, value, size)
}

/// setxattr(2): `flags` 0, XATTR_CREATE or XATTR_REPLACE.
#[no_mangle]
pub unsafe extern "C" fn shoal_setxattr(
    path: *const c_char,
    name: *const c_char,
    value: *const c_void,
    size: size_t,
    flags: c_int,
) -> c_int {
    let t = path_target(path, true);
    setxattr("shoal_setxattr", t, name, value, size, flags)
}

/// lsetxattr(2).
#[no_mangle]
pub unsafe extern "C" fn shoal_lsetxattr(
    path: *const c_char,
    name: *const c_char,
    value: *const c_void,
    size: size_t,
    flags: c_int,
) -> c_int {
    let t = path_target(path, false);
    setxattr("shoal_lsetxattr", t, name, value, size, flags)
}

/// fsetxattr(2).
#[no_mangle]
pub unsafe extern "C" fn shoal_fsetxattr(
    fd: c_int,
    name: *const c_char,
    value: *const c_void,
    size: size_t,
    flags: c_int,
) -> c_int {
    setxattr(
        "shoal_fsetxattr",
        Ok(Target::Fd(fd)),
        name,
        value,
        size,
        flags,
    )
}

/// listxattr(2): the names, each NUL-terminated, one after another; with
/// `size` 0 returns the length needed.
#[no_mangle]
pub unsafe extern "C" fn shoal_listxattr(
    path: *const c_char,
    list: *mut c_char,
    size: size_t,
) -> ssize_t {
    listxattr("shoal_listxattr", path_target(path, true), list, size)
}

/// llistxattr(2).
#[no_mangle]
pub unsafe extern "C" fn shoal_llistxattr(
    path: *const c_char,
    list: *mut c_char,
    size: size_t,
) -> ssize_t {
    listxattr("shoal_llistxattr", path_target(path, false), list, size)
}

/// flistxattr(2).
#[no_mangle]
pub unsafe extern "C" fn shoal_flistxattr(fd: c_int, list: *mut c_char, size: size_t) -> ssize_t {
    listxattr("shoal_flistxattr", Ok(Target::Fd(fd)), list, size)
}

/// removexattr(2).
#[no_mangle]
pub unsafe extern "C" fn shoal_removexattr(path: *const c_char, name: *const c_char) -> c_int {
    removexattr("shoal_removexattr", path_target(path, true), name)
}

/// lremovexattr(2).
#[no_mangle]
pub unsafe extern "C" fn shoal_lremovexattr(path: *const c_char, name: *const c_char) -> c_int {
    removexattr("shoal_lremovexattr", path_target(path, false), name)
}

/// fremovexattr(2).
#[no_mangle]
pub unsafe extern "C" fn shoal_fremovexattr(fd: c_int, name: *const c_char) -> c_int {
    removexattr("shoal_fremovexattr", Ok(Target::Fd(fd)), name)
}

/// The cluster's capacity (every server summed) in the terms statvfs and
/// statfs share, for a `path` that must exist.
struct Capacity {
    bsize: u64,
    blocks: u64,
    bfree: u64,
    bavail: u64,
    files: u64,
    ffree: u64,
}

fn capacity(path: &str) -> error::Result<Capacity> {
    const BSIZE: u64 = 4096;
    Target::Path { path, follow: true }.attr()?;
    let s = ops::session()?;
    let st = s.run(s.client.statfs())?;
    let bavail = st.avail_bytes / BSIZE;
    Ok(Capacity {
        bsize: BSIZE,
        blocks: st.total_bytes / BSIZE,
        bfree: st.free_bytes / BSIZE,
        bavail,
        // Objects have no fixed table: as many more fit as free blocks.
        files: st.objects.saturating_add(bavail),
        ffree: bavail,
    })
}

/// statvfs(3) of the cluster (`path` must exist in it).
#[no_mangle]
pub unsafe extern "C" fn shoal_statvfs(path: *const c_char, buf: *mut libc::statvfs) -> c_int {
    call("shoal_statvfs", -1, || {
        let path = c_path(path)?;
        let out = out_struct(buf, "statvfs buffer")?;
        let c = capacity(path)?;
        // SAFETY: plain data; all zeros is valid.
        *out = std::mem::zeroed();
        (out.f_bsize, out.f_frsize) = (c.bsize as _, c.bsize as _);
        (out.f_blocks, out.f_bfree, out.f_bavail) = (c.blocks, c.bfree, c.bavail);
        (out.f_files, out.f_ffree, out.f_favail) = (c.files, c.ffree, c.ffree);
        out.f_fsid = ops::SHOAL_DEV as _;
        out.f_namemax = SHOAL_NAME_MAX as _;
        Ok(0)
    })
}

/// statfs(2) of the cluster; `f_type` is SHOAL_SUPER_MAGIC.
#[no_mangle]
pub unsafe extern "C" fn shoal_statfs(path: *const c_char, buf: *mut libc::statfs) -> c_int {
    call("shoal_statfs", -1, || {
        let path = c_path(path)?;
        let out = out_struct(buf, "statfs buffer")?;
        let c = capacity(path)?;
        // SAFETY: plain data; all zeros is valid.
        *out = std::mem::zeroed();
        out.f_type = SHOAL_SUPER_MAGIC as _;
        (out.f_bsize, out.f_frsize) = (c.bsize as _, c.bsize as _);
        (out.f_blocks, out.f_bfree, out.f_bavail) = (c.blocks, c.bfree, c.bavail);
        (out.f_files, out.f_ffree) = (c.files, c.ffree);
        out.f_namelen = SHOAL_NAME_MAX as _;
        Ok(0)
    })
}

/// The layout of file `path` (followed if a symlink): strip size and width.
#[no_mangle]
pub unsafe extern "C" fn shoal_get_layout(path: *const c_char, out: *mut shoal_layout) -> c_int {
    call("shoal_get_layout", -1, || {
        let t = Target::Path {
            path: c_path(path)?,
            follow: true,
        };
        let out = out_struct(out, "layout")?;
        let l = t.with(|c, h| async move { c.layout(h).await })?;
        out.strip_size = l.strip_size;
        out.num_datafiles = l.datafiles.len() as u32;
        out.no_metafile = l.no_metafile as u32;
        Ok(0)
    })
}

/// Copies `text` and a NUL into `buf`: with `size` 0 returns the length
/// (without the NUL); ERANGE if text and NUL do not fit.
fn copy_text(text: &str, buf: &mut [u8]) -> error::Result<ssize_t> {
    if buf.is_empty() {
        return Ok(text.len() as ssize_t);
    }
    if text.len() >= buf.len() {
        return Err(err(
            libc::ERANGE,
            format!("{} bytes and a NUL do not fit in {}", text.len(), buf.len()),
        ));
    }
    buf[..text.len()].copy_from_slice(text.as_bytes());
    buf[text.len()] = 0;
    Ok(text.len() as ssize_t)
}

/// The value of directory hint `hint` ("strip_size", "num_dfiles", "dist",
/// "no_metafile"; see `shoal hint`) of directory `dir`, as a NUL-terminated
/// string in `value`; returns its length. With `size` 0 returns the length
/// only; ERANGE if it does not fit; ENODATA if the hint is not set; EINVAL
/// for an unknown hint; ENOTDIR if `dir` is not a directory.
#[no_mangle]
pub unsafe extern "C" fn shoal_hint_get(
    dir: *const c_char,
    hint: *const c_char,
    value: *mut c_char,
    size: size_t,
) -> ssize_t {
    call("shoal_hint_get", -1, || {
        let (dir, hint) = (c_path(dir)?, c_str(hint, "hint")?);
        let buf = out_buf(value as *mut c_void, size)?;
        copy_text(&ops::hint_get(dir, hint)?, buf)
    })
}

/// Every hint set on directory `dir` as NUL-terminated text of
/// "hint=value\n" lines; returns its length; `size` as in shoal_hint_get.
#[no_mangle]
pub unsafe extern "C" fn shoal_hint_list(
    dir: *const c_char,
    buf: *mut c_char,
    size: size_t,
) -> ssize_t {
    call("shoal_hint_list", -1, || {
        let dir = c_path(dir)?;
        let buf = out_buf(buf as *mut c_void, size)?;
        let text: String = ops::hint_list(dir)?
            .into_iter()
            .map(|(h, v)| format!("{}={v}\n", h.name()))
            .collect();
        copy_text(&text, buf)
    })
}

/// Sets directory hint `hint` of `dir` to `value` (e.g. "strip_size",
/// "65536"); files created in `dir` from then on follow it. A bad value is
/// EINVAL (see shoal_last_error for what the hint accepts).
#[no_mangle]
pub unsafe extern "C" fn shoal_hint_set(
    dir: *const c_char,
    hint: *const c_char,
    value: *const c_char,
) -> c_int {
    call("shoal_hint_set", -1, || {
        let (dir, hint) = (c_path(dir)?, c_str(hint, "hint")?);
        let value = c_str(value, "value")?;
        ops::hint_set(dir, hint, Some(value)).map(|_| 0)
    })
}

/// Clears directory hint `hint` of `dir`; ENODATA if it was not set.
#[no_mangle]
pub unsafe extern "C" fn shoal_hint_unset(dir: *const c_char, hint: *const c_char) -> c_int {
    call("shoal_hint_unset", -1, || {
        let (dir, hint) = (c_path(dir)?, c_str(hint, "hint")?);
        ops::hint_set(dir, hint, None).map(|_| 0)
    })
}
