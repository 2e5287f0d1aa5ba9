//! What the interposer knows about the process: the Shoal prefixes (mount
//! points, or `SHOAL_PREFIX`), whether libshoal is connected, the current
//! directory when it is inside Shoal, the kernel descriptors that stand for
//! libshoal descriptors, and the per-thread flag that sends the library's
//! own calls (and a signal handler interrupting it) straight to libc.
//!
//! Every entry point asks [`fd`] or [`classify_at`] first. Until the library
//! is initialised, inside the library on this thread, or when there is no
//! Shoal prefix at all, both answer "the kernel's" without taking a lock or
//! allocating: an unrelated call costs an atomic load and a compare.

use std::cell::Cell;
use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Mutex, OnceLock, RwLock};

use libc::{c_char, c_int};

use crate::errno::{errno, fail, set_errno};
use crate::paths;
use crate::real;
use crate::stats::{self, Op};

/// Kernel descriptor numbers up to this can stand for Shoal descriptors.
pub const MAX_FD: usize = 1 << 16;

/// A Shoal prefix of this process's paths.
pub struct Prefix {
    /// Absolute, normalised: the mount point or `SHOAL_PREFIX`.
    pub local: Vec<u8>,
    /// The cluster file.
    pub cluster: Vec<u8>,
    /// Whether the kernel reaches the same files there (a Shoal mount), so
    /// that a call the library does not serve can fall back to it.
    pub mounted: bool,
}

/// The environment variable an exec hands a Shoal current directory on in.
pub const CWD_VAR: &str = "SHOAL_PRELOAD_CWD";

static READY: AtomicBool = AtomicBool::new(false);
static PREFIXES: OnceLock<Vec<Prefix>> = OnceLock::new();
/// The cluster file libshoal is connected to (one per process).
static CONNECTED: OnceLock<Vec<u8>> = OnceLock::new();
static CONNECTING: Mutex<()> = Mutex::new(());
/// A mounted cluster libshoal could not connect to (its cluster file
/// unreadable, from a newer Shoal, its servers refusing): left to the mount.
static LEFT_TO_THE_MOUNT: OnceLock<Vec<u8>> = OnceLock::new();

thread_local! {
    static IN_LIB: Cell<bool> = const { Cell::new(false) };
}

/// While alive, this thread's calls go straight to libc.
pub struct Guard(bool);

impl Guard {
    pub fn enter() -> Guard {
        Guard(IN_LIB.with(|f| f.replace(true)))
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let was = self.0;
        IN_LIB.with(|f| f.set(was));
    }
}

pub fn in_lib() -> bool {
    IN_LIB.with(|f| f.get())
}

pub fn ready() -> bool {
    READY.load(Ordering::Acquire)
}

/// The process the library's tables belong to: the one it started in, or
/// the child of a fork (`fork.rs`).
static OWNER: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// The tables belong to this process from now on (start, a forked child).
pub fn owned_here() {
    // SAFETY: no arguments.
    OWNER.store(unsafe { libc::getpid() }, Ordering::Release);
}

/// Whether this is a child made with vfork (Python's `subprocess`, some
/// `posix_spawn`s) that has not exec'd yet: it runs on its parent's memory,
/// with no fork handler run, so it must change nothing in the library's
/// tables and send nothing through libshoal. It closes and duplicates the
/// kernel's descriptors only, and hands Shoal files to the program it execs
/// through the mount. Asked only by the calls such a child makes before
/// exec (close, close_range, dup2, exec), never on reads and writes.
pub fn in_vfork_child() -> bool {
    // SAFETY: no arguments.
    ready() && unsafe { libc::getpid() } != OWNER.load(Ordering::Acquire)
}

/// Runs a call the library serves: this thread's libc calls go straight
/// through meanwhile, and the wait is counted under `op`.
pub fn serve<T>(op: Op, f: impl FnOnce() -> T) -> T {
    let _g = Guard::enter();
    let t0 = stats::start();
    let r = f();
    if t0.is_some() {
        let e = errno();
        stats::record(op, t0);
        set_errno(e);
    }
    r
}

