//! Uncached reads: a large read of a datafile goes through the page cache
//! without staying there (`RWF_DONTCACHE`): the kernel drops the pages it
//! brought in for the read once they are copied out, and leaves pages that
//! were cached before alone. A stream through a server then cycles a few
//! megabytes of page cache instead of filling gigabytes of it.
//!
//! Why: on this machine's VM every page the guest touches for the first
//! time in a while costs a fault in the host, and a cold stream filled the
//! servers' page cache with such pages: sixteen local readers of 128 MiB
//! files just written with O_DIRECT spent 4.2-4.9 s of system time through
//! the page cache and 0.5 s uncached, in half the wall time, and Shoal's
//! first read after its writes went 2.1x-2.2x in the same streaming runs
//! (`bench/results/changes.md`). The price: where memory is warm the
//! kernel reads ahead in smaller pieces for uncached reads (0.8x for the
//! local readers), and a large file read again by another client comes from
//! the disk again. The servers' cache still serves small files and small
//! reads (Lustre's `readcache_max_filesize` makes the same split), and a
//! cluster can turn this off (`uncached_reads = 0`).
//!
//! Asked for only on Linux 6.16 and later: the flag came in 6.14, and its
//! read side was fixed after that (a folio dirtied again while its uncached
//! read finished could be invalidated); older kernels read as before. A
//! kernel or file system that still refuses it (EOPNOTSUPP: tmpfs, for one)
//! turns it off for the life of the process, after one line in the log.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::LazyLock;

/// The oldest kernel asked for uncached reads, (major, minor).
const OLDEST_KERNEL: (u32, u32) = (6, 16);

/// Whether reads may still ask for `RWF_DONTCACHE`.
static OFFERED: LazyLock<AtomicBool> = LazyLock::new(|| AtomicBool::new(kernel_new_enough()));

/// Whether the running kernel is one uncached reads are asked of.
pub fn kernel_new_enough() -> bool {
    release_at_least(&kernel_release(), OLDEST_KERNEL)
}

/// The `preadv2` flags of a read that wants to be `uncached` (or not).
pub fn flags(uncached: bool) -> libc::c_int {
    if uncached && OFFERED.load(Ordering::Relaxed) {
        libc::RWF_DONTCACHE
    } else {
        0
    }
}

/// A read with `flags` failed with `error`: true if that was a refusal of
/// uncached reads, which are then off (the caller reads again without).
pub fn refused(flags: libc::c_int, error: &std::io::Error) -> bool {
    if flags & libc::RWF_DONTCACHE == 0 || error.raw_os_error() != Some(libc::EOPNOTSUPP) {
        return false;
    }
    if OFFERED.swap(false, Ordering::Relaxed) {
        tracing::info!(
            "the kernel or file system refuses uncached reads (RWF_DONTCACHE): \
             large reads stay in the page cache"
        );
    }
    true
}

/// Whether uncached reads are still asked for.
pub fn offered() -> bool {
    OFFERED.load(Ordering::Relaxed)
}

/// The running kernel's release (`uname -r`), or "" if unknown.
fn kernel_release() -> String {
    // SAFETY: uname fills the zeroed struct; its fields are NUL-terminated.
    unsafe {
        let mut u: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut u) != 0 {
            return String::new();
        }
        std::ffi::CStr::from_ptr(u.release.as_ptr())
            .to_string_lossy()
            .into_owned()
    }
}

/// Whether a kernel `release` such as "6.18.5-cloud" is at least `want`.
fn release_at_least(release: &str, want: (u32, u32)) -> bool {
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|p| p.parse::<u32>().ok());
    match (parts.next().flatten(), parts.next().flatten()) {
        (Some(major), Some(minor)) => (major, minor) >= want,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_releases_compare_by_major_and_minor() {
        assert!(release_at_least("6.18.0-1-cloud-amd64", (6, 16)));
        assert!(release_at_least("6.16", (6, 16)));
        assert!(release_at_least("7.0.1", (6, 16)));
        assert!(!release_at_least("6.15.9", (6, 16)));
        assert!(!release_at_least("5.19.0", (6, 16)));
        assert!(!release_at_least("", (6, 16)), "unknown: not asked for");
        assert!(!release_at_least("linux", (6, 16)));
    }

    #[test]
    fn only_a_refusal_of_the_flag_turns_it_off() {
        let eopnotsupp = std::io::Error::from_raw_os_error(libc::EOPNOTSUPP);
        let eio = std::io::Error::from_raw_os_error(libc::EIO);
        assert!(
            !refused(0, &eopnotsupp),
            "a plain read's refusal is an error"
        );
        assert!(!refused(libc::RWF_DONTCACHE, &eio), "so is any other error");
        assert_eq!(flags(false), 0);
    }
}
