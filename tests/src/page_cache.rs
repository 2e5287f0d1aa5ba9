//! What of a local file the kernel's page cache holds, for tests of what a
//! server leaves there (uncached reads).

use std::fs::File;
use std::os::fd::AsRawFd;

/// The size of a page of the page cache.
pub fn page_size() -> usize {
    // SAFETY: sysconf reads a constant of the system.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).expect("a page size")
}

/// Pages of the first `len` bytes of `file` (which has at least that many)
/// that are in the page cache, by mincore.
pub fn resident_pages(file: &File, len: usize) -> usize {
    if len == 0 {
        return 0;
    }
    let mut vec = vec![0u8; len.div_ceil(page_size())];
    // SAFETY: a shared read-only mapping of `len` bytes of an open file of
    // at least that length, unmapped before returning; mincore writes one
    // byte per page into `vec`, which holds that many.
    unsafe {
        let map = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        );
        assert_ne!(map, libc::MAP_FAILED, "mapping the file");
        assert_eq!(libc::mincore(map, len, vec.as_mut_ptr()), 0, "mincore");
        libc::munmap(map, len);
    }
    vec.iter().filter(|b| *b & 1 == 1).count()
}

/// Takes the clean pages of `file` out of the page cache.
pub fn evict(file: &File) {
    // SAFETY: an advice on an open descriptor; offset and length 0 name the
    // whole file.
    unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
}
