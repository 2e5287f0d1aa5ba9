//! Raising the kernel's readahead window for the mount.
//!
//! The FUSE init reply can only lower readahead below the kernel's default
//! (128 KiB), which would cut every large sequential read into 128 KiB
//! requests. After mounting, root may raise it through the mount's backing
//! device info, `/sys/class/bdi/<major>:<minor>/read_ahead_kb`, so that
//! sequential reads arrive as requests as large as one strip. Best effort:
//! without the permission the mount works with the default window.

use std::path::Path;

/// The readahead window asked for, in KiB: four default strips, sent as
/// requests of at most one strip (max_pages), so several are in flight to
/// different servers. Measured against one strip (1024) on one mount,
/// alternating, 3 rounds, 512 MiB files after dropping the page cache: one
/// `dd bs=1M` reader 1,692-1,856 MiB/s against 1,449-1,575; four readers no
/// different (`bench/results/changes.md`, with an ABBA check:
/// one reader 1.12x median over 6 rounds). 8 and 16 MiB did no better.
pub const READ_AHEAD_KB: u32 = 4096;

/// Sets the readahead of the FUSE mount at `mountpoint`.
pub fn raise(mountpoint: &Path, kb: u32) {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return;
    };
    let Some(dev) = device_of(&info, mountpoint) else {
        tracing::debug!("no mountinfo line for {}", mountpoint.display());
        return;
    };
    let knob = format!("/sys/class/bdi/{dev}/read_ahead_kb");
    match std::fs::write(&knob, kb.to_string()) {
        Ok(()) => tracing::debug!("readahead of {} set to {kb} KiB", mountpoint.display()),
        Err(e) => tracing::debug!("could not set {knob}: {e}"),
    }
}

/// The `major:minor` of the last mount on `mountpoint` listed in `mountinfo`
/// (the last one is the most recent, the one on top).
fn device_of(mountinfo: &str, mountpoint: &Path) -> Option<String> {
    let want = mountpoint.to_str()?;
    mountinfo
        .lines()
        .filter_map(|line| {
            let mut f = line.split(' ');
            let dev = f.nth(2)?;
            let point = f.nth(1)?;
            let fstype = line.split(" - ").nth(1)?.split(' ').next()?;
            (unescape(point) == want && fstype.starts_with("fuse")).then(|| dev.to_string())
        })
        .next_back()
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let octal = b
            .get(i + 1..i + 4)
            .filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (b[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_topmost_fuse_mount() {
        let info = "22 1 8:1 / / rw - ext4 /dev/sda1 rw\n\
                    50 22 0:45 / /mnt/a\\040b rw,nosuid - fuse.shoal /c.toml rw\n\
                    51 22 0:46 / /mnt/c rw - tmpfs tmpfs rw\n\
                    52 50 0:47 / /mnt/a\\040b rw - fuse.shoal /d.toml rw\n";
        assert_eq!(
            device_of(info, Path::new("/mnt/a b")).as_deref(),
            Some("0:47")
        );
        assert_eq!(device_of(info, Path::new("/mnt/c")), None);
        assert_eq!(device_of(info, Path::new("/nope")), None);
    }

    #[test]
    fn unescapes_octal() {
        assert_eq!(unescape("a\\040b\\134c\\9"), "a b\\c\\9");
    }
}
