//! Datafile I/O: read, write, truncate, fsync and sizes. File data follows
//! POSIX: a write is visible at once and durable after fsync. Every request
//! that moves or changes data is checked against the capability it carries
//! (`caps`); sizes are attributes and need none.

use shoal_proto::capability::{ANY, READ, WRITE};
use shoal_proto::error::ShoalError;
use shoal_proto::frame::MAX_PAYLOAD;
use shoal_proto::msg::*;
use shoal_proto::{extents, ops, ObjectKind};

use crate::auth::caps;
use crate::data_store::datafile;
use crate::request::{Request, Result};
use crate::service::{Reply, Service};

/// Most handles one GetSizes request may name.
const MAX_SIZES_PER_REQUEST: usize = 65536;

pub fn read(s: &Service, r: &Request, q: ReadRequest) -> Result<Reply<Empty>> {
    if q.length > MAX_PAYLOAD as u64 {
        return Err(ShoalError::invalid(format!(
            "read of {} bytes is over the {MAX_PAYLOAD}-byte limit",
            q.length
        ))
        .into());
    }
    let rec = datafile(&s.meta, r, q.handle)?;
    caps::check(s, &r.cred, &rec, q.cap.as_ref(), READ)?;
    let data = s.data.read(&s.meta, &rec, q.offset, q.length)?;
    Ok(Reply {
        payload: data,
        ..Default::default()
    })
}

/// A read of a datafile whose bytes are in the KV store (see
/// `stays_in_memory`); an undecodable request also qualifies (its error is
/// answered at once).
pub fn reads_in_memory(s: &Service, r: &Request) -> bool {
    let Ok(q) = r.decode::<ops::Read>() else {
        return true;
    };
    datafile(&s.meta, r, q.handle).map_or(true, |rec| !rec.in_file)
}

/// A write that keeps a datafile's bytes in the KV store.
pub fn writes_in_memory(s: &Service, r: &Request) -> bool {
    let Ok(q) = r.decode::<ops::Write>() else {
        return true;
    };
    let end = q.offset.saturating_add(r.payload.len() as u64);
    // A write that would wait for another client's recall waits on the
    // blocking pool, rather than handing the connection's worker over.
    datafile(&s.meta, r, q.handle).map_or(true, |rec| !rec.in_file && end <= s.data.inline_max())
        && !s.leases.held_by_others(q.handle, r.header.client.client)
}

pub fn write(s: &Service, r: &Request, q: WriteRequest) -> Result<Reply<WriteReply>> {
    let rec = datafile(&s.meta, r, q.handle)?;
    caps::check(s, &r.cred, &rec, q.cap.as_ref(), WRITE)?;
    let written = s.data.write(&s.meta, q.handle, q.offset, r.payload)?;
    s.leases.changed(&mut r.leasing(), &[q.handle]);
    Ok(Reply::new(WriteReply {
        written,
        verifier: s.verifier,
    }))
}

/// Several pieces of one datafile, from a gathering server's write-out.
pub fn write_extents(s: &Service, r: &Request, q: GatherWriteRequest) -> Result<Reply<WriteReply>> {
    let rec = datafile(&s.meta, r, q.handle)?;
    caps::check(s, &r.cred, &rec, None, WRITE)?;
    let mut written = 0;
    for (offset, data) in extents::from_request(&q, r.payload)? {
        written += s.data.write(&s.meta, q.handle, offset, &data)?;
    }
    s.leases.changed(&mut r.leasing(), &[q.handle]);
    Ok(Reply::new(WriteReply {
        written,
        verifier: s.verifier,
    }))
}

pub fn truncate(s: &Service, r: &Request, q: TruncateRequest) -> Result<Reply<TruncateReply>> {
    let rec = datafile(&s.meta, r, q.handle)?;
    caps::check(s, &r.cred, &rec, q.cap.as_ref(), WRITE)?;
    s.data.truncate(&s.meta, q.handle, q.size)?;
    s.leases.changed(&mut r.leasing(), &[q.handle]);
    Ok(Reply::new(TruncateReply {
        verifier: s.verifier,
    }))
}

pub fn fsync(s: &Service, r: &Request, q: FsyncRequest) -> Result<Reply<FsyncReply>> {
    let rec = s.meta.get(r, q.handle)?;
    if rec.kind() == ObjectKind::Datafile {
        caps::check(s, &r.cred, &rec, q.cap.as_ref(), ANY)?;
        s.data.fsync(&rec)?;
    }
    let syncs = s.commit.sync_now(&s.meta, &s.stats)?;
    Ok(Reply::new(FsyncReply {
        verifier: s.verifier,
    })
    .with_syncs(syncs))
}

pub fn get_sizes(s: &Service, r: &Request, q: GetSizesRequest) -> Result<Reply<GetSizesReply>> {
    if q.handles.len() > MAX_SIZES_PER_REQUEST {
        return Err(ShoalError::invalid("too many handles in one get_sizes").into());
    }
    let sizes = q
        .handles
        .iter()
        .map(|h| {
            let rec = datafile(&s.meta, r, *h)?;
            if q.file != 0 {
                r.offer(*h, q.file);
            }
            let (size, mtime_ns) = s.data.size_of(&rec)?;
            Ok(DatafileSize {
                handle: *h,
                size,
                mtime_ns,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(Reply::new(GetSizesReply { sizes }))
}

/// Rendezvous: the first half of a transfer that is not eager. The server
/// checks the datafile and tells how many bytes it is ready to move; the data
/// follows in `Read`/`Write` requests. This is the extra round trip that eager
/// I/O saves for small transfers.
pub fn rendezvous(
    s: &Service,
    r: &Request,
    q: RendezvousRequest,
) -> Result<Reply<RendezvousReply>> {
    let rec = datafile(&s.meta, r, q.handle)?;
    let need = if q.write { WRITE } else { READ };
    caps::check(s, &r.cred, &rec, q.cap.as_ref(), need)?;
    let ready = if q.write {
        q.length
    } else {
        let (size, _) = s.data.size_of(&rec)?;
        size.saturating_sub(q.offset).min(q.length)
    };
    Ok(Reply::new(RendezvousReply { ready }))
}
