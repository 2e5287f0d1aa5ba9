//! Directory listings as Python iterators, a batch of entries per request:
//! with attributes (scandir: readdirplus, the entries' attributes fetched
//! with them, one ListAttr per server for a batch) or names only (listdir:
//! no attribute fetched, though those the process holds come along free).

use std::collections::VecDeque;

use pyo3::prelude::*;

use crate::calls::{c_string, call, stat_tuple, Fd, StatTuple};

/// Entries asked for per request.
const BATCH: usize = 1024;

/// One entry: name, inode number, `d_type`, and the attributes (None where
/// a names-only listing does not hold them).
type Entry = (String, u64, u8, Option<StatTuple>);

/// An open listing of one directory; its descriptor closes at the end, at
/// `close()`, or when it is dropped.
#[pyclass(module = "shoal._shoal")]
struct Listing {
    fd: Option<Fd>,
    path: String,
    /// Attributes for every entry (readdirplus), or only those held.
    attrs: bool,
    ready: VecDeque<Entry>,
}

#[pymethods]
impl Listing {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Option<Entry>> {
        while self.ready.is_empty() {
            let Some(fd) = self.fd else {
                return Ok(None);
            };
            let held = !self.attrs;
            let mut got = Vec::new();
            let listed = call(py, Some(&self.path), || {
                shoal::readdir_each(fd, held, BATCH, |e| {
                    if e.name != b"." && e.name != b".." {
                        let name = String::from_utf8_lossy(e.name).into_owned();
                        got.push((name, e.ino, e.kind, e.attrs.map(stat_tuple)));
                    }
                })
            })?;
            if listed == 0 {
                self.close(py)?;
            }
            self.ready.extend(got);
        }
        Ok(self.ready.pop_front())
    }

    /// Closes the listing's descriptor (later calls find it ended).
    fn close(&mut self, py: Python<'_>) -> PyResult<()> {
        if let Some(fd) = self.fd.take() {
            call(py, Some(&self.path), || shoal::shoal_closedir(fd))?;
        }
        Ok(())
    }
}

impl Drop for Listing {
    fn drop(&mut self) {
        // Closing a listing sends nothing: no reason to release the GIL.
        if let Some(fd) = self.fd.take() {
            shoal::shoal_closedir(fd);
        }
    }
}

/// Opens a listing of directory `path`; `attrs` fetches every entry's
/// attributes with it (scandir), otherwise names only (listdir).
#[pyfunction]
fn listing(py: Python<'_>, path: &str, attrs: bool) -> PyResult<Listing> {
    let p = c_string(path)?;
    // SAFETY: the path outlives the call.
    let fd = call(py, Some(path), || unsafe {
        shoal::shoal_opendir(p.as_ptr())
    })?;
    Ok(Listing {
        fd: Some(fd),
        path: path.to_string(),
        attrs,
        ready: VecDeque::new(),
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Listing>()?;
    m.add_function(wrap_pyfunction!(listing, m)?)?;
    Ok(())
}
