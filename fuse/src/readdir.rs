//! READDIR and READDIRPLUS replies, filled from an open directory's listing
//! snapshot (see `dirs` for the cookie scheme).
//!
//! A reply holds what fits in the kernel's buffer. If fetching fails after
//! some entries were added, those are sent: the kernel asks again from the
//! last cookie and then gets the error.

use std::sync::Arc;
use std::time::Duration;

use fuser::{FileAttr, FileType, Generation, INodeNo, ReplyDirectory, ReplyDirectoryPlus};
use shoal_client::{Client, FileKind};
use shoal_proto::error::Result;
use shoal_proto::Handle;

use crate::access;
use crate::attr::file_type;
use crate::dirs::{Listing, FIRST_ENTRY};
use crate::errors::fail;
use crate::shared::Shared;

/// Entries taken from the listing per step while filling a readdir reply.
const READDIR_STEP: usize = 256;
/// Entries whose attributes are fetched together (one listattr per server,
/// see `Client::listattr`) in the first step of a readdirplus reply; each
/// further step doubles, up to the cluster's readdir batch. The kernel's
/// buffer may hold a page (~25 entries) or, when the reader asks for much
/// (glibc asks for st_blksize), up to max_pages (thousands): starting small
/// wastes little on a small buffer, doubling reaches whole batches quickly on
/// a large one. Attributes fetched but not sent are in the client's
/// attribute cache for the kernel's next request.
const READDIRPLUS_FIRST_STEP: usize = 32;
/// Largest step whatever the readdir batch (the servers' readdir limit).
const READDIRPLUS_MAX_STEP: usize = 4096;

/// What one request asks: where, from which cookie, with which credentials.
pub struct Read {
    pub shared: Arc<Shared>,
    pub client: Client,
    pub listing: Arc<tokio::sync::Mutex<Listing>>,
    pub dir: Handle,
    pub offset: u64,
}

/// "." or "..", the entries before index FIRST_ENTRY.
fn dot(s: &Shared, dir: Handle, at: u64) -> (Handle, &'static str) {
    if at == 0 {
        (dir, ".")
    } else {
        (s.parents.get(dir), "..")
    }
}

pub async fn readdir(r: Read, mut reply: ReplyDirectory) {
    let mut listing = r.listing.lock().await;
    if r.offset == 0 {
        listing.rewind();
    }
    let mut at = r.offset;
    let filled = fill(&r, &mut listing, &mut reply, &mut at).await;
    finish("readdir", &r, at, filled, reply, ReplyDirectory::ok);
}

async fn fill(r: &Read, l: &mut Listing, reply: &mut ReplyDirectory, at: &mut u64) -> Result<()> {
    while *at < FIRST_ENTRY {
        let (h, name) = dot(&r.shared, r.dir, *at);
        if reply.add(INodeNo(h), *at + 1, FileType::Directory, name) {
            return Ok(());
        }
        *at += 1;
    }
    loop {
        let i = (*at - FIRST_ENTRY) as usize;
        let step = l.range(&r.client, i, READDIR_STEP).await?;
        if step.is_empty() {
            return Ok(());
        }
        for e in step {
            if e.kind == FileKind::Directory {
                r.shared.parents.set(e.handle, r.dir);
            }
            if reply.add(INodeNo(e.handle), *at + 1, file_type(e.kind), &e.name) {
                return Ok(());
            }
            *at += 1;
        }
    }
}

pub async fn readdirplus(r: Read, mut reply: ReplyDirectoryPlus) {
    let mut listing = r.listing.lock().await;
    if r.offset == 0 {
        listing.rewind();
    }
    let mut at = r.offset;
    let given = r.shared.leases.give();
    let mut gave = Vec::new();
    let filled = fill_plus(&r, &mut listing, &mut reply, &mut at, &mut gave).await;
    finish("readdirplus", &r, at, filled, reply, ReplyDirectoryPlus::ok);
    // Only now does the kernel have what the reply gave.
    r.shared.leases.given_listing(given, r.dir, &gave);
}

async fn fill_plus(
    r: &Read,
    l: &mut Listing,
    reply: &mut ReplyDirectoryPlus,
    at: &mut u64,
    gave: &mut Vec<(Handle, String)>,
) -> Result<()> {
    let s = &r.shared;
    if *at < FIRST_ENTRY {
        // The kernel does not instantiate "." and ".." from a readdirplus
        // reply; their attributes only fill the format.
        let here = s.attr(&r.client.getattr(r.dir).await?);
        while *at < FIRST_ENTRY {
            let (h, name) = dot(s, r.dir, *at);
            let attr = FileAttr {
                ino: INodeNo(h),
                ..here
            };
            if reply.add(INodeNo(h), *at + 1, name, &s.ttl, &attr, Generation(0)) {
                return Ok(());
            }
            *at += 1;
        }
    }
    // Entries of a directory not every user may search are given for no
    // time (`crate::access`).
    let keep = access::kernel_may_keep_entries(&r.client.getattr(r.dir).await?);
    let max_step = (r.client.config().settings.readdir_batch as usize)
        .clamp(READDIRPLUS_FIRST_STEP, READDIRPLUS_MAX_STEP);
    let mut n = READDIRPLUS_FIRST_STEP;
    loop {
        let i = (*at - FIRST_ENTRY) as usize;
        let step = l.range(&r.client, i, n).await?.to_vec();
        n = (n * 2).min(max_step);
        if step.is_empty() {
            return Ok(());
        }
        // Readdirplus: the step's attributes in one listattr per server (and
        // one get_sizes per server for striped files), or one getattr per
        // entry when the cluster has readdirplus off.
        let handles: Vec<Handle> = step.iter().map(|e| e.handle).collect();
        let attrs = r.client.listattr(&handles).await?;
        // None: removed since the listing was taken, left out.
        let found: Vec<_> = step.iter().zip(attrs).collect();
        let named: Vec<(Handle, &str)> = found
            .iter()
            .filter(|(_, a)| a.is_some())
            .map(|(e, _)| (e.handle, e.name.as_str()))
            .collect();
        let ttls = if keep {
            s.leases.listing_ttls(&s.client, r.dir, &named, s.ttl)
        } else {
            vec![Duration::ZERO; named.len()]
        };
        let mut ttls = ttls.into_iter();
        for (e, a) in found {
            if let Some(a) = a {
                if e.kind == FileKind::Directory {
                    s.parents.set(e.handle, r.dir);
                }
                let attr = s.attr(&a);
                let (ino, next) = (INodeNo(e.handle), *at + 1);
                let ttl = ttls.next().expect("a timeout per entry found");
                gave.push((e.handle, e.name.clone()));
                if reply.add(ino, next, &e.name, &ttl, &attr, Generation(0)) {
                    return Ok(());
                }
            }
            *at += 1;
        }
    }
}

/// Sends the filled reply, or the error if nothing could be added.
fn finish<R: crate::errors::ErrorReply>(
    op: &'static str,
    r: &Read,
    at: u64,
    filled: Result<()>,
    reply: R,
    ok: fn(R),
) {
    match filled {
        Err(e) if at == r.offset => fail(op, reply, e),
        _ => {
            tracing::debug!(op, dir = r.dir, offset = r.offset, next = at, "listed");
            ok(reply)
        }
    }
}
