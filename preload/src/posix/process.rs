//! The calls about descriptors and the process rather than files: the
//! current directory (chdir/fchdir/getcwd), the umask, dup/dup2/dup3/fcntl,
//! close_range/closefrom, and exec.
//!
//! exec: the kernel descriptors standing for Shoal ones are close-on-exec,
//! so a new program never inherits a /dev/null in their place. One the
//! program did not mark close-on-exec (a shell's `< file` redirection) is,
//! just before execve, replaced by the same file opened through the mount
//! at the same offset, so the new program reads it from the kernel; without
//! a mount it is closed (EBADF in the new program, never wrong data).

use libc::{c_char, c_int, c_uint, c_ulong, mode_t, size_t};

use super::files::busy;
use crate::errno::{errno, fail, set_errno};
use crate::real;
use crate::state::{self, serve, Fd, FdInfo, Where};
use crate::stats::Op;
use crate::unwind::{guarded, Failed};

// ---------------------------------------------------------------- umask

/// umask(2), and libshoal told the new mask: its creates apply it without
/// reading /proc each time.
#[no_mangle]
pub extern "C" fn umask(mask: mode_t) -> mode_t {
    guarded(
        || 0o022,
        || {
            // SAFETY: umask cannot fail.
            let old = unsafe { real::umask(mask) };
            shoal::track_umask(mask);
            old
        },
    )
}

// ---------------------------------------------------------------- cwd

/// Whether Shoal descriptor `s` is a directory.
fn is_dir(s: c_int) -> Result<bool, c_int> {
    // SAFETY: a zeroed stat is valid.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: our own struct.
    if unsafe { shoal::shoal_fstat(s, &mut st) } < 0 {
        return Err(errno());
    }
    Ok(st.st_mode & libc::S_IFMT == libc::S_IFDIR)
}

/// Makes Shoal directory `local` the current directory; the kernel's too
/// when a mount makes it reachable (for what falls back to the kernel, and
/// for programs this one starts).
fn enter(local: Vec<u8>, mounted: bool) {
    if mounted {
        if let Ok(p) = std::ffi::CString::new(local.clone()) {
            // SAFETY: a NUL-terminated path.
            unsafe { real::chdir(p.as_ptr()) };
        }
    }
    state::set_cwd(Some(local));
}

#[no_mangle]
pub unsafe extern "C" fn chdir(path: *const c_char) -> c_int {
    guarded(<c_int as Failed>::failed, || {
        // SAFETY: chdir's contract.
        let w = unsafe { state::classify_at(libc::AT_FDCWD, path) };
        match w {
            Where::Shoal(t) => serve(Op::Chdir, || {
                // SAFETY: a zeroed stat is valid.
                let mut st: libc::stat = unsafe { std::mem::zeroed() };
                // SAFETY: a NUL-terminated path; our own struct.
                if unsafe { shoal::shoal_stat(t.shoal.as_ptr(), &mut st) } < 0 {
                    return -1;
                }
                if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
                    return fail(libc::ENOTDIR);
                }
                enter(t.local, t.mounted);
                0
            }),
            Where::Fail(e) => fail(e),
            Where::Kernel(_) => {
                let (_, p) = w.kernel_args(libc::AT_FDCWD, path);
                // SAFETY: chdir's contract.
                let r = unsafe { real::chdir(p) };
                if r == 0 {
                    state::set_cwd(None);
                }
                r
            }
        }
    })
}

#[no_mangle]
pub extern "C" fn fchdir(fd: c_int) -> c_int {
    guarded(<c_int as Failed>::failed, || {
        match state::fd(fd) {
            Fd::Kernel => {
                // SAFETY: an integer.
                let r = unsafe { real::fchdir(fd) };
                if r == 0 {
                    state::set_cwd(None);
                }
                r
            }
            Fd::Shoal(s) => serve(Op::Chdir, || match is_dir(s) {
                Err(e) => fail(e),
                Ok(false) => fail(libc::ENOTDIR),
                Ok(true) => match state::with_info(fd, |i| (i.local.clone(), i.mounted)) {
                    Some((local, mounted)) => {
                        enter(local, mounted);
                        0
                    }
                    None => fail(libc::EBADF),
                },
            }),
            Fd::Busy => busy(),
        }
    })
}

