//! POSIX asynchronous I/O (aio_read & co, `<aio.h>`) on Shoal descriptors.
//! glibc's runs each request on a thread of its own that calls its internal
//! pread/pwrite/fsync, which no interposer sees, so a Shoal descriptor
//! would reach the kernel's stand-in. A request on one is done here at once,
//! on the caller's thread, and the control block left as glibc leaves a
//! finished one: its error and return value set (what glibc's aio_error and
//! aio_return read: those, and aio_suspend, which returns at once for a
//! finished request, work unchanged), its notification sent. POSIX allows a
//! request to be done before the call that submits it returns.

use libc::{c_int, c_void, off64_t, size_t, ssize_t};

use super::files;
use crate::errno::{errno, fail};
use crate::real;
use crate::state;

/// glibc's struct aiocb (and aiocb64, the same on 64-bit targets), with the
/// private fields its aio_error and aio_return read (`<aio.h>`).
#[repr(C)]
pub struct Aiocb {
    fildes: c_int,
    lio_opcode: c_int,
    reqprio: c_int,
    buf: *mut c_void,
    nbytes: size_t,
    sigevent: SigEvent,
    next_prio: *mut Aiocb,
    abs_prio: c_int,
    policy: c_int,
    error_code: c_int,
    return_value: ssize_t,
    offset: off64_t,
    reserved: [u8; 32],
}

/// struct sigevent, with SIGEV_THREAD's members where glibc has them.
#[repr(C)]
pub struct SigEvent {
    value: *mut c_void,
    signo: c_int,
    notify: c_int,
    function: Option<unsafe extern "C" fn(*mut c_void)>,
    attributes: *mut c_void,
    pad: [u8; 32],
}

const _: () = assert!(std::mem::size_of::<Aiocb>() == std::mem::size_of::<libc::aiocb>());
const _: () = assert!(std::mem::size_of::<SigEvent>() == std::mem::size_of::<libc::sigevent>());

/// Sends a finished request's notification, as glibc's aio does.
fn notify(ev: &SigEvent) {
    match ev.notify {
        libc::SIGEV_SIGNAL => {
            let value = libc::sigval {
                sival_ptr: ev.value,
            };
            // SAFETY: plain values; a signal to this process.
            unsafe { libc::sigqueue(libc::getpid(), ev.signo, value) };
        }
        libc::SIGEV_THREAD => {
            if let Some(f) = ev.function {
                let value = ev.value as usize;
                // SAFETY: the program's function, called with its value on
                // a new thread as SIGEV_THREAD asks.
                let run = move || unsafe { f(value as *mut c_void) };
                let _ = std::thread::Builder::new()
                    .name("shoal-aio".into())
                    .spawn(run);
            }
        }
        _ => {}
    }
}

/// Marks `cb` finished with `r` (a count, or -1 and errno) and notifies.
fn finish(cb: &mut Aiocb, r: ssize_t, ev: Option<&SigEvent>) {
    cb.error_code = if r < 0 { errno() } else { 0 };
    cb.return_value = r;
    if let Some(ev) = ev {
        notify(ev);
    }
}

/// Does a read, write or sync request on a Shoal descriptor; `sync` is
/// aio_fsync's operation. Notifies with the block's own sigevent when
/// `notify`.
unsafe fn run(cb: &mut Aiocb, opcode: c_int, notify: bool) {
    let fd = cb.fildes;
    let r = match opcode {
        // SAFETY: the program's buffer of aio_nbytes bytes.
        libc::LIO_READ => unsafe { files::pread64(fd, cb.buf, cb.nbytes, cb.offset) },
        libc::LIO_WRITE => {
            let append = super::process::fcntl64(fd, libc::F_GETFL, 0) & libc::O_APPEND != 0;
            // SAFETY: as above; O_APPEND writes at the end, whatever the offset.
            unsafe {
                match append {
                    true => files::write(fd, cb.buf, cb.nbytes),
                    false => files::pwrite64(fd, cb.buf, cb.nbytes, cb.offset),
                }
            }
        }
        libc::O_DSYNC => files::fdatasync(fd) as ssize_t,
        _ => files::fsync(fd) as ssize_t,
    };
    let ev = std::ptr::addr_of!(cb.sigevent);
    // SAFETY: the block's own sigevent, not changed by finish.
    finish(cb, r, notify.then(|| unsafe { &*ev }));
}

