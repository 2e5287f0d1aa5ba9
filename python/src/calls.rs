//! What every call of the module shares: making a libshoal call with the
//! GIL released (or kept, for calls that send nothing), its failure as
//! Python's OSError, C strings, `struct stat` as a tuple, and values
//! copied out with libshoal's "size 0 asks for the length" convention.

use std::ffi::{c_int, CStr, CString};

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;

/// A libshoal call that failed: its errno and libshoal's message for it.
pub struct Failure {
    pub errno: i32,
    pub message: String,
}

impl Failure {
    /// The failure of the libshoal call this thread just made: errno and the
    /// message are this thread's, so they are read before the GIL is taken
    /// back (another thread's Python code could change errno meanwhile).
    pub fn last() -> Failure {
        let errno = std::io::Error::last_os_error()
            .raw_os_error()
            .filter(|e| *e > 0)
            .unwrap_or(libc::EIO);
        // SAFETY: libshoal returns a NUL-terminated string valid until this
        // thread's next failing call.
        let message = unsafe { CStr::from_ptr(shoal::shoal_last_error()) }
            .to_string_lossy()
            .into_owned();
        Failure { errno, message }
    }

    /// As Python's `OSError(errno, message, path)`, which picks the subclass
    /// for the errno (FileNotFoundError for ENOENT, and so on).
    pub fn raise(self, path: Option<&str>) -> PyErr {
        match path {
            Some(p) => PyOSError::new_err((self.errno, self.message, p.to_string())),
            None => PyOSError::new_err((self.errno, self.message)),
        }
    }
}

/// Makes libshoal call `f` with the GIL released; a negative return value
/// is its failure.
pub fn released<T>(py: Python<'_>, f: impl FnOnce() -> T + Send) -> Result<T, Failure>
where
    T: Copy + Default + PartialOrd + Send,
{
    py.detach(|| {
        let rc = f();
        if rc < T::default() {
            Err(Failure::last())
        } else {
            Ok(rc)
        }
    })
}

/// Makes libshoal call `f` keeping the GIL, for calls that send nothing (a
/// seek, the close of a file only read): under contention, handing the GIL
/// to another thread and waiting for it back costs more than such a call.
pub fn call_holding<T>(path: Option<&str>, f: impl FnOnce() -> T) -> PyResult<T>
where
    T: Copy + Default + PartialOrd,
{
    let rc = f();
    if rc < T::default() {
        return Err(Failure::last().raise(path));
    }
    Ok(rc)
}

/// [`released`], its failure raised as an `OSError` about `path`.
pub fn call<T>(py: Python<'_>, path: Option<&str>, f: impl FnOnce() -> T + Send) -> PyResult<T>
where
    T: Copy + Default + PartialOrd + Send,
{
    released(py, f).map_err(|e| e.raise(path))
}

/// `s` as a C string; a NUL inside is Python's ValueError, as `os` says.
pub fn c_string(s: &str) -> PyResult<CString> {
    CString::new(s).map_err(|_| PyValueError::new_err(format!("embedded null byte in {s:?}")))
}

/// A `struct stat` as the tuple the package turns into `os.stat_result`:
/// mode, ino, dev, nlink, uid, gid, size, atime, mtime and ctime in
/// nanoseconds, blksize, blocks.
pub type StatTuple = (u32, u64, u64, u64, u32, u32, i64, i64, i64, i64, i64, i64);

pub fn stat_tuple(st: &libc::stat) -> StatTuple {
    let ns = |s: i64, n: i64| s * 1_000_000_000 + n;
    (
        st.st_mode,
        st.st_ino,
        st.st_dev,
        // `as _`: the field types differ between architectures.
        st.st_nlink as _,
        st.st_uid,
        st.st_gid,
        st.st_size,
        ns(st.st_atime, st.st_atime_nsec),
        ns(st.st_mtime, st.st_mtime_nsec),
        ns(st.st_ctime, st.st_ctime_nsec),
        st.st_blksize as _,
        st.st_blocks,
    )
}

/// A zeroed `struct stat` for libshoal to fill.
pub fn empty_stat() -> libc::stat {
    // SAFETY: struct stat is plain data; all zeros is a valid value.
    unsafe { std::mem::zeroed() }
}

/// Reads a value libshoal copies out with the "size 0 asks for the length,
/// ERANGE if it does not fit" convention (xattrs, hints): `get(buf, size)`
/// makes the call. Asks again when the value grew between the two calls.
pub fn sized(
    py: Python<'_>,
    path: &str,
    get: impl Fn(*mut libc::c_void, usize) -> isize + Send + Sync,
) -> PyResult<Vec<u8>> {
    let get = &get;
    loop {
        let len = call(py, Some(path), || get(std::ptr::null_mut(), 0))? as usize;
        // Room for a NUL too: the text calls add one.
        let mut buf = vec![0u8; len + 1];
        let ptr = SendPtr(buf.as_mut_ptr());
        match released(py, move || get(ptr.get().cast(), len + 1)) {
            Ok(n) => {
                buf.truncate(n as usize);
                return Ok(buf);
            }
            Err(e) if e.errno == libc::ERANGE => continue,
            Err(e) => return Err(e.raise(Some(path))),
        }
    }
}

/// A pointer into memory the caller keeps alive and unshared across a call
/// made without the GIL (a buffer it holds).
#[derive(Clone, Copy)]
pub struct SendPtr(pub *mut u8);

// SAFETY: only ever made for memory that the caller keeps alive for the
// call it is sent to, as the call's documentation says; shared, it is only
// copied.
unsafe impl Send for SendPtr {}
unsafe impl Sync for SendPtr {}

impl SendPtr {
    /// Through a method, so that a closure captures the whole (Send)
    /// wrapper, not its raw field.
    pub fn get(self) -> *mut u8 {
        self.0
    }
}

/// The descriptor number libshoal gave, as C's int.
pub type Fd = c_int;
