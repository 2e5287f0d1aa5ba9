//! The libc functions this library stands in front of, found with
//! `dlsym(RTLD_NEXT, name)`: what a call that is not Shoal's is passed to,
//! unchanged. Each is looked up once (all of them when the library starts, so
//! that a signal handler never has to call dlsym) and stored in an atomic.

use std::sync::atomic::{AtomicUsize, Ordering};

use libc::{c_char, c_int, c_uint, c_void, mode_t, off64_t, size_t, ssize_t, DIR, FILE};

/// Where `name` (NUL-terminated) is after this library, or 0.
fn next(slot: &AtomicUsize, name: &'static str) -> usize {
    let p = slot.load(Ordering::Relaxed);
    if p != 0 {
        return p;
    }
    // SAFETY: name is a NUL-terminated string literal.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr() as *const c_char) } as usize;
    slot.store(p, Ordering::Relaxed);
    p
}

macro_rules! next_fns {
    ($(fn $name:ident($($a:ident: $t:ty),*) -> $r:ty = $missing:expr;)*) => {
        $(
            #[allow(non_snake_case, non_upper_case_globals)]
            mod $name {
                pub static SLOT: super::AtomicUsize = super::AtomicUsize::new(0);
            }

            /// The next definition of this libc function (ENOSYS if there is none).
            #[allow(clippy::unused_unit)]
            pub unsafe fn $name($($a: $t),*) -> $r {
                let p = next(&$name::SLOT, concat!(stringify!($name), "\0"));
                if p == 0 {
                    // SAFETY: this thread's errno.
                    unsafe { *libc::__errno_location() = libc::ENOSYS };
                    return $missing;
                }
                // SAFETY: dlsym found the symbol of this name, whose C
                // prototype is the one declared here.
                let f: unsafe extern "C" fn($($t),*) -> $r = unsafe { std::mem::transmute(p) };
                unsafe { f($($a),*) }
            }
        )*

        /// Looks every function up now.
        pub fn prime() {
            $( next(&$name::SLOT, concat!(stringify!($name), "\0")); )*
        }
    };
}