#[no_mangle]
pub unsafe extern "C" fn getcwd(buf: *mut c_char, size: size_t) -> *mut c_char {
    guarded(<*mut c_char as Failed>::failed, || {
        let Some(dir) = (if state::in_lib() { None } else { state::cwd() }) else {
            // SAFETY: getcwd's contract.
            return unsafe { real::getcwd(buf, size) };
        };
        let need = dir.len() + 1;
        let out = if buf.is_null() {
            // glibc: NULL asks for a buffer of `size` bytes, or as big as
            // needed if `size` is 0.
            if size != 0 && size < need {
                set_errno(libc::ERANGE);
                return std::ptr::null_mut();
            }
            // SAFETY: plain allocation; the caller frees it.
            let p = unsafe { libc::malloc(size.max(need)) } as *mut c_char;
            if p.is_null() {
                set_errno(libc::ENOMEM);
                return p;
            }
            p
        } else {
            if size == 0 {
                set_errno(libc::EINVAL);
                return std::ptr::null_mut();
            }
            if size < need {
                set_errno(libc::ERANGE);
                return std::ptr::null_mut();
            }
            buf
        };
        // SAFETY: `out` has room for `need` bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(dir.as_ptr(), out as *mut u8, dir.len());
            *out.add(dir.len()) = 0;
        }
        out
    })
}

// ---------------------------------------------------------------- dup

/// Makes kernel descriptor `k2` (a stand-in already open) a duplicate of
/// Shoal descriptor `kfd`, sharing its open file and offset.
fn duplicate(kfd: c_int, s: c_int, k2: c_int, cloexec: bool) -> c_int {
    serve(Op::Dup, || {
        let s2 = shoal::shoal_dup(s);
        if s2 < 0 {
            let e = errno();
            // SAFETY: the stand-in just made.
            unsafe { real::close(k2) };
            return fail(e);
        }
        let Some((local, flags, mounted)) =
            state::with_info(kfd, |i| (i.local.clone(), i.flags, i.mounted))
        else {
            shoal::shoal_close(s2);
            // SAFETY: the stand-in just made.
            unsafe { real::close(k2) };
            return fail(libc::EBADF);
        };
        let info = FdInfo {
            sfd: s2,
            local,
            flags,
            cloexec,
            mounted,
            pending: Default::default(),
        };
        match state::register(k2, info) {
            Ok(()) => k2,
            Err(e) => {
                shoal::shoal_close(s2);
                // SAFETY: the stand-in just made.
                unsafe { real::close(k2) };
                fail(e)
            }
        }
    })
}

/// Lets go of Shoal descriptor `kfd` without closing the kernel number
/// (the caller's dup2/dup3/close_range replaces or closes it).
fn release(kfd: c_int) {
    if let Some(info) = state::unregister(kfd) {
        serve(Op::Close, || shoal::shoal_close(info.sfd));
    }
}

#[no_mangle]
pub extern "C" fn dup(fd: c_int) -> c_int {
    guarded(<c_int as Failed>::failed, || {
        match state::fd(fd) {
            // SAFETY: an integer.
            Fd::Kernel => unsafe { real::dup(fd) },
            Fd::Shoal(s) => {
                // SAFETY: integers.
                let k2 = unsafe { real::fcntl64(fd, libc::F_DUPFD_CLOEXEC, 0) };
                if k2 < 0 {
                    return -1;
                }
                duplicate(fd, s, k2, false)
            }
            Fd::Busy => busy(),
        }
    })
}

