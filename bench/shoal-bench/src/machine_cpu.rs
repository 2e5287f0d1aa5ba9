//! CPU time the whole machine spent, from `/proc/stat`: what a phase cost in
//! processor time across every process (the workers, a FUSE daemon, the
//! servers, the kernel), so a rate can be set against what the cores allow.
//! A phase that keeps every core busy is bound by CPU: it goes faster only
//! if its operations cost less CPU, whatever else is tuned.

use std::time::Duration;

/// Busy CPU time of all cores since boot: user, nice, system, irq and
/// softirq (idle, iowait and time stolen by a hypervisor are not ours).
/// None where `/proc/stat` is not Linux's.
pub fn busy() -> Option<Duration> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    busy_of(&stat, clock_ticks()?)
}

fn busy_of(stat: &str, ticks_per_s: u64) -> Option<Duration> {
    let first = stat.lines().next()?;
    let mut fields = first.split_whitespace();
    if fields.next()? != "cpu" {
        return None;
    }
    let v: Vec<u64> = fields.map_while(|f| f.parse().ok()).collect();
    // user nice system idle iowait irq softirq steal ...
    let busy = v.first()? + v.get(1)? + v.get(2)? + v.get(5)? + v.get(6)?;
    Some(Duration::from_secs_f64(busy as f64 / ticks_per_s as f64))
}

/// CPU time the threads of processes `pids` have spent, from each thread's
/// `schedstat` (nanoseconds, where `/proc/PID/stat` counts 10 ms ticks): what
/// the servers spent in a phase. Threads that ended are no longer counted,
/// so a difference undercounts a phase in which some did. None if a process
/// is gone or the kernel keeps no schedstat.
pub fn of_processes(pids: &[u32]) -> Option<Duration> {
    let mut ns = 0u64;
    for pid in pids {
        for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()? {
            let path = task.ok()?.path().join("schedstat");
            // A thread that ended since the listing: nothing to add.
            let Ok(stat) = std::fs::read_to_string(path) else {
                continue;
            };
            ns += stat.split_whitespace().next()?.parse::<u64>().ok()?;
        }
    }
    Some(Duration::from_nanos(ns))
}

fn clock_ticks() -> Option<u64> {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    (t > 0).then_some(t as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn busy_counts_user_nice_system_irq_softirq() {
        let stat = "cpu  100 5 50 1000 30 2 3 7 0 0\ncpu0 1 2 3 4\n";
        assert_eq!(busy_of(stat, 100), Some(Duration::from_millis(1600)));
        assert_eq!(busy_of("intr 1 2\n", 100), None);
        assert_eq!(busy_of("cpu 1 2\n", 100), None);
    }

    #[test]
    fn a_process_has_spent_cpu_and_a_gone_one_none() {
        let me = of_processes(&[std::process::id()]);
        assert!(me.is_some_and(|t| t > Duration::ZERO));
        assert_eq!(of_processes(&[u32::MAX]), None);
    }

    #[test]
    fn linux_says_how_busy_it_was() {
        assert!(busy().is_some_and(|b| b > Duration::ZERO));
    }
}
