//! A launcher: a command that runs a command on a host, given the host's
//! name and then the command's words (`ssh`, `srun -N1 -n1 -w`,
//! `scripts/hosts ssh NAME`), as `shoal up --hosts` starts servers and
//! mounts through. Its words are split on whitespace; the launcher itself
//! decides how the command's words reach the host (ssh joins them for the
//! remote shell, so paths with spaces do not survive it).

use std::path::Path;
use std::process::{Child, Command};

use shoal_proto::error::{Result, ShoalError};

use crate::local_cluster;

pub struct Launcher {
    words: Vec<String>,
}

impl Launcher {
    pub fn parse(cmd: &str) -> Result<Launcher> {
        let words: Vec<String> = cmd.split_whitespace().map(str::to_string).collect();
        if words.is_empty() {
            return Err(ShoalError::invalid("--launcher is empty"));
        }
        Ok(Launcher { words })
    }

    pub fn from_words(words: Vec<String>) -> Launcher {
        Launcher { words }
    }

    pub fn words(&self) -> &[String] {
        &self.words
    }

    /// `LAUNCHER HOST ARGS...`, as the launcher's command line reads.
    pub fn describe(&self, host: &str, args: &[&str]) -> String {
        let mut all: Vec<&str> = self.words.iter().map(String::as_str).collect();
        all.push(host);
        all.extend(args);
        all.join(" ")
    }

    fn command(&self, host: &str, args: &[&str]) -> Command {
        let mut cmd = Command::new(&self.words[0]);
        cmd.args(&self.words[1..]).arg(host).args(args);
        cmd
    }

    /// Starts `ARGS` on `host` for as long as it runs (a server, a mount),
    /// in a process group of its own, output to `log`.
    pub fn spawn(&self, host: &str, args: &[&str], log: &Path) -> Result<Child> {
        local_cluster::spawn(self.command(host, args), log).map_err(|e| {
            e.context(format!(
                "starting the launcher {:?} ({})",
                self.words[0],
                self.describe(host, args)
            ))
        })
    }

    /// Runs `ARGS` on `host` to its end; an error gives the launcher's
    /// exit status and what it wrote to stderr.
    pub fn run(&self, host: &str, args: &[&str]) -> Result<()> {
        let out = self.command(host, args).output().map_err(|e| {
            ShoalError::from(e).context(format!("the launcher {:?}", self.words[0]))
        })?;
        if out.status.success() {
            return Ok(());
        }
        Err(ShoalError::io(format!(
            "{} failed ({}): {}",
            self.describe(host, args),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}
