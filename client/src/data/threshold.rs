//! The `auto` write threshold: the crossover of the two paths of
//! [Hildebrand 2006]'s Figure 5, from what this client's own writes cost.
//!
//! A direct write of `s` bytes costs a fixed part `F` (its round trips) plus
//! `s * d` (moving its bytes); a buffered write costs its share of the large
//! write that sends it, `s * g`. Below `s* = F / (g - d)` the gathering path
//! is cheaper. Each is followed as it moves (exponentially weighted): `g`
//! from every send of buffered writes, `d` from direct writes of at least
//! [`LARGE`] bytes (their cost is mostly bytes), `F` from smaller direct
//! writes less their bytes' share, and, before any, from the round trip of
//! a ping. While sends of buffered writes are as cheap per byte as direct
//! writes (`g <= d`, an idle client here: they are the same large writes)
//! the threshold is the most the caller finds worth buffering (the whole
//! buffer, or with write-behind the writes under `AUTO_BUFFERS_UNDER`);
//! when they get dearer (the servers or the client busy) it comes down, as
//! [Hildebrand 2006]'s busy threshold lies below its idle one.

use std::sync::Mutex;
use std::time::Duration;

/// Direct writes at least this large measure the per-byte cost.
pub const LARGE: usize = 256 << 10;
/// Weight of a new observation.
const ALPHA: f64 = 0.2;
/// Smallest threshold `auto` sets: writes this small are always worth
/// buffering.
pub const FLOOR: usize = 4096;

#[derive(Default)]
pub struct AutoThreshold {
    est: Mutex<Estimates>,
}

#[derive(Default, Clone, Copy, Debug)]
struct Estimates {
    /// Fixed cost of one direct write, ns.
    fixed_ns: Option<f64>,
    /// Per byte of a direct write, ns.
    direct_byte_ns: Option<f64>,
    /// Per byte of a send of buffered writes, ns.
    gathered_byte_ns: Option<f64>,
}

fn follow(old: Option<f64>, new: f64) -> Option<f64> {
    Some(old.map_or(new, |o| o + ALPHA * (new - o)))
}

impl AutoThreshold {
    fn est(&self) -> std::sync::MutexGuard<'_, Estimates> {
        self.est.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the fixed cost of a direct write is known yet.
    pub fn knows_fixed_cost(&self) -> bool {
        self.est().fixed_ns.is_some()
    }

    /// A round trip to a server took `rtt`: the fixed cost until direct
    /// writes say better.
    pub fn round_trip(&self, rtt: Duration) {
        let mut e = self.est();
        if e.fixed_ns.is_none() {
            e.fixed_ns = Some(rtt.as_nanos() as f64);
        }
    }

    /// A direct write of `bytes` took `took`.
    pub fn direct(&self, bytes: usize, took: Duration) {
        let ns = took.as_nanos() as f64;
        let mut e = self.est();
        if bytes >= LARGE {
            e.direct_byte_ns = follow(e.direct_byte_ns, ns / bytes as f64);
        } else {
            let moving = e.direct_byte_ns.unwrap_or(0.0) * bytes as f64;
            e.fixed_ns = follow(e.fixed_ns, (ns - moving).max(0.0));
        }
    }

    /// A send of `bytes` of buffered writes took `took`.
    pub fn gathered(&self, bytes: usize, took: Duration) {
        if bytes == 0 {
            return;
        }
        let mut e = self.est();
        e.gathered_byte_ns = follow(e.gathered_byte_ns, took.as_nanos() as f64 / bytes as f64);
    }

    /// The threshold now, between [`FLOOR`] and `buffer` (the most worth
    /// buffering: at most a file's gathering buffer).
    pub fn threshold(&self, buffer: usize) -> usize {
        let e = *self.est();
        let (Some(fixed), Some(g)) = (e.fixed_ns, e.gathered_byte_ns) else {
            return buffer;
        };
        let d = e.direct_byte_ns.unwrap_or(g);
        if g <= d {
            return buffer;
        }
        let crossover = fixed / (g - d);
        (crossover.min(buffer as f64) as usize).clamp(FLOOR.min(buffer), buffer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);

    #[test]
    fn idle_gathering_buffers_everything_and_busy_gathering_lowers_the_threshold() {
        let a = AutoThreshold::default();
        assert_eq!(a.threshold(1 << 20), 1 << 20, "nothing known yet");
        a.round_trip(100 * US);
        // Sends of buffered writes: 1 MiB in 1 ms (1 ns a byte); direct 1 MiB
        // writes as fast: buffering costs nothing more.
        for _ in 0..20 {
            a.gathered(1 << 20, 1000 * US);
            a.direct(1 << 20, 1000 * US);
        }
        assert_eq!(a.threshold(1 << 20), 1 << 20);
        // The sends slow to 3 ns a byte: with 100 us of fixed cost the
        // crossover is 100,000 / 2 = 50,000 bytes.
        for _ in 0..40 {
            a.gathered(1 << 20, 3000 * US);
        }
        let t = a.threshold(1 << 20);
        assert!((45_000..55_000).contains(&t), "{t}");
        // Small direct writes show a larger fixed cost: the threshold rises.
        for _ in 0..40 {
            a.direct(4096, 204 * US);
        }
        let t2 = a.threshold(1 << 20);
        assert!(t2 > t * 3 / 2, "{t2} after {t}");
        // Never below the floor.
        for _ in 0..60 {
            a.gathered(1 << 20, 1_000_000 * US);
        }
        assert_eq!(a.threshold(1 << 20), FLOOR);
    }
}