// ---------------------------------------------------------------- startup

/// Reads the prefixes (SHOAL_CONFIG + SHOAL_PREFIX, and the Shoal mounts of
/// /proc/self/mounts) and the current directory. Runs once, from the
/// library's constructor, before READY: its own libc calls go to libc.
pub fn init() {
    real::prime();
    let mounts = std::fs::read_to_string("/proc/self/mounts")
        .map(|t| paths::shoal_mounts(&t))
        .unwrap_or_default();
    let mut prefixes: Vec<Prefix> = Vec::new();
    if let (Some(config), Some(prefix)) = (
        std::env::var_os("SHOAL_CONFIG"),
        std::env::var_os("SHOAL_PREFIX"),
    ) {
        use std::os::unix::ffi::OsStrExt;
        let config = std::fs::canonicalize(&config).unwrap_or_else(|_| config.into());
        let prefix = std::path::absolute(&prefix).unwrap_or_else(|_| prefix.into());
        let local = paths::normalize(prefix.as_os_str().as_bytes());
        let mounted = mounts.iter().any(|(mp, _)| *mp == local);
        prefixes.push(Prefix {
            local,
            cluster: config.as_os_str().as_bytes().to_vec(),
            mounted,
        });
    }
    for (mountpoint, cluster) in mounts {
        if !prefixes.iter().any(|p| p.local == mountpoint) {
            prefixes.push(Prefix {
                local: mountpoint,
                cluster,
                mounted: true,
            });
        }
    }
    // The longest (innermost) prefix first.
    prefixes.sort_by_key(|p| std::cmp::Reverse(p.local.len()));
    if !prefixes.is_empty() {
        if let Ok(dir) = std::env::current_dir() {
            use std::os::unix::ffi::OsStrExt;
            let dir = paths::normalize(dir.as_os_str().as_bytes());
            // A Shoal cwd handed on by the exec that started this program
            // (posix/process.rs), if the kernel's cwd is still what it was.
            let handed = std::env::var_os(CWD_VAR).and_then(|v| {
                let v = v.as_bytes();
                let nl = v.iter().position(|&b| b == b'\n')?;
                (paths::normalize(&v[..nl]) == dir).then(|| paths::normalize(&v[nl + 1..]))
            });
            let under_prefix =
                |d: &[u8]| prefixes.iter().any(|p| paths::under(d, &p.local).is_some());
            if let Some(h) = handed.filter(|h| under_prefix(h)) {
                set_cwd(Some(h));
            } else if under_prefix(&dir) {
                set_cwd(Some(dir));
            } else {
                set_kernel_cwd(Some(dir), &prefixes);
            }
        }
    }
    // Creates apply the umask libshoal tracks through umask() below.
    shoal::start_tracking_umask();
    let _ = PREFIXES.set(prefixes);
    owned_here();
    READY.store(true, Ordering::Release);
}

pub fn prefixes() -> &'static [Prefix] {
    PREFIXES.get().map(Vec::as_slice).unwrap_or(&[])
}

/// The lock held while connecting, held across a fork (see `fork.rs`).
pub fn hold_connecting_for_fork() -> Box<dyn std::any::Any> {
    Box::new(CONNECTING.lock().unwrap_or_else(|e| e.into_inner()))
}

