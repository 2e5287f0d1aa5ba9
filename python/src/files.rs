//! Calls on libshoal descriptors, for the package's raw file object (an
//! `io.RawIOBase` that `io.BufferedReader`, `BufferedWriter` and
//! `TextIOWrapper` wrap): reads land straight in the caller's buffer, and
//! a whole-file read is one request for a small file.

use std::ffi::c_int;

use pyo3::buffer::PyUntypedBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::calls::{c_string, call, call_holding, empty_stat, stat_tuple, Fd, SendPtr, StatTuple};

/// The first read of [`readall`]: bigger than most small files, so that one
/// whose size it does not know still costs one request (a short read is the
/// end of the file: libshoal reads short only there).
const FIRST_READ: usize = 64 * 1024;
/// [`readall`]'s reads double up to this.
const MAX_READ: usize = 16 << 20;

/// open(2) with `flags` and `mode` (less the umask): a libshoal descriptor.
#[pyfunction]
fn open(py: Python<'_>, path: &str, flags: c_int, mode: u32) -> PyResult<Fd> {
    let p = c_string(path)?;
    // SAFETY: a NUL-terminated string that outlives the call.
    call(py, Some(path), || unsafe {
        shoal::shoal_open(p.as_ptr(), flags, mode)
    })
}

/// close(2): sends the file's buffered writes first, and fails if that does
/// (the descriptor is released either way). `written`: the file was open
/// for writing; one only read sends nothing at close (but a reclaim when it
/// was unlinked while open), so the GIL is kept.
#[pyfunction]
fn close(py: Python<'_>, fd: Fd, written: bool) -> PyResult<()> {
    match written {
        true => call(py, None, || shoal::shoal_close(fd))?,
        false => call_holding(None, || shoal::shoal_close(fd))?,
    };
    Ok(())
}

/// A buffer's memory, checked to be contiguous bytes (and writable when
/// `writing` into it).
fn bytes_of(
    buffer: &Bound<'_, PyAny>,
    writing: bool,
) -> PyResult<(PyUntypedBuffer, SendPtr, usize)> {
    let b = PyUntypedBuffer::get(buffer)?;
    if !b.is_c_contiguous() {
        return Err(PyValueError::new_err("the buffer is not contiguous"));
    }
    if writing && b.readonly() {
        return Err(PyValueError::new_err("the buffer is read-only"));
    }
    let ptr = SendPtr(b.buf_ptr().cast());
    let len = b.len_bytes();
    Ok((b, ptr, len))
}

/// read(2) into `buffer` (any writable buffer: a bytearray, a memoryview):
/// the bytes read, 0 at the end of the file.
#[pyfunction]
fn readinto(py: Python<'_>, fd: Fd, buffer: &Bound<'_, PyAny>) -> PyResult<usize> {
    let (_held, ptr, len) = bytes_of(buffer, true)?;
    // SAFETY: `_held` keeps the buffer exported (alive, not resized) until
    // this returns; as for FileIO.readinto, Python code on other threads
    // could still touch its bytes meanwhile, which is theirs to avoid.
    let n = call(py, None, move || unsafe {
        shoal::shoal_read(fd, ptr.get().cast(), len)
    })?;
    Ok(n as usize)
}

/// The rest of the file from the descriptor's offset: reads double from
/// [`FIRST_READ`] until one comes back short.
#[pyfunction]
fn readall(py: Python<'_>, fd: Fd) -> PyResult<Bound<'_, PyBytes>> {
    let data = py.detach(|| {
        let mut out: Vec<u8> = Vec::new();
        let mut want = FIRST_READ;
        loop {
            out.reserve(want);
            let spare = out.spare_capacity_mut();
            // SAFETY: `spare` has room for `want` bytes, written by the call.
            let n = unsafe { shoal::shoal_read(fd, spare.as_mut_ptr().cast(), want) };
            if n < 0 {
                return Err(crate::calls::Failure::last());
            }
            // SAFETY: libshoal wrote the first n bytes of the spare room.
            unsafe { out.set_len(out.len() + n as usize) };
            if (n as usize) < want {
                return Ok(out);
            }
            want = (want * 2).min(MAX_READ);
        }
    });
    let data = data.map_err(|e| e.raise(None))?;
    Ok(PyBytes::new(py, &data))
}

/// write(2) of `buffer` (bytes, a bytearray, a memoryview): the bytes
/// written.
#[pyfunction]
fn write(py: Python<'_>, fd: Fd, buffer: &Bound<'_, PyAny>) -> PyResult<usize> {
    let (_held, ptr, len) = bytes_of(buffer, false)?;
    // SAFETY: as in readinto; the call only reads the buffer.
    let n = call(py, None, move || unsafe {
        shoal::shoal_write(fd, ptr.get().cast_const().cast(), len)
    })?;
    Ok(n as usize)
}

/// lseek(2): the new offset. Only a seek from the end asks the servers
/// (for the size); the others keep the GIL (io's objects tell() at every
/// open).
#[pyfunction]
fn lseek(py: Python<'_>, fd: Fd, offset: i64, whence: c_int) -> PyResult<i64> {
    let seek = || shoal::shoal_lseek(fd, offset, whence);
    match whence {
        libc::SEEK_SET | libc::SEEK_CUR => call_holding(None, seek),
        _ => call(py, None, seek),
    }
}

/// ftruncate(2).
#[pyfunction]
fn ftruncate(py: Python<'_>, fd: Fd, length: i64) -> PyResult<()> {
    call(py, None, || shoal::shoal_ftruncate(fd, length))?;
    Ok(())
}

/// fsync(2): the file's writes are on the servers' disks when it returns.
#[pyfunction]
fn fsync(py: Python<'_>, fd: Fd) -> PyResult<()> {
    call(py, None, || shoal::shoal_fsync(fd))?;
    Ok(())
}

/// fstat(2).
#[pyfunction]
fn fstat(py: Python<'_>, fd: Fd) -> PyResult<StatTuple> {
    let mut st = empty_stat();
    let out = SendPtr((&mut st as *mut libc::stat).cast());
    // SAFETY: `st` outlives the call.
    call(py, None, move || unsafe {
        shoal::shoal_fstat(fd, out.get().cast())
    })?;
    Ok(stat_tuple(&st))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(open, m)?)?;
    m.add_function(wrap_pyfunction!(close, m)?)?;
    m.add_function(wrap_pyfunction!(readinto, m)?)?;
    m.add_function(wrap_pyfunction!(readall, m)?)?;
    m.add_function(wrap_pyfunction!(write, m)?)?;
    m.add_function(wrap_pyfunction!(lseek, m)?)?;
    m.add_function(wrap_pyfunction!(ftruncate, m)?)?;
    m.add_function(wrap_pyfunction!(fsync, m)?)?;
    m.add_function(wrap_pyfunction!(fstat, m)?)?;
    Ok(())
}
