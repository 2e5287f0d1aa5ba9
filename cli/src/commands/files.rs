//! Small file tools over the native client: ls, stat, cat, rm, mkdir, touch.

use std::io::Write;

use futures::StreamExt;
use shoal_client::{Attr, Client, FileKind, SetAttr, SetTime};
use shoal_proto::error::{Errno, Result, ShoalError};

use crate::target::{open, runtime, ConfigArg};

/// Attribute requests in flight at once in `ls -l`.
const LIST_CONCURRENCY: usize = 64;

/// `drwxr-xr-x`-style mode string.
pub fn mode_string(kind: FileKind, mode: u32) -> String {
    let mut s = String::with_capacity(10);
    s.push(match kind {
        FileKind::Directory => 'd',
        FileKind::Symlink => 'l',
        FileKind::File => '-',
        FileKind::Fifo => 'p',
        FileKind::Socket => 's',
        FileKind::CharDevice => 'c',
        FileKind::BlockDevice => 'b',
    });
    for shift in [6, 3, 0] {
        let bits = (mode >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        s.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    s
}

pub fn long_line(a: &Attr, name: &str) -> String {
    let secs = a.mtime_ns.div_euclid(1_000_000_000);
    format!(
        "{} {:>2} {:>5} {:>5} {:>12} {} {}",
        mode_string(a.kind, a.mode),
        a.nlink,
        a.uid,
        a.gid,
        a.size,
        format_time(secs),
        name
    )
}

/// UTC time as `YYYY-MM-DD HH:MM`.
fn format_time(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}",
        rem / 3600,
        rem % 3600 / 60
    )
}

/// What `ls` and `lsplus` print for a path that is not a directory.
pub async fn list_one(
    client: &Client,
    h: shoal_proto::Handle,
    path: &str,
    long: bool,
    out: &mut impl Write,
) -> Result<()> {
    let line = if long {
        long_line(&client.getattr(h).await?, path)
    } else {
        path.to_string()
    };
    writeln!(out, "{line}")?;
    Ok(())
}

pub fn ls(cfg: &ConfigArg, path: &str, long: bool) -> Result<()> {
    runtime()?.block_on(async {
        let (client, paths) = open(cfg, &[path.to_string()]).await?;
        let (h, kind) = client.resolve(&paths[0]).await?;
        let mut out = std::io::BufWriter::new(std::io::stdout().lock());
        if kind != FileKind::Directory {
            return list_one(&client, h, path, long, &mut out).await;
        }
        let entries = client.readdir_all(h).await?;
        if !long {
            for e in &entries {
                writeln!(out, "{}", e.name)?;
            }
            return Ok(());
        }
        let mut attrs = futures::stream::iter(entries.iter().map(|e| {
            let client = client.clone();
            async move { client.getattr(e.handle).await }
        }))
        .buffered(LIST_CONCURRENCY);
        let mut i = 0;
        while let Some(a) = attrs.next().await {
            writeln!(out, "{}", long_line(&a?, &entries[i].name))?;
            i += 1;
        }
        Ok(())
    })
}

pub fn stat(cfg: &ConfigArg, path: &str, layout: bool, json: bool) -> Result<()> {
    runtime()?.block_on(async {
        let (client, paths) = open(cfg, &[path.to_string()]).await?;
        let (h, _) = client.resolve(&paths[0]).await?;
        let a = client.getattr(h).await?;
        let (layout, partitions) = match (layout, a.kind) {
            (true, FileKind::File) => (Some(client.layout(h).await?), None),
            (true, FileKind::Directory) => (None, Some(client.dir_partitions(h).await?)),
            _ => (None, None),
        };
        if json {
            let mut v = serde_json::json!({
                "path": paths[0],
                "handle": format!("{h:#x}"),
                "kind": format!("{:?}", a.kind).to_lowercase(),
                "mode": format!("{:o}", a.mode),
                "uid": a.uid,
                "gid": a.gid,
                "size": a.size,
                "atime_ns": a.atime_ns,
                "mtime_ns": a.mtime_ns,
                "ctime_ns": a.ctime_ns,
                "nlink": a.nlink,
            });
            if let Some(l) = &layout {
                v["layout"] = serde_json::json!({
                    "no_metafile": l.no_metafile,
                    "strip_size": l.strip_size,
                    "datafiles": l.datafiles.iter().map(|(d, s)| serde_json::json!({
                        "handle": format!("{d:#x}"),
                        "server": s,
                    })).collect::<Vec<_>>(),
                });
            }
            if let Some(parts) = &partitions {
                v["partitions"] = parts
                    .iter()
                    .map(|p| {
                        serde_json::json!({
                            "index": p.partition_index,
                            "depth": p.partition_depth,
                            "handle": format!("{:#x}", p.handle),
                            "server": shoal_proto::handle::server_of(p.handle),
                            "entries": p.entry_count,
                            "splitting": p.split_pending != 0,
                        })
                    })
                    .collect();
            }
            println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            return Ok(());
        }
        println!("  path: {}", paths[0]);
        println!(
            "handle: {h:#x} (server {})",
            shoal_proto::handle::server_of(h)
        );
        println!("  kind: {:?}", a.kind);
        println!("  mode: {} ({:o})", mode_string(a.kind, a.mode), a.mode);
        println!(" owner: uid {} gid {}", a.uid, a.gid);
        println!("  size: {}", a.size);
        println!(
            " mtime: {}",
            format_time(a.mtime_ns.div_euclid(1_000_000_000))
        );
        if let Some(l) = layout {
            if l.no_metafile {
                println!(" strip: none: one datafile and no metafile (no_metafile)");
            } else {
                println!(
                    " strip: {} bytes over {} datafiles",
                    l.strip_size,
                    l.datafiles.len()
                );
            }
            for (i, (d, s)) in l.datafiles.iter().enumerate() {
                println!("  dfile {i}: {d:#x} on server {s}");
            }
        }
        if let Some(parts) = partitions {
            match parts.len() {
                1 => println!(
                    " split: no: its entries are on server {}",
                    shoal_proto::handle::server_of(h)
                ),
                n => println!(" split: {n} partitions"),
            }
            for p in parts.iter().filter(|_| parts.len() > 1) {
                println!(
                    "  part {}: {:#x} on server {}, depth {}, {} entries{}",
                    p.partition_index,
                    p.handle,
                    shoal_proto::handle::server_of(p.handle),
                    p.partition_depth,
                    p.entry_count,
                    if p.split_pending != 0 {
                        ", splitting"
                    } else {
                        ""
                    }
                );
            }
        }
        Ok(())
    })
}