/// Connects libshoal to `p`'s cluster if nothing is connected yet. Ok(false):
/// `p` is left to the kernel: the process is connected to another cluster
/// (one per process), or this one's mount serves it because libshoal could
/// not connect (said once on stderr: a program keeps working, through the
/// mount). Without a mount that failure is every call's.
fn connect(p: &Prefix) -> Result<bool, c_int> {
    if let Some(c) = CONNECTED.get() {
        return Ok(*c == p.cluster);
    }
    if LEFT_TO_THE_MOUNT.get() == Some(&p.cluster) {
        stats::left_to_the_mount();
        return Ok(false);
    }
    let _g = Guard::enter();
    let _lock = CONNECTING.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(c) = CONNECTED.get() {
        return Ok(*c == p.cluster);
    }
    if LEFT_TO_THE_MOUNT.get() == Some(&p.cluster) {
        stats::left_to_the_mount();
        return Ok(false);
    }
    let file = CString::new(p.cluster.clone()).map_err(|_| libc::EINVAL)?;
    // SAFETY: a NUL-terminated path.
    // Lazily (no round to every server first: a process that stats one file
    // connects to the server or two it asks), the caller's thread reading
    // its replies: see the README's startup cost. A lease recall empties the
    // library's own cache before it is answered.
    if unsafe { shoal::connect_for_preload(file.as_ptr(), crate::cache::clear) } != 0 {
        let e = errno();
        // SAFETY: libshoal's message for this thread's last failure.
        let msg = unsafe { CStr::from_ptr(shoal::shoal_last_error()) };
        let local = String::from_utf8_lossy(&p.local);
        if p.mounted {
            eprintln!(
                "libshoal_preload: not serving {local} ({}); its mount does",
                msg.to_string_lossy()
            );
            let _ = LEFT_TO_THE_MOUNT.set(p.cluster.clone());
            stats::left_to_the_mount();
            return Ok(false);
        }
        // Once, not at every call that meets it.
        static SAID: AtomicBool = AtomicBool::new(false);
        if !SAID.swap(true, Ordering::Relaxed) {
            eprintln!("libshoal_preload: {local}: {}", msg.to_string_lossy());
        }
        return Err(e);
    }
    // The session's own copy of the cluster file: not read a second time.
    if let Some(settings) = shoal::connected_settings() {
        crate::cache::set_ttl(settings.cache_ttl_ms);
        crate::cache::set_bound(settings.cache_entries as usize);
    }
    let _ = CONNECTED.set(p.cluster.clone());
    Ok(true)
}

// ---------------------------------------------------------------- paths

/// A path the library serves.
pub struct Target {
    /// The absolute local path (under the prefix), normalised.
    pub local: Vec<u8>,
    /// The path inside Shoal.
    pub shoal: CString,
    /// Whether the kernel reaches it too (a mount).
    pub mounted: bool,
}

impl Target {
    pub fn shoal_bytes(&self) -> &[u8] {
        self.shoal.to_bytes()
    }
}

/// What a path argument names.
pub enum Where {
    /// The kernel's: the call goes to libc, with an absolute path in place
    /// of a relative one if the library resolved it (relative to a current
    /// directory or a directory descriptor of Shoal's).
    Kernel(Option<CString>),
    Shoal(Target),
    /// Shoal's, but libshoal cannot connect: fail with this errno.
    Fail(c_int),
}

impl Where {
    /// The (dirfd, path) to give libc for a `Kernel` answer.
    pub fn kernel_args(&self, dirfd: c_int, path: *const c_char) -> (c_int, *const c_char) {
        match self {
            Where::Kernel(Some(abs)) => (libc::AT_FDCWD, abs.as_ptr()),
            _ => (dirfd, path),
        }
    }
}

