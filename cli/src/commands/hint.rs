//! `shoal hint set|get|unset DIR ...`: a directory's hints ([Kuhn 2008]), which
//! lay out the files created in it from then on and are copied to new
//! subdirectories. The same hints are the extended attributes
//! `user.shoal.<hint>` of the directory on a mount.

use serde_json::{Map, Value};
use shoal_client::{Client, FileKind};
use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::hints::{self, Hint};
use shoal_proto::msg::DirHints;
use shoal_proto::Handle;

use crate::target::{open, runtime, ConfigArg};

#[derive(clap::Subcommand)]
pub enum HintCommand {
    /// Set hints of a directory: strip_size=BYTES (4096 to 1 GiB, suffix K, M
    /// or G), num_dfiles=N (1 to the servers), dist=simple_stripe[:strip_size=N],
    /// no_metafile=1|0.
    Set {
        #[command(flatten)]
        cfg: ConfigArg,
        dir: String,
        #[arg(required = true, value_name = "HINT=VALUE")]
        hints: Vec<String>,
    },
    /// Show the hints set on a directory, one HINT=VALUE a line.
    Get {
        #[command(flatten)]
        cfg: ConfigArg,
        #[arg(long)]
        json: bool,
        dir: String,
    },
    /// Clear hints of a directory (new files then follow the cluster's settings).
    Unset {
        #[command(flatten)]
        cfg: ConfigArg,
        dir: String,
        #[arg(required = true, value_name = "HINT")]
        hints: Vec<String>,
    },
}

/// The client and handle of directory `path`.
async fn directory(cfg: &ConfigArg, path: &str) -> Result<(Client, Handle)> {
    let (client, paths) = open(cfg, &[path.to_string()]).await?;
    let (h, kind) = client.resolve(&paths[0]).await?;
    if kind != FileKind::Directory {
        return Err(ShoalError::new(
            Errno::ENOTDIR,
            format!("{path}: hints are set on directories, and this is not one"),
        ));
    }
    Ok((client, h))
}

pub fn run(command: HintCommand) -> Result<()> {
    runtime()?.block_on(async {
        match command {
            HintCommand::Set { cfg, dir, hints } => {
                let (client, h) = directory(&cfg, &dir).await?;
                // Every value is checked before any is set, so a typo in the
                // last one changes nothing.
                let mut scratch = DirHints::default();
                let mut parsed = Vec::with_capacity(hints.len());
                for text in &hints {
                    let (hint, value) = hints::parse_assignment(text)?;
                    hints::set(&mut scratch, hint, value, client.num_servers())?;
                    parsed.push((hint, value));
                }
                for (hint, value) in parsed {
                    client.set_hint(h, hint, value).await?;
                }
                Ok(())
            }
            HintCommand::Get { cfg, json, dir } => {
                let (client, h) = directory(&cfg, &dir).await?;
                let set = hints::list(&client.hints(h).await?);
                if json {
                    let map: Map<String, Value> = set
                        .into_iter()
                        .map(|(hint, v)| (hint.name().to_string(), Value::String(v)))
                        .collect();
                    println!("{}", Value::Object(map));
                } else {
                    for (hint, value) in set {
                        println!("{}={value}", hint.name());
                    }
                }
                Ok(())
            }
            HintCommand::Unset { cfg, dir, hints } => {
                let (client, h) = directory(&cfg, &dir).await?;
                let parsed = hints
                    .iter()
                    .map(|name| Hint::parse(name))
                    .collect::<Result<Vec<_>>>()?;
                for hint in parsed {
                    client.unset_hint(h, hint).await?;
                }
                Ok(())
            }
        }
    })
}
