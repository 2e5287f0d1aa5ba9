//! libshoal_preload.so: an LD_PRELOAD interposer that serves the POSIX
//! calls of unmodified programs on Shoal paths through libshoal (the native
//! client, talking to the servers directly) and passes every other call to
//! libc unchanged. See preload/README.md for what is served and what falls
//! back to the kernel (the FUSE mount underneath).
//!
//! - Which paths: those under a Shoal mount point (read from
//!   /proc/self/mounts: type `fuse.shoal`, the cluster file as the source),
//!   or under `SHOAL_PREFIX` with the cluster file `SHOAL_CONFIG` (no mount
//!   needed). libshoal connects on the first call that needs it.
//! - Descriptors: each libshoal descriptor is stood for by a real kernel
//!   descriptor (/dev/null, close-on-exec), so its number is one the kernel
//!   will not hand out again, and a close of an unrelated number cannot
//!   reach it.
//! - Re-entry: while the library serves a call, that thread's own libc
//!   calls (libshoal's sockets, its reading of the cluster file) go straight
//!   to libc; so does every call made before the library is initialised.
//! - `SHOAL_STATS=FILE`: at exit, the table of [Vilayannur 2004]'s Table 2
//!   form (per operation type: count, mean and p99 wait) is appended to FILE
//!   (`%p` in it becomes the pid).
//! - Memory: the library's own heap (`heap.rs`), not the program's malloc.

#![allow(clippy::missing_safety_doc)]
// The unit tests build without the interposed functions (posix/), which
// would otherwise stand in front of the test harness's own libc calls.
#![cfg_attr(test, allow(dead_code))]

mod cache;
mod errno;
#[cfg(not(test))]
mod fork;
mod heap;
mod listed;
mod modes;
mod paths;
#[cfg(not(test))]
mod posix;
mod real;
mod statahead;
mod state;
mod stats;
mod unwind;

use std::ffi::OsString;
use std::sync::OnceLock;

static STATS_FILE: OnceLock<OsString> = OnceLock::new();

/// Runs when the library is loaded, before `main`.
extern "C" fn start() {
    unwind::guarded(|| (), start_library)
}

fn start_library() {
    if let Some(file) = std::env::var_os("SHOAL_STATS").filter(|f| !f.is_empty()) {
        let _ = STATS_FILE.set(file);
        stats::enable();
        // SAFETY: plain functions that live as long as the process.
        unsafe {
            libc::atexit(write_stats);
            libc::pthread_atfork(None, None, Some(stats::reset));
        }
    }
    #[cfg(not(test))]
    fork::install_handlers();
    state::init();
}

#[cfg(not(test))]
#[used]
#[link_section = ".init_array"]
static START: extern "C" fn() = start;

/// The process's name, for the table's header.
fn command() -> String {
    std::fs::read("/proc/self/cmdline")
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default()
}

/// At exit: appends this process's table to SHOAL_STATS.
extern "C" fn write_stats() {
    unwind::guarded(|| (), append_stats)
}

fn append_stats() {
    let _g = state::Guard::enter();
    let Some(file) = STATS_FILE.get() else {
        return;
    };
    if stats::calls() == 0 && stats::calls_left_to_the_mount() == 0 {
        // Nothing on Shoal (a shell, `timeout`, ...): no table.
        return;
    }
    use std::os::unix::ffi::{OsStrExt, OsStringExt};
    let pid = std::process::id();
    let path =
        file.as_bytes()
            .split(|&b| b == b'%')
            .enumerate()
            .fold(Vec::new(), |mut out, (i, part)| {
                match (i, part.first()) {
                    (0, _) => out.extend_from_slice(part),
                    (_, Some(b'p')) => {
                        out.extend_from_slice(pid.to_string().as_bytes());
                        out.extend_from_slice(&part[1..]);
                    }
                    _ => {
                        out.push(b'%');
                        out.extend_from_slice(part);
                    }
                }
                out
            });
    let mut cmd = command();
    if cmd.len() > 120 {
        let cut = (0..=120)
            .rev()
            .find(|&i| cmd.is_char_boundary(i))
            .unwrap_or(0);
        cmd.truncate(cut);
        cmd.push_str("...");
    }
    let mut text = stats::table(&format!("pid {pid} ({cmd})"));
    let mut paths = shoal::shoal_write_paths::default();
    // SAFETY: our own struct.
    if unsafe { shoal::shoal_write_paths(&mut paths) } == 0 {
        let paths = shoal_client::WritePaths {
            direct_writes: paths.direct_writes,
            direct_bytes: paths.direct_bytes,
            gathered_writes: paths.gathered_writes,
            gathered_bytes: paths.gathered_bytes,
            gathered_sends: paths.gathered_sends,
        };
        text += &format!("# write paths: {paths} (sent so far)\n");
    }
    match shoal::connected_credential_uid() {
        Some(uid) => {
            text += &format!("# served as uid {uid}, by a user credential from the node's broker\n")
        }
        None if stats::calls() > 0 => text += "# served with the cluster secret\n",
        None => {}
    }
    let left = stats::calls_left_to_the_mount();
    if left > 0 {
        text += &format!("# left to the mount: {left} calls (libshoal could not connect)\n");
    }
    use std::io::Write;
    let _ = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(std::path::PathBuf::from(OsString::from_vec(path)))
        .and_then(|mut f| f.write_all(text.as_bytes()));
}
