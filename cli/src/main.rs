//! `shoal`: run servers and mounts, start local clusters, and work with files
//! and statistics from the command line.

mod commands;
mod host_list;
mod launcher;
mod local_cluster;
mod target;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};

use target::ConfigArg;

#[derive(Parser)]
#[command(name = "shoal", version, about = "Shoal parallel file system")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run one server of a cluster in the foreground.
    Server {
        #[arg(long)]
        config: PathBuf,
        #[arg(long)]
        id: u32,
    },
    /// Start a local cluster of N servers (and optionally mount it).
    Up(commands::up::UpArgs),
    /// Stop what `shoal up` started from DIR: unmount, then stop the servers.
    Down {
        #[arg(long)]
        data: PathBuf,
    },
    /// Mount a cluster on a directory through FUSE.
    Mount(commands::mount::MountArgs),
    /// Serve this node's credential broker without a mount: programs under
    /// libshoal run by users who cannot read the cluster secret get a
    /// credential for themselves from it (a mount serves one too).
    Agent {
        /// The cluster file (its secret must be readable: run as root).
        cluster: PathBuf,
    },
    /// List a directory.
    Ls {
        #[command(flatten)]
        cfg: ConfigArg,
        /// Long format: mode, owner, size, time.
        #[arg(short = 'l')]
        long: bool,
        path: String,
    },
    /// List a directory through readdirplus: entries and their attributes in
    /// a few messages per batch (same output as `ls`).
    Lsplus {
        #[command(flatten)]
        cfg: ConfigArg,
        /// Long format: mode, owner, size, time.
        #[arg(short = 'l')]
        long: bool,
        path: String,
    },
    /// Show attributes of a file or directory.
    Stat {
        #[command(flatten)]
        cfg: ConfigArg,
        /// Show the distribution: a file's strip size, datafiles and their
        /// servers; a directory's partitions (split directories), their
        /// servers and entries.
        #[arg(long)]
        layout: bool,
        #[arg(long)]
        json: bool,
        path: String,
    },
    /// Copy files in or out of Shoal (Shoal paths: shoal:/path or under a mount).
    Cp {
        #[command(flatten)]
        cfg: ConfigArg,
        /// Do not show a progress bar.
        #[arg(long, short = 'q')]
        quiet: bool,
        source: String,
        dest: String,
    },
    /// Print files.
    Cat {
        #[command(flatten)]
        cfg: ConfigArg,
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Remove files (and with -r, directories and their contents).
    Rm {
        #[command(flatten)]
        cfg: ConfigArg,
        #[arg(short = 'r')]
        recursive: bool,
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Create directories.
    Mkdir {
        #[command(flatten)]
        cfg: ConfigArg,
        /// Create parents as needed; no error if it exists.
        #[arg(short = 'p')]
        parents: bool,
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Create empty files or update their times.
    Touch {
        #[command(flatten)]
        cfg: ConfigArg,
        #[arg(required = true)]
        paths: Vec<String>,
    },
    /// Directory hints: how files created in a directory are laid out
    /// (strip_size, num_dfiles, dist, no_metafile); new subdirectories copy them.
    Hint {
        #[command(subcommand)]
        command: commands::hint::HintCommand,
    },
    /// Run a benchmark.
    ///
    /// Papers are cited by key, such as [Carns 2009]; their titles, authors
    /// and venues are under References in docs/design.md. What each benchmark
    /// measured, and how to reproduce it: bench/README.md.
    Bench(shoal_bench::BenchArgs),
    /// Parallel file aggregation containers ([Kato 2011]): ls, cat, extract, check.
    Pfa(shoal_pfa::tools::PfaArgs),
    /// Find what crashes left behind (orphan objects, stale marks, orphan
    /// local files); with --repair, reclaim it. Run --repair on a quiet cluster.
    Fsck {
        #[command(flatten)]
        cfg: ConfigArg,
        #[arg(long)]
        repair: bool,
        /// Leave objects younger than this alone (a create may be in flight).
        #[arg(long, default_value_t = 60, value_name = "SECONDS")]
        grace: u64,
        #[arg(long)]
        json: bool,
        /// A path under a mount, when no --config is given.
        path: Option<String>,
    },
    /// Per-server, per-operation statistics; with --mount, the mount's own:
    /// per request type, the count and the mean and p99 time a caller waited.
    Stats {
        #[command(flatten)]
        cfg: ConfigArg,
        #[arg(long)]
        json: bool,
        /// Only this server.
        #[arg(long)]
        server: Option<u32>,
        /// The FUSE mount at DIR: its requests, as it counted them (asks the
        /// mount, not the servers).
        #[arg(long, value_name = "DIR", conflicts_with_all = ["server", "path"])]
        mount: Option<std::path::PathBuf>,
        /// With --mount: start the mount's counts again (prints nothing).
        #[arg(long, requires = "mount")]
        reset: bool,
        /// A path under a mount, when no --config is given.
        path: Option<String>,
    },
    /// The cluster file: every setting with its default and documentation.
    Config {
        #[command(subcommand)]
        command: commands::config::ConfigCommand,
    },
    /// Write the manual pages (shoal.1 and one per subcommand) into DIR.
    ///
    /// For example `shoal man /usr/local/share/man/man1`;
    /// `scripts/install-docs PREFIX` installs pages and completions.
    Man {
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
    /// Print the completion script for a shell.
    ///
    /// For example `shoal completions bash >
    /// ~/.local/share/bash-completion/completions/shoal`, or for this shell
    /// only: `source <(shoal completions bash)`.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if !matches!(
        cli.command,
        Command::Server { .. } | Command::Mount(_) | Command::Up(_) | Command::Agent { .. }
    ) {
        // Tools print to pipes (`shoal cat f | head`): end quietly on a closed
        // pipe as cat does. Servers and mounts keep SIGPIPE ignored so a closed
        // socket is an error on that connection, not the end of the process.
        // SAFETY: setting a signal disposition before any thread starts.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("SHOAL_LOG")
                // fuser warns that its own unmount failed after fusermount3 -u
                // already did it: harmless, so only its errors are shown.
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,fuser=error")),
        )
        .with_writer(std::io::stderr)
        .init();
    // Crash points armed by the environment (tests), for this process's life.
    let _crash_points =
        std::env::var_os("FAILPOINTS").map(|_| shoal_proto::fail::FailScenario::setup());
    let result = match cli.command {
        Command::Server { config, id } => commands::server::run(&config, id),
        Command::Up(args) => commands::up::run(args),
        Command::Down { data } => commands::down::run(&data),
        Command::Mount(args) => commands::mount::run(args),
        Command::Agent { cluster } => commands::agent::run(&cluster),
        Command::Ls { cfg, long, path } => commands::files::ls(&cfg, &path, long),
        Command::Lsplus { cfg, long, path } => commands::lsplus::run(&cfg, &path, long),
        Command::Stat {
            cfg,
            layout,
            json,
            path,
        } => commands::files::stat(&cfg, &path, layout, json),
        Command::Cp {
            cfg,
            quiet,
            source,
            dest,
        } => commands::copy::run(&cfg, &source, &dest, quiet),
        Command::Cat { cfg, paths } => commands::files::cat(&cfg, &paths),
        Command::Rm {
            cfg,
            recursive,
            paths,
        } => commands::files::rm(&cfg, &paths, recursive),
        Command::Mkdir {
            cfg,
            parents,
            paths,
        } => commands::files::mkdir(&cfg, &paths, parents),
        Command::Touch { cfg, paths } => commands::files::touch(&cfg, &paths),
        Command::Hint { command } => commands::hint::run(command),
        Command::Bench(args) => shoal_bench::run(args),
        Command::Pfa(args) => shoal_pfa::tools::run(args).map_err(Into::into),
        Command::Fsck {
            cfg,
            repair,
            grace,
            json,
            path,
        } => commands::fsck::run(&cfg, path.as_deref(), repair, grace, json),
        Command::Stats {
            mount: Some(dir),
            reset,
            json,
            ..
        } => commands::stats::mount(&dir, reset, json),
        Command::Stats {
            cfg,
            json,
            server,
            path,
            ..
        } => commands::stats::run(&cfg, path.as_deref(), server, json),
        Command::Config { command } => commands::config::run(command),
        Command::Man { dir } => commands::docs::man(Cli::command(), &dir),
        Command::Completions { shell } => commands::docs::completions(Cli::command(), shell),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("shoal: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_for_every_visible_subcommand() {
        let dir = std::env::temp_dir().join(format!("shoal-man-test.{}", std::process::id()));
        commands::docs::man(Cli::command(), &dir).unwrap();
        let mut pages: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        pages.sort();
        for page in [
            "shoal.1",
            "shoal-up.1",
            "shoal-config-defaults.1",
            "shoal-bench-smallfile.1",
            "shoal-hint-set.1",
        ] {
            assert!(pages.iter().any(|p| p == page), "{page} not in {pages:?}");
        }
        let up = std::fs::read_to_string(dir.join("shoal-up.1")).unwrap();
        assert!(up.contains("servers"), "{up}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn completions_name_the_subcommands() {
        let mut out = Vec::new();
        let shell = clap_complete::Shell::Bash;
        clap_complete::generate(shell, &mut Cli::command(), "shoal", &mut out);
        let script = String::from_utf8(out).unwrap();
        for word in ["lsplus", "fsck", "completions", "defaults"] {
            assert!(script.contains(word), "{word} missing");
        }
    }
}
