//! Calls on paths (absolute paths inside the Shoal namespace): attributes,
//! the namespace's changes, extended attributes and directory hints.

use pyo3::exceptions::PyOSError;
use pyo3::prelude::*;

use crate::calls::{c_string, call, empty_stat, sized, stat_tuple, SendPtr, StatTuple};

/// stat(2), or lstat(2) without `follow`.
#[pyfunction]
fn stat(py: Python<'_>, path: &str, follow: bool) -> PyResult<StatTuple> {
    let p = c_string(path)?;
    let mut st = empty_stat();
    let out = SendPtr((&mut st as *mut libc::stat).cast());
    // SAFETY: the path and `st` outlive the call.
    call(py, Some(path), move || unsafe {
        let out = out.get().cast();
        match follow {
            true => shoal::shoal_stat(p.as_ptr(), out),
            false => shoal::shoal_lstat(p.as_ptr(), out),
        }
    })?;
    Ok(stat_tuple(&st))
}

#[pyfunction]
fn mkdir(py: Python<'_>, path: &str, mode: u32) -> PyResult<()> {
    let p = c_string(path)?;
    // SAFETY: the path outlives the call.
    call(py, Some(path), || unsafe {
        shoal::shoal_mkdir(p.as_ptr(), mode)
    })?;
    Ok(())
}

#[pyfunction]
fn rmdir(py: Python<'_>, path: &str) -> PyResult<()> {
    let p = c_string(path)?;
    // SAFETY: the path outlives the call.
    call(py, Some(path), || unsafe { shoal::shoal_rmdir(p.as_ptr()) })?;
    Ok(())
}

#[pyfunction]
fn unlink(py: Python<'_>, path: &str) -> PyResult<()> {
    let p = c_string(path)?;
    // SAFETY: the path outlives the call.
    call(py, Some(path), || unsafe {
        shoal::shoal_unlink(p.as_ptr())
    })?;
    Ok(())
}

/// rename(2): replaces `dst` if it exists (as os.replace).
#[pyfunction]
fn rename(py: Python<'_>, src: &str, dst: &str) -> PyResult<()> {
    let (s, d) = (c_string(src)?, c_string(dst)?);
    // SAFETY: both paths outlive the call.
    let done = crate::calls::released(py, || unsafe {
        shoal::shoal_rename(s.as_ptr(), d.as_ptr())
    });
    // OSError's fifth argument names the second path, as os.rename's do.
    done.map_err(|e| {
        PyOSError::new_err((e.errno, e.message, src.to_string(), 0, dst.to_string()))
    })?;
    Ok(())
}

#[pyfunction]
fn truncate(py: Python<'_>, path: &str, length: i64) -> PyResult<()> {
    let p = c_string(path)?;
    // SAFETY: the path outlives the call.
    call(py, Some(path), || unsafe {
        shoal::shoal_truncate(p.as_ptr(), length)
    })?;
    Ok(())
}

/// chmod(2) (a symlink followed).
#[pyfunction]
fn chmod(py: Python<'_>, path: &str, mode: u32) -> PyResult<()> {
    let p = c_string(path)?;
    // SAFETY: the path outlives the call.
    call(py, Some(path), || unsafe {
        shoal::shoal_chmod(p.as_ptr(), mode)
    })?;
    Ok(())
}

/// symlink(2): `path` made a symlink to `target`.
#[pyfunction]
fn symlink(py: Python<'_>, target: &str, path: &str) -> PyResult<()> {
    let (t, p) = (c_string(target)?, c_string(path)?);
    // SAFETY: both strings outlive the call.
    call(py, Some(path), || unsafe {
        shoal::shoal_symlink(t.as_ptr(), p.as_ptr())
    })?;
    Ok(())
}

/// readlink(2): the whole target (libshoal truncates to the buffer, so a
/// target that fills it is read again with a larger one).
#[pyfunction]
fn readlink(py: Python<'_>, path: &str) -> PyResult<String> {
    let p = c_string(path)?;
    let mut size = 4096;
    loop {
        let mut buf = vec![0u8; size];
        let ptr = SendPtr(buf.as_mut_ptr());
        // SAFETY: `buf` holds `size` bytes and outlives the call.
        let n = call(py, Some(path), || unsafe {
            shoal::shoal_readlink(p.as_ptr(), ptr.get().cast(), size)
        })? as usize;
        if n < size {
            buf.truncate(n);
            return Ok(String::from_utf8_lossy(&buf).into_owned());
        }
        size *= 2;
    }
}

/// The value of extended attribute `name` (getxattr(2), lgetxattr(2)
/// without `follow`).
#[pyfunction]
fn getxattr(py: Python<'_>, path: &str, name: &str, follow: bool) -> PyResult<Vec<u8>> {
    let (p, n) = (c_string(path)?, c_string(name)?);
    let (p, n) = (&p, &n);
    sized(py, path, move |buf, size| {
        // SAFETY: the strings outlive the call; `sized` passes a buffer of
        // `size` bytes (or none with size 0).
        unsafe {
            match follow {
                true => shoal::shoal_getxattr(p.as_ptr(), n.as_ptr(), buf, size),
                false => shoal::shoal_lgetxattr(p.as_ptr(), n.as_ptr(), buf, size),
            }
        }
    })
}