fn dup3_any(old: c_int, new: c_int, flags: c_int, dup2_semantics: bool) -> c_int {
    let cloexec = flags & libc::O_CLOEXEC != 0;
    match state::fd(old) {
        Fd::Busy => busy(),
        Fd::Kernel => {
            if old != new && state::is_ours(new) && !state::in_lib() && !state::in_vfork_child() {
                release(new);
            }
            // SAFETY: integers.
            unsafe {
                if dup2_semantics {
                    real::dup2(old, new)
                } else {
                    real::dup3(old, new, flags)
                }
            }
        }
        Fd::Shoal(s) => {
            if old == new {
                return if dup2_semantics {
                    new
                } else {
                    fail(libc::EINVAL)
                };
            }
            let vfork_child = state::in_vfork_child();
            if state::is_ours(new) && !vfork_child {
                release(new);
            }
            if (0..=2).contains(&new) || vfork_child {
                // A standard stream: glibc's stdio reaches it with internal
                // calls no interposer sees, so through a mount it becomes
                // the kernel's file (without one, the O_PATH stand-in makes
                // stdio fail with EBADF). So does any in a vfork child,
                // which is about to exec and must not touch the tables.
                let twin = {
                    let _g = state::Guard::enter();
                    kernel_twin(old)
                };
                if let Some(k) = twin {
                    if k == new {
                        // `new` was free (the caller closed it first, as a
                        // shell's redirection does), so the twin took it.
                        let fd_flags = if cloexec { libc::FD_CLOEXEC } else { 0 };
                        // SAFETY: our descriptor.
                        unsafe { real::fcntl64(k, libc::F_SETFD, fd_flags as libc::c_ulong) };
                        return new;
                    }
                    // SAFETY: descriptors of ours.
                    let r = unsafe { real::dup3(k, new, flags & libc::O_CLOEXEC) };
                    // SAFETY: our descriptor.
                    unsafe { real::close(k) };
                    return r;
                }
            }
            // SAFETY: integers; the stand-in stays close-on-exec.
            let k2 = unsafe { real::dup3(old, new, libc::O_CLOEXEC) };
            if k2 < 0 || vfork_child {
                return k2;
            }
            duplicate(old, s, k2, cloexec)
        }
    }
}

#[no_mangle]
pub extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    guarded(<c_int as Failed>::failed, || dup3_any(old, new, 0, true))
}

#[no_mangle]
pub extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    guarded(<c_int as Failed>::failed, || {
        dup3_any(old, new, flags, false)
    })
}

/// The flags F_SETFL may change.
const SETFL_MASK: c_int =
    libc::O_APPEND | libc::O_NONBLOCK | libc::O_ASYNC | libc::O_DIRECT | libc::O_NOATIME;

fn fcntl_any(fd: c_int, cmd: c_int, arg: c_ulong) -> c_int {
    let s = match state::fd(fd) {
        // SAFETY: fcntl's contract.
        Fd::Kernel => return unsafe { real::fcntl64(fd, cmd, arg) },
        Fd::Busy => return busy(),
        Fd::Shoal(s) => s,
    };
    match cmd {
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
            // SAFETY: integers.
            let k2 = unsafe { real::fcntl64(fd, libc::F_DUPFD_CLOEXEC, arg) };
            if k2 < 0 {
                return -1;
            }
            duplicate(fd, s, k2, cmd == libc::F_DUPFD_CLOEXEC)
        }
        libc::F_GETFD => state::with_info(fd, |i| if i.cloexec { libc::FD_CLOEXEC } else { 0 })
            .unwrap_or_else(|| fail(libc::EBADF)),
        libc::F_SETFD => state::with_info(fd, |i| {
            i.cloexec = arg as c_int & libc::FD_CLOEXEC != 0;
            0
        })
        .unwrap_or_else(|| fail(libc::EBADF)),
        libc::F_GETFL => state::with_info(fd, |i| i.flags).unwrap_or_else(|| fail(libc::EBADF)),
        libc::F_SETFL => state::with_info(fd, |i| {
            i.flags = (i.flags & !SETFL_MASK) | (arg as c_int & SETFL_MASK);
            0
        })
        .unwrap_or_else(|| fail(libc::EBADF)),
        // Record locks, for the whole cluster (libshoal's).
        libc::F_GETLK
        | libc::F_SETLK
        | libc::F_SETLKW
        | libc::F_OFD_GETLK
        | libc::F_OFD_SETLK
        | libc::F_OFD_SETLKW => serve(Op::Lock, || {
            // SAFETY: fcntl's contract: a struct flock (libshoal checks null).
            unsafe { shoal::shoal_fcntl_lock(s, cmd, arg as *mut libc::flock) }
        }),
        // Leases, dnotify, seals, pipe sizes, signal ownership, hints:
        // nothing a Shoal file has. EINVAL, "not recognized", rather than
        // the stand-in's answer.
        _ => fail(libc::EINVAL),
    }
}

