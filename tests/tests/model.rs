//! Model test: random sequences of namespace and I/O operations run against a
//! real cluster (through the native client) and against an in-memory tree of
//! directories and byte vectors; every result, error number, byte read and
//! size must agree, and so must the whole tree at the end of each case.
//!
//! The names come from a tiny pool ("a", "b", "c", depth at most 3) so that
//! operations collide: creating what exists, removing what is missing or not
//! empty, renaming onto files, directories and into a directory's own subtree.
//! Writes cross the 4096-byte strip boundaries, leave holes and now and then
//! grow a datafile past `inline_max`, so its bytes move from the KV store to a
//! local file.
//!
//! A second test runs the same operations as several users through two
//! FUSE mounts and two native clients of one cluster (`Actor`): results must
//! agree with the model exactly while one client (a mount, or a native
//! client) does one operation after another, whichever user asks, and after
//! the cache TTL when the next operation comes from another client. A change
//! made through a client must be seen by every user of that client at once.
//!
//! `PROPTEST_CASES=n` runs more cases than the default 24 (12 for the test of
//! several clients).

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use shoal_client::{Client, Cred, Errno, FileKind, ShoalError};
use shoal_proto::handle::ROOT;
use shoal_tests::{Cluster, SharedMount};

const STRIP: u64 = 4096;
/// Bytes a datafile keeps inline; with 3 datafiles, files past ~48 KiB move to
/// local files.
const INLINE_MAX: u64 = 16384;
const NAMES: [&str; 3] = ["a", "b", "c"];
/// Guards against a hung request; never an assertion about speed.
const OP_TIMEOUT: Duration = Duration::from_secs(30);

type Path = Vec<&'static str>;

/// How a generated operation names its object. Most pick something that
/// exists in the model at that moment (the n-th node, file or directory, in
/// tree order), so operations hit real objects instead of failing with ENOENT;
/// `Fixed` names any path, existing or not.
#[derive(Clone, Debug)]
enum Sel {
    Fixed(Path),
    /// The n-th file or directory.
    Node(u8),
    /// The n-th file (or node, if there is no file).
    File(u8),
    /// The n-th directory (or node, if there is no directory).
    Dir(u8),
    /// A name in the n-th directory of depth at most 2 (the case's own
    /// directory included).
    Child(u8, &'static str),
    /// Another name next to the n-th node.
    Sibling(u8, &'static str),
    /// A path below the n-th node (into a directory's own subtree).
    Below(u8, Vec<&'static str>),
    /// The case's own directory.
    Top,
}

#[derive(Clone)]
enum Op<P> {
    Mkdir(P),
    Create(P),
    Unlink(P),
    Rmdir(P),
    Rename(P, P),
    Write {
        path: P,
        offset: u64,
        len: usize,
        seed: u8,
    },
    Truncate(P, u64),
    Read(P, u64, usize),
    Stat(P),
    Readdir(P),
}

impl<P> Op<P> {
    /// Whether the operation changes the tree (when it succeeds).
    fn changes(&self) -> bool {
        !matches!(self, Op::Read(..) | Op::Stat(_) | Op::Readdir(_))
    }

    fn map<Q>(&self, mut f: impl FnMut(&P) -> Q) -> Op<Q> {
        match self {
            Op::Mkdir(p) => Op::Mkdir(f(p)),
            Op::Create(p) => Op::Create(f(p)),
            Op::Unlink(p) => Op::Unlink(f(p)),
            Op::Rmdir(p) => Op::Rmdir(f(p)),
            Op::Rename(a, b) => {
                let a = f(a);
                Op::Rename(a, f(b))
            }
            Op::Write {
                path,
                offset,
                len,
                seed,
            } => Op::Write {
                path: f(path),
                offset: *offset,
                len: *len,
                seed: *seed,
            },
            Op::Truncate(p, size) => Op::Truncate(f(p), *size),
            Op::Read(p, offset, len) => Op::Read(f(p), *offset, *len),
            Op::Stat(p) => Op::Stat(f(p)),
            Op::Readdir(p) => Op::Readdir(f(p)),
        }
    }
}

fn show(p: &Path) -> String {
    if p.is_empty() {
        ".".to_string()
    } else {
        p.join("/")
    }
}

impl<P: fmt::Debug> fmt::Debug for Op<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Mkdir(p) => write!(f, "mkdir {p:?}"),
            Op::Create(p) => write!(f, "create {p:?}"),
            Op::Unlink(p) => write!(f, "unlink {p:?}"),
            Op::Rmdir(p) => write!(f, "rmdir {p:?}"),
            Op::Rename(a, b) => write!(f, "rename {a:?} {b:?}"),
            Op::Write {
                path,
                offset,
                len,
                seed,
            } => write!(f, "write {path:?} @{offset}+{len} seed {seed}"),
            Op::Truncate(p, size) => write!(f, "truncate {p:?} {size}"),
            Op::Read(p, offset, len) => write!(f, "read {p:?} @{offset}+{len}"),
            Op::Stat(p) => write!(f, "stat {p:?}"),
            Op::Readdir(p) => write!(f, "readdir {p:?}"),
        }
    }
}

