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

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn a_page_for_every_visible_subcommand() {
        let dir = std::env::temp_dir().join(format!("shoal-man-test.{}", std::process::id()));
        man(crate::Cli::command(), &dir).unwrap();
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
        clap_complete::generate(Shell::Bash, &mut crate::Cli::command(), "shoal", &mut out);
        let script = String::from_utf8(out).unwrap();
        for word in ["lsplus", "fsck", "completions", "defaults"] {
            assert!(script.contains(word), "{word} missing");
        }
    }
}
