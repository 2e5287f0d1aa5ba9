//! Paths as bytes: lexical normalisation and which prefix (Shoal mount point
//! or `SHOAL_PREFIX`) a path is under. Nothing here touches the file system,
//! and the common case (a path under no prefix) allocates nothing.

/// Whether an absolute path has a `.`, `..` or empty component, a trailing
/// slash, or is otherwise not already in the form [`normalize`] gives.
pub fn needs_normalizing(p: &[u8]) -> bool {
    if p == b"/" {
        return false;
    }
    if p.ends_with(b"/") {
        return true;
    }
    p.split(|&b| b == b'/')
        .skip(1)
        .any(|c| c.is_empty() || c == b"." || c == b"..")
}

/// `p` (absolute) with `.` and empty components dropped and each `..` taking
/// away the component before it (lexically, as libshoal does); "/" for the
/// root. No trailing slash.
pub fn normalize(p: &[u8]) -> Vec<u8> {
    let mut out: Vec<u8> = Vec::with_capacity(p.len());
    for c in p.split(|&b| b == b'/') {
        match c {
            b"" | b"." => {}
            b".." => {
                let cut = out.iter().rposition(|&b| b == b'/').unwrap_or(0);
                out.truncate(cut);
            }
            _ => {
                out.push(b'/');
                out.extend_from_slice(c);
            }
        }
    }
    if out.is_empty() {
        out.push(b'/');
    }
    out
}

/// `rel` taken from directory `base` (absolute), normalised.
pub fn join(base: &[u8], rel: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(base.len() + 1 + rel.len());
    p.extend_from_slice(base);
    p.push(b'/');
    p.extend_from_slice(rel);
    normalize(&p)
}

/// Whether relative path `rel` has a `..` component. Taken from a directory
/// of the kernel's, such a path is left to the kernel: a symlink before the
/// `..` would make the lexical answer wrong.
pub fn has_dotdot(rel: &[u8]) -> bool {
    rel.split(|&b| b == b'/').any(|c| c == b"..")
}

/// If `p` (normalised) is `prefix` or under it, the rest: "" or "/...".
pub fn under<'p>(p: &'p [u8], prefix: &[u8]) -> Option<&'p [u8]> {
    if prefix == b"/" {
        return Some(if p == b"/" { b"" } else { p });
    }
    let rest = p.strip_prefix(prefix)?;
    (rest.is_empty() || rest.starts_with(b"/")).then_some(rest)
}

/// The Shoal path of `rest` (what [`under`] returned): "/" for the prefix
/// itself; a trailing slash of the caller's path stays (libshoal then
/// insists on a directory).
pub fn shoal_path(rest: &[u8], trailing_slash: bool) -> Vec<u8> {
    let rest: &[u8] = if rest.is_empty() { b"/" } else { rest };
    let slash = trailing_slash && rest.len() > 1;
    // Exactly the room of the C string it becomes (a CString shrinks to
    // fit): one allocation per path, not two.
    let mut s = Vec::with_capacity(rest.len() + usize::from(slash) + 1);
    s.extend_from_slice(rest);
    if slash {
        s.push(b'/');
    }
    s
}

/// Unescapes a /proc/mounts field (space, tab, newline and backslash are
/// written as octal escapes).
pub fn unescape_mount_field(field: &str) -> Vec<u8> {
    let b = field.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 4 <= b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = b[i + 1..i + 4]
                .iter()
                .fold(0u32, |v, c| v * 8 + u32::from(c - b'0'));
            out.push(v as u8);
            i += 4;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

/// The (mount point, cluster file) of every Shoal mount in a /proc/mounts
/// text: type `fuse.shoal`, the cluster file's path as the source.
pub fn shoal_mounts(mounts: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
    mounts
        .lines()
        .filter_map(|line| {
            let mut f = line.split(' ');
            let source = f.next()?;
            let mountpoint = f.next()?;
            let fstype = f.next()?;
            (fstype == "fuse.shoal").then(|| {
                (
                    unescape_mount_field(mountpoint),
                    unescape_mount_field(source),
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_dotdot_components_only() {
        assert!(has_dotdot(b".."));
        assert!(has_dotdot(b"a/../b"));
        assert!(has_dotdot(b"a/.."));
        assert!(!has_dotdot(b"a/..b/c.."));
        assert!(!has_dotdot(b"./a"));
    }

    #[test]
    fn normalizes_lexically() {
        assert_eq!(normalize(b"/"), b"/");
        assert_eq!(normalize(b"//a//b/./c/"), b"/a/b/c");
        assert_eq!(normalize(b"/a/b/../../.."), b"/");
        assert_eq!(normalize(b"/mnt/s/../x"), b"/mnt/x");
        assert_eq!(join(b"/mnt/s/d", b"../e/./f"), b"/mnt/s/e/f");
        assert_eq!(join(b"/", b"a"), b"/a");
        assert!(needs_normalizing(b"/a/"));
        assert!(needs_normalizing(b"/a//b"));
        assert!(needs_normalizing(b"/a/./b"));
        assert!(needs_normalizing(b"/a/.."));
        assert!(!needs_normalizing(b"/a/.b/c"));
        assert!(!needs_normalizing(b"/"));
    }

    #[test]
    fn finds_the_part_under_a_prefix() {
        assert_eq!(under(b"/mnt/s", b"/mnt/s"), Some(&b""[..]));
        assert_eq!(under(b"/mnt/s/a", b"/mnt/s"), Some(&b"/a"[..]));
        assert_eq!(under(b"/mnt/shoal", b"/mnt/s"), None);
        assert_eq!(under(b"/mnt", b"/mnt/s"), None);
        assert_eq!(shoal_path(b"", true), b"/");
        assert_eq!(shoal_path(b"/d", true), b"/d/");
        assert_eq!(shoal_path(b"/d", false), b"/d");
    }

    #[test]
    fn reads_shoal_mounts_from_proc_mounts() {
        let text = "proc /proc proc rw 0 0\n\
                    /tmp/c\\040x/cluster.toml /mnt/my\\040mount fuse.shoal rw,nosuid 0 0\n\
                    /dev/fuse /mnt/other fuse.sshfs rw 0 0\n";
        assert_eq!(
            shoal_mounts(text),
            vec![(b"/mnt/my mount".to_vec(), b"/tmp/c x/cluster.toml".to_vec())]
        );
    }
}