/// A concrete path, printed as `a/b` (`.` for the case's directory).
#[derive(Clone, PartialEq, Eq)]
struct Concrete(Path);

impl fmt::Debug for Concrete {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&show(&self.0))
    }
}

/// The bytes a write puts at `offset`: never zero, so holes stand out, and
/// different for every seed and position.
fn pattern(seed: u8, offset: u64, len: usize) -> Vec<u8> {
    (0..len as u64)
        .map(|i| (((offset + i) * 7 + seed as u64 * 13) % 251 + 1) as u8)
        .collect()
}

// ---------------------------------------------------------------- strategies

fn name() -> impl Strategy<Value = &'static str> {
    prop::sample::select(&NAMES[..])
}

/// A path of 1 to 3 names, shallow ones more often.
fn path() -> impl Strategy<Value = Path> {
    prop_oneof![
        2 => prop::collection::vec(name(), 1),
        3 => prop::collection::vec(name(), 2),
        1 => prop::collection::vec(name(), 3),
    ]
}

fn fixed() -> impl Strategy<Value = Sel> {
    path().prop_map(Sel::Fixed)
}

fn node() -> impl Strategy<Value = Sel> {
    any::<u8>().prop_map(Sel::Node)
}

fn file() -> impl Strategy<Value = Sel> {
    any::<u8>().prop_map(Sel::File)
}

fn dir() -> impl Strategy<Value = Sel> {
    any::<u8>().prop_map(Sel::Dir)
}

fn child() -> impl Strategy<Value = Sel> {
    (any::<u8>(), name()).prop_map(|(i, n)| Sel::Child(i, n))
}

/// Where a new object goes: mostly into an existing directory.
fn new_place() -> impl Strategy<Value = Sel> {
    prop_oneof![4 => child(), 1 => node(), 1 => fixed()]
}

/// What an operation on an existing object names: usually one that exists.
fn existing() -> impl Strategy<Value = Sel> {
    prop_oneof![4 => node(), 1 => fixed()]
}

/// What an I/O operation names: usually a file.
fn existing_file() -> impl Strategy<Value = Sel> {
    prop_oneof![8 => file(), 1 => node(), 1 => fixed()]
}

/// What stat and readdir name: anything, the case's directory included.
fn anything() -> impl Strategy<Value = Sel> {
    prop_oneof![1 => Just(Sel::Top), 4 => node(), 1 => child(), 1 => fixed()]
}

/// Offsets near strip boundaries, anywhere below 64 KiB, and now and then
/// beyond, where datafiles outgrow `inline_max`.
fn offset() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => (0u64..20, -2i64..=2).prop_map(|(k, d)| (k as i64 * STRIP as i64 + d).max(0) as u64),
        3 => 0u64..65536,
        1 => 65536u64..131072,
    ]
}

fn length() -> impl Strategy<Value = usize> {
    prop_oneof![
        2 => 1usize..16,
        3 => (1usize..5, -2isize..=2).prop_map(|(k, d)| (k as isize * STRIP as isize + d) as usize),
        3 => 1usize..20000,
    ]
}

fn rename() -> impl Strategy<Value = Op<Sel>> {
    prop_oneof![
        // Onto anything: new names, files, directories, itself.
        3 => (existing(), prop_oneof![2 => child(), 2 => node(), 1 => fixed()])
            .prop_map(|(a, b)| Op::Rename(a, b)),
        // A directory onto a directory (empty or not, maybe its ancestor).
        1 => (dir(), dir()).prop_map(|(a, b)| Op::Rename(a, b)),
        // Within one directory.
        2 => (any::<u8>(), name()).prop_map(|(i, n)| Op::Rename(Sel::Node(i), Sel::Sibling(i, n))),
        // Into its own subtree.
        1 => (any::<u8>(), prop::collection::vec(name(), 1..=2))
            .prop_map(|(i, p)| Op::Rename(Sel::Node(i), Sel::Below(i, p))),
    ]
}

fn op() -> impl Strategy<Value = Op<Sel>> {
    prop_oneof![
        3 => new_place().prop_map(Op::Mkdir),
        3 => new_place().prop_map(Op::Create),
        2 => existing().prop_map(Op::Unlink),
        2 => prop_oneof![2 => dir(), 1 => existing()].prop_map(Op::Rmdir),
        4 => rename(),
        6 => (existing_file(), offset(), length(), any::<u8>()).prop_map(
            |(path, offset, len, seed)| Op::Write {
                path,
                offset,
                len,
                seed
            }
        ),
        2 => (existing_file(), offset()).prop_map(|(p, s)| Op::Truncate(p, s)),
        4 => (existing_file(), offset(), length()).prop_map(|(p, o, l)| Op::Read(p, o, l)),
        2 => anything().prop_map(Op::Stat),
        2 => anything().prop_map(Op::Readdir),
    ]
}