/// setxattr(2) with its flags (XATTR_CREATE, XATTR_REPLACE).
#[pyfunction]
fn setxattr(
    py: Python<'_>,
    path: &str,
    name: &str,
    value: Vec<u8>,
    flags: i32,
    follow: bool,
) -> PyResult<()> {
    let (p, n) = (c_string(path)?, c_string(name)?);
    // SAFETY: the strings and the value outlive the call.
    call(py, Some(path), || unsafe {
        let v = value.as_ptr().cast();
        match follow {
            true => shoal::shoal_setxattr(p.as_ptr(), n.as_ptr(), v, value.len(), flags),
            false => shoal::shoal_lsetxattr(p.as_ptr(), n.as_ptr(), v, value.len(), flags),
        }
    })?;
    Ok(())
}

/// The names of the extended attributes of `path`.
#[pyfunction]
fn listxattr(py: Python<'_>, path: &str, follow: bool) -> PyResult<Vec<String>> {
    let p = c_string(path)?;
    let p = &p;
    let list = sized(py, path, move |buf, size| {
        // SAFETY: as in getxattr.
        unsafe {
            match follow {
                true => shoal::shoal_listxattr(p.as_ptr(), buf.cast(), size),
                false => shoal::shoal_llistxattr(p.as_ptr(), buf.cast(), size),
            }
        }
    })?;
    // NUL-terminated names, one after another.
    Ok(list
        .split(|b| *b == 0)
        .filter(|n| !n.is_empty())
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect())
}

#[pyfunction]
fn removexattr(py: Python<'_>, path: &str, name: &str, follow: bool) -> PyResult<()> {
    let (p, n) = (c_string(path)?, c_string(name)?);
    // SAFETY: the strings outlive the call.
    call(py, Some(path), || unsafe {
        match follow {
            true => shoal::shoal_removexattr(p.as_ptr(), n.as_ptr()),
            false => shoal::shoal_lremovexattr(p.as_ptr(), n.as_ptr()),
        }
    })?;
    Ok(())
}

/// Where file `path`'s bytes live: (strip size, datafiles it is striped
/// over, whether it has no metafile), as the directory hints made it.
#[pyfunction]
fn layout(py: Python<'_>, path: &str) -> PyResult<(u64, u32, bool)> {
    let p = c_string(path)?;
    let mut out = shoal::shoal_layout {
        strip_size: 0,
        num_datafiles: 0,
        no_metafile: 0,
    };
    let ptr = SendPtr((&mut out as *mut shoal::shoal_layout).cast());
    // SAFETY: the path and `out` outlive the call.
    call(py, Some(path), move || unsafe {
        shoal::shoal_get_layout(p.as_ptr(), ptr.get().cast())
    })?;
    Ok((out.strip_size, out.num_datafiles, out.no_metafile != 0))
}

/// Text `sized` read (its length counts no NUL, so none is left).
fn text(bytes: Vec<u8>) -> String {
    String::from_utf8_lossy(&bytes).into_owned()
}

/// The hints set on directory `dir` as "hint=value" lines.
#[pyfunction]
fn hint_list(py: Python<'_>, dir: &str) -> PyResult<String> {
    let d = c_string(dir)?;
    let d = &d;
    // SAFETY: as in getxattr.
    let listed = sized(py, dir, move |buf, size| unsafe {
        shoal::shoal_hint_list(d.as_ptr(), buf.cast(), size)
    })?;
    Ok(text(listed))
}

/// The value of hint `hint` of directory `dir`; ENODATA if not set.
#[pyfunction]
fn hint_get(py: Python<'_>, dir: &str, hint: &str) -> PyResult<String> {
    let (d, h) = (c_string(dir)?, c_string(hint)?);
    let (d, h) = (&d, &h);
    // SAFETY: as in getxattr.
    let value = sized(py, dir, move |buf, size| unsafe {
        shoal::shoal_hint_get(d.as_ptr(), h.as_ptr(), buf.cast(), size)
    })?;
    Ok(text(value))
}

/// Sets hint `hint` of directory `dir` to `value`, or clears it with None.
#[pyfunction]
#[pyo3(signature = (dir, hint, value))]
fn hint_set(py: Python<'_>, dir: &str, hint: &str, value: Option<&str>) -> PyResult<()> {
    let (d, h) = (c_string(dir)?, c_string(hint)?);
    let v = value.map(c_string).transpose()?;
    // SAFETY: the strings outlive the call.
    call(py, Some(dir), || unsafe {
        match &v {
            Some(v) => shoal::shoal_hint_set(d.as_ptr(), h.as_ptr(), v.as_ptr()),
            None => shoal::shoal_hint_unset(d.as_ptr(), h.as_ptr()),
        }
    })?;
    Ok(())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(stat, m)?)?;
    m.add_function(wrap_pyfunction!(mkdir, m)?)?;
    m.add_function(wrap_pyfunction!(rmdir, m)?)?;
    m.add_function(wrap_pyfunction!(unlink, m)?)?;
    m.add_function(wrap_pyfunction!(rename, m)?)?;
    m.add_function(wrap_pyfunction!(truncate, m)?)?;
    m.add_function(wrap_pyfunction!(chmod, m)?)?;
    m.add_function(wrap_pyfunction!(symlink, m)?)?;
    m.add_function(wrap_pyfunction!(readlink, m)?)?;
    m.add_function(wrap_pyfunction!(getxattr, m)?)?;
    m.add_function(wrap_pyfunction!(setxattr, m)?)?;
    m.add_function(wrap_pyfunction!(listxattr, m)?)?;
    m.add_function(wrap_pyfunction!(removexattr, m)?)?;
    m.add_function(wrap_pyfunction!(layout, m)?)?;
    m.add_function(wrap_pyfunction!(hint_list, m)?)?;
    m.add_function(wrap_pyfunction!(hint_get, m)?)?;
    m.add_function(wrap_pyfunction!(hint_set, m)?)?;
    Ok(())
}
