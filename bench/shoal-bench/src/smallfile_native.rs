//! The smallfile worker over the native client instead of POSIX calls: the
//! same nine phases, timed the same way, bypassing FUSE. The run directory
//! lies under a live Shoal mount, which names the cluster; every timed
//! operation goes straight to the servers. The native client opens nothing;
//! what a POSIX close does (send the writes the gathering path keeps, report
//! a failed send) is `Client::flush`, called where the POSIX forms close:
//! after each file's write in the open+close form (`reopen`), in the close
//! phase otherwise.

use std::path::Path;

use bytes::Bytes;
use shoal_client::{mounts, Client, FileKind};
use shoal_proto::cluster::ClusterConfig;
use shoal_proto::error::{Result, ShoalError};
use shoal_proto::Handle;

use crate::pattern;
use crate::runtime::runtime;
use crate::smallfile::PHASES;
use crate::smallfile_layout::Layout;
use crate::workers::Barrier;

/// One worker process: the nine phases in its directory of `run_dir`
/// through the native client.
pub fn worker(
    run_dir: &Path,
    l: Layout,
    size: usize,
    reopen: bool,
    create_batch: usize,
) -> Result<()> {
    let (id, files) = (l.id, l.files);
    let (mount, shoal_dir) = mounts::containing(run_dir).ok_or_else(|| {
        ShoalError::invalid(format!(
            "{}: --native needs a directory under a live Shoal mount",
            run_dir.display()
        ))
    })?;
    let rt = runtime()?;
    let client = Client::new(ClusterConfig::load(&mount.cluster_file)?);
    rt.block_on(client.ping_all())?;
    let (parent, _) = rt.block_on(client.resolve(&shoal_dir))?;
    let name = l.dir_name();
    let names: Vec<String> = (0..files).map(|i| l.file_name(i)).collect();
    let mut want = pattern::base(size, id);
    let mut b = Barrier::new();

    let made = b.phase(PHASES[0].0, || match l.makes_dir() {
        true => rt
            .block_on(client.mkdir(parent, &name, 0o755))
            .map(|a| Some(a.handle)),
        false => Ok(None),
    })?;
    let handles = b.phase(PHASES[1].0, || {
        // The shared directory another worker made: it exists once every
        // worker is past the mkdir phase, so the lookup is timed here, one
        // message beside the phase's creates (a POSIX worker's path
        // lookups are timed too).
        let dir = match made {
            Some(dir) => dir,
            None => rt.block_on(client.lookup(parent, &name))?.0,
        };
        create_all(&rt, &client, dir, &names, create_batch).map(|h| (dir, h))
    })?;
    let (dir, handles) = handles;
    b.phase(PHASES[2].0, || {
        rt.block_on(list_and_stat(&client, &l, dir, 0))
    })?;
    b.phase(PHASES[3].0, || {
        for (i, h) in handles.iter().enumerate() {
            pattern::stamp(&mut want, pattern::tag(id, i as u64), 0);
            rt.block_on(client.write(*h, 0, Bytes::copy_from_slice(&want)))?;
            if reopen {
                rt.block_on(client.flush(*h))?;
            }
        }
        Ok(())
    })?;
    b.phase(PHASES[4].0, || {
        for (i, h) in handles.iter().enumerate() {
            let got = rt.block_on(client.read(*h, 0, size))?;
            pattern::stamp(&mut want, pattern::tag(id, i as u64), 0);
            if let Some(pos) = pattern::first_mismatch(&got, &want, true) {
                return Err(ShoalError::io(format!(
                    "{shoal_dir}/{name}/{}: content differs from what was written, {}",
                    names[i],
                    pattern::describe_mismatch(&got, &want, pos)
                )));
            }
        }
        Ok(())
    })?;
    b.phase(PHASES[5].0, || {
        rt.block_on(list_and_stat(&client, &l, dir, size as u64))
    })?;
    b.phase(PHASES[6].0, || {
        if !reopen {
            for h in &handles {
                rt.block_on(client.flush(*h))?;
            }
        }
        Ok(())
    })?;
    b.phase(PHASES[7].0, || {
        for n in &names {
            rt.block_on(client.unlink(dir, n))?;
        }
        Ok(())
    })?;
    b.phase(PHASES[8].0, || match l.makes_dir() {
        true => rt.block_on(client.rmdir(parent, &name)),
        false => Ok(()),
    })?;
    Ok(())
}

/// The create phase: `names` in `dir`, `create_batch` to a `create_files`
/// call (1: one `create` each).
fn create_all(
    rt: &tokio::runtime::Runtime,
    client: &Client,
    dir: Handle,
    names: &[String],
    create_batch: usize,
) -> Result<Vec<Handle>> {
    if create_batch == 1 {
        return names
            .iter()
            .map(|n| rt.block_on(client.create(dir, n, 0o644)).map(|a| a.handle))
            .collect();
    }
    let mut handles = Vec::with_capacity(names.len());
    for chunk in names.chunks(create_batch) {
        for made in rt.block_on(client.create_files(dir, chunk, 0o644))? {
            handles.push(made?.handle);
        }
    }
    Ok(handles)
}

/// Lists `dir`, stats this worker's entries, and checks the listing's count
/// and that each is a regular file of `size` bytes.
async fn list_and_stat(client: &Client, l: &Layout, dir: Handle, size: u64) -> Result<()> {
    let entries = client.readdir_all(dir).await?;
    let mut own = 0;
    for e in entries.iter().filter(|e| l.owns(&e.name)) {
        own += 1;
        let a = client.getattr(e.handle).await?;
        if a.kind != FileKind::File || a.size != size {
            return Err(ShoalError::io(format!(
                "{}: stat says {:?} of {} bytes, expected a file of {size} bytes",
                e.name, a.kind, a.size
            )));
        }
    }
    l.check_listing(&l.dir_name(), entries.len(), own)
        .map_err(ShoalError::io)
}
