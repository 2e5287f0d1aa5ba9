//! Live Shoal mounts, read from /proc/mounts. A Shoal mount has type
//! `fuse.shoal` and its cluster file's absolute path as its source, which is
//! how a path under a mount leads back to its cluster.

use std::path::{Path, PathBuf};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    pub cluster_file: PathBuf,
    pub mountpoint: PathBuf,
}

/// /proc/mounts escapes space, tab, newline and backslash as octal.
fn unescape(field: &str) -> String {
    let mut out = String::new();
    let mut chars = field.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\\' {
            let code: String = chars.by_ref().take(3).collect();
            if let Ok(b) = u8::from_str_radix(&code, 8) {
                out.push(b as char);
                continue;
            }
            out.push('\\');
            out.push_str(&code);
        } else {
            out.push(c);
        }
    }
    out
}

pub(crate) fn parse(text: &str) -> Vec<Mount> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.split(' ');
            let source = f.next()?;
            let mountpoint = f.next()?;
            let fstype = f.next()?;
            (fstype == "fuse.shoal").then(|| Mount {
                cluster_file: PathBuf::from(unescape(source)),
                mountpoint: PathBuf::from(unescape(mountpoint)),
            })
        })
        .collect()
}

pub(crate) fn list() -> Vec<Mount> {
    std::fs::read_to_string("/proc/mounts")
        .map(|t| parse(&t))
        .unwrap_or_default()
}

/// Whether a Shoal file system is mounted exactly on `dir`.
pub fn is_mounted(dir: &Path) -> bool {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    list().iter().any(|m| m.mountpoint == dir)
}

/// The mount holding `path` (longest matching mount point) and the Shoal path
/// of `path` inside it.
pub fn containing(path: &Path) -> Option<(Mount, String)> {
    let abs = std::path::absolute(path).ok()?;
    list()
        .into_iter()
        .filter(|m| abs.starts_with(&m.mountpoint))
        .max_by_key(|m| m.mountpoint.as_os_str().len())
        .map(|m| {
            let rest = abs.strip_prefix(&m.mountpoint).unwrap_or(Path::new(""));
            let shoal = format!("/{}", rest.to_string_lossy());
            (m, shoal)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_shoal_mounts_and_unescapes_paths() {
        let text = "proc /proc proc rw 0 0\n\
                    /data/my\\040cluster.toml /mnt/s\\040x fuse.shoal rw,user_id=0 0 0\n\
                    other /mnt/o fuse.sshfs rw 0 0\n";
        let m = parse(text);
        assert_eq!(
            m,
            vec![Mount {
                cluster_file: "/data/my cluster.toml".into(),
                mountpoint: "/mnt/s x".into()
            }]
        );
    }
}
