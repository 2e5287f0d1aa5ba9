//! `shoal lsplus [-l] PATH`: a directory listing through readdirplus
//! (pvfs2-lsplus of [Carns 2009]). Entries and their attributes come in batches: one
//! readdir per batch of entries, one listattr per server holding their
//! objects, at most one get_sizes per server for striped files, instead of
//! the getattr per entry (n+1 messages each) that `shoal ls -l` sends. With
//! the cluster's `readdirplus` switch off the client falls back to that.
//! The output is the same as `shoal ls`.

use std::io::Write;

use shoal_client::FileKind;
use shoal_proto::error::Result;

use super::files::{list_one, long_line};
use crate::target::{open, runtime, ConfigArg};

pub fn run(cfg: &ConfigArg, path: &str, long: bool) -> Result<()> {
    runtime()?.block_on(async {
        let (client, paths) = open(cfg, &[path.to_string()]).await?;
        let (h, kind) = client.resolve(&paths[0]).await?;
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        if kind != FileKind::Directory {
            return list_one(&client, h, path, long, &mut out).await;
        }
        for (e, a) in client.readdir_plus_all(h).await? {
            if long {
                writeln!(out, "{}", long_line(&a, &e.name))?;
            } else {
                writeln!(out, "{}", e.name)?;
            }
        }
        out.flush()?;
        Ok(())
    })
}
