//! `shoal._shoal`, the extension module of the `shoal` Python package:
//! libshoal's calls (the `shoal-capi` crate, as `libshoal_preload.so` uses
//! it) for Python, each made with the GIL released so that threads wait on
//! the servers in parallel. The Pythonic API (file objects, `os`-style
//! functions, the fsspec filesystem) is the package's Python code over these.
//!
//! Everything a process needs beyond one call is libshoal's already: one
//! connection per server shared by every thread, the credential from the
//! node's broker when the process cannot read the cluster secret, a fresh
//! session in a forked child, writes held back sent at exit. So the module
//! keeps no state of its own but the listings it hands out.

use pyo3::prelude::*;

use calls::{c_string, call};

mod calls;
mod files;
mod listing;
mod paths;

/// Connects this process to the cluster of `cluster_file` and checks that
/// every server answers (shoal_connect): once more with the same file counts
/// one more user; another file is EISCONN (one cluster per process).
#[pyfunction]
fn connect(py: Python<'_>, cluster_file: &str) -> PyResult<()> {
    let file = c_string(cluster_file)?;
    // SAFETY: a NUL-terminated string that outlives the call.
    call(py, Some(cluster_file), || unsafe {
        shoal::shoal_connect(file.as_ptr())
    })?;
    Ok(())
}

/// Drops one user of the connection; the last sends what is held back and
/// closes every descriptor and the connections (shoal_disconnect).
#[pyfunction]
fn disconnect(py: Python<'_>) -> PyResult<()> {
    call(py, None, || shoal::shoal_disconnect())?;
    Ok(())
}

/// Sends every write this process holds back (shoal_flush).
#[pyfunction]
fn flush_all(py: Python<'_>) -> PyResult<()> {
    call(py, None, || shoal::shoal_flush())?;
    Ok(())
}

/// Whether this process is connected (shoal_is_connected).
#[pyfunction]
fn is_connected() -> bool {
    shoal::shoal_is_connected() == 1
}

#[pymodule]
fn _shoal(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(connect, m)?)?;
    m.add_function(wrap_pyfunction!(disconnect, m)?)?;
    m.add_function(wrap_pyfunction!(flush_all, m)?)?;
    m.add_function(wrap_pyfunction!(is_connected, m)?)?;
    files::register(m)?;
    paths::register(m)?;
    listing::register(m)?;
    Ok(())
}