/// Which side serves `path`, taken relative to `dirfd` (or the current
/// directory for AT_FDCWD) as openat(2) does.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
pub unsafe fn classify_at(dirfd: c_int, path: *const c_char) -> Where {
    if path.is_null() || !ready() || in_lib() {
        return Where::Kernel(None);
    }
    let prefixes = prefixes();
    if prefixes.is_empty() {
        return Where::Kernel(None);
    }
    // SAFETY: the caller's promise.
    let p = unsafe { CStr::from_ptr(path) }.to_bytes();
    if p.is_empty() {
        return Where::Kernel(None);
    }
    let (abs, resolved): (std::borrow::Cow<[u8]>, bool) = if p[0] == b'/' {
        if paths::needs_normalizing(p) {
            (paths::normalize(p).into(), false)
        } else {
            (p.into(), false)
        }
    } else if dirfd == libc::AT_FDCWD {
        match cwd() {
            Some(dir) => (paths::join(&dir, p).into(), true),
            // The kernel's directory: a path that stays outside Shoal goes
            // to libc as the caller gave it.
            None => match from_kernel_cwd(p) {
                Some(abs) => (abs.into(), false),
                None => return Where::Kernel(None),
            },
        }
    } else {
        match fd_local(dirfd) {
            Some(dir) => (paths::join(&dir, p).into(), true),
            None => return Where::Kernel(None),
        }
    };
    let trailing = p.len() > 1 && p.ends_with(b"/");
    for pre in prefixes {
        let Some(rest) = paths::under(&abs, &pre.local) else {
            continue;
        };
        match connect(pre) {
            Ok(true) => {
                let shoal = paths::shoal_path(rest, trailing);
                return Where::Shoal(Target {
                    local: abs.into_owned(),
                    shoal: CString::new(shoal).unwrap_or_default(),
                    mounted: pre.mounted,
                });
            }
            Ok(false) => break,
            Err(e) => return Where::Fail(e),
        }
    }
    if resolved {
        let mut k = abs.into_owned();
        if trailing && k.len() > 1 {
            k.push(b'/');
        }
        Where::Kernel(Some(CString::new(k).unwrap_or_default()))
    } else {
        Where::Kernel(None)
    }
}

/// The prefix `local` is under.
pub fn prefix_of(local: &[u8]) -> Option<&'static Prefix> {
    prefixes()
        .iter()
        .find(|p| paths::under(local, &p.local).is_some())
}

/// The Shoal path of a local path under a prefix.
pub fn shoal_of(local: &[u8]) -> Option<CString> {
    let p = prefix_of(local)?;
    let rest = paths::under(local, &p.local)?;
    CString::new(paths::shoal_path(rest, false)).ok()
}

// ---------------------------------------------------------- current directory

static CWD: RwLock<Option<Vec<u8>>> = RwLock::new(None);
static HAS_CWD: AtomicBool = AtomicBool::new(false);

/// The current directory if it is inside Shoal (absolute local path).
pub fn cwd() -> Option<Vec<u8>> {
    if !HAS_CWD.load(Ordering::Acquire) {
        return None;
    }
    CWD.read().unwrap_or_else(|e| e.into_inner()).clone()
}

/// Sets the current directory: `Some` a Shoal directory, `None` after the
/// kernel's chdir succeeded (then the kernel's is read again).
pub fn set_cwd(dir: Option<Vec<u8>>) {
    if dir.is_none() {
        set_kernel_cwd(real_getcwd(), prefixes());
    }
    let mut c = CWD.write().unwrap_or_else(|e| e.into_inner());
    HAS_CWD.store(dir.is_some(), Ordering::Release);
    *c = dir;
}

/// The kernel's current directory (absolute, as getcwd(2) gives it) while
/// the current directory is not Shoal's: a relative path is taken from it to
/// find the ones that lead into a prefix (`tar -xf t.tar -C mnt/dir` run from
/// outside the mount). Brought up to date by the chdir and fchdir this library
/// passes to the kernel.
struct KernelCwd {
    dir: Vec<u8>,
    /// The first component of the way from `dir` down to each prefix below
    /// it: a relative path that starts otherwise stays outside Shoal.
    toward: Vec<Vec<u8>>,
}

static KERNEL_CWD: RwLock<Option<KernelCwd>> = RwLock::new(None);
/// Whether some prefix lies below the kernel's current directory: when not
/// (the common case), a relative path costs no lock and no allocation.
static KERNEL_CWD_LEADS_IN: AtomicBool = AtomicBool::new(false);

