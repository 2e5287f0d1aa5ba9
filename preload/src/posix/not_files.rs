//! Calls for descriptors a Shoal file is not: sockets, terminals and
//! pseudoterminals, epoll, inotify, fanotify, signalfd, timerfd and eventfd
//! descriptors, namespaces, pidfds, the new mount API's descriptors. On a
//! Shoal descriptor each fails as the kernel fails it for a regular file
//! (ENOTSOCK, ENOTTY, EINVAL, EPERM or EBADF, as its man page says),
//! instead of reaching the kernel with the stand-in's number (which would
//! say EBADF to all). Every other descriptor goes to libc unchanged.

use libc::{
    c_char, c_int, c_uint, c_void, epoll_event, msghdr, pid_t, size_t, sockaddr, socklen_t,
    ssize_t, termios,
};

use crate::errno::{fail, set_errno};
use crate::real;
use crate::state;
use crate::unwind::Failed;

/// Refuses each listed call with `errno` when its first argument is a
/// Shoal descriptor (`= VALUE` where the call's failure is not -1: NULL,
/// 0, or an error number it returns).
macro_rules! refused_on_shoal {
    ($errno:expr => $(fn $name:ident($fd:ident: c_int $(, $a:ident: $t:ty)*) -> $r:ty $(= $failed:expr)?;)+) => {
        $(exported! {
            [$name] ($fd: c_int $(, $a: $t)*) -> $r => match state::is_ours($fd) {
                true => refusal!($errno, $r $(, $failed)?),
                false => real::$name($fd $(, $a)*),
            };
        })+
    };
}

/// What a refused call returns: errno set, and [`Failed`]'s value
/// for its type or its own.
macro_rules! refusal {
    ($errno:expr, $r:ty) => {{
        set_errno($errno);
        <$r as Failed>::failed()
    }};
    ($errno:expr, $r:ty, $failed:expr) => {{
        set_errno($errno);
        $failed
    }};
}