fn ops() -> impl Strategy<Value = Vec<Op<Sel>>> {
    prop::collection::vec(op(), 1..=40)
}

/// Who runs an operation: the client (a mount, a native client) of the one
/// before (`None`, most often) or the n-th, and which of that client's users.
#[derive(Clone, Copy, Debug)]
struct Who {
    client: Option<u8>,
    user: u8,
}

/// Operations, each with who runs it. Users of one client change often (a
/// change by one user must be seen by the next at once); clients less often
/// (each change of client waits out the cache TTL).
fn ops_by_actors() -> impl Strategy<Value = Vec<(Who, Op<Sel>)>> {
    let client = prop_oneof![6 => Just(None), 1 => any::<u8>().prop_map(Some)];
    let who = (client, any::<u8>()).prop_map(|(client, user)| Who { client, user });
    prop::collection::vec((who, op()), 1..=40)
}

// ---------------------------------------------------------------- outcomes

#[derive(Clone, PartialEq, Eq)]
enum Out {
    Done,
    Written(usize),
    Data(Vec<u8>),
    /// Kind and, for a file, its size.
    Stat(FileKind, Option<u64>),
    Names(Vec<(String, FileKind)>),
}

impl fmt::Debug for Out {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Out::Done => write!(f, "ok"),
            Out::Written(n) => write!(f, "wrote {n}"),
            Out::Data(d) => write!(f, "{} bytes", d.len()),
            Out::Stat(k, s) => write!(f, "{k:?} size {s:?}"),
            Out::Names(n) => write!(f, "{n:?}"),
        }
    }
}

/// Where two byte strings first differ, for the failure message.
fn first_difference(a: &[u8], b: &[u8]) -> String {
    match a.iter().zip(b).position(|(x, y)| x != y) {
        Some(i) => format!("first difference at byte {i}: {} vs {}", a[i], b[i]),
        None => format!("lengths {} vs {}", a.len(), b.len()),
    }
}

// ---------------------------------------------------------------- the model

#[derive(Clone, Debug, PartialEq, Eq)]
enum Node {
    Dir(BTreeMap<String, Node>),
    File(Vec<u8>),
}

impl Node {
    fn kind(&self) -> FileKind {
        match self {
            Node::Dir(_) => FileKind::Directory,
            Node::File(_) => FileKind::File,
        }
    }
}

type Dir = BTreeMap<String, Node>;

/// The error the model expects, and another one it accepts where POSIX
/// allows either.
#[derive(Clone, Copy, Debug)]
struct Fail(Errno, Option<Errno>);

impl From<Errno> for Fail {
    fn from(e: Errno) -> Fail {
        Fail(e, None)
    }
}

impl Fail {
    fn accepts(self, e: Errno) -> bool {
        self.0 == e || self.1 == Some(e)
    }

    fn describe(self) -> String {
        match self.1 {
            None => self.0.describe(),
            Some(alt) => format!("{} or {}", self.0.describe(), alt.describe()),
        }
    }
}

#[derive(Default)]
struct Model {
    root: Dir,
}

fn intern(name: &str) -> &'static str {
    NAMES
        .iter()
        .find(|n| **n == name)
        .expect("a name of the pool")
}

