//! `shoal cp SRC DST`: copies a file into, out of, or within Shoal through the
//! native client. Shoal paths are `shoal:/path` (with --config) or paths under a
//! live mount; everything else is a local path. Large copies keep several
//! strip-sized writes in flight across the servers and show a progress bar.

use std::io::{Read, Write};
use std::path::Path;

use bytes::Bytes;
use indicatif::{ProgressBar, ProgressStyle};
use shoal_client::{mounts, Client, FileKind};
use shoal_proto::error::{Errno, Result, ShoalError};
use shoal_proto::Handle;
use tokio::task::JoinSet;

use crate::target::{connect, locate, runtime, ConfigArg, SHOAL_PREFIX};

/// Bytes per read or write call; the client splits it across servers.
const CHUNK: usize = 8 << 20;
/// Chunks in flight at once.
const IN_FLIGHT: usize = 4;
/// Files at least this large get a progress bar.
const PROGRESS_MIN: u64 = 16 << 20;

enum Side {
    Local(String),
    Shoal(std::path::PathBuf, String),
}

fn classify(cfg: &ConfigArg, path: &str) -> Result<Side> {
    if path.starts_with(SHOAL_PREFIX) || mounts::containing(Path::new(path)).is_some() {
        let (config, shoal) = locate(cfg, path)?;
        return Ok(Side::Shoal(config, shoal));
    }
    Ok(Side::Local(path.to_string()))
}

fn progress(len: u64, quiet: bool) -> ProgressBar {
    if quiet || len < PROGRESS_MIN {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    bar.set_style(
        ProgressStyle::with_template(
            "{bytes}/{total_bytes} [{bar:40}] {binary_bytes_per_sec} eta {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar
}

pub fn run(cfg: &ConfigArg, source: &str, dest: &str, quiet: bool) -> Result<()> {
    let src = classify(cfg, source)?;
    let dst = classify(cfg, dest)?;
    runtime()?.block_on(async {
        match (src, dst) {
            (Side::Local(_), Side::Local(_)) => Err(ShoalError::invalid(
                "neither path is in Shoal (use shoal:/path with --config, or a path under a mount)",
            )),
            (Side::Local(s), Side::Shoal(c, d)) => {
                let client = connect(&c).await?;
                let mut file =
                    std::fs::File::open(&s).map_err(|e| ShoalError::from(e).context(&s))?;
                let len = file.metadata()?.len();
                let basename = Path::new(&s)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let h = create_dest(&client, &d, &basename).await?;
                let bar = progress(len, quiet);
                let mut jobs = JoinSet::new();
                let mut offset = 0u64;
                loop {
                    let mut buf = vec![0u8; CHUNK];
                    let n = read_full(&mut file, &mut buf)?;
                    if n == 0 {
                        break;
                    }
                    buf.truncate(n);
                    if jobs.len() >= IN_FLIGHT {
                        jobs.join_next()
                            .await
                            .transpose()
                            .map_err(join_err)?
                            .transpose()?;
                    }
                    let c = client.clone();
                    let at = offset;
                    jobs.spawn(async move { c.write(h, at, Bytes::from(buf)).await });
                    offset += n as u64;
                    bar.set_position(offset);
                }
                while let Some(r) = jobs.join_next().await {
                    r.map_err(join_err)??;
                }
                client.fsync(h).await?;
                bar.finish_and_clear();
                Ok(())
            }
            (Side::Shoal(c, s), Side::Local(d)) => {
                let client = connect(&c).await?;
                let h = source_file(&client, &s).await?;
                let len = client.getattr(h).await?.size;
                let target = if Path::new(&d).is_dir() {
                    Path::new(&d).join(Path::new(&s).file_name().unwrap_or_default())
                } else {
                    d.into()
                };
                let mut out = std::fs::File::create(&target)
                    .map_err(|e| ShoalError::from(e).context(target.display()))?;
                let bar = progress(len, quiet);
                copy_out(&client, h, |data| Ok(out.write_all(data)?), &bar).await?;
                bar.finish_and_clear();
                Ok(())
            }
            (Side::Shoal(c1, s), Side::Shoal(c2, d)) => {
                if c1 != c2 {
                    return Err(ShoalError::invalid(
                        "copies between two clusters are not supported",
                    ));
                }
                let client = connect(&c1).await?;
                let h = source_file(&client, &s).await?;
                let len = client.getattr(h).await?.size;
                let basename = Path::new(&s)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                let out = create_dest(&client, &d, &basename).await?;
                let bar = progress(len, quiet);
                let mut offset = 0u64;
                loop {
                    let data = client.read(h, offset, CHUNK).await?;
                    if data.is_empty() {
                        break;
                    }
                    let n = data.len() as u64;
                    client.write(out, offset, data).await?;
                    offset += n;
                    bar.set_position(offset);
                }
                client.fsync(out).await?;
                bar.finish_and_clear();
                Ok(())
            }
        }
    })
}

fn join_err(e: tokio::task::JoinError) -> ShoalError {
    ShoalError::io(format!("copy task failed: {e}"))
}

fn read_full(file: &mut std::fs::File, buf: &mut [u8]) -> Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

async fn source_file(client: &Client, path: &str) -> Result<Handle> {
    let (h, kind) = client.resolve(path).await?;
    if kind != FileKind::File {
        return Err(ShoalError::new(
            Errno::EISDIR,
            format!("{path}: not a regular file"),
        ));
    }
    Ok(h)
}

/// Creates (or truncates) the destination file; a directory destination gets
/// the source's base name inside it.
async fn create_dest(client: &Client, path: &str, basename: &str) -> Result<Handle> {
    let (dir, name) = match client.resolve(path).await {
        Ok((h, FileKind::Directory)) => (h, basename.to_string()),
        Ok(_) | Err(_) => {
            let (dir, name) = client.resolve_parent(path).await?;
            (dir, name.to_string())
        }
    };
    match client.lookup(dir, &name).await {
        Ok((h, FileKind::File)) => {
            client.truncate(h, 0).await?;
            Ok(h)
        }
        Ok(_) => Err(ShoalError::new(
            Errno::EISDIR,
            format!("{path}: not a regular file"),
        )),
        Err(e) if e.errno == Errno::ENOENT => Ok(client.create(dir, &name, 0o644).await?.handle),
        Err(e) => Err(e.context(path)),
    }
}

/// Reads file `h` in order, several chunks in flight, handing each to `sink`.
async fn copy_out(
    client: &Client,
    h: Handle,
    mut sink: impl FnMut(&[u8]) -> Result<()>,
    bar: &ProgressBar,
) -> Result<()> {
    let mut next = 0u64;
    let mut queue = std::collections::VecDeque::new();
    let mut done = false;
    while !done || !queue.is_empty() {
        while !done && queue.len() < IN_FLIGHT {
            let c = client.clone();
            let at = next;
            queue.push_back(tokio::spawn(async move { c.read(h, at, CHUNK).await }));
            next += CHUNK as u64;
        }
        let Some(job) = queue.pop_front() else { break };
        let data = job.await.map_err(join_err)??;
        if data.len() < CHUNK {
            done = true;
        }
        if !data.is_empty() {
            sink(&data)?;
            bar.inc(data.len() as u64);
        }
        if done {
            for j in queue.drain(..) {
                j.abort();
            }
        }
    }
    Ok(())
}
