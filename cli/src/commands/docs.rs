//! `shoal man DIR` and `shoal completions SHELL`: manual pages and shell
//! completions generated from the command-line definition itself (clap), so
//! they always describe the binary that wrote them.

use std::path::Path;

use clap_complete::Shell;
use shoal_proto::error::{Result, ShoalError};

/// Writes `shoal.1` and one page per subcommand (`shoal-up.1`,
/// `shoal-bench-smallfile.1`, ...) into `dir`, creating it if needed.
pub fn man(cli: clap::Command, dir: &Path) -> Result<()> {
    let context = |e: std::io::Error| ShoalError::from(e).context(dir.display());
    std::fs::create_dir_all(dir).map_err(context)?;
    clap_mangen::generate_to(cli, dir).map_err(context)?;
    eprintln!(
        "manual pages written to {} (read one with: man -l {}/shoal.1)",
        dir.display(),
        dir.display()
    );
    Ok(())
}

/// Prints the completion script for `shell` on stdout.
pub fn completions(mut cli: clap::Command, shell: Shell) -> Result<()> {
    clap_complete::generate(shell, &mut cli, "shoal", &mut std::io::stdout());
    Ok(())
}