next_fns! {
    fn openat(dirfd: c_int, path: *const c_char, flags: c_int, mode: mode_t) -> c_int = -1;
    fn close(fd: c_int) -> c_int = -1;
    fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t = -1;
    fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t = -1;
    fn pread64(fd: c_int, buf: *mut c_void, n: size_t, off: off64_t) -> ssize_t = -1;
    fn pwrite64(fd: c_int, buf: *const c_void, n: size_t, off: off64_t) -> ssize_t = -1;
    fn readv(fd: c_int, iov: *const libc::iovec, n: c_int) -> ssize_t = -1;
    fn writev(fd: c_int, iov: *const libc::iovec, n: c_int) -> ssize_t = -1;
    fn preadv64(fd: c_int, iov: *const libc::iovec, n: c_int, off: off64_t) -> ssize_t = -1;
    fn pwritev64(fd: c_int, iov: *const libc::iovec, n: c_int, off: off64_t) -> ssize_t = -1;
    fn preadv64v2(fd: c_int, iov: *const libc::iovec, n: c_int, off: off64_t, flags: c_int) -> ssize_t = -1;
    fn pwritev64v2(fd: c_int, iov: *const libc::iovec, n: c_int, off: off64_t, flags: c_int) -> ssize_t = -1;
    fn sync_file_range(fd: c_int, off: off64_t, n: off64_t, flags: c_uint) -> c_int = -1;
    fn syncfs(fd: c_int) -> c_int = -1;
    fn readahead(fd: c_int, off: off64_t, n: size_t) -> ssize_t = -1;
    fn lseek64(fd: c_int, off: off64_t, whence: c_int) -> off64_t = -1;
    fn fsync(fd: c_int) -> c_int = -1;
    fn fdatasync(fd: c_int) -> c_int = -1;
    fn ftruncate64(fd: c_int, len: off64_t) -> c_int = -1;
    fn truncate64(path: *const c_char, len: off64_t) -> c_int = -1;
    fn fstat64(fd: c_int, st: *mut libc::stat64) -> c_int = -1;
    fn fstatat64(dirfd: c_int, path: *const c_char, st: *mut libc::stat64, flags: c_int) -> c_int = -1;
    fn statx(dirfd: c_int, path: *const c_char, flags: c_int, mask: c_uint, stx: *mut libc::statx) -> c_int = -1;
    fn faccessat(dirfd: c_int, path: *const c_char, mode: c_int, flags: c_int) -> c_int = -1;
    fn mkdirat(dirfd: c_int, path: *const c_char, mode: mode_t) -> c_int = -1;
    fn unlinkat(dirfd: c_int, path: *const c_char, flags: c_int) -> c_int = -1;
    fn renameat2(olddirfd: c_int, old: *const c_char, newdirfd: c_int, new: *const c_char, flags: c_uint) -> c_int = -1;
    fn symlinkat(target: *const c_char, dirfd: c_int, path: *const c_char) -> c_int = -1;
    fn readlinkat(dirfd: c_int, path: *const c_char, buf: *mut c_char, size: size_t) -> ssize_t = -1;
    fn linkat(olddirfd: c_int, old: *const c_char, newdirfd: c_int, new: *const c_char, flags: c_int) -> c_int = -1;
    fn fchmodat(dirfd: c_int, path: *const c_char, mode: mode_t, flags: c_int) -> c_int = -1;
    fn fchmod(fd: c_int, mode: mode_t) -> c_int = -1;
    fn fchownat(dirfd: c_int, path: *const c_char, uid: libc::uid_t, gid: libc::gid_t, flags: c_int) -> c_int = -1;
    fn fchown(fd: c_int, uid: libc::uid_t, gid: libc::gid_t) -> c_int = -1;
    fn utimensat(dirfd: c_int, path: *const c_char, times: *const libc::timespec, flags: c_int) -> c_int = -1;
    fn futimens(fd: c_int, times: *const libc::timespec) -> c_int = -1;
    fn getxattr(path: *const c_char, name: *const c_char, value: *mut c_void, size: size_t) -> ssize_t = -1;
    fn lgetxattr(path: *const c_char, name: *const c_char, value: *mut c_void, size: size_t) -> ssize_t = -1;
    fn fgetxattr(fd: c_int, name: *const c_char, value: *mut c_void, size: size_t) -> ssize_t = -1;
    fn listxattr(path: *const c_char, list: *mut c_char, size: size_t) -> ssize_t = -1;
    fn llistxattr(path: *const c_char, list: *mut c_char, size: size_t) -> ssize_t = -1;
    fn flistxattr(fd: c_int, list: *mut c_char, size: size_t) -> ssize_t = -1;
    fn setxattr(path: *const c_char, name: *const c_char, value: *const c_void, size: size_t, flags: c_int) -> c_int = -1;
    fn lsetxattr(path: *const c_char, name: *const c_char, value: *const c_void, size: size_t, flags: c_int) -> c_int = -1;
    fn fsetxattr(fd: c_int, name: *const c_char, value: *const c_void, size: size_t, flags: c_int) -> c_int = -1;
    fn removexattr(path: *const c_char, name: *const c_char) -> c_int = -1;
    fn lremovexattr(path: *const c_char, name: *const c_char) -> c_int = -1;
    fn fremovexattr(fd: c_int, name: *const c_char) -> c_int = -1;
    fn statfs64(path: *const c_char, buf: *mut libc::statfs64) -> c_int = -1;
    fn fstatfs64(fd: c_int, buf: *mut libc::statfs64) -> c_int = -1;
    fn statvfs64(path: *const c_char, buf: *mut libc::statvfs64) -> c_int = -1;
    fn fstatvfs64(fd: c_int, buf: *mut libc::statvfs64) -> c_int = -1;
    fn opendir(path: *const c_char) -> *mut DIR = std::ptr::null_mut();
    fn fdopendir(fd: c_int) -> *mut DIR = std::ptr::null_mut();
    fn readdir64(d: *mut DIR) -> *mut libc::dirent64 = std::ptr::null_mut();
    fn closedir(d: *mut DIR) -> c_int = -1;
    fn dirfd(d: *mut DIR) -> c_int = -1;
    fn rewinddir(d: *mut DIR) -> () = ();
    fn telldir(d: *mut DIR) -> libc::c_long = -1;
    fn seekdir(d: *mut DIR, pos: libc::c_long) -> () = ();
    fn getdents64(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t = -1;
    fn chdir(path: *const c_char) -> c_int = -1;
    fn fchdir(fd: c_int) -> c_int = -1;
    fn getcwd(buf: *mut c_char, size: size_t) -> *mut c_char = std::ptr::null_mut();
    fn umask(mask: mode_t) -> mode_t = 0o022;
    fn dup(fd: c_int) -> c_int = -1;
    fn dup2(fd: c_int, to: c_int) -> c_int = -1;
    fn dup3(fd: c_int, to: c_int, flags: c_int) -> c_int = -1;
    fn fcntl64(fd: c_int, cmd: c_int, arg: libc::c_ulong) -> c_int = -1;
    fn fopen64(path: *const c_char, mode: *const c_char) -> *mut FILE = std::ptr::null_mut();
    fn fdopen(fd: c_int, mode: *const c_char) -> *mut FILE = std::ptr::null_mut();
    fn fileno(f: *mut FILE) -> c_int = -1;
    fn fclose(f: *mut FILE) -> c_int = libc::EOF;
    fn mmap64(addr: *mut c_void, len: size_t, prot: c_int, flags: c_int, fd: c_int, off: off64_t) -> *mut c_void = libc::MAP_FAILED;
    fn sendfile64(out: c_int, inp: c_int, off: *mut off64_t, n: size_t) -> ssize_t = -1;
    fn copy_file_range(inp: c_int, off_in: *mut off64_t, out: c_int, off_out: *mut off64_t, n: size_t, flags: c_uint) -> ssize_t = -1;
    fn splice(inp: c_int, off_in: *mut off64_t, out: c_int, off_out: *mut off64_t, n: size_t, flags: c_uint) -> ssize_t = -1;
    fn tee(inp: c_int, out: c_int, n: size_t, flags: c_uint) -> ssize_t = -1;
    fn vmsplice(fd: c_int, iov: *const libc::iovec, n: size_t, flags: c_uint) -> ssize_t = -1;
    fn posix_fadvise64(fd: c_int, off: off64_t, len: off64_t, advice: c_int) -> c_int = libc::ENOSYS;
    fn fallocate64(fd: c_int, mode: c_int, off: off64_t, len: off64_t) -> c_int = -1;
    fn posix_fallocate64(fd: c_int, off: off64_t, len: off64_t) -> c_int = libc::ENOSYS;
    fn flock(fd: c_int, op: c_int) -> c_int = -1;
    fn aio_read64(cb: *mut libc::aiocb) -> c_int = -1;
    fn aio_write64(cb: *mut libc::aiocb) -> c_int = -1;
    fn aio_fsync64(op: c_int, cb: *mut libc::aiocb) -> c_int = -1;
    fn aio_cancel64(fd: c_int, cb: *mut libc::aiocb) -> c_int = -1;
    fn lio_listio64(mode: c_int, list: *const *mut libc::aiocb, nent: c_int, sig: *mut libc::sigevent) -> c_int = -1;
    fn ioctl(fd: c_int, request: libc::c_ulong, arg: *mut c_void) -> c_int = -1;
    fn lockf64(fd: c_int, cmd: c_int, len: off64_t) -> c_int = -1;
    fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int = -1;
    fn closefrom(first: c_int) -> () = ();
    fn execve(path: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int = -1;
    fn execv(path: *const c_char, argv: *const *const c_char) -> c_int = -1;
    fn execvp(file: *const c_char, argv: *const *const c_char) -> c_int = -1;
    fn execvpe(file: *const c_char, argv: *const *const c_char, envp: *const *const c_char) -> c_int = -1;
    fn mkostemps64(template: *mut c_char, suffixlen: c_int, flags: c_int) -> c_int = -1;
    fn mkdtemp(template: *mut c_char) -> *mut c_char = std::ptr::null_mut();
    fn fexecve(fd: c_int, argv: *const *const c_char, envp: *const *const c_char) -> c_int = -1;
    fn accept(fd: c_int, addr: *mut libc::sockaddr, len: *mut libc::socklen_t) -> c_int = -1;
    fn accept4(fd: c_int, addr: *mut libc::sockaddr, len: *mut libc::socklen_t, flags: c_int) -> c_int = -1;
    fn bind(fd: c_int, addr: *const libc::sockaddr, len: libc::socklen_t) -> c_int = -1;
    fn connect(fd: c_int, addr: *const libc::sockaddr, len: libc::socklen_t) -> c_int = -1;
    fn getpeername(fd: c_int, addr: *mut libc::sockaddr, len: *mut libc::socklen_t) -> c_int = -1;
    fn getsockname(fd: c_int, addr: *mut libc::sockaddr, len: *mut libc::socklen_t) -> c_int = -1;
    fn getsockopt(fd: c_int, level: c_int, name: c_int, value: *mut c_void, len: *mut libc::socklen_t) -> c_int = -1;
    fn setsockopt(fd: c_int, level: c_int, name: c_int, value: *const c_void, len: libc::socklen_t) -> c_int = -1;
    fn listen(fd: c_int, backlog: c_int) -> c_int = -1;
    fn shutdown(fd: c_int, how: c_int) -> c_int = -1;
    fn sockatmark(fd: c_int) -> c_int = -1;
    fn bindresvport(fd: c_int, addr: *mut libc::sockaddr_in) -> c_int = -1;
    fn recv(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t = -1;
    fn recvfrom(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int, addr: *mut libc::sockaddr, len: *mut libc::socklen_t) -> ssize_t = -1;
    fn recvmsg(fd: c_int, msg: *mut libc::msghdr, flags: c_int) -> ssize_t = -1;
    fn recvmmsg(fd: c_int, msgs: *mut libc::mmsghdr, n: c_uint, flags: c_int, timeout: *mut libc::timespec) -> c_int = -1;
    fn send(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t = -1;
    fn sendto(fd: c_int, buf: *const c_void, n: size_t, flags: c_int, addr: *const libc::sockaddr, len: libc::socklen_t) -> ssize_t = -1;
    fn sendmsg(fd: c_int, msg: *const libc::msghdr, flags: c_int) -> ssize_t = -1;
    fn sendmmsg(fd: c_int, msgs: *mut libc::mmsghdr, n: c_uint, flags: c_int) -> c_int = -1;
    fn __recv_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t, flags: c_int) -> ssize_t = -1;
    fn __recvfrom_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t, flags: c_int, addr: *mut libc::sockaddr, len: *mut libc::socklen_t) -> ssize_t = -1;
    fn isatty(fd: c_int) -> c_int = -1;
    fn tcgetattr(fd: c_int, t: *mut libc::termios) -> c_int = -1;
    fn tcsetattr(fd: c_int, when: c_int, t: *const libc::termios) -> c_int = -1;
    fn tcdrain(fd: c_int) -> c_int = -1;
    fn tcflow(fd: c_int, action: c_int) -> c_int = -1;
    fn tcflush(fd: c_int, queue: c_int) -> c_int = -1;
    fn tcsendbreak(fd: c_int, duration: c_int) -> c_int = -1;
    fn tcgetpgrp(fd: c_int) -> libc::pid_t = -1;
    fn tcsetpgrp(fd: c_int, pgrp: libc::pid_t) -> c_int = -1;
    fn tcgetsid(fd: c_int) -> libc::pid_t = -1;
    fn login_tty(fd: c_int) -> c_int = -1;
    fn gtty(fd: c_int, params: *mut c_void) -> c_int = -1;
    fn stty(fd: c_int, params: *const c_void) -> c_int = -1;
    fn ttyname(fd: c_int) -> *mut c_char = std::ptr::null_mut();
    fn ptsname(fd: c_int) -> *mut c_char = std::ptr::null_mut();
    fn ttyname_r(fd: c_int, buf: *mut c_char, n: size_t) -> c_int = -1;
    fn ptsname_r(fd: c_int, buf: *mut c_char, n: size_t) -> c_int = -1;
    fn __ttyname_r_chk(fd: c_int, buf: *mut c_char, n: size_t, buflen: size_t) -> c_int = -1;
    fn __ptsname_r_chk(fd: c_int, buf: *mut c_char, n: size_t, buflen: size_t) -> c_int = -1;
    fn grantpt(fd: c_int) -> c_int = -1;
    fn unlockpt(fd: c_int) -> c_int = -1;
    fn epoll_wait(fd: c_int, events: *mut libc::epoll_event, max: c_int, timeout: c_int) -> c_int = -1;
    fn epoll_pwait(fd: c_int, events: *mut libc::epoll_event, max: c_int, timeout: c_int, mask: *const libc::sigset_t) -> c_int = -1;
    fn epoll_pwait2(fd: c_int, events: *mut libc::epoll_event, max: c_int, timeout: *const libc::timespec, mask: *const libc::sigset_t) -> c_int = -1;
    fn inotify_add_watch(fd: c_int, path: *const c_char, mask: u32) -> c_int = -1;
    fn inotify_rm_watch(fd: c_int, wd: c_int) -> c_int = -1;
    fn fanotify_mark(fd: c_int, flags: c_uint, mask: u64, dirfd: c_int, path: *const c_char) -> c_int = -1;
    fn signalfd(fd: c_int, mask: *const libc::sigset_t, flags: c_int) -> c_int = -1;
    fn timerfd_gettime(fd: c_int, value: *mut libc::itimerspec) -> c_int = -1;
    fn timerfd_settime(fd: c_int, flags: c_int, value: *const libc::itimerspec, old: *mut libc::itimerspec) -> c_int = -1;
    fn eventfd_read(fd: c_int, value: *mut u64) -> c_int = -1;
    fn eventfd_write(fd: c_int, value: u64) -> c_int = -1;
    fn setns(fd: c_int, nstype: c_int) -> c_int = -1;
    fn fsconfig(fd: c_int, cmd: c_uint, key: *const c_char, value: *const c_void, aux: c_int) -> c_int = -1;
    fn fsmount(fd: c_int, flags: c_uint, attr: c_uint) -> c_int = -1;
    fn fspick(fd: c_int, path: *const c_char, flags: c_uint) -> c_int = -1;
    fn open_tree(fd: c_int, path: *const c_char, flags: c_uint) -> c_int = -1;
    fn mount_setattr(fd: c_int, path: *const c_char, flags: c_uint, attr: *mut c_void, size: size_t) -> c_int = -1;
    fn pidfd_getfd(fd: c_int, target: c_int, flags: c_uint) -> c_int = -1;
    fn pidfd_send_signal(fd: c_int, sig: c_int, info: *mut libc::siginfo_t, flags: c_uint) -> c_int = -1;
    fn process_madvise(fd: c_int, iov: *const libc::iovec, n: size_t, advice: c_int, flags: c_uint) -> ssize_t = -1;
    fn epoll_ctl(epfd: c_int, op: c_int, fd: c_int, ev: *mut libc::epoll_event) -> c_int = -1;
    fn mknodat(dirfd: c_int, path: *const c_char, mode: mode_t, dev: libc::dev_t) -> c_int = -1;
    fn pathconf(path: *const c_char, name: c_int) -> libc::c_long = -1;
    fn fpathconf(fd: c_int, name: c_int) -> libc::c_long = -1;
    fn isfdtype(fd: c_int, kind: c_int) -> c_int = -1;
    fn name_to_handle_at(dirfd: c_int, path: *const c_char, handle: *mut c_void, mount_id: *mut c_int, flags: c_int) -> c_int = -1;
    fn open_by_handle_at(mount_fd: c_int, handle: *mut c_void, flags: c_int) -> c_int = -1;
    fn execveat(dirfd: c_int, path: *const c_char, argv: *const *const c_char, envp: *const *const c_char, flags: c_int) -> c_int = -1;
    fn posix_spawn_file_actions_adddup2(fa: *mut libc::posix_spawn_file_actions_t, fd: c_int, to: c_int) -> c_int = libc::ENOSYS;
    fn posix_spawn_file_actions_addfchdir_np(fa: *mut libc::posix_spawn_file_actions_t, fd: c_int) -> c_int = libc::ENOSYS;
    fn posix_spawn_file_actions_addtcsetpgrp_np(fa: *mut libc::posix_spawn_file_actions_t, fd: c_int) -> c_int = libc::ENOSYS;
    fn getdirentries64(fd: c_int, buf: *mut c_char, n: size_t, basep: *mut i64) -> ssize_t = -1;
    fn scandirat64(dirfd: c_int, path: *const c_char, list: *mut *mut *mut libc::dirent64, select: Option<unsafe extern "C" fn(*const libc::dirent64) -> c_int>, compare: Option<unsafe extern "C" fn(*mut *const libc::dirent64, *mut *const libc::dirent64) -> c_int>) -> c_int = -1;
    fn vdprintf(fd: c_int, fmt: *const c_char, ap: *mut c_void) -> c_int = -1;
    fn __vdprintf_chk(fd: c_int, flag: c_int, fmt: *const c_char, ap: *mut c_void) -> c_int = -1;
    fn backtrace_symbols_fd(buffer: *const *mut c_void, size: c_int, fd: c_int) -> () = ();
}
