//! Where a smallfile worker's files live: in a directory of its own, the
//! form every experiment of [Carns 2009] used (a PVFS directory lives on one
//! server, so the study gave each process one), or, with `--shared`, all
//! processes' files in one directory of the run, the form real jobs and
//! IO500's mdtest-hard use, which puts every create, lookup and remove of
//! the run on the servers that directory's entries live on.
//!
//! In the shared form worker 0 alone makes and removes the directory (the
//! mkdir and rmdir phases count one operation each), files are named
//! `p<id>.f<i>` so that no two workers' names meet, and each listing phase
//! lists the whole directory (every worker's files: the count is checked)
//! but stats only the worker's own, so the phase stats each file once, as in
//! the directory-per-process form, and lists the directory once per worker.

/// The directory the shared form's files are made in, inside the run's.
const SHARED_DIR: &str = "shared";

#[derive(Clone, Copy, Debug)]
pub struct Layout {
    /// One directory for every worker.
    pub shared: bool,
    /// Workers in the run.
    pub procs: usize,
    /// This worker.
    pub id: usize,
    /// Files per worker.
    pub files: usize,
}

impl Layout {
    /// The name, inside the run directory, of the directory this worker's
    /// files are made in.
    pub fn dir_name(&self) -> String {
        match self.shared {
            true => SHARED_DIR.to_string(),
            false => format!("p{}", self.id),
        }
    }

    /// The name of this worker's file `i` in that directory.
    pub fn file_name(&self, i: usize) -> String {
        match self.shared {
            true => format!("p{}.f{i}", self.id),
            false => format!("f{i}"),
        }
    }

    /// This worker makes the directory in the mkdir phase and removes it in
    /// the rmdir phase.
    pub fn makes_dir(&self) -> bool {
        !self.shared || self.id == 0
    }

    /// How many entries a listing of the directory must show.
    pub fn listed(&self) -> usize {
        match self.shared {
            true => self.procs * self.files,
            false => self.files,
        }
    }

    /// `name`, listed in the directory, is one of this worker's files (the
    /// ones its listing phases stat).
    pub fn owns(&self, name: &str) -> bool {
        !self.shared
            || name
                .strip_prefix('p')
                .and_then(|rest| rest.split_once(".f"))
                .is_some_and(|(id, _)| id.parse() == Ok(self.id))
    }

    /// Checks a listing phase's counts: `listed` entries in all, `own` of
    /// them this worker's; the error names `dir`.
    pub fn check_listing(&self, dir: &str, listed: usize, own: usize) -> Result<(), String> {
        if listed != self.listed() || own != self.files {
            return Err(format!(
                "{dir}: readdir listed {listed} entries ({own} of this worker's), expected {} ({})",
                self.listed(),
                self.files
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_shared_directory_tells_each_worker_its_own_files() {
        let l = |id| Layout {
            shared: true,
            procs: 12,
            id,
            files: 3,
        };
        assert_eq!(l(1).file_name(2), "p1.f2");
        assert!(l(1).owns("p1.f2"));
        assert!(!l(1).owns("p11.f2"), "p1 is a prefix of p11");
        assert!(!l(11).owns("p1.f12"));
        assert!(!l(1).owns("p1x.f2"));
        assert!(l(0).makes_dir() && !l(1).makes_dir());
        assert_eq!(l(0).listed(), 36);
        assert!(l(0).check_listing("d", 36, 3).is_ok());
        assert!(l(0).check_listing("d", 35, 3).is_err());
        assert!(l(0).check_listing("d", 36, 2).is_err());
    }

    #[test]
    fn a_directory_per_process_is_all_the_workers_own() {
        let l = Layout {
            shared: false,
            procs: 4,
            id: 2,
            files: 5,
        };
        assert_eq!(l.dir_name(), "p2");
        assert_eq!(l.file_name(4), "f4");
        assert!(l.owns("f4") && l.makes_dir());
        assert_eq!(l.listed(), 5);
    }
}