// fcntl's third argument is variadic: an int or a pointer, passed in the
// register a third named argument would use on x86-64 and AArch64 Linux.

exported! {
    [fcntl, fcntl64] (fd: c_int, cmd: c_int, arg: c_ulong) -> c_int => fcntl_any(fd, cmd, arg);
}
#[no_mangle]
pub extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    guarded(<c_int as Failed>::failed, || {
        if state::ready() && !state::in_lib() && !state::in_vfork_child() {
            for kfd in state::all_fds() {
                let k = kfd as c_uint;
                if k < first || k > last {
                    continue;
                }
                if flags & libc::CLOSE_RANGE_CLOEXEC as c_int != 0 {
                    state::with_info(kfd, |i| i.cloexec = true);
                } else {
                    release(kfd);
                }
            }
        }
        // SAFETY: integers.
        unsafe { real::close_range(first, last, flags) }
    })
}

#[no_mangle]
pub extern "C" fn closefrom(first: c_int) {
    guarded(<() as Failed>::failed, || {
        if state::ready() && !state::in_lib() && !state::in_vfork_child() {
            for kfd in state::all_fds() {
                if kfd >= first {
                    release(kfd);
                }
            }
        }
        // SAFETY: an integer.
        unsafe { real::closefrom(first) }
    })
}

// ---------------------------------------------------------------- exec

/// Puts, in place of each Shoal descriptor the new program should inherit,
/// the file opened through the mount at the same offset. Returns the
/// descriptors replaced, for [`after_failed_exec`].
fn before_exec() -> Vec<c_int> {
    let mut replaced = Vec::new();
    if !state::ready() || state::in_lib() {
        return replaced;
    }
    let _g = state::Guard::enter();
    // Attribute changes libshoal holds back would be lost with its memory;
    // exec has no way to report a failure to send them. (A vfork child's
    // memory is its parent's, which keeps them.)
    if !state::in_vfork_child() {
        let _ = shoal::shoal_flush();
    }
    for kfd in state::all_fds() {
        if state::with_info(kfd, |i| i.cloexec) != Some(false) {
            continue;
        }
        if let Some(k) = kernel_twin(kfd) {
            // SAFETY: descriptors of ours.
            unsafe {
                if real::dup2(k, kfd) == kfd {
                    replaced.push(kfd);
                }
                real::close(k);
            }
        }
    }
    replaced
}

/// The file Shoal descriptor `kfd` is open on, opened again through the
/// mount (the kernel's descriptor, close-on-exec) at the same offset; None
/// if no mount reaches it.
fn kernel_twin(kfd: c_int) -> Option<c_int> {
    let (sfd, local, flags, mounted) =
        state::with_info(kfd, |i| (i.sfd, i.local.clone(), i.flags, i.mounted))?;
    if !mounted {
        return None;
    }
    let path = std::ffi::CString::new(local).ok()?;
    let open_flags = flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_TRUNC) | libc::O_CLOEXEC;
    // SAFETY: a NUL-terminated path.
    let k = unsafe { real::openat(libc::AT_FDCWD, path.as_ptr(), open_flags, 0) };
    if k < 0 {
        return None;
    }
    let off = shoal::shoal_lseek(sfd, 0, libc::SEEK_CUR);
    if off > 0 {
        // SAFETY: our descriptor.
        unsafe { real::lseek64(k, off, libc::SEEK_SET) };
    }
    Some(k)
}

/// The exec failed: the replaced descriptors become stand-ins again.
fn after_failed_exec(replaced: Vec<c_int>) {
    let e = errno();
    for kfd in replaced {
        let r = state::reserve();
        if r >= 0 {
            // SAFETY: descriptors of ours.
            unsafe {
                real::dup3(r, kfd, libc::O_CLOEXEC);
                real::close(r);
            }
        }
    }
    set_errno(e);
}

