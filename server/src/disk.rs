//! The local file system under a server's data directory.

use std::path::Path;

/// Total and available bytes of the file system holding `path`.
pub fn fs_space(path: &Path) -> std::io::Result<(u64, u64)> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: all-zero is a valid statvfs; `c` is a valid C string and `st`
    // a valid out-pointer for the call.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let frsize = st.f_frsize as u64;
    Ok((
        (st.f_blocks as u64).saturating_mul(frsize),
        (st.f_bavail as u64).saturating_mul(frsize),
    ))
}
