//! Scan: pages through what a server stores, for `shoal fsck`. Objects,
//! directory entries and pooled handles come straight from the KV store in
//! key order; orphan
//! files are local datafile files that no datafile record owns (a crash
//! between writing a file and recording it, or a lost record).

use std::time::{Duration, SystemTime};

use prost::Message;
use shoal_proto::error::ShoalError;
use shoal_proto::msg::*;
use shoal_proto::ObjectKind;

use crate::keys;
use crate::request::{Request, Result};
use crate::service::{Reply, Service};

/// Most items one scan reply carries.
const MAX_SCAN: u32 = 4096;
/// Local files changed this recently are never called orphans: a datafile
/// being moved out of the KV store writes its file just before its record.
const FILE_GRACE: Duration = Duration::from_secs(60);

pub fn scan(s: &Service, r: &Request, q: ScanRequest) -> Result<Reply<ScanReply>> {
    let max = q.max.clamp(1, MAX_SCAN) as usize;
    let mut reply = ScanReply::default();
    match q.what() {
        ScanWhat::ScanObjects => {
            let pairs = page(s, &[keys::OBJECT], &q.after, max)?;
            for (k, v) in &pairs {
                let rec = ObjectRecord::decode(v.as_slice())
                    .map_err(|e| ShoalError::io(format!("corrupt object record: {e}")))?;
                reply.objects.push(rec);
                reply.next = k.clone().into();
            }
            reply.done = pairs.len() < max;
        }
        ScanWhat::ScanEntries => {
            let pairs = page(s, &[keys::ENTRY], &q.after, max)?;
            for (k, v) in &pairs {
                if let (Some(dir), Some((handle, kind))) =
                    (keys::handle_of(k), keys::decode_entry(v))
                {
                    reply.entries.push(ScannedEntry {
                        dir,
                        name: keys::entry_name_of(k),
                        handle,
                        kind: kind as i32,
                    });
                }
                reply.next = k.clone().into();
            }
            reply.done = pairs.len() < max;
        }
        ScanWhat::ScanPools => {
            let pairs = page(s, &[keys::POOL], &q.after, max)?;
            for (k, _) in &pairs {
                reply.handles.extend(crate::pools::handle_of(k));
                reply.next = k.clone().into();
            }
            reply.done = pairs.len() < max;
        }
        ScanWhat::ScanOrphanFiles => {
            let orphans = orphan_files(s, r, max)?;
            if q.repair {
                for h in &orphans {
                    std::fs::remove_file(s.data.path_of(*h)).map_err(ShoalError::from)?;
                }
            }
            reply.done = orphans.len() < max;
            reply.handles = orphans;
        }
    }
    Ok(Reply::new(reply))
}

fn page(
    s: &Service,
    prefix: &[u8],
    after: &[u8],
    max: usize,
) -> Result<Vec<crate::kv::Pair>, ShoalError> {
    let after = (!after.is_empty()).then_some(after);
    s.meta.kv().scan(prefix, after, max)
}

/// Handles of local datafile files (not changed for FILE_GRACE) whose record
/// (read for `r`) is missing or does not say its bytes live in a file; at
/// most `max`.
fn orphan_files(s: &Service, r: &Request, max: usize) -> Result<Vec<u64>> {
    let mut found = Vec::new();
    let files_dir = s.data_dir.join("files");
    let Ok(shards) = std::fs::read_dir(&files_dir) else {
        return Ok(found);
    };
    let now = SystemTime::now();
    for shard in shards.flatten() {
        for file in std::fs::read_dir(shard.path())
            .map_err(ShoalError::from)?
            .flatten()
        {
            let Some(h) = file
                .file_name()
                .to_str()
                .and_then(|n| u64::from_str_radix(n, 16).ok())
            else {
                continue;
            };
            let recent = file
                .metadata()
                .and_then(|m| m.modified())
                .map(|t| now.duration_since(t).unwrap_or_default() < FILE_GRACE)
                .unwrap_or(true);
            if recent {
                continue;
            }
            let owned = s
                .meta
                .try_get(r, h)?
                .is_some_and(|rec| rec.kind() == ObjectKind::Datafile && rec.in_file);
            if !owned {
                found.push(h);
                if found.len() == max {
                    return Ok(found);
                }
            }
        }
    }
    Ok(found)
}