/// Bytes `cat` asks for per read.
const CAT_CHUNK: usize = 4 << 20;

pub fn cat(cfg: &ConfigArg, paths: &[String]) -> Result<()> {
    runtime()?.block_on(async {
        let (client, shoal_paths) = open(cfg, paths).await?;
        let mut out = std::io::stdout().lock();
        for p in &shoal_paths {
            let (h, kind) = client.resolve(p).await?;
            if kind == FileKind::Directory {
                return Err(ShoalError::new(
                    Errno::EISDIR,
                    format!("{p}: is a directory"),
                ));
            }
            let mut offset = 0u64;
            loop {
                let data = client.read(h, offset, CAT_CHUNK).await?;
                if data.is_empty() {
                    break;
                }
                out.write_all(&data)?;
                offset += data.len() as u64;
            }
        }
        out.flush()?;
        Ok(())
    })
}

pub fn rm(cfg: &ConfigArg, paths: &[String], recursive: bool) -> Result<()> {
    runtime()?.block_on(async {
        let (client, shoal_paths) = open(cfg, paths).await?;
        for p in &shoal_paths {
            let (dir, name) = client.resolve_parent(p).await?;
            let (h, kind) = client.lookup(dir, name).await.map_err(|e| e.context(p))?;
            if kind == FileKind::Directory {
                if !recursive {
                    return Err(ShoalError::new(
                        Errno::EISDIR,
                        format!("{p}: is a directory (use -r)"),
                    ));
                }
                remove_tree(&client, h).await.map_err(|e| e.context(p))?;
                client.rmdir(dir, name).await.map_err(|e| e.context(p))?;
            } else {
                client.unlink(dir, name).await.map_err(|e| e.context(p))?;
            }
        }
        Ok(())
    })
}

/// Removes everything below directory `dir`, depth first; files of one
/// directory are removed concurrently.
async fn remove_tree(client: &Client, dir: shoal_proto::Handle) -> Result<()> {
    let entries = client.readdir_all(dir).await?;
    for sub in entries.iter().filter(|e| e.kind == FileKind::Directory) {
        Box::pin(remove_tree(client, sub.handle)).await?;
        client.rmdir(dir, &sub.name).await?;
    }
    let files = entries.iter().filter(|e| e.kind != FileKind::Directory);
    futures::stream::iter(files.map(|e| client.unlink(dir, &e.name)))
        .buffer_unordered(LIST_CONCURRENCY)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .collect()
}

pub fn mkdir(cfg: &ConfigArg, paths: &[String], parents: bool) -> Result<()> {
    runtime()?.block_on(async {
        let (client, shoal_paths) = open(cfg, paths).await?;
        for p in &shoal_paths {
            if !parents {
                let (dir, name) = client.resolve_parent(p).await?;
                client
                    .mkdir(dir, name, 0o755)
                    .await
                    .map_err(|e| e.context(p))?;
                continue;
            }
            let mut dir = client.root();
            for name in shoal_proto::names::split_path(p)? {
                dir = match client.mkdir(dir, name, 0o755).await {
                    Ok(a) => a.handle,
                    Err(e) if e.errno == Errno::EEXIST => {
                        let (h, kind) = client.lookup(dir, name).await?;
                        if kind != FileKind::Directory {
                            return Err(ShoalError::new(
                                Errno::ENOTDIR,
                                format!("{p}: {name} is not a directory"),
                            ));
                        }
                        h
                    }
                    Err(e) => return Err(e.context(p)),
                };
            }
        }
        Ok(())
    })
}

pub fn touch(cfg: &ConfigArg, paths: &[String]) -> Result<()> {
    runtime()?.block_on(async {
        let (client, shoal_paths) = open(cfg, paths).await?;
        for p in &shoal_paths {
            let (dir, name) = client.resolve_parent(p).await?;
            match client.lookup(dir, name).await {
                Ok((h, _)) => {
                    client
                        .setattr(
                            h,
                            &SetAttr {
                                atime: Some(SetTime::Now),
                                mtime: Some(SetTime::Now),
                                ..Default::default()
                            },
                        )
                        .await?;
                }
                Err(e) if e.errno == Errno::ENOENT => {
                    client
                        .create(dir, name, 0o644)
                        .await
                        .map_err(|e| e.context(p))?;
                }
                Err(e) => return Err(e.context(p)),
            }
        }
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_and_times_format_like_ls() {
        assert_eq!(mode_string(FileKind::Directory, 0o755), "drwxr-xr-x");
        assert_eq!(mode_string(FileKind::File, 0o640), "-rw-r-----");
        assert_eq!(format_time(0), "1970-01-01 00:00");
        assert_eq!(format_time(1_700_000_000), "2023-11-14 22:13");
    }
}
