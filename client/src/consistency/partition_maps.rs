//! The partitions this client knows of each split directory
//! (`shoal_proto::partitions`), learnt from their records: which partition a
//! name goes to, and which directory a partition belongs to.
//!
//! Everything the client caches stays keyed by the directory; only the
//! requests name a partition (`namespace::partitions`). A server recalls a
//! lease on a partition, and the recall is taken as one of the directory
//! ([`PartitionMaps::directories_of`]).

use std::collections::HashMap;
use std::sync::Mutex;

use shoal_proto::handle::Handle;
use shoal_proto::msg::ObjectRecord;
use shoal_proto::partitions::{self as parts, name_hash};

/// The partitions known of each split directory.
#[derive(Default)]
pub(crate) struct PartitionMaps {
    state: Mutex<Maps>,
}

#[derive(Default)]
struct Maps {
    /// Directory → its partitions' handles by index (0: not known).
    of_dir: HashMap<Handle, Vec<u64>>,
    /// Partition → its directory.
    dir_of: HashMap<Handle, Handle>,
}

impl PartitionMaps {
    /// The partition of `dir` that holds `name`, as far as this client
    /// knows (`dir` itself for a directory not known to be split).
    pub(crate) fn route(&self, dir: Handle, name: &str) -> Handle {
        let st = self.state.lock().unwrap();
        match st.of_dir.get(&dir) {
            Some(known) => known[parts::route(known, name_hash(name)) as usize],
            None => dir,
        }
    }

    /// The partitions of `dir` known, by index (None: not known to be split).
    pub(crate) fn known(&self, dir: Handle) -> Option<Vec<u64>> {
        self.state.lock().unwrap().of_dir.get(&dir).cloned()
    }

    /// Learns what record `rec` (of `dir` or one of its partitions) says
    /// of `dir`'s partitions.
    pub(crate) fn learn(&self, dir: Handle, rec: &ObjectRecord) {
        if rec.partitions.is_empty() && rec.partition_of == 0 {
            return;
        }
        let mut st = self.state.lock().unwrap();
        let mut known = st.of_dir.remove(&dir).unwrap_or_else(|| vec![dir]);
        parts::merge(&mut known, &rec.partitions);
        if rec.partition_of == dir {
            parts::merge(&mut known, &index_only(rec.partition_index, rec.handle));
        }
        for p in known.iter().filter(|p| **p != 0 && **p != dir) {
            st.dir_of.insert(*p, dir);
        }
        st.of_dir.insert(dir, known);
    }

    /// The directories whose partitions are among `handles`: a recall of a
    /// partition drops what is cached of its directory.
    pub(crate) fn directories_of(&self, handles: &[Handle]) -> Vec<Handle> {
        let st = self.state.lock().unwrap();
        if st.dir_of.is_empty() {
            return Vec::new();
        }
        handles
            .iter()
            .filter_map(|h| st.dir_of.get(h).copied())
            .collect()
    }
}

/// A partition list naming only `handle` at `index`.
fn index_only(index: u32, handle: Handle) -> Vec<u64> {
    let mut v = vec![0; index as usize + 1];
    v[index as usize] = handle;
    v
}