/// The environment entry that tells the new program its current
/// directory is a Shoal one (the kernel's, where Shoal is not mounted, is
/// still the old one): `SHOAL_PRELOAD_CWD=<kernel cwd>\n<Shoal cwd>`. The
/// new program's library takes it only if its kernel cwd is still that
/// (state::init), so a stale entry passed on by a program that changed
/// directory without this library is ignored.
fn cwd_entry() -> Option<Vec<u8>> {
    let dir = state::cwd()?;
    let mut buf = vec![0u8; libc::PATH_MAX as usize + 1];
    // SAFETY: our buffer and its size.
    let k = unsafe { real::getcwd(buf.as_mut_ptr() as *mut c_char, buf.len()) };
    if k.is_null() {
        return None;
    }
    let len = buf.iter().position(|&b| b == 0)?;
    let mut e = format!("{}=", state::CWD_VAR).into_bytes();
    e.extend_from_slice(&buf[..len]);
    e.push(b'\n');
    e.extend_from_slice(&dir);
    e.push(0);
    Some(e)
}

/// `envp` with the cwd entry set (or removed when the cwd is not Shoal's).
/// The returned pointers borrow from the returned buffer and from `envp`.
unsafe fn with_cwd_entry(envp: Argv) -> (Option<Vec<u8>>, Vec<*const c_char>) {
    let entry = cwd_entry();
    let mut out = Vec::new();
    let prefix = format!("{}=", state::CWD_VAR);
    if !envp.is_null() {
        let mut i = 0;
        loop {
            // SAFETY: a NULL-terminated array of C strings.
            let e = unsafe { *envp.add(i) };
            if e.is_null() {
                break;
            }
            // SAFETY: a C string.
            if !unsafe { std::ffi::CStr::from_ptr(e) }
                .to_bytes()
                .starts_with(prefix.as_bytes())
            {
                out.push(e);
            }
            i += 1;
        }
    }
    if let Some(e) = &entry {
        out.push(e.as_ptr() as *const c_char);
    }
    out.push(std::ptr::null());
    (entry, out)
}

/// For the exec calls that take the process's own environment.
fn set_cwd_env() {
    let key = std::ffi::CString::new(state::CWD_VAR).unwrap_or_default();
    match cwd_entry() {
        Some(mut e) => {
            e.pop();
            let value = e.split_off(state::CWD_VAR.len() + 1);
            if let Ok(v) = std::ffi::CString::new(value) {
                // SAFETY: NUL-terminated strings; libc copies them.
                unsafe { libc::setenv(key.as_ptr(), v.as_ptr(), 1) };
            }
        }
        // SAFETY: a NUL-terminated name.
        None => unsafe {
            libc::unsetenv(key.as_ptr());
        },
    }
}

macro_rules! exec_call {
    ($name:ident($($a:ident: $t:ty),*), env) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t,)* envp: Argv) -> c_int {
            guarded(<c_int as Failed>::failed, || {
                if !state::ready() || state::in_lib() {
                    // SAFETY: the call's contract.
                    return unsafe { real::$name($($a,)* envp) };
                }
                let replaced = before_exec();
                // SAFETY: the caller's environment.
                let (_entry, env) = unsafe { with_cwd_entry(envp) };
                // SAFETY: the call's contract; `env` is a NULL-terminated array.
                let r = unsafe { real::$name($($a,)* env.as_ptr()) };
                after_failed_exec(replaced);
                r

            })
        }
    };
    ($name:ident($($a:ident: $t:ty),*)) => {
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> c_int {
            guarded(<c_int as Failed>::failed, || {
                if !state::ready() || state::in_lib() {
                    // SAFETY: the call's contract.
                    return unsafe { real::$name($($a),*) };
                }
                let replaced = before_exec();
                set_cwd_env();
                // SAFETY: the call's contract.
                let r = unsafe { real::$name($($a),*) };
                after_failed_exec(replaced);
                r

            })
        }
    };
}

type Argv = *const *const c_char;