refused_on_shoal! { libc::ENOTSOCK =>
    fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int;
    fn accept4(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t, flags: c_int) -> c_int;
    fn bind(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int;
    fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int;
    fn getpeername(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int;
    fn getsockname(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int;
    fn getsockopt(fd: c_int, level: c_int, name: c_int, value: *mut c_void, len: *mut socklen_t) -> c_int;
    fn setsockopt(fd: c_int, level: c_int, name: c_int, value: *const c_void, len: socklen_t) -> c_int;
    fn listen(fd: c_int, backlog: c_int) -> c_int;
    fn shutdown(fd: c_int, how: c_int) -> c_int;
    fn sockatmark(fd: c_int) -> c_int;
    fn bindresvport(fd: c_int, addr: *mut libc::sockaddr_in) -> c_int;
    fn recv(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t;
    fn recvfrom(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> ssize_t;
    fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t;
    fn recvmmsg(fd: c_int, msgs: *mut libc::mmsghdr, n: c_uint, flags: c_int, timeout: *mut libc::timespec) -> c_int;
    fn send(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t;
    fn sendto(fd: c_int, buf: *const c_void, n: size_t, flags: c_int, addr: *const sockaddr, len: socklen_t) -> ssize_t;
    fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t;
    fn sendmmsg(fd: c_int, msgs: *mut libc::mmsghdr, n: c_uint, flags: c_int) -> c_int;
    fn __recv_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t, flags: c_int) -> ssize_t;
    fn __recvfrom_chk(fd: c_int, buf: *mut c_void, n: size_t, buflen: size_t, flags: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> ssize_t;
}

refused_on_shoal! { libc::ENOTTY =>
    fn isatty(fd: c_int) -> c_int = 0;
    fn tcgetattr(fd: c_int, t: *mut termios) -> c_int;
    fn tcsetattr(fd: c_int, when: c_int, t: *const termios) -> c_int;
    fn tcdrain(fd: c_int) -> c_int;
    fn tcflow(fd: c_int, action: c_int) -> c_int;
    fn tcflush(fd: c_int, queue: c_int) -> c_int;
    fn tcsendbreak(fd: c_int, duration: c_int) -> c_int;
    fn tcgetpgrp(fd: c_int) -> pid_t;
    fn tcsetpgrp(fd: c_int, pgrp: pid_t) -> c_int;
    fn tcgetsid(fd: c_int) -> pid_t;
    fn login_tty(fd: c_int) -> c_int;
    fn gtty(fd: c_int, params: *mut c_void) -> c_int;
    fn stty(fd: c_int, params: *const c_void) -> c_int;
    fn ttyname(fd: c_int) -> *mut c_char;
    fn ptsname(fd: c_int) -> *mut c_char;
    fn ttyname_r(fd: c_int, buf: *mut c_char, n: size_t) -> c_int = libc::ENOTTY;
    fn ptsname_r(fd: c_int, buf: *mut c_char, n: size_t) -> c_int = libc::ENOTTY;
    fn __ttyname_r_chk(fd: c_int, buf: *mut c_char, n: size_t, buflen: size_t) -> c_int = libc::ENOTTY;
    fn __ptsname_r_chk(fd: c_int, buf: *mut c_char, n: size_t, buflen: size_t) -> c_int = libc::ENOTTY;
}

// grantpt and unlockpt: "fd does not refer to a pseudoterminal master".
refused_on_shoal! { libc::EINVAL =>
    fn grantpt(fd: c_int) -> c_int;
    fn unlockpt(fd: c_int) -> c_int;
    fn epoll_wait(fd: c_int, events: *mut epoll_event, max: c_int, timeout: c_int) -> c_int;
    fn epoll_pwait(fd: c_int, events: *mut epoll_event, max: c_int, timeout: c_int, mask: *const libc::sigset_t) -> c_int;
    fn epoll_pwait2(fd: c_int, events: *mut epoll_event, max: c_int, timeout: *const libc::timespec, mask: *const libc::sigset_t) -> c_int;
    fn inotify_add_watch(fd: c_int, path: *const c_char, mask: u32) -> c_int;
    fn inotify_rm_watch(fd: c_int, wd: c_int) -> c_int;
    fn fanotify_mark(fd: c_int, flags: c_uint, mask: u64, dirfd: c_int, path: *const c_char) -> c_int;
    fn signalfd(fd: c_int, mask: *const libc::sigset_t, flags: c_int) -> c_int;
    fn timerfd_gettime(fd: c_int, value: *mut libc::itimerspec) -> c_int;
    fn timerfd_settime(fd: c_int, flags: c_int, value: *const libc::itimerspec, old: *mut libc::itimerspec) -> c_int;
    fn eventfd_read(fd: c_int, value: *mut u64) -> c_int;
    fn eventfd_write(fd: c_int, value: u64) -> c_int;
    fn setns(fd: c_int, nstype: c_int) -> c_int;
    fn fsconfig(fd: c_int, cmd: c_uint, key: *const c_char, value: *const c_void, aux: c_int) -> c_int;
    fn fsmount(fd: c_int, flags: c_uint, attr: c_uint) -> c_int;
    fn fspick(fd: c_int, path: *const c_char, flags: c_uint) -> c_int;
    fn open_tree(fd: c_int, path: *const c_char, flags: c_uint) -> c_int;
    fn mount_setattr(fd: c_int, path: *const c_char, flags: c_uint, attr: *mut c_void, size: size_t) -> c_int;
}

// "pidfd is not a valid PID file descriptor".
refused_on_shoal! { libc::EBADF =>
    fn pidfd_getfd(fd: c_int, target: c_int, flags: c_uint) -> c_int;
    fn pidfd_send_signal(fd: c_int, sig: c_int, info: *mut libc::siginfo_t, flags: c_uint) -> c_int;
    fn process_madvise(fd: c_int, iov: *const libc::iovec, n: size_t, advice: c_int, flags: c_uint) -> ssize_t;
}

/// epoll_ctl: a Shoal file as the watched descriptor is EPERM ("the target
/// file does not support epoll", as for any regular file); as the epoll
/// descriptor, EINVAL.
unsafe fn epoll_ctl_any(epfd: c_int, op: c_int, fd: c_int, ev: *mut epoll_event) -> c_int {
    if state::is_ours(fd) {
        fail(libc::EPERM)
    } else if state::is_ours(epfd) {
        fail(libc::EINVAL)
    } else {
        // SAFETY: epoll_ctl's contract.
        unsafe { real::epoll_ctl(epfd, op, fd, ev) }
    }
}

exported! {
    [epoll_ctl] (epfd: c_int, op: c_int, fd: c_int, ev: *mut epoll_event) -> c_int => epoll_ctl_any(epfd, op, fd, ev);
}