fn set_kernel_cwd(dir: Option<Vec<u8>>, prefixes: &[Prefix]) {
    let cwd = dir.map(|dir| {
        let toward = prefixes
            .iter()
            .filter_map(|p| {
                let rest = paths::under(&p.local, &dir)?;
                rest.split(|&b| b == b'/')
                    .find(|c| !c.is_empty())
                    .map(<[u8]>::to_vec)
            })
            .collect();
        KernelCwd { dir, toward }
    });
    let leads_in = cwd.as_ref().is_some_and(|c| !c.toward.is_empty());
    *KERNEL_CWD.write().unwrap_or_else(|e| e.into_inner()) = cwd;
    KERNEL_CWD_LEADS_IN.store(leads_in, Ordering::Release);
}

fn real_getcwd() -> Option<Vec<u8>> {
    let mut buf = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: a buffer of its stated size.
    let p = unsafe { real::getcwd(buf.as_mut_ptr().cast(), buf.len()) };
    if p.is_null() {
        return None;
    }
    let len = buf.iter().position(|&b| b == 0)?;
    buf.truncate(len);
    (buf.first() == Some(&b'/')).then_some(buf)
}

/// A relative path taken from the kernel's current directory, if it may lead
/// into a prefix: not if it has a `..` (see [`paths::has_dotdot`]), nor if
/// its first component is not on the way to one.
fn from_kernel_cwd(rel: &[u8]) -> Option<Vec<u8>> {
    if !KERNEL_CWD_LEADS_IN.load(Ordering::Acquire) || paths::has_dotdot(rel) {
        return None;
    }
    let cwd = KERNEL_CWD.read().unwrap_or_else(|e| e.into_inner());
    let cwd = cwd.as_ref()?;
    let first = rel
        .split(|&b| b == b'/')
        .find(|c| !c.is_empty() && *c != b".")?;
    cwd.toward
        .iter()
        .any(|t| t == first)
        .then(|| paths::join(&cwd.dir, rel))
}

// ---------------------------------------------------------------- descriptors

/// Kernel descriptor -> libshoal descriptor + 1 (0: not Shoal's).
static FDS: [AtomicI32; MAX_FD] = [const { AtomicI32::new(0) }; MAX_FD];

/// What the library keeps about one of its descriptors.
pub struct FdInfo {
    pub sfd: c_int,
    /// Absolute local path it was opened by.
    pub local: Vec<u8>,
    /// open(2) flags (what F_GETFL answers), less O_CLOEXEC.
    pub flags: c_int,
    /// FD_CLOEXEC as the program sees it (the kernel descriptor always has
    /// it, so that an exec never inherits a stand-in).
    pub cloexec: bool,
    pub mounted: bool,
    /// Listed entries not returned yet (a directory is listed a batch per
    /// libshoal call); emptied when the listing starts over.
    pub pending: crate::listed::Batch,
}

type InfoMap = std::collections::HashMap<c_int, FdInfo>;
static INFO: Mutex<Option<InfoMap>> = Mutex::new(None);

/// The descriptor table's and the current directories' locks, held across
/// a fork (see `fork.rs`).
pub fn hold_for_fork() -> Vec<Box<dyn std::any::Any>> {
    vec![
        Box::new(INFO.lock().unwrap_or_else(|e| e.into_inner())),
        Box::new(CWD.write().unwrap_or_else(|e| e.into_inner())),
        Box::new(KERNEL_CWD.write().unwrap_or_else(|e| e.into_inner())),
    ]
}

pub fn with_info<T>(kfd: c_int, f: impl FnOnce(&mut FdInfo) -> T) -> Option<T> {
    let mut m = INFO.lock().unwrap_or_else(|e| e.into_inner());
    m.as_mut()?.get_mut(&kfd).map(f)
}

/// The listing of `kfd` starts over: what was fetched and not returned goes.
pub fn forget_listed(kfd: c_int) {
    with_info(kfd, |i| i.pending.clear());
}

