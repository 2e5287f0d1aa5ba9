//! The local file system under a path: a server's data directory, or the
//! directory a benchmark runs in.

use std::path::Path;

/// The sizes statvfs(3) reports for a file system, in bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Space {
    pub total: u64,
    pub free: u64,
    /// Free to an unprivileged writer (`free` less the root reserve).
    pub avail: u64,
}

/// statvfs(3) of the file system holding `path`.
pub fn space(path: &Path) -> std::io::Result<Space> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: all-zero is a valid statvfs; `c` is a valid C string and `st`
    // a valid out-pointer for the call.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let frsize = st.f_frsize as u64;
    Ok(Space {
        total: (st.f_blocks as u64).saturating_mul(frsize),
        free: (st.f_bfree as u64).saturating_mul(frsize),
        avail: (st.f_bavail as u64).saturating_mul(frsize),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn space_of_a_real_directory_and_a_missing_one() {
        let s = space(Path::new("/")).unwrap();
        assert!(
            s.total > 0 && s.free <= s.total && s.avail <= s.free,
            "{s:?}"
        );
        let e = space(Path::new("/no/such/dir")).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
    }
}
