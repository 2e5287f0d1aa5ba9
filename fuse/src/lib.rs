//! Shoal's FUSE mount (`shoal mount`): VFS operations mapped onto the native
//! client, answered from async tasks so the FUSE loop never blocks.
//!
//! - `fs`: the `fuser::Filesystem` implementation, one task per request.
//! - `inline_task`: a task's first step on the loop thread, the rest on the runtime.
//! - `attr`: Shoal attributes as the kernel's `FileAttr`.
//! - `dirs`: per-open-directory listing snapshots (stable readdir offsets).
//! - `readdir`: READDIR / READDIRPLUS replies filled from those snapshots.
//! - `xattr`: the xattr size protocol and the refused namespaces.
//! - `errors`: errno mapping and name checks.
//! - `groups`: the caller's supplementary groups, from /proc.
//! - `readahead`: raising the kernel readahead window after mounting.
//! - `kernel_leases`: the kernel's caches under the client's leases, and
//!   their invalidation when a server recalls one.
//! - `sweeps`: memory given back after the kernel forgets many inodes.
//! - `stats`, `metrics_endpoint`: the mount's counters, for `shoal stats
//!   --mount` and, when asked, for Prometheus.
//!
//! Limits a user may meet: names and symlink targets must be UTF-8 (others
//! get EINVAL); device files are stored but not opened (nodev); `rename`
//! with RENAME_EXCHANGE gets EINVAL; POSIX ACLs, SELinux
//! labels and file capabilities (`system.*`, `security.selinux`,
//! `security.capability` xattrs) get EOPNOTSUPP.

mod access;
mod attr;
mod dirs;
mod errors;
mod fs;
mod groups;
mod inline_task;
mod kernel_leases;
mod lock_epochs;
mod lock_waits;
mod locks;
mod metrics_endpoint;
mod read_streams;
mod readahead;
mod readdir;
mod reads_in_place;
mod shared;
mod stats;
mod sweeps;
mod xattr;

use std::path::Path;
use std::time::Duration;

use fuser::{Config, MountOption, Session, SessionACL};
use shoal_proto::error::{Errno, Result, ShoalError};

/// FUSE loop threads. Each only reads a request, copies what it needs and
/// spawns a task, so two keep up with both cores. With FUSE over io_uring
/// the rings' threads serve the requests instead (one per possible CPU), and
/// fuser keeps one classic loop thread for what the kernel still sends
/// through `/dev/fuse` (forgets, interrupts).
const LOOP_THREADS: usize = 2;

pub struct MountOptions {
    /// Shown as the mount's source in /proc/mounts (the cluster file's
    /// absolute path); the fs type appears as `fuse.shoal`.
    pub fsname: String,
    /// Let users other than the one mounting use the mount.
    pub allow_other: bool,
    /// Kernel entry/attribute cache TTL (the cluster's cache_ttl_ms).
    pub ttl: Duration,
    /// Where to answer Prometheus scrapes (`GET /metrics`), if anywhere.
    pub metrics_addr: Option<std::net::SocketAddr>,
}

/// Mounts `client`'s cluster on `mountpoint` and serves until it is
/// unmounted (`fusermount3 -u`): blocking. Requests are answered from tasks
/// spawned on `runtime`, so call this from a thread that is not one of the
/// runtime's workers (e.g. the main thread, outside `block_on`).
pub fn mount(
    client: shoal_client::Client,
    runtime: tokio::runtime::Handle,
    mountpoint: &Path,
    opts: &MountOptions,
) -> Result<()> {
    let meta = std::fs::metadata(mountpoint)
        .map_err(|e| ShoalError::from(e).context(mountpoint.display()))?;
    if !meta.is_dir() {
        return Err(ShoalError::new(
            Errno::ENOTDIR,
            format!("{}: mount point is not a directory", mountpoint.display()),
        ));
    }
    let mountpoint = mountpoint
        .canonicalize()
        .map_err(|e| ShoalError::from(e).context(mountpoint.display()))?;
    reserve_standard_fds();
    let config = session_config(opts);
    let sender = send_due_writes(&client, &runtime);
    let fs = fs::ShoalFs::new(client.clone(), runtime.clone(), opts.ttl);
    let scrapes = match opts.metrics_addr {
        Some(addr) => Some(serve_metrics(&fs, &runtime, addr, &mountpoint)?),
        None => None,
    };
    let leases = fs.kernel_leases();
    let session = Session::new(fs, &mountpoint, &config)
        .map_err(|e| ShoalError::from(e).context(format!("mount {}", mountpoint.display())))?;
    leases.attach(session.notifier(), &client);
    tracing::info!("mounted {} on {}", opts.fsname, mountpoint.display());
    readahead::raise(&mountpoint, readahead::READ_AHEAD_KB);
    session
        .run()
        .map_err(|e| ShoalError::from(e).context(format!("serving {}", mountpoint.display())))?;
    sender.abort();
    if let Some(scrapes) = scrapes {
        scrapes.abort();
    }
    tracing::info!("unmounted {}", mountpoint.display());
    Ok(())
}

