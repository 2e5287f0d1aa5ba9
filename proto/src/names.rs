//! Validation of directory entry names and Shoal paths.

use crate::error::{Errno, Result, ShoalError};

/// Longest name of one directory entry, in bytes (as on Linux).
pub const NAME_MAX: usize = 255;
/// Longest path accepted by the client, in bytes (as on Linux).
pub const PATH_MAX: usize = 4096;

/// Checks one directory entry name: not empty, not `.` or `..`, no `/` or NUL,
/// at most [`NAME_MAX`] bytes.
pub fn check_name(name: &str) -> Result<()> {
    if name.len() > NAME_MAX {
        return Err(ShoalError::new(
            Errno::ENAMETOOLONG,
            format!("name of {} bytes is longer than {NAME_MAX}", name.len()),
        ));
    }
    if name.is_empty() || name == "." || name == ".." {
        return Err(ShoalError::invalid(format!("invalid entry name {name:?}")));
    }
    if name.bytes().any(|b| b == b'/' || b == 0) {
        return Err(ShoalError::invalid(format!(
            "entry name {name:?} contains '/' or NUL"
        )));
    }
    Ok(())
}

/// Splits an absolute Shoal path into its components, resolving `.` and `..`
/// lexically (`..` at the root stays at the root, as POSIX says).
pub fn split_path(path: &str) -> Result<Vec<&str>> {
    if path.len() > PATH_MAX {
        return Err(ShoalError::new(
            Errno::ENAMETOOLONG,
            format!("path of {} bytes is longer than {PATH_MAX}", path.len()),
        ));
    }
    if !path.starts_with('/') {
        return Err(ShoalError::invalid(format!(
            "Shoal path {path:?} must start with '/'"
        )));
    }
    if path.contains('\0') {
        return Err(ShoalError::invalid("path contains NUL"));
    }
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            name => {
                check_name(name)?;
                parts.push(name);
            }
        }
    }
    Ok(parts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_checked() {
        assert!(check_name("a.txt").is_ok());
        assert_eq!(
            check_name(&"x".repeat(256)).unwrap_err().errno,
            Errno::ENAMETOOLONG
        );
        assert!(check_name(&"x".repeat(255)).is_ok());
        for bad in ["", ".", "..", "a/b", "a\0b"] {
            assert_eq!(check_name(bad).unwrap_err().errno, Errno::EINVAL, "{bad:?}");
        }
    }

    #[test]
    fn paths_resolve_dots_without_escaping_root() {
        assert_eq!(split_path("/").unwrap(), Vec::<&str>::new());
        assert_eq!(split_path("/a//b/./c/").unwrap(), vec!["a", "b", "c"]);
        assert_eq!(split_path("/a/../../b").unwrap(), vec!["b"]);
        assert!(split_path("relative").is_err());
        assert!(split_path("/a\0b").is_err());
    }
}
