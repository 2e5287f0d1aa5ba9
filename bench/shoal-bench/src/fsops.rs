//! The POSIX calls the benchmarks make beyond what `std` offers cleanly, each
//! with an error that names the file, and the process limits they need.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::os::unix::io::{AsRawFd, IntoRawFd};
use std::path::Path;

use shoal_proto::error::{Result, ShoalError};

/// File descriptors a process needs besides the benchmark's own files
/// (stdio, the barrier pipes, directory handles, libraries).
const SPARE_FDS: u64 = 64;

/// Wraps an I/O error with the path it concerns, keeping the errno.
pub fn at(path: &Path, e: std::io::Error) -> ShoalError {
    ShoalError::from(e).context(path.display())
}

/// Raises the soft open-file limit to the hard limit, and fails clearly when
/// even that cannot hold `files` open files at once.
pub fn raise_nofile_limit(files: usize) -> Result<()> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit only writes the struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    let needed = files as u64 + SPARE_FDS;
    if lim.rlim_max != libc::RLIM_INFINITY && lim.rlim_max < needed {
        return Err(ShoalError::invalid(format!(
            "{files} files per process must stay open at once, but the hard limit on open \
             files is {} (ulimit -Hn); lower -n or raise the limit",
            lim.rlim_max
        )));
    }
    if lim.rlim_cur != lim.rlim_max {
        lim.rlim_cur = lim.rlim_max;
        // SAFETY: setrlimit only reads the struct we pass.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) } != 0 {
            return Err(ShoalError::from(std::io::Error::last_os_error())
                .context("raising the open-file limit"));
        }
    }
    Ok(())
}

/// Closes `file` and reports close's error: on network and FUSE file systems
/// close is where deferred write errors surface, and `drop` would hide them.
pub fn close(file: File, path: &Path) -> Result<()> {
    let fd = file.into_raw_fd();
    // SAFETY: we own fd (taken from the File) and close it exactly once.
    if unsafe { libc::close(fd) } != 0 {
        return Err(at(path, std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Reads `buf.len()` bytes at `offset`, failing with the file's actual length
/// when it is shorter (a short file is a wrong result, not an I/O error).
pub fn read_full_at(file: &File, buf: &mut [u8], offset: u64, path: &Path) -> Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], offset + done as u64) {
            Ok(0) => {
                return Err(ShoalError::io(format!(
                    "{}: read returned end of file after {} bytes at offset {offset}, \
                     expected {} bytes",
                    path.display(),
                    done,
                    buf.len()
                )))
            }
            Ok(n) => done += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(at(path, e)),
        }
    }
    Ok(())
}

/// Asks the kernel to drop its cached pages of a byte range. Only a hint: it
/// works for clean pages of local file systems and FUSE mounts, and is
/// meaningless on tmpfs.
pub fn drop_cached_range(path: &Path, offset: u64, len: u64) {
    if let Ok(f) = File::open(path) {
        drop_cached(&f, offset, len);
    }
}

/// `drop_cached_range` on an open file.
pub fn drop_cached(f: &File, offset: u64, len: u64) {
    // SAFETY: plain system call on an fd we hold; errors are ignored on purpose.
    unsafe {
        libc::posix_fadvise(
            f.as_raw_fd(),
            offset as libc::off_t,
            len as libc::off_t,
            libc::POSIX_FADV_DONTNEED,
        );
    }
}

/// Bytes available to an unprivileged writer under `dir`, when the file
/// system reports it (None when statvfs fails or reports no blocks at all).
pub fn available_bytes(dir: &Path) -> Option<u64> {
    let space = shoal_server::disk::space(dir).ok()?;
    (space.total > 0).then_some(space.avail)
}