/// Answers Prometheus scrapes of `fs`'s counters on `addr`, on `runtime`.
fn serve_metrics(
    fs: &fs::ShoalFs,
    runtime: &tokio::runtime::Handle,
    addr: std::net::SocketAddr,
    mountpoint: &Path,
) -> Result<tokio::task::JoinHandle<()>> {
    let listener = runtime
        .block_on(shoal_metrics::endpoint::bind(addr))
        .map_err(|e| {
            ShoalError::from(e).context(format!("cannot serve the mount's metrics on {addr}"))
        })?;
    tracing::info!("serving metrics on http://{addr}/metrics");
    let registry = std::sync::Arc::new(fs.metrics_registry(mountpoint));
    Ok(runtime.spawn(shoal_metrics::endpoint::serve(listener, registry)))
}

/// Sends the gathering path's buffered writes once they are `gather_delay_ms`
/// old, so other clients see them that soon even if the writer keeps the
/// file open (close and fsync send them anyway).
fn send_due_writes(
    client: &shoal_client::Client,
    runtime: &tokio::runtime::Handle,
) -> tokio::task::JoinHandle<()> {
    let client = client.clone();
    let delay = client.config().settings.gather_delay_ms.max(2) as u64;
    runtime.spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(delay / 2));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            client.flush_due().await;
        }
    })
}

/// Makes sure descriptors 0, 1 and 2 are open (on /dev/null if they were
/// closed, as a detached daemon may have them). Otherwise /dev/fuse could be
/// opened as one of them, which fuser refuses with a panic, and a stray
/// print would write into the FUSE channel.
fn reserve_standard_fds() {
    for fd in 0..3 {
        // SAFETY: fcntl(F_GETFD) only queries the descriptor table.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
            // SAFETY: a valid NUL-terminated path; the descriptor is left
            // open on purpose for the life of the process.
            unsafe { libc::open(c"/dev/null".as_ptr(), libc::O_RDWR) };
        }
    }
}

fn session_config(opts: &MountOptions) -> Config {
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName(opts.fsname.clone()),
        // For fusermount3 (unprivileged mounts), which turns it into the
        // type "fuse.shoal" ...
        MountOption::Subtype("shoal".into()),
        // ... and for the kernel, which fuser mounts directly when we are
        // root: it only forwards kernel options, and the kernel's own
        // `subtype=` option is what makes the type read "fuse.shoal".
        MountOption::CUSTOM("subtype=shoal".into()),
        // No `default_permissions`: the mount checks permissions itself
        // (`access`), which spares a GETATTR per create and unlink. The
        // kernel sends no OPEN for device files, so nothing could check
        // their opens: they stay unusable (nodev), as do setuid bits.
        MountOption::NoDev,
        MountOption::NoSuid,
    ];
    config.acl = if opts.allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    config.n_threads = Some(LOOP_THREADS);
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_name_the_mount() {
        let c = session_config(&MountOptions {
            fsname: "/etc/shoal.toml".into(),
            allow_other: true,
            ttl: Duration::from_millis(100),
            metrics_addr: None,
        });
        assert!(c
            .mount_options
            .contains(&MountOption::FSName("/etc/shoal.toml".into())));
        assert!(c
            .mount_options
            .contains(&MountOption::Subtype("shoal".into())));
        assert!(
            !c.mount_options.contains(&MountOption::DefaultPermissions),
            "the mount checks permissions itself"
        );
        assert!(c.mount_options.contains(&MountOption::NoDev));
        assert!(c.mount_options.contains(&MountOption::NoSuid));
        assert_eq!(c.acl, SessionACL::All);
        assert_eq!(c.n_threads, Some(LOOP_THREADS));
    }
}
