//! Who a request acts for: the caller's uid, primary gid and supplementary
//! groups, carried in every request frame (`frame`).
//!
//! Trust model (as NFS's AUTH_SYS): a client that proves the cluster secret
//! (`auth`) is trusted to say which user it acts for; servers then enforce
//! POSIX permissions for that user. With the cluster setting `root_squash`,
//! servers map uid 0 and group 0 to [`NOBODY`] first ([`Cred::squashed`]).

/// Most supplementary groups a request carries. A caller in more groups
/// sends the first `MAX_GROUPS` (in the order the kernel lists them, which
/// is ascending): access granted only through a later group is refused by
/// the servers, as NFS's AUTH_SYS (16 groups) does.
pub const MAX_GROUPS: usize = 32;

/// The uid and gid root is squashed to (`nobody` / `nogroup` on Debian).
pub const NOBODY: u32 = 65534;

/// A caller's identity. Fixed size and `Copy`, so requests and caches pass it
/// around without allocating.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cred {
    pub uid: u32,
    pub gid: u32,
    groups: [u32; MAX_GROUPS],
    ngroups: u8,
}

impl std::fmt::Debug for Cred {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "uid {} gid {} groups {:?}",
            self.uid,
            self.gid,
            self.groups()
        )
    }
}

impl Cred {
    pub const ROOT: Cred = Cred::new(0, 0);

    /// A caller with no supplementary groups.
    pub const fn new(uid: u32, gid: u32) -> Cred {
        Cred {
            uid,
            gid,
            groups: [0; MAX_GROUPS],
            ngroups: 0,
        }
    }

    /// The same caller with supplementary groups `groups`: the primary gid
    /// and repeats are left out, and only the first [`MAX_GROUPS`] others
    /// are taken.
    pub fn with_groups(mut self, groups: &[u32]) -> Cred {
        self.ngroups = 0;
        for &g in groups {
            if self.ngroups as usize == MAX_GROUPS {
                break;
            }
            if g != self.gid && !self.groups().contains(&g) {
                self.groups[self.ngroups as usize] = g;
                self.ngroups += 1;
            }
        }
        self
    }

    /// A caller as a frame carries it: `groups` as they are, which must be
    /// what [`Cred::with_groups`] keeps (at most [`MAX_GROUPS`], none
    /// repeated, not the primary gid), or None.
    pub fn from_wire(uid: u32, gid: u32, groups: &[u32]) -> Option<Cred> {
        let cred = Cred::new(uid, gid).with_groups(groups);
        (cred.groups() == groups).then_some(cred)
    }

    /// The same caller with primary gid `gid` (and the same supplementary
    /// groups).
    pub fn with_gid(self, gid: u32) -> Cred {
        Cred::new(self.uid, gid).with_groups(self.groups())
    }

    /// The supplementary groups (never the primary gid).
    pub fn groups(&self) -> &[u32] {
        &self.groups[..self.ngroups as usize]
    }

    /// Whether the caller belongs to group `g`, as its primary or a
    /// supplementary group.
    pub fn in_group(&self, g: u32) -> bool {
        self.gid == g || self.groups().contains(&g)
    }

    pub fn is_root(&self) -> bool {
        self.uid == 0
    }

    /// Whether an object of `mode` (permission bits), owned by `uid`:`gid`,
    /// gives this caller every right in `want` (4 read, 2 write, 1 execute
    /// or search, as in each class of a mode). The owner's bits if the
    /// caller owns it, else the group's if it is in its group, else the
    /// others'. Root may read and write anything and search any directory,
    /// and execute a file with at least one x bit. The one rule the servers
    /// and the mount both apply.
    pub fn may(&self, mode: u32, uid: u32, gid: u32, is_dir: bool, want: u32) -> bool {
        if self.is_root() {
            return want & 1 == 0 || is_dir || mode & 0o111 != 0;
        }
        let class = if self.uid == uid {
            mode >> 6
        } else if self.in_group(gid) {
            mode >> 3
        } else {
            mode
        } & 0o7;
        class & want == want
    }

    /// Root squash: uid 0 becomes [`NOBODY`], and so does group 0, primary
    /// or supplementary (as Linux's knfsd does).
    pub fn squashed(self) -> Cred {
        let squash = |id: u32| if id == 0 { NOBODY } else { id };
        let groups: Vec<u32> = self.groups().iter().map(|g| squash(*g)).collect();
        Cred::new(squash(self.uid), squash(self.gid)).with_groups(&groups)
    }
}

/// The names of the rights in `want` (4 read, 2 write, 1 execute, or
/// search on a directory), for messages: "write and search".
pub fn rights_name(want: u32, is_dir: bool) -> String {
    let x = if is_dir { "search" } else { "execute" };
    [(4, "read"), (2, "write"), (1, x)]
        .into_iter()
        .filter(|(bit, _)| want & bit != 0)
        .map(|(_, name)| name)
        .collect::<Vec<_>>()
        .join(" and ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_leave_out_the_primary_gid_and_repeats_and_stop_at_the_limit() {
        let c = Cred::new(1000, 100).with_groups(&[100, 5, 5, 7]);
        assert_eq!(c.groups(), &[5, 7]);
        assert!(c.in_group(100) && c.in_group(7) && !c.in_group(8));
        let many: Vec<u32> = (1..=100).collect();
        let c = Cred::new(1000, 1).with_groups(&many);
        assert_eq!(c.groups().len(), MAX_GROUPS);
        assert_eq!(c.groups()[0], 2, "the primary gid is not repeated");
        assert!(c.in_group(33) && !c.in_group(34), "the first 32 others");
    }

    #[test]
    fn a_mode_gives_the_owner_the_group_or_the_others_their_bits() {
        let alice = Cred::new(1001, 1001);
        let bob_in_team = Cred::new(1002, 1002).with_groups(&[2000]);
        let carol = Cred::new(1003, 1003);
        // rw- r-- ---, alice:team
        let may = |c: &Cred, want| c.may(0o640, 1001, 2000, false, want);
        assert!(may(&alice, 6) && !may(&alice, 1));
        assert!(may(&bob_in_team, 4) && !may(&bob_in_team, 2));
        assert!(!may(&carol, 4));
        // The owner's class decides even where the others' gives more.
        assert!(!alice.may(0o077, 1001, 1001, false, 4));
        // Root: anything but executing a file without an x bit.
        assert!(Cred::ROOT.may(0, 1001, 1001, false, 6));
        assert!(Cred::ROOT.may(0, 1001, 1001, true, 1));
        assert!(!Cred::ROOT.may(0o666, 1001, 1001, false, 1));
        assert!(Cred::ROOT.may(0o100, 1001, 1001, false, 1));
    }

    #[test]
    fn root_squash_maps_uid_and_group_zero_to_nobody() {
        let root = Cred::new(0, 0).with_groups(&[0, 4, NOBODY]);
        let s = root.squashed();
        assert_eq!((s.uid, s.gid), (NOBODY, NOBODY));
        assert_eq!(s.groups(), &[4]);
        let user = Cred::new(1000, 0).with_groups(&[0, 20]);
        let s = user.squashed();
        assert_eq!((s.uid, s.gid, s.groups()), (1000, NOBODY, &[20][..]));
        let plain = Cred::new(1000, 1000).with_groups(&[20]);
        assert_eq!(plain.squashed(), plain);
    }
}
