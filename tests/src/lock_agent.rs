//! A process that locks as a test tells it ([`Agent`]): python3 driven line
//! by line over its stdin and stdout. POSIX locks belong to a process and
//! flock locks to an open file, so each lock owner a test needs is an agent
//! of its own. Every wait is bounded: a reply by [`REPLY_TIMEOUT`], an
//! agent's life by `alarm`.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const PYTHON: &str = "/usr/bin/python3";

/// The longest an agent's reply to one command may take.
pub const REPLY_TIMEOUT: Duration = Duration::from_secs(60);

/// The agent's program. Commands, one per line; answers, one per line:
///
/// - `open PATH`: opens PATH read-write (`ok`);
/// - `lock T START LEN WAIT`: fcntl F_SETLK (WAIT 0) or F_SETLKW (WAIT 1)
///   of type T (`r`, `w`, `u`) on LEN bytes from START (0: to the end):
///   `ok` or `err ERRNO-NAME`;
/// - `getlk T START LEN`: F_GETLK: `lk T START LEN PID` (`lk u ...` if
///   nothing is in the way);
/// - `flock T WAIT`: flock(2) of type T (`r`: LOCK_SH, `w`: LOCK_EX, `u`:
///   LOCK_UN), with LOCK_NB unless WAIT is 1: `ok` or `err ERRNO-NAME`;
/// - `close`: closes the file (`ok`).
///
/// SIGUSR1 interrupts what it waits in: its handler raises, so a call the
/// kernel ended with EINTR answers `err EINTR` (Python retries an
/// interrupted call whose handler returns). Its first line is
/// `ready PID`. It ends itself after 300 s (`alarm`).
const AGENT: &str = r#"
import errno, fcntl, os, signal, struct, sys
signal.alarm(300)
class Interrupted(Exception):
    pass
def interrupted(signum, frame):
    raise Interrupted()
signal.signal(signal.SIGUSR1, interrupted)
FMT = "hhqqi4x"  # struct flock on Linux x86_64/aarch64: 32 bytes
TYPES = {"r": fcntl.F_RDLCK, "w": fcntl.F_WRLCK, "u": fcntl.F_UNLCK}
FLOCKS = {"r": fcntl.LOCK_SH, "w": fcntl.LOCK_EX, "u": fcntl.LOCK_UN}
NAMES = {v: k for k, v in TYPES.items()}
print("ready", os.getpid(), flush=True)
fd = None
for line in sys.stdin:
    cmd = line.split()
    try:
        if cmd[0] == "open":
            fd = os.open(cmd[1], os.O_RDWR)
            out = "ok"
        elif cmd[0] == "close":
            os.close(fd)
            fd = None
            out = "ok"
        elif cmd[0] == "lock":
            op = fcntl.F_SETLKW if cmd[4] == "1" else fcntl.F_SETLK
            fl = struct.pack(FMT, TYPES[cmd[1]], os.SEEK_SET, int(cmd[2]), int(cmd[3]), 0)
            fcntl.fcntl(fd, op, fl)
            out = "ok"
        elif cmd[0] == "getlk":
            fl = struct.pack(FMT, TYPES[cmd[1]], os.SEEK_SET, int(cmd[2]), int(cmd[3]), 0)
            t, _, start, length, pid = struct.unpack(FMT, fcntl.fcntl(fd, fcntl.F_GETLK, fl))
            out = "lk %s %d %d %d" % (NAMES[t], start, length, pid)
        elif cmd[0] == "read":
            out = "data " + os.pread(fd, int(cmd[1]), 0).hex()
        elif cmd[0] == "flock":
            fcntl.flock(fd, FLOCKS[cmd[1]] | (0 if cmd[2] == "1" else fcntl.LOCK_NB))
            out = "ok"
        else:
            out = "bad command " + line.strip()
    except Interrupted:
        out = "err EINTR"
    except OSError as e:
        # EDEADLK, not its alias EDEADLOCK; EAGAIN, not EWOULDBLOCK
        name = "EDEADLK" if e.errno == errno.EDEADLK else errno.errorcode.get(e.errno, str(e.errno))
        out = "err " + ("EAGAIN" if e.errno == errno.EAGAIN else name)
    print(out, flush=True)
"#;

pub struct Agent {
    name: &'static str,
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
    pub pid: u32,
}

impl Agent {
    /// An agent named `name` (for messages) with `path` open.
    pub fn open(name: &'static str, path: &Path) -> Agent {
        let mut child = Command::new(PYTHON)
            .args(["-c", AGENT])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn python3");
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut agent = Agent {
            name,
            pid: child.id(),
            child,
            stdin,
            lines,
        };
        let ready = agent.reply();
        assert_eq!(ready, format!("ready {}", agent.pid), "{name} started");
        let opened = agent.ask(&format!("open {}", path.display()));
        assert_eq!(opened, "ok", "{name} opens {}", path.display());
        agent
    }

    pub fn send(&mut self, cmd: &str) {
        writeln!(self.stdin, "{cmd}").unwrap_or_else(|e| panic!("{}: {cmd}: {e}", self.name));
        self.stdin.flush().unwrap();
    }

    /// Its next answer, within `REPLY_TIMEOUT`.
    pub fn reply(&mut self) -> String {
        match self.lines.recv_timeout(REPLY_TIMEOUT) {
            Ok(line) => line,
            Err(e) => panic!("{}: no answer within {REPLY_TIMEOUT:?}: {e}", self.name),
        }
    }

    /// Its answer if one came within `wait`.
    pub fn reply_within(&mut self, wait: Duration) -> Option<String> {
        match self.lines.recv_timeout(wait) {
            Ok(line) => Some(line),
            Err(mpsc::RecvTimeoutError::Timeout) => None,
            Err(e) => panic!("{}: {e}", self.name),
        }
    }

    pub fn ask(&mut self, cmd: &str) -> String {
        self.send(cmd);
        self.reply()
    }

    /// Sends it signal `sig`.
    pub fn signal(&self, sig: i32) {
        // SAFETY: a plain kill(2) of our own child.
        let r = unsafe { libc::kill(self.pid as libc::pid_t, sig) };
        assert_eq!(r, 0, "{}: kill {sig}", self.name);
    }

    /// SIGKILL, as a crash: the kernel closes its files, which lets its
    /// locks go.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGKILL, and whether it was gone within `within` (a process the
    /// kernel keeps in a file system request never is).
    pub fn kill_and_reap(&mut self, within: Duration) -> bool {
        let _ = self.child.kill();
        let started = std::time::Instant::now();
        while started.elapsed() < within {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        self.kill();
    }
}