fn split(p: &Path) -> (&[&'static str], &'static str) {
    let (last, parent) = p.split_last().expect("non-empty path");
    (parent, last)
}

impl Model {
    /// Every file and directory, in tree order, with whether it is a directory.
    fn nodes(&self) -> Vec<(Path, bool)> {
        fn walk(dir: &Dir, prefix: &Path, out: &mut Vec<(Path, bool)>) {
            for (name, node) in dir {
                let mut p = prefix.clone();
                p.push(intern(name));
                out.push((p.clone(), matches!(node, Node::Dir(_))));
                if let Node::Dir(d) = node {
                    walk(d, &p, out);
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.root, &Vec::new(), &mut out);
        out
    }

    /// The concrete path a selector names now.
    fn pick(&self, sel: &Sel) -> Path {
        let nodes = self.nodes();
        let nth = |i: u8, of: Vec<Path>| -> Option<Path> {
            (!of.is_empty()).then(|| of[i as usize % of.len()].clone())
        };
        let node = |i: u8| nth(i, nodes.iter().map(|(p, _)| p.clone()).collect());
        match sel {
            Sel::Fixed(p) => p.clone(),
            Sel::Top => Vec::new(),
            Sel::Node(i) => node(*i).unwrap_or_else(|| vec![NAMES[0]]),
            Sel::File(i) | Sel::Dir(i) => {
                let want_dir = matches!(sel, Sel::Dir(_));
                let of_kind = nodes.iter().filter(|(_, d)| *d == want_dir);
                nth(*i, of_kind.map(|(p, _)| p.clone()).collect())
                    .or_else(|| node(*i))
                    .unwrap_or_else(|| vec![NAMES[0]])
            }
            Sel::Child(i, name) => {
                let dirs = nodes
                    .iter()
                    .filter(|(p, d)| *d && p.len() <= 2)
                    .map(|(p, _)| p.clone());
                let mut p = nth(*i, std::iter::once(Vec::new()).chain(dirs).collect())
                    .expect("the top directory is always there");
                p.push(name);
                p
            }
            Sel::Sibling(i, name) => {
                let mut p = node(*i).unwrap_or_else(|| vec![NAMES[0]]);
                *p.last_mut().unwrap() = name;
                p
            }
            Sel::Below(i, below) => {
                let mut p = node(*i).unwrap_or_else(|| vec![NAMES[0]]);
                p.extend(below);
                p
            }
        }
    }

    fn dir(&self, path: &[&str]) -> Result<&Dir, Errno> {
        let mut cur = &self.root;
        for n in path {
            match cur.get(*n) {
                None => return Err(Errno::ENOENT),
                Some(Node::File(_)) => return Err(Errno::ENOTDIR),
                Some(Node::Dir(d)) => cur = d,
            }
        }
        Ok(cur)
    }

    fn dir_mut(&mut self, path: &[&str]) -> Result<&mut Dir, Errno> {
        let mut cur = &mut self.root;
        for n in path {
            match cur.get_mut(*n) {
                None => return Err(Errno::ENOENT),
                Some(Node::File(_)) => return Err(Errno::ENOTDIR),
                Some(Node::Dir(d)) => cur = d,
            }
        }
        Ok(cur)
    }

    /// The file at `path`: EISDIR for a directory.
    fn file_mut(&mut self, path: &Path) -> Result<&mut Vec<u8>, Errno> {
        let (parent, name) = split(path);
        match self.dir_mut(parent)?.get_mut(name) {
            None => Err(Errno::ENOENT),
            Some(Node::Dir(_)) => Err(Errno::EISDIR),
            Some(Node::File(data)) => Ok(data),
        }
    }

    fn node(&self, path: &Path) -> Result<Option<&Node>, Errno> {
        if path.is_empty() {
            return Ok(None);
        }
        let (parent, name) = split(path);
        self.dir(parent)?.get(name).map(Some).ok_or(Errno::ENOENT)
    }

    fn apply(&mut self, op: &Op<Path>) -> Result<Out, Fail> {
        match op {
            Op::Mkdir(p) | Op::Create(p) => {
                let (parent, name) = split(p);
                let dir = self.dir_mut(parent)?;
                if dir.contains_key(name) {
                    return Err(Errno::EEXIST.into());
                }
                let node = match op {
                    Op::Mkdir(_) => Node::Dir(Dir::new()),
                    _ => Node::File(Vec::new()),
                };
                dir.insert(name.to_string(), node);
                Ok(Out::Done)
            }
            Op::Unlink(p) => {
                let (parent, name) = split(p);
                let dir = self.dir_mut(parent)?;
                match dir.get(name) {
                    None => Err(Errno::ENOENT.into()),
                    Some(Node::Dir(_)) => Err(Errno::EISDIR.into()),
                    Some(Node::File(_)) => {
                        dir.remove(name);
                        Ok(Out::Done)
                    }
                }
            }
            Op::Rmdir(p) => {
                let (parent, name) = split(p);
                let dir = self.dir_mut(parent)?;
                match dir.get(name) {
                    None => Err(Errno::ENOENT.into()),
                    Some(Node::File(_)) => Err(Errno::ENOTDIR.into()),
                    Some(Node::Dir(d)) if !d.is_empty() => Err(Errno::ENOTEMPTY.into()),
                    Some(Node::Dir(_)) => {
                        dir.remove(name);
                        Ok(Out::Done)
                    }
                }
            }
            Op::Rename(from, to) => self.rename(from, to),
            Op::Write {
                path,
                offset,
                len,
                seed,
            } => {
                let data = self.file_mut(path)?;
                let (start, end) = (*offset as usize, *offset as usize + len);
                if data.len() < end {
                    data.resize(end, 0);
                }
                data[start..end].copy_from_slice(&pattern(*seed, *offset, *len));
                Ok(Out::Written(*len))
            }
            Op::Truncate(p, size) => {
                self.file_mut(p)?.resize(*size as usize, 0);
                Ok(Out::Done)
            }
            Op::Read(p, offset, len) => {
                let data = self.file_mut(p)?;
                let start = (*offset as usize).min(data.len());
                let end = (start + len).min(data.len());
                Ok(Out::Data(data[start..end].to_vec()))
            }
            Op::Stat(p) => Ok(match self.node(p)? {
                None | Some(Node::Dir(_)) => Out::Stat(FileKind::Directory, None),
                Some(Node::File(d)) => Out::Stat(FileKind::File, Some(d.len() as u64)),
            }),
            Op::Readdir(p) => {
                let dir = match self.node(p)? {
                    None => &self.root,
                    Some(Node::Dir(d)) => d,
                    Some(Node::File(_)) => return Err(Errno::ENOTDIR.into()),
                };
                Ok(Out::Names(
                    dir.iter()
                        .map(|(n, node)| (n.clone(), node.kind()))
                        .collect(),
                ))
            }
        }
    }

    /// POSIX rename: both parents, the source, the target (itself: no-op; kind
    /// mismatch; a non-empty directory), a directory moved into its own subtree.
    fn rename(&mut self, from: &Path, to: &Path) -> Result<Out, Fail> {
        let (fp, fname) = split(from);
        let (tp, tname) = split(to);
        self.dir(fp)?;
        self.dir(tp)?;
        let src_is_dir = match self.dir(fp)?.get(fname) {
            None => return Err(Errno::ENOENT.into()),
            Some(n) => matches!(n, Node::Dir(_)),
        };
        let into_itself = src_is_dir && to.len() > from.len() && to.starts_with(from);
        if let Some(target) = self.dir(tp)?.get(tname) {
            if from == to {
                return Ok(Out::Done);
            }
            let kind_error = match (src_is_dir, target) {
                (true, Node::File(_)) => Some(Errno::ENOTDIR),
                // A file onto a non-empty directory: POSIX allows ENOTEMPTY
                // too, which Linux gives when the directory is the file's
                // own parent.
                (false, Node::Dir(d)) if !d.is_empty() => {
                    return Err(Fail(Errno::EISDIR, Some(Errno::ENOTEMPTY)))
                }
                (false, Node::Dir(_)) => Some(Errno::EISDIR),
                (true, Node::Dir(d)) if !d.is_empty() => Some(Errno::ENOTEMPTY),
                _ => None,
            };
            if let Some(e) = kind_error {
                // Linux checks for a move into itself first, Shoal checks
                // the target first; POSIX allows either error.
                return Err(Fail(e, into_itself.then_some(Errno::EINVAL)));
            }
        }
        if into_itself {
            return Err(Errno::EINVAL.into());
        }
        let node = self.dir_mut(fp)?.remove(fname).expect("source exists");
        self.dir_mut(tp)?.insert(tname.to_string(), node);
        Ok(Out::Done)
    }
}

// ---------------------------------------------------------------- Shoal

/// Who runs an operation: a native client acting as some user, or a
/// process of some user (`fsop`) on a FUSE mount.
enum Actor {
    Native {
        client: Client,
        /// Which client (caches) it is: views of one client acting as
        /// different users share it.
        domain: usize,
    },
    Mount {
        fsop: Fsop,
        /// The mount point.
        root: String,
        /// Which mount it is.
        domain: usize,
    },
}

impl Actor {
    fn domain(&self) -> usize {
        match self {
            Actor::Native { domain, .. } | Actor::Mount { domain, .. } => *domain,
        }
    }

    fn describe(&self) -> String {
        match self {
            Actor::Native { client, domain } => {
                format!("native client {domain} as uid {}", client.cred().uid)
            }
            Actor::Mount { fsop, domain, .. } => format!("mount {domain} as uid {}", fsop.uid),
        }
    }
}

/// A long-lived `fsop` process acting as one user (see `src/bin/fsop.rs`).
struct Fsop {
    uid: u32,
    child: Child,
    io: Mutex<(ChildStdin, BufReader<ChildStdout>)>,
}

impl Fsop {
    fn start(uid: u32) -> Fsop {
        let fsop = env!("CARGO_BIN_EXE_fsop");
        let mut cmd = if uid == 0 {
            Command::new(fsop)
        } else {
            let mut c = Command::new("setpriv");
            let id = uid.to_string();
            c.args(["--reuid", &id, "--regid", &id, "--clear-groups", fsop]);
            c
        };
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start fsop");
        let io = (
            child.stdin.take().unwrap(),
            BufReader::new(child.stdout.take().unwrap()),
        );
        Fsop {
            uid,
            child,
            io: Mutex::new(io),
        }
    }

    /// Sends one request (fields joined by tabs) and returns the reply line.
    fn ask(&self, fields: &[&str]) -> Result<String, ShoalError> {
        let mut io = self.io.lock().unwrap();
        let (stdin, stdout) = &mut *io;
        writeln!(stdin, "{}", fields.join("\t")).map_err(ShoalError::from)?;
        let mut line = String::new();
        stdout.read_line(&mut line).map_err(ShoalError::from)?;
        let line = line.trim_end().to_string();
        match line.strip_prefix("err ") {
            Some(n) => Err(ShoalError::new(
                Errno(n.parse().unwrap_or(libc::EIO)),
                format!("through the mount, as uid {}", self.uid),
            )),
            None if line.is_empty() => Err(ShoalError::io("fsop ended")),
            None => Ok(line),
        }
    }
}

impl Drop for Fsop {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn fsop_kind(k: &str) -> FileKind {
    match k {
        "dir" => FileKind::Directory,
        "file" => FileKind::File,
        _ => FileKind::Symlink,
    }
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// An operation done through a mount by `fsop`, as the model sees it.
fn through_mount(
    fsop: &Fsop,
    abs: impl Fn(&Path) -> String,
    op: &Op<Path>,
) -> Result<Out, ShoalError> {
    let done = |r: Result<String, ShoalError>| r.map(|_| Out::Done);
    match op {
        Op::Mkdir(p) => done(fsop.ask(&["mkdir", &abs(p)])),
        Op::Create(p) => done(fsop.ask(&["create", &abs(p)])),
        Op::Unlink(p) => done(fsop.ask(&["unlink", &abs(p)])),
        Op::Rmdir(p) => done(fsop.ask(&["rmdir", &abs(p)])),
        Op::Rename(a, b) => done(fsop.ask(&["rename", &abs(a), &abs(b)])),
        Op::Write {
            path,
            offset,
            len,
            seed,
        } => {
            let data: String = pattern(*seed, *offset, *len)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            let r = fsop.ask(&["write", &abs(path), &offset.to_string(), &data])?;
            Ok(Out::Written(r["wrote".len()..].trim().parse().unwrap()))
        }
        Op::Truncate(p, size) => done(fsop.ask(&["truncate", &abs(p), &size.to_string()])),
        Op::Read(p, offset, len) => {
            let r = fsop.ask(&["read", &abs(p), &offset.to_string(), &len.to_string()])?;
            Ok(Out::Data(unhex(r["data".len()..].trim())))
        }
        Op::Stat(p) => {
            let r = fsop.ask(&["stat", &abs(p)])?;
            let mut f = r.split(' ').skip(1);
            let kind = fsop_kind(f.next().unwrap_or(""));
            let size = f.next().and_then(|n| n.parse().ok());
            Ok(Out::Stat(kind, size.filter(|_| kind == FileKind::File)))
        }
        Op::Readdir(p) => {
            let r = fsop.ask(&["readdir", &abs(p)])?;
            let names = r["names".len()..]
                .split_whitespace()
                .map(|e| {
                    let (name, kind) = e.rsplit_once('/').unwrap();
                    (name.to_string(), fsop_kind(kind))
                })
                .collect();
            Ok(Out::Names(names))
        }
    }
}

struct Shoal<'a> {
    rt: &'a tokio::runtime::Runtime,
    actors: &'a [Actor],
    /// A client without caches, which reads the final tree as the servers
    /// hold it.
    uncached: &'a Client,
    /// The case's own top-level directory, e.g. "/case-7".
    top: String,
    /// How long another client may see what this one changed.
    ttl: Duration,
}

impl Shoal<'_> {
    fn abs(&self, p: &Path) -> String {
        if p.is_empty() {
            self.top.clone()
        } else {
            format!("{}/{}", self.top, p.join("/"))
        }
    }

    fn block_on<T>(&self, f: impl Future<Output = Result<T, ShoalError>>) -> Result<T, ShoalError> {
        self.rt.block_on(async {
            tokio::time::timeout(OP_TIMEOUT, f)
                .await
                .unwrap_or_else(|_| Err(ShoalError::io("operation timed out")))
        })
    }

    /// Sends what every native actor keeps (the mounts' programs closed
    /// their files already).
    fn flush_all(&self) -> Result<(), ShoalError> {
        for a in self.actors {
            if let Actor::Native { client, .. } = a {
                self.block_on(client.flush_all())?;
            }
        }
        Ok(())
    }

    fn apply(&self, who: usize, op: &Op<Path>) -> Result<Out, ShoalError> {
        let c = match &self.actors[who] {
            Actor::Native { client, .. } => client,
            Actor::Mount { fsop, root, .. } => {
                return through_mount(fsop, |p| format!("{root}{}", self.abs(p)), op)
            }
        };
        self.block_on(async {
            match op {
                Op::Mkdir(p) => {
                    let path = self.abs(p);
                    let (dir, name) = c.resolve_parent(&path).await?;
                    c.mkdir(dir, name, 0o777).await?;
                    Ok(Out::Done)
                }
                Op::Create(p) => {
                    let path = self.abs(p);
                    let (dir, name) = c.resolve_parent(&path).await?;
                    c.create(dir, name, 0o666).await?;
                    Ok(Out::Done)
                }
                Op::Unlink(p) => {
                    let path = self.abs(p);
                    let (dir, name) = c.resolve_parent(&path).await?;
                    c.unlink(dir, name).await?;
                    Ok(Out::Done)
                }
                Op::Rmdir(p) => {
                    let path = self.abs(p);
                    let (dir, name) = c.resolve_parent(&path).await?;
                    c.rmdir(dir, name).await?;
                    Ok(Out::Done)
                }
                Op::Rename(from, to) => {
                    let (from, to) = (self.abs(from), self.abs(to));
                    let (d1, n1) = c.resolve_parent(&from).await?;
                    let (d2, n2) = c.resolve_parent(&to).await?;
                    c.rename(d1, n1, d2, n2, false).await?;
                    Ok(Out::Done)
                }
                Op::Write {
                    path,
                    offset,
                    len,
                    seed,
                } => {
                    let (h, _) = c.resolve(&self.abs(path)).await?;
                    let data = Bytes::from(pattern(*seed, *offset, *len));
                    let written = c.write(h, *offset, data).await?;
                    if self.actors.len() > 1 {
                        // Among several clients a write is a program's write
                        // and close: others see it (close-to-open). Alone,
                        // the client keeps small writes, and every later
                        // operation must see them all the same.
                        c.flush(h).await?;
                    }
                    Ok(Out::Written(written))
                }
                Op::Truncate(p, size) => {
                    let (h, _) = c.resolve(&self.abs(p)).await?;
                    c.truncate(h, *size).await?;
                    Ok(Out::Done)
                }
                Op::Read(p, offset, len) => {
                    let (h, _) = c.resolve(&self.abs(p)).await?;
                    Ok(Out::Data(c.read(h, *offset, *len).await?.to_vec()))
                }
                Op::Stat(p) => {
                    let (h, _) = c.resolve(&self.abs(p)).await?;
                    let attr = c.getattr(h).await?;
                    let size = (attr.kind == FileKind::File).then_some(attr.size);
                    Ok(Out::Stat(attr.kind, size))
                }
                Op::Readdir(p) => {
                    let (h, _) = c.resolve(&self.abs(p)).await?;
                    let mut names: Vec<(String, FileKind)> = c
                        .readdir_all(h)
                        .await?
                        .into_iter()
                        .map(|e| (e.name, e.kind))
                        .collect();
                    names.sort_by(|a, b| a.0.cmp(&b.0));
                    Ok(Out::Names(names))
                }
            }
        })
    }

    /// The whole tree under the case's directory, as the servers hold it.
    fn snapshot(&self) -> Result<Dir, ShoalError> {
        let (top, _) = self.block_on(self.uncached.resolve(&self.top))?;
        self.block_on(snapshot_dir(self.uncached, top))
    }
}

fn snapshot_dir(
    client: &Client,
    dir: shoal_proto::Handle,
) -> std::pin::Pin<Box<dyn Future<Output = Result<Dir, ShoalError>> + '_>> {
    Box::pin(async move {
        let mut out = Dir::new();
        for e in client.readdir_all(dir).await? {
            let node = match e.kind {
                FileKind::Directory => Node::Dir(snapshot_dir(client, e.handle).await?),
                FileKind::File => {
                    let size = client.getattr(e.handle).await?.size;
                    let data = client.read(e.handle, 0, size as usize + 4096).await?;
                    if data.len() as u64 != size {
                        return Err(ShoalError::io(format!(
                            "{}: getattr says {size} bytes, read returns {}",
                            e.name,
                            data.len()
                        )));
                    }
                    Node::File(data.to_vec())
                }
                other => return Err(ShoalError::io(format!("{}: unexpected {other:?}", e.name))),
            };
            out.insert(e.name, node);
        }
        Ok(out)
    })
}

/// Every path of a tree with a short description, for comparing trees.
fn flatten(dir: &Dir, prefix: &str, out: &mut BTreeMap<String, Option<Vec<u8>>>) {
    for (name, node) in dir {
        let path = format!("{prefix}{name}");
        match node {
            Node::Dir(d) => {
                out.insert(format!("{path}/"), None);
                flatten(d, &format!("{path}/"), out);
            }
            Node::File(data) => {
                out.insert(path, Some(data.clone()));
            }
        }
    }
}

fn compare_trees(model: &Dir, shoal: &Dir) -> Result<(), String> {
    let (mut m, mut s) = (BTreeMap::new(), BTreeMap::new());
    flatten(model, "", &mut m);
    flatten(shoal, "", &mut s);
    let mk: Vec<&String> = m.keys().collect();
    let sk: Vec<&String> = s.keys().collect();
    if mk != sk {
        return Err(format!("final tree: model has {mk:?}, Shoal has {sk:?}"));
    }
    for (path, data) in &m {
        if let (Some(a), Some(b)) = (data, &s[path]) {
            if a != b {
                return Err(format!("final tree: {path}: {}", first_difference(a, b)));
            }
        }
    }
    Ok(())
}

fn outcome(r: &Result<Out, Fail>) -> String {
    match r {
        Ok(out) => format!("{out:?}"),
        Err(e) => e.describe(),
    }
}

fn run_case(shoal: &Shoal, ops: &[(Who, Op<Sel>)]) -> Result<(), TestCaseError> {
    let mut model = Model::default();
    // The concrete operations so far, for the failure message.
    let mut trace = String::new();
    let n = shoal.actors.len();
    let domains = shoal.actors.iter().map(Actor::domain).max().unwrap_or(0) + 1;
    let mut domain = 0;
    // Clients that another client changed something for since they last
    // acted: they may see the old state until the TTL has passed.
    let mut stale = vec![false; domains];
    for (i, (pick, op)) in ops.iter().enumerate() {
        if let Some(c) = pick.client {
            domain = c as usize % domains;
        }
        let users: Vec<usize> = (0..n)
            .filter(|a| shoal.actors[*a].domain() == domain)
            .collect();
        let who = users[pick.user as usize % users.len()];
        if std::mem::take(&mut stale[domain]) {
            std::thread::sleep(shoal.ttl + Duration::from_millis(50));
        }
        let op = op.map(|sel| model.pick(sel));
        let shown = op.map(|p| Concrete(p.clone()));
        let want = model.apply(&op);
        let got = shoal.apply(who, &op);
        if want.is_ok() && op.changes() {
            for a in shoal.actors.iter().filter(|a| a.domain() != domain) {
                stale[a.domain()] = true;
            }
        }
        let by = if n > 1 {
            format!(" by {}", shoal.actors[who].describe())
        } else {
            String::new()
        };
        let same = match (&want, &got) {
            (Ok(a), Ok(b)) => a == b,
            (Err(a), Err(b)) => a.accepts(b.errno),
            _ => false,
        };
        if !same {
            let detail = match (&want, &got) {
                (Ok(Out::Data(a)), Ok(Out::Data(b))) => format!(" ({})", first_difference(a, b)),
                _ => String::new(),
            };
            let got = match got {
                Ok(out) => format!("{out:?}"),
                Err(e) => format!("{} ({})", e.errno.describe(), e.message),
            };
            return Err(TestCaseError::fail(format!(
                "{trace}op {i} `{shown:?}`{by}: model expects {}, Shoal gives {got}{detail}",
                outcome(&want)
            )));
        }
        trace += &format!("op {i} `{shown:?}`{by} -> {}\n", outcome(&want));
    }
    // The programs end: what their clients keep goes to the servers.
    shoal
        .flush_all()
        .map_err(|e| TestCaseError::fail(format!("{trace}flushing at the end: {e}")))?;
    let tree = shoal
        .snapshot()
        .map_err(|e| TestCaseError::fail(format!("{trace}reading the final tree: {e}")))?;
    compare_trees(&model.root, &tree).map_err(|e| TestCaseError::fail(format!("{trace}{e}")))
}

fn model_cluster() -> Cluster {
    Cluster::builder()
        .servers(3)
        .set(&format!("strip_size={STRIP}"))
        .set(&format!("inline_max={INLINE_MAX}"))
        .start()
}

#[test]
fn shoal_agrees_with_an_in_memory_model() {
    let cluster = model_cluster();
    let client = cluster.client();
    let actors = [Actor::Native { client, domain: 0 }];
    let me = Who {
        client: None,
        user: 0,
    };
    let ops = ops().prop_map(move |ops| ops.into_iter().map(|op| (me, op)).collect());
    check_against_model(&cluster, &actors, ops, 24);
}

/// Two users on each of two mounts and two native clients of one cluster.
#[test]
fn several_users_and_clients_agree_with_the_model() {
    let cluster = model_cluster();
    let (m1, m2) = (SharedMount::new(&cluster), SharedMount::new(&cluster));
    let on = |m: &SharedMount| m.path().to_string_lossy().into_owned();
    let c1 = cluster.client();
    let c2 = cluster.client();
    let actors = [
        Actor::Mount {
            fsop: Fsop::start(0),
            root: on(&m1),
            domain: 0,
        },
        Actor::Mount {
            fsop: Fsop::start(65534),
            root: on(&m1),
            domain: 0,
        },
        Actor::Mount {
            fsop: Fsop::start(1001),
            root: on(&m2),
            domain: 1,
        },
        Actor::Mount {
            fsop: Fsop::start(1004),
            root: on(&m2),
            domain: 1,
        },
        Actor::Native {
            client: c1.with_cred(Cred::new(1002, 1002)),
            domain: 2,
        },
        Actor::Native {
            client: c1,
            domain: 2,
        },
        Actor::Native {
            client: c2.with_cred(Cred::new(1003, 1003)),
            domain: 3,
        },
        Actor::Native {
            client: c2,
            domain: 3,
        },
    ];
    check_against_model(&cluster, &actors, ops_by_actors(), 12);
}

/// Runs `default_cases` cases (or `PROPTEST_CASES`) of `ops` by `actors`,
/// each in a fresh directory, against the model.
fn check_against_model(
    cluster: &Cluster,
    actors: &[Actor],
    ops: impl Strategy<Value = Vec<(Who, Op<Sel>)>>,
    default_cases: u32,
) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let client = cluster.client();
    let uncached = cluster.uncached_client();
    let ttl = Duration::from_millis(cluster.config().settings.cache_ttl_ms);
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_cases);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        max_shrink_iters: 4096,
        ..Config::default()
    });
    let next_case = AtomicU32::new(0);
    let result = runner.run(&ops, |ops| {
        // Every run, shrinking ones included, gets a fresh directory.
        let top = format!("case-{}", next_case.fetch_add(1, Ordering::Relaxed));
        rt.block_on(client.mkdir(ROOT, &top, 0o777))
            .map_err(|e| TestCaseError::fail(format!("mkdir /{top}: {e}")))?;
        // Every client starts from what the servers hold.
        std::thread::sleep(ttl);
        let shoal = Shoal {
            rt: &rt,
            actors,
            uncached: &uncached,
            top: format!("/{top}"),
            ttl,
        };
        run_case(&shoal, &ops)
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}