/// aio_read/aio_write: `cb` names a Shoal descriptor, or goes to glibc.
unsafe fn submit(cb: *mut Aiocb, opcode: c_int) -> c_int {
    // SAFETY: the program's control block, read only when not NULL.
    let Some(block) = (unsafe { cb.as_mut() }).filter(|b| state::is_ours(b.fildes)) else {
        // SAFETY: the call's contract.
        return unsafe {
            match opcode {
                libc::LIO_READ => real::aio_read64(cb as *mut libc::aiocb),
                _ => real::aio_write64(cb as *mut libc::aiocb),
            }
        };
    };
    if block.offset < 0 && opcode == libc::LIO_READ {
        return fail(libc::EINVAL);
    }
    // SAFETY: the block is the program's, alive until it reads the result.
    unsafe { run(block, opcode, true) };
    0
}

unsafe fn fsync_any(op: c_int, cb: *mut Aiocb) -> c_int {
    // SAFETY: the program's control block, read only when not NULL.
    let Some(block) = (unsafe { cb.as_mut() }).filter(|b| state::is_ours(b.fildes)) else {
        // SAFETY: the call's contract.
        return unsafe { real::aio_fsync64(op, cb as *mut libc::aiocb) };
    };
    if op != libc::O_SYNC && op != libc::O_DSYNC {
        return fail(libc::EINVAL);
    }
    // SAFETY: as in submit.
    unsafe { run(block, op, true) };
    0
}

/// lio_listio: the requests on Shoal descriptors are done here, the others
/// handed to glibc in one list (with NULL, which it skips, in place of
/// ours). The list's own notification is sent here only if every request
/// was ours (else glibc sends it when its part is done).
unsafe fn lio_listio_any(
    mode: c_int,
    list: *const *mut Aiocb,
    nent: c_int,
    sig: *mut SigEvent,
) -> c_int {
    let Ok(n) = usize::try_from(nent) else {
        return fail(libc::EINVAL);
    };
    if list.is_null() || n == 0 {
        // SAFETY: the call's contract.
        return unsafe { real::lio_listio64(mode, list as _, nent, sig as _) };
    }
    // SAFETY: the program's array of nent pointers.
    let list = unsafe { std::slice::from_raw_parts(list, n) };
    let ours = |cb: &*mut Aiocb| {
        // SAFETY: the program's control blocks, NULL skipped.
        !cb.is_null() && state::is_ours(unsafe { (**cb).fildes })
    };
    if !list.iter().any(ours) {
        // SAFETY: the call's contract.
        return unsafe { real::lio_listio64(mode, list.as_ptr() as _, nent, sig as _) };
    }
    let mut failed = false;
    let mut rest = Vec::with_capacity(n);
    for &cb in list {
        if !ours(&cb) {
            rest.push(cb);
            continue;
        }
        rest.push(std::ptr::null_mut());
        // SAFETY: checked not NULL above.
        let block = unsafe { &mut *cb };
        if block.lio_opcode == libc::LIO_NOP {
            continue;
        }
        // SAFETY: the program's block; lio_listio sends no per-request
        // notification in LIO_WAIT mode.
        unsafe { run(block, block.lio_opcode, mode == libc::LIO_NOWAIT) };
        failed |= block.error_code != 0;
    }
    let r = if rest.iter().all(|cb| cb.is_null()) {
        // SAFETY: the program's sigevent, if any.
        if let (libc::LIO_NOWAIT, Some(ev)) = (mode, unsafe { sig.as_ref() }) {
            notify(ev);
        }
        0
    } else {
        // SAFETY: the program's blocks, ours left out.
        unsafe { real::lio_listio64(mode, rest.as_ptr() as _, nent, sig as _) }
    };
    if r == 0 && failed {
        return fail(libc::EIO);
    }
    r
}

/// aio_cancel: a request on a Shoal descriptor is done by the time it
/// could be cancelled.
unsafe fn cancel_any(fd: c_int, cb: *mut Aiocb) -> c_int {
    if !state::is_ours(fd) {
        // SAFETY: the call's contract.
        return unsafe { real::aio_cancel64(fd, cb as *mut libc::aiocb) };
    }
    // SAFETY: the program's control block, if any.
    if unsafe { cb.as_ref() }.is_some_and(|b| b.fildes != fd) {
        return fail(libc::EINVAL);
    }
    libc::AIO_ALLDONE
}

exported! {
    [aio_read, aio_read64] (cb: *mut Aiocb) -> c_int => submit(cb, libc::LIO_READ);
    [aio_write, aio_write64] (cb: *mut Aiocb) -> c_int => submit(cb, libc::LIO_WRITE);
    [aio_fsync, aio_fsync64] (op: c_int, cb: *mut Aiocb) -> c_int => fsync_any(op, cb);
    [lio_listio, lio_listio64] (mode: c_int, list: *const *mut Aiocb, nent: c_int, sig: *mut SigEvent) -> c_int =>
        lio_listio_any(mode, list, nent, sig);
    [aio_cancel, aio_cancel64] (fd: c_int, cb: *mut Aiocb) -> c_int => cancel_any(fd, cb);
}
