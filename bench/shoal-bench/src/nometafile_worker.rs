//! One client process of `shoal bench nometafile`: the benchmark
//! program of [Kuhn 2008]. In its own directory it makes DIRS subdirectories (untimed),
//! creates FILES empty files in each, lists them with their attributes,
//! removes them, and removes the subdirectories (untimed); each phase behind
//! the parent's barrier (`workers`), one operation after another, as the
//! paper's program did.
//!
//! The native client runs with its caches off, so each phase pays its whole
//! cost, as the paper's separate runs of its program did. (Directory hints
//! are kept regardless: the servers correct a stale copy.)

use std::path::Path;

use shoal_client::{Client, FileKind};
use shoal_proto::cluster::ClusterConfig;
use shoal_proto::error::{Result, ShoalError};
use shoal_proto::Handle;

use crate::runtime::runtime;
use crate::workers::Barrier;

/// The phases, in order; the parent times create, list and remove.
pub const PHASES: [&str; 5] = ["mkdir", "create", "list", "remove", "rmdir"];

fn dir_name(i: usize) -> String {
    format!("d{i:03}")
}

fn file_name(i: usize) -> String {
    format!("f{i:04}")
}

/// Runs worker `k` in the Shoal directory `{run_dir}/c{k}` of the cluster
/// whose file is `config`.
pub fn worker(config: &Path, run_dir: &str, k: usize, dirs: usize, files: usize) -> Result<()> {
    let rt = runtime()?;
    let mut cluster = ClusterConfig::load(config)?;
    cluster.settings.cache_ttl_ms = 0;
    let client = Client::new(cluster);
    let top = rt.block_on(async {
        client.ping_all().await?;
        let (top, _) = client.resolve(&format!("{run_dir}/c{k}")).await?;
        // Learn its hints now, so the first mkdir needs no second try.
        client.hints(top).await?;
        Ok::<_, ShoalError>(top)
    })?;
    let mut barrier = Barrier::new();
    let subdirs = barrier.phase(PHASES[0], || {
        rt.block_on(async {
            let mut made = Vec::with_capacity(dirs);
            for i in 0..dirs {
                made.push(client.mkdir(top, &dir_name(i), 0o755).await?.handle);
            }
            Ok(made)
        })
    })?;
    barrier.phase(PHASES[1], || {
        rt.block_on(async {
            for d in &subdirs {
                for i in 0..files {
                    client.create(*d, &file_name(i), 0o644).await?;
                }
            }
            Ok(())
        })
    })?;
    barrier.phase(PHASES[2], || rt.block_on(list(&client, &subdirs, files)))?;
    barrier.phase(PHASES[3], || {
        rt.block_on(async {
            for d in &subdirs {
                for i in 0..files {
                    client.unlink(*d, &file_name(i)).await?;
                }
            }
            Ok(())
        })
    })?;
    barrier.phase(PHASES[4], || {
        rt.block_on(async {
            for i in 0..dirs {
                client.rmdir(top, &dir_name(i)).await?;
            }
            Ok(())
        })
    })
}

/// Lists every directory with the attributes of every entry (readdirplus
/// when the cluster has it, else a getattr per entry, as `shoal lsplus -l`
/// does) and checks that each holds its files, empty.
async fn list(client: &Client, subdirs: &[Handle], files: usize) -> Result<()> {
    for d in subdirs {
        let listed = client.readdir_plus_all(*d).await?;
        let empty_files = listed
            .iter()
            .filter(|(_, a)| a.kind == FileKind::File && a.size == 0)
            .count();
        if listed.len() != files || empty_files != files {
            return Err(ShoalError::io(format!(
                "directory {d:#x} lists {} entries, {empty_files} empty files; expected {files}",
                listed.len()
            )));
        }
    }
    Ok(())
}
