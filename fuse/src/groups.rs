//! The supplementary groups of the process behind a FUSE request. The
//! kernel sends only its uid, gid and pid; the mount (`access`) and the
//! servers check permissions, and must not refuse what a supplementary
//! group allows. So the
//! groups are read from `/proc/<pid>/status` and cached for a moment per
//! process and identity: a process that changes user (su, sudo, setpriv
//! drop their groups with it) is read again under its new uid or gid; one
//! that only changes its groups keeps the old ones for up to [`KEEP`].
//! When they cannot be read (the process is gone, or the request comes from
//! the kernel itself) the request carries the primary gid only.

use std::time::Duration;

use shoal_client::cache::TtlCache;

/// How long a process's groups are cached.
const KEEP: Duration = Duration::from_secs(1);
/// Processes remembered at most (the cache is emptied beyond).
const MAX_PROCESSES: usize = 4096;

pub struct CallerGroups {
    /// Per (pid, uid, gid) of a request.
    known: TtlCache<(u32, u32, u32), Vec<u32>>,
}

impl Default for CallerGroups {
    fn default() -> Self {
        CallerGroups {
            known: TtlCache::bounded(KEEP, MAX_PROCESSES),
        }
    }
}

impl CallerGroups {
    /// The supplementary groups of process `pid`, acting as `uid`:`gid`
    /// (empty if unknown).
    pub fn of(&self, pid: u32, uid: u32, gid: u32) -> Vec<u32> {
        if pid == 0 {
            return Vec::new();
        }
        let key = (pid, uid, gid);
        if let Some(groups) = self.known.get(&key) {
            return groups;
        }
        let groups = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .map(|status| parse_status(&status))
            .unwrap_or_default();
        self.known.put(key, groups.clone());
        groups
    }
}

/// The ids of the `Groups:` line of a `/proc/<pid>/status`.
fn parse_status(status: &str) -> Vec<u32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Groups:"))
        .map(|ids| {
            ids.split_whitespace()
                .filter_map(|g| g.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_groups_line_is_parsed_and_a_missing_process_has_none() {
        let status = "Name:\tcat\nGid:\t100\t100\t100\t100\nGroups:\t4 24 1000 \nNgid:\t0\n";
        assert_eq!(parse_status(status), vec![4, 24, 1000]);
        assert_eq!(parse_status("Groups:\t\n"), Vec::<u32>::new());
        let groups = CallerGroups::default();
        assert_eq!(groups.of(0, 0, 0), Vec::<u32>::new());
        assert_eq!(groups.of(u32::MAX, 0, 0), Vec::<u32>::new());
        // This process: what getgroups(2) says.
        let me = shoal_client::current_cred();
        let mine = groups.of(std::process::id(), me.uid, me.gid);
        assert_eq!(
            shoal_proto::Cred::new(me.uid, me.gid).with_groups(&mine),
            me
        );
    }
}
