//! `fsop`: one file-system operation per line of standard input, done with
//! ordinary system calls, its outcome one line on standard output. Tests run
//! it under `setpriv` to act as another user through a FUSE mount, so that
//! one long-lived process per user serves a whole test instead of a process
//! per operation.
//!
//! Requests are tab-separated: `mkdir P`, `create P` (O_CREAT|O_EXCL),
//! `unlink P`, `rmdir P`, `rename FROM TO`, `link FROM TO`, `write P OFFSET
//! HEX`, `truncate P SIZE`, `read P OFFSET LEN`, `stat P`, `readdir P`.
//! Replies: `ok`, `wrote N`, `data HEX`, `stat KIND SIZE`, `names
//! NAME/KIND...` (sorted), or `err ERRNO`. New objects get modes 0777 and
//! 0666 (the umask is 0), so every user may use them.

use std::fs::{self, OpenOptions};
use std::io::{self, BufRead, Write};
use std::os::unix::fs::{FileExt, FileTypeExt, OpenOptionsExt};

fn main() {
    // SAFETY: umask has no memory effects.
    unsafe { libc::umask(0) };
    let stdin = io::stdin();
    let mut out = io::stdout().lock();
    for line in stdin.lock().lines() {
        let Ok(line) = line else { break };
        let args: Vec<&str> = line.split('\t').collect();
        let reply = match run(&args) {
            Ok(r) => r,
            Err(e) => format!("err {}", e.raw_os_error().unwrap_or(libc::EIO)),
        };
        if writeln!(out, "{reply}").and_then(|_| out.flush()).is_err() {
            break;
        }
    }
}

fn kind(t: fs::FileType) -> &'static str {
    if t.is_dir() {
        "dir"
    } else if t.is_file() {
        "file"
    } else if t.is_symlink() {
        "symlink"
    } else if t.is_fifo() || t.is_socket() || t.is_char_device() || t.is_block_device() {
        "special"
    } else {
        "unknown"
    }
}

fn hex(data: &[u8]) -> String {
    data.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> io::Result<Vec<u8>> {
    (0..s.len())
        .step_by(2)
        .map(|i| {
            s.get(i..i + 2)
                .and_then(|b| u8::from_str_radix(b, 16).ok())
                .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))
        })
        .collect()
}

fn number(s: &str) -> io::Result<u64> {
    s.parse()
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

fn run(args: &[&str]) -> io::Result<String> {
    let ok = |()| "ok".to_string();
    match args {
        ["mkdir", p] => fs::create_dir(p).map(ok),
        ["create", p] => OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o666)
            .open(p)
            .map(|_| "ok".to_string()),
        ["unlink", p] => fs::remove_file(p).map(ok),
        ["rmdir", p] => fs::remove_dir(p).map(ok),
        ["rename", from, to] => fs::rename(from, to).map(ok),
        ["link", from, to] => fs::hard_link(from, to).map(ok),
        ["write", p, offset, data] => {
            let data = unhex(data)?;
            let f = OpenOptions::new().write(true).open(p)?;
            f.write_all_at(&data, number(offset)?)?;
            Ok(format!("wrote {}", data.len()))
        }
        ["truncate", p, size] => OpenOptions::new()
            .write(true)
            .open(p)?
            .set_len(number(size)?)
            .map(ok),
        ["read", p, offset, len] => {
            let f = fs::File::open(p)?;
            let mut buf = vec![0u8; number(len)? as usize];
            let (mut at, offset) = (0, number(offset)?);
            while at < buf.len() {
                match f.read_at(&mut buf[at..], offset + at as u64)? {
                    0 => break,
                    n => at += n,
                }
            }
            buf.truncate(at);
            Ok(format!("data {}", hex(&buf)))
        }
        ["stat", p] => {
            let m = fs::symlink_metadata(p)?;
            Ok(format!("stat {} {}", kind(m.file_type()), m.len()))
        }
        ["readdir", p] => {
            let mut names = fs::read_dir(p)?
                .map(|e| {
                    let e = e?;
                    Ok(format!(
                        "{}/{}",
                        e.file_name().to_string_lossy(),
                        kind(e.file_type()?)
                    ))
                })
                .collect::<io::Result<Vec<String>>>()?;
            names.sort();
            Ok(format!("names {}", names.join(" ")))
        }
        _ => Err(io::Error::from_raw_os_error(libc::EINVAL)),
    }
}
