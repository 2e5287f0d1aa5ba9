//! fopen's mode strings.

use libc::c_int;

/// open(2) flags of an fopen mode ("r", "w+", "ae", "wx", ...).
pub fn mode_flags(mode: &[u8]) -> Option<c_int> {
    let plus = mode.contains(&b'+');
    let mut flags = match (mode.first()?, plus) {
        (b'r', false) => libc::O_RDONLY,
        (b'r', true) => libc::O_RDWR,
        (b'w', false) => libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC,
        (b'w', true) => libc::O_RDWR | libc::O_CREAT | libc::O_TRUNC,
        (b'a', false) => libc::O_WRONLY | libc::O_CREAT | libc::O_APPEND,
        (b'a', true) => libc::O_RDWR | libc::O_CREAT | libc::O_APPEND,
        _ => return None,
    };
    // glibc reads flag letters after the first up to a ','.
    for &c in mode[1..].iter().take_while(|&&c| c != b',') {
        match c {
            b'x' => flags |= libc::O_EXCL,
            b'e' => flags |= libc::O_CLOEXEC,
            _ => {}
        }
    }
    Some(flags)
}

#[cfg(test)]
mod tests {
    use super::mode_flags;

    #[test]
    fn fopen_modes() {
        assert_eq!(mode_flags(b"r"), Some(libc::O_RDONLY));
        assert_eq!(mode_flags(b"rb+"), Some(libc::O_RDWR));
        assert_eq!(
            mode_flags(b"we"),
            Some(libc::O_WRONLY | libc::O_CREAT | libc::O_TRUNC | libc::O_CLOEXEC)
        );
        assert_eq!(
            mode_flags(b"a+x"),
            Some(libc::O_RDWR | libc::O_CREAT | libc::O_APPEND | libc::O_EXCL)
        );
        assert_eq!(mode_flags(b"z"), None);
    }
}