exec_call!(execve(path: *const c_char, argv: Argv), env);
exec_call!(execv(path: *const c_char, argv: Argv));
exec_call!(execvp(file: *const c_char, argv: Argv));
exec_call!(execvpe(file: *const c_char, argv: Argv), env);

#[no_mangle]
pub unsafe extern "C" fn fexecve(fd: c_int, argv: Argv, envp: Argv) -> c_int {
    guarded(<c_int as Failed>::failed, || {
        if state::is_ours(fd) {
            // The program's bytes are in Shoal; the kernel cannot run a
            // /dev/null stand-in.
            return fail(libc::ENOEXEC);
        }
        let replaced = before_exec();
        // SAFETY: the caller's environment.
        let (_entry, env) = unsafe { with_cwd_entry(envp) };
        // SAFETY: fexecve's contract.
        let r = unsafe { real::fexecve(fd, argv, env.as_ptr()) };
        after_failed_exec(replaced);
        r
    })
}

exported! {
    [__getcwd_chk] (buf: *mut c_char, size: size_t, buflen: size_t) -> *mut c_char =>
        { super::files::checked(size, buflen); getcwd(buf, size) };
}

/// execveat(2): a Shoal directory descriptor is resolved to its local
/// path first (the kernel could not walk from its stand-in), then exec'd
/// as execve does it; AT_EMPTY_PATH on a Shoal descriptor is fexecve.
unsafe fn execveat_any(
    dirfd: c_int,
    path: *const c_char,
    argv: Argv,
    envp: Argv,
    flags: c_int,
) -> c_int {
    if !state::is_ours(dirfd) {
        // SAFETY: execveat's contract.
        return unsafe { real::execveat(dirfd, path, argv, envp, flags) };
    }
    // SAFETY: the call's path, read only if not NULL.
    if flags & libc::AT_EMPTY_PATH != 0 && !path.is_null() && unsafe { *path } == 0 {
        // SAFETY: fexecve's contract.
        return unsafe { fexecve(dirfd, argv, envp) };
    }
    // SAFETY: the call's path.
    let w = unsafe { state::classify_at(dirfd, path) };
    let local = match w {
        Where::Shoal(t) => std::ffi::CString::new(t.local).ok(),
        Where::Kernel(Some(abs)) => Some(abs),
        Where::Kernel(None) => None,
        Where::Fail(e) => return fail(e),
    };
    match local {
        // SAFETY: execve's contract; a NUL-terminated path.
        Some(p) => unsafe { execve(p.as_ptr(), argv, envp) },
        // SAFETY: execveat's contract (an absolute path: dirfd unused).
        None => unsafe { real::execveat(dirfd, path, argv, envp, flags) },
    }
}

exported! {
    [execveat] (dirfd: c_int, path: *const c_char, argv: Argv, envp: Argv, flags: c_int) -> c_int =>
        execveat_any(dirfd, path, argv, envp, flags);
}

// posix_spawn's file actions run in the child with glibc's internal calls:
// a Shoal descriptor there would be its stand-in. A dup2 of one, an fchdir
// to one, or one as the child's terminal is refused as a descriptor the
// child cannot have (EBADF, returned); addopen of a path reaches the mount.
exported! {
    [posix_spawn_file_actions_adddup2] (fa: *mut libc::posix_spawn_file_actions_t, fd: c_int, to: c_int) -> c_int =>
        match state::is_ours(fd) {
            true => libc::EBADF,
            false => real::posix_spawn_file_actions_adddup2(fa, fd, to),
        }, else libc::EIO;
    [posix_spawn_file_actions_addfchdir_np] (fa: *mut libc::posix_spawn_file_actions_t, fd: c_int) -> c_int =>
        match state::is_ours(fd) {
            true => libc::EBADF,
            false => real::posix_spawn_file_actions_addfchdir_np(fa, fd),
        }, else libc::EIO;
    [posix_spawn_file_actions_addtcsetpgrp_np] (fa: *mut libc::posix_spawn_file_actions_t, fd: c_int) -> c_int =>
        match state::is_ours(fd) {
            true => libc::EBADF,
            false => real::posix_spawn_file_actions_addtcsetpgrp_np(fa, fd),
        }, else libc::EIO;
}
