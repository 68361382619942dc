//! Where a slow rank's extra time went, on a job that computes on its CPUs: on the CPU
//! (more or slower compute) or off it (sleeping, blocked on I/O or a lock), from the CPU
//! time its process used against its peers'. A live trace of a plain framework job often
//! holds no compute ops (DDP's forward and backward are not spans), and this is then the
//! only evidence that tells slow compute from a stall.

use super::input::scale;
use super::{LiveRank, LiveWindow};
use crate::stats::median;

/// One rank's time outside collectives and CPU time against its peers', per iteration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CpuSplit {
    /// Its time outside collectives beyond its peers' median.
    pub extra_ns: f64,
    pub cpu_ns: f64,
    pub peer_cpu_ns: f64,
}

/// At least this share of the extra time on the CPU: the CPU did more (or slower) work.
const ON_CPU: f64 = 0.5;
/// At most this share: the extra time was spent off the CPU.
const OFF_CPU: f64 = 0.25;

impl CpuSplit {
    /// Share of its extra time that its extra CPU time covers.
    pub fn on_cpu_share(&self) -> f64 {
        (self.cpu_ns - self.peer_cpu_ns) / self.extra_ns
    }

    /// `Some(true)`: the extra time was CPU work; `Some(false)`: it was spent off the CPU;
    /// `None`: the split does not decide (in between, or no extra time).
    pub fn on_cpu(&self) -> Option<bool> {
        if self.extra_ns.is_nan() || self.extra_ns <= 0.0 {
            return None;
        }
        let share = self.on_cpu_share();
        if share >= ON_CPU {
            Some(true)
        } else if share <= OFF_CPU {
            Some(false)
        } else {
            None
        }
    }
}

impl LiveWindow {
    /// `rank` against `peers` (ranks that run the same work), when the job runs on CPUs
    /// alone and the agent reported the CPU time of the rank and of two peers or more.
    pub fn cpu_split(&self, rank: u32, peers: impl Iterator<Item = u32>) -> Option<CpuSplit> {
        if !self.cpu_only() {
            // A GPU job's host thread spins or sleeps in device syncs as its driver
            // chooses: its CPU time says nothing about its kernels.
            return None;
        }
        let known = |r: &&LiveRank| r.cpu_ns.is_finite() && r.observed_ns > 0.0;
        let own = self.rank(rank).filter(known)?;
        let mut group: Vec<&LiveRank> = vec![own];
        group.extend(
            peers
                .filter(|&p| p != rank)
                .filter_map(|p| self.rank(p))
                .filter(known),
        );
        if group.len() < 3 {
            return None;
        }
        let f = scale(&group);
        let mut own_time: Vec<f64> = group.iter().zip(&f).map(|(r, f)| r.own_ns() * f).collect();
        let mut cpu: Vec<f64> = group.iter().zip(&f).map(|(r, f)| r.cpu_ns * f).collect();
        let (own_t, own_c) = (own_time[0], cpu[0]);
        Some(CpuSplit {
            extra_ns: own_t - median(&mut own_time[1..]),
            cpu_ns: own_c,
            peer_cpu_ns: median(&mut cpu[1..]),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::CpuSplit;

    #[test]
    fn the_share_of_the_extra_time_on_the_cpu_decides() {
        let split = |extra: f64, cpu: f64| CpuSplit {
            extra_ns: extra,
            cpu_ns: 100.0 + cpu,
            peer_cpu_ns: 100.0,
        };
        for (extra, cpu, want) in [
            (30.0, 28.0, Some(true)),  // its extra time was CPU work
            (30.0, 15.0, Some(true)),  // on a contended node wall time outgrows CPU time
            (30.0, 1.0, Some(false)),  // slept or blocked
            (30.0, -2.0, Some(false)), // less CPU than its peers: waiting, not working
            (30.0, 10.0, None),        // in between: does not decide
            (0.0, 5.0, None),          // not slower
            (-5.0, 5.0, None),
            (f64::NAN, 5.0, None),
        ] {
            assert_eq!(split(extra, cpu).on_cpu(), want, "extra {extra}, cpu {cpu}");
        }
    }
}
