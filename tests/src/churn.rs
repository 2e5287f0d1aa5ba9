//! The operations `churn` (`src/bin/churn.rs`) makes and the journal it
//! keeps of them, written by churn and read back by the client-crash suite
//! (`tests/client_crash.rs`): one declaration of the format for both.
//!
//! A line per event: `B SEQ OP...` before an operation is called, `A SEQ`
//! once it returned success, `F SEQ ERRNO` once it failed (churn then
//! stops). SEQ 0 is churn's setup (its two directories).

use std::fmt;

/// One operation, on names `a/...`, `b/...` or `c/...` under churn's
/// directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// O_CREAT|O_EXCL, `len` bytes of `pattern(seed)` written, closed.
    Create {
        name: String,
        len: usize,
        seed: u64,
    },
    /// `len` bytes of `pattern(seed)` written at `off`, closed.
    Write {
        name: String,
        off: u64,
        len: usize,
        seed: u64,
    },
    Unlink {
        name: String,
    },
    /// To a name that does not exist, in the same directory or the other.
    Rename {
        from: String,
        to: String,
    },
    /// A hard link, in the other directory.
    Link {
        from: String,
        to: String,
    },
    Fsync {
        name: String,
    },
    /// `a` or `b`.
    FsyncDir {
        dir: String,
    },
}

impl Op {
    /// Whether a client may answer it itself under a directory delegation
    /// and send it later (a create with no data, an unlink), so that the
    /// client's crash can lose it; every other operation reaches a server
    /// before it returns, and sends its client's unsent changes first.
    pub fn may_be_unsent(&self) -> bool {
        matches!(self, Op::Create { len: 0, .. } | Op::Unlink { .. })
    }

    /// The names whose state it changes.
    pub fn names(&self) -> Vec<&str> {
        match self {
            Op::Create { name, .. } | Op::Write { name, .. } | Op::Unlink { name } => vec![name],
            Op::Rename { from, to } | Op::Link { from, to } => vec![from, to],
            Op::Fsync { .. } | Op::FsyncDir { .. } => Vec::new(),
        }
    }

    fn parse(words: &[&str]) -> Option<Op> {
        let s = |i: usize| words.get(i).map(|w| w.to_string());
        let n = |i: usize| words.get(i)?.parse::<u64>().ok();
        Some(match *words.first()? {
            "create" => Op::Create {
                name: s(1)?,
                len: n(2)? as usize,
                seed: n(3)?,
            },
            "write" => Op::Write {
                name: s(1)?,
                off: n(2)?,
                len: n(3)? as usize,
                seed: n(4)?,
            },
            "unlink" => Op::Unlink { name: s(1)? },
            "rename" => Op::Rename {
                from: s(1)?,
                to: s(2)?,
            },
            "link" => Op::Link {
                from: s(1)?,
                to: s(2)?,
            },
            "fsync" => Op::Fsync { name: s(1)? },
            "fsyncdir" => Op::FsyncDir { dir: s(1)? },
            _ => return None,
        })
    }
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Op::Create { name, len, seed } => write!(f, "create {name} {len} {seed}"),
            Op::Write {
                name,
                off,
                len,
                seed,
            } => write!(f, "write {name} {off} {len} {seed}"),
            Op::Unlink { name } => write!(f, "unlink {name}"),
            Op::Rename { from, to } => write!(f, "rename {from} {to}"),
            Op::Link { from, to } => write!(f, "link {from} {to}"),
            Op::Fsync { name } => write!(f, "fsync {name}"),
            Op::FsyncDir { dir } => write!(f, "fsyncdir {dir}"),
        }
    }
}

/// How an operation of the journal ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Acked,
    Failed(i32),
    /// Begun, and nothing more written: in flight when churn died.
    InFlight,
}

/// A journal read back: the operations in order, with their outcomes.
#[derive(Debug, Default)]
pub struct Journal {
    pub ops: Vec<(Op, Outcome)>,
    /// churn could not set up its directories (errno).
    pub setup_failed: Option<i32>,
}

impl Journal {
    /// Parses `text`; a line cut short by a kill mid-write is not possible
    /// (each is one append), so any line it cannot read is an error.
    pub fn parse(text: &str) -> Result<Journal, String> {
        let mut j = Journal::default();
        for line in text.lines() {
            let words: Vec<&str> = line.split(' ').collect();
            let bad = || format!("journal line {line:?}");
            let seq: u64 = words.get(1).and_then(|w| w.parse().ok()).ok_or_else(bad)?;
            match words[0] {
                "B" => {
                    let op = Op::parse(&words[2..]).ok_or_else(bad)?;
                    if seq as usize != j.ops.len() + 1 {
                        return Err(format!("{} out of order", bad()));
                    }
                    j.ops.push((op, Outcome::InFlight));
                }
                "A" | "F" => {
                    let outcome = match words[0] {
                        "A" => Outcome::Acked,
                        _ => Outcome::Failed(
                            words.get(2).and_then(|w| w.parse().ok()).ok_or_else(bad)?,
                        ),
                    };
                    if seq == 0 {
                        if let Outcome::Failed(e) = outcome {
                            j.setup_failed = Some(e);
                        }
                        continue;
                    }
                    let entry = j.ops.get_mut(seq as usize - 1).ok_or_else(bad)?;
                    entry.1 = outcome;
                }
                _ => return Err(bad()),
            }
        }
        Ok(j)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_journal_reads_back_what_was_written() {
        let ops = [
            Op::Create {
                name: "a/n1".into(),
                len: 0,
                seed: 7,
            },
            Op::Write {
                name: "a/n1".into(),
                off: 3,
                len: 10,
                seed: 9,
            },
            Op::Rename {
                from: "a/n1".into(),
                to: "b/n2".into(),
            },
        ];
        let text = format!(
            "B 1 {}\nA 1\nB 2 {}\nF 2 107\nB 3 {}\n",
            ops[0], ops[1], ops[2]
        );
        let j = Journal::parse(&text).unwrap();
        let outcomes: Vec<Outcome> = j.ops.iter().map(|(_, o)| *o).collect();
        assert_eq!(
            outcomes,
            [Outcome::Acked, Outcome::Failed(107), Outcome::InFlight]
        );
        assert!(j.ops.iter().zip(&ops).all(|((a, _), b)| a == b));
        assert!(Journal::parse("B 2 unlink a/x\n").is_err(), "a gap");
        assert!(Journal::parse("B 1 frob a/x\n").is_err());
    }
}