/// Who serves descriptor `fd`.
pub enum Fd {
    Kernel,
    /// libshoal's descriptor.
    Shoal(c_int),
    /// One of the library's descriptors, used from inside the library on
    /// this thread: a signal handler interrupted a Shoal call. Not served
    /// (libshoal is not re-entrant), and not given to the kernel (whose
    /// stand-in is /dev/null): EIO.
    Busy,
}

pub fn fd(fd: c_int) -> Fd {
    if !ready() {
        return Fd::Kernel;
    }
    let Some(slot) = usize::try_from(fd).ok().and_then(|i| FDS.get(i)) else {
        return Fd::Kernel;
    };
    match slot.load(Ordering::Acquire) {
        0 => Fd::Kernel,
        _ if in_lib() => Fd::Busy,
        v => Fd::Shoal(v - 1),
    }
}

/// Whether `fd` is one of the library's (whatever thread state).
pub fn is_ours(fd: c_int) -> bool {
    usize::try_from(fd)
        .ok()
        .and_then(|i| FDS.get(i))
        .is_some_and(|s| s.load(Ordering::Acquire) != 0)
}

/// The local path a Shoal descriptor was opened by.
pub fn fd_local(kfd: c_int) -> Option<Vec<u8>> {
    if !is_ours(kfd) {
        return None;
    }
    with_info(kfd, |i| i.local.clone())
}

/// A kernel descriptor to stand for a libshoal one: /dev/null opened with
/// O_PATH (so that whatever reaches it without this library, glibc's
/// internal calls or a raw system call, fails with EBADF rather than
/// reading or writing /dev/null), close-on-exec.
pub fn reserve() -> c_int {
    // SAFETY: a NUL-terminated path.
    unsafe {
        real::openat(
            libc::AT_FDCWD,
            c"/dev/null".as_ptr(),
            libc::O_PATH | libc::O_CLOEXEC,
            0,
        )
    }
}

/// Makes kernel descriptor `kfd` (a reserved one) stand for `info.sfd`.
pub fn register(kfd: c_int, info: FdInfo) -> Result<(), c_int> {
    let Some(slot) = usize::try_from(kfd).ok().and_then(|i| FDS.get(i)) else {
        return Err(libc::EMFILE);
    };
    let sfd = info.sfd;
    INFO.lock()
        .unwrap_or_else(|e| e.into_inner())
        .get_or_insert_with(Default::default)
        .insert(kfd, info);
    slot.store(sfd + 1, Ordering::Release);
    Ok(())
}

/// Stops `kfd` standing for a libshoal descriptor; returns what it was.
pub fn unregister(kfd: c_int) -> Option<FdInfo> {
    let slot = usize::try_from(kfd).ok().and_then(|i| FDS.get(i))?;
    slot.store(0, Ordering::Release);
    INFO.lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_mut()?
        .remove(&kfd)
}

/// A new kernel descriptor standing for libshoal's `sfd`; on failure `sfd`
/// is closed and errno set.
pub fn adopt(sfd: c_int, local: Vec<u8>, flags: c_int, mounted: bool) -> c_int {
    let kfd = reserve();
    let e = if kfd < 0 { errno() } else { 0 };
    let info = FdInfo {
        sfd,
        local,
        flags: flags & !libc::O_CLOEXEC,
        cloexec: flags & libc::O_CLOEXEC != 0,
        mounted,
        pending: Default::default(),
    };
    if kfd >= 0 {
        match register(kfd, info) {
            Ok(()) => return kfd,
            Err(err) => {
                // SAFETY: the descriptor reserve() just opened.
                unsafe { real::close(kfd) };
                shoal::shoal_close(sfd);
                return fail(err);
            }
        }
    }
    shoal::shoal_close(sfd);
    fail(e)
}

/// Every kernel descriptor standing for a libshoal one, with its info.
pub fn all_fds() -> Vec<c_int> {
    INFO.lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_ref()
        .map(|m| m.keys().copied().collect())
        .unwrap_or_default()
}
