//! Where a slow rank's extra time went, on a job that computes on its CPUs: on the CPU
//! (more or slower compute), waiting for a CPU (other processes hold its cores), or off
//! it (sleeping, blocked on I/O or a lock), from the CPU time its process used and its
//! main thread's run-queue wait against its peers'. A live trace of a plain framework job often
//! holds no compute ops (DDP's forward and backward are not spans), and this is then the
//! only evidence that tells slow compute from a stall.

use super::input::{comparable, own_scale, scale};
use super::{LiveRank, LiveWindow};
use crate::stats::median;

/// One rank's time outside collectives and CPU time against its peers', per iteration.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CpuSplit {
    /// Its time outside collectives beyond its peers' median.
    pub extra_ns: f64,
    pub cpu_ns: f64,
    pub peer_cpu_ns: f64,
    /// Its main thread's wait for a CPU and its peers' median (NaN when not reported).
    pub runqueue_ns: f64,
    pub peer_runqueue_ns: f64,
}

/// Where a rank's extra time went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeSpent {
    /// Working on its CPU.
    OnCpu,
    /// Runnable, waiting for a CPU that other processes held.
    WaitingForCpu,
    /// Off the CPU by its own doing: sleeping or blocked.
    OffCpu,
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

    /// Share of its extra time that its extra wait for a CPU covers (NaN when unknown).
    pub fn runqueue_share(&self) -> f64 {
        (self.runqueue_ns - self.peer_runqueue_ns) / self.extra_ns
    }

    /// Where its extra time went; `None` when the split does not decide (in between, or
    /// no extra time).
    pub fn spent(&self) -> Option<TimeSpent> {
        if self.extra_ns.is_nan() || self.extra_ns <= 0.0 {
            return None;
        }
        let share = self.on_cpu_share();
        if share >= ON_CPU {
            Some(TimeSpent::OnCpu)
        } else if share > OFF_CPU {
            None
        } else if self.runqueue_share() >= ON_CPU {
            Some(TimeSpent::WaitingForCpu)
        } else if self.runqueue_share() > OFF_CPU {
            // Off the CPU, partly for want of one: it does not decide.
            None
        } else {
            Some(TimeSpent::OffCpu)
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
        let group = comparable(&group);
        if group.len() < 3 || group[0].rank != rank {
            return None;
        }
        let f = scale(&group);
        let mut own_time: Vec<f64> = group
            .iter()
            .zip(own_scale(&group))
            .map(|(r, f)| r.own_ns() * f)
            .collect();
        let mut cpu: Vec<f64> = group.iter().zip(&f).map(|(r, f)| r.cpu_ns * f).collect();
        let mut wait: Vec<f64> = group
            .iter()
            .zip(&f)
            .map(|(r, f)| r.runqueue_ns * f)
            .collect();
        let (own_t, own_c, own_w) = (own_time[0], cpu[0], wait[0]);
        let peer_wait = if wait[1..].iter().all(|w| w.is_finite()) {
            median(&mut wait[1..])
        } else {
            f64::NAN
        };
        Some(CpuSplit {
            extra_ns: own_t - median(&mut own_time[1..]),
            cpu_ns: own_c,
            peer_cpu_ns: median(&mut cpu[1..]),
            runqueue_ns: own_w,
            peer_runqueue_ns: peer_wait,
        })
    }
}

/// A rank whose CPU did clearly more per step than its peers' while its time outside
/// collectives matched theirs: its peers waited for it, but in nothing Flare traced
/// (communication through calls the hooks do not wrap: functional collectives, a custom
/// backend, a framework's own threads).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct UntracedWait {
    pub rank: u32,
    /// Per step: its CPU time and its peers' median, its time outside collectives beyond
    /// its peers' median, and the typical step.
    pub cpu_ns: f64,
    pub peer_cpu_ns: f64,
    pub own_extra_ns: f64,
    pub step_ns: f64,
}

/// Extra CPU per step, as a share of the step, from which a rank's extra work should
/// show in its traced time.
const UNTRACED_MIN_STEP_SHARE: f64 = 0.1;
/// At most this share of that extra CPU time showing outside collectives: the rest hides
/// where nothing is traced.
const UNTRACED_MAX_SHOWN: f64 = 0.25;

impl LiveWindow {
    /// The rank whose extra CPU work its traced time does not show (see
    /// [`UntracedWait`]), among the ranks that stepped in the window, on a job computing
    /// on CPUs whose agent reported CPU times for three ranks or more.
    pub fn untraced_wait(&self) -> Option<UntracedWait> {
        if !self.cpu_only() {
            return None;
        }
        let group: Vec<&LiveRank> = self
            .with_data()
            .filter(|r| r.iterations > 0 && r.cpu_ns.is_finite() && r.observed_ns > 0.0)
            .collect();
        let group = comparable(&group);
        if group.len() < 3 {
            return None;
        }
        let f = scale(&group);
        let cpu: Vec<f64> = group.iter().zip(&f).map(|(r, f)| r.cpu_ns * f).collect();
        let own: Vec<f64> = group
            .iter()
            .zip(own_scale(&group))
            .map(|(r, f)| r.own_ns() * f)
            .collect();
        let mut steps: Vec<f64> = group
            .iter()
            .map(|r| r.iteration_ns)
            .filter(|t| t.is_finite() && *t > 0.0)
            .collect();
        if steps.is_empty() {
            return None;
        }
        let step_ns = median(&mut steps);
        let others = |v: &[f64], i: usize| {
            let mut o: Vec<f64> = v
                .iter()
                .enumerate()
                .filter(|&(j, _)| j != i)
                .map(|(_, x)| *x)
                .collect();
            median(&mut o)
        };
        // The rank with the most CPU beyond its peers' median is the one with the most
        // CPU: leaving out the largest value gives the smallest median of the rest.
        let i = (0..group.len()).max_by(|&x, &y| cpu[x].total_cmp(&cpu[y]))?;
        let (peer_cpu, own_extra) = (others(&cpu, i), own[i] - others(&own, i));
        let extra_cpu = cpu[i] - peer_cpu;
        (extra_cpu >= UNTRACED_MIN_STEP_SHARE * step_ns
            && own_extra <= UNTRACED_MAX_SHOWN * extra_cpu)
            .then_some(UntracedWait {
                rank: group[i].rank,
                cpu_ns: cpu[i],
                peer_cpu_ns: peer_cpu,
                own_extra_ns: own_extra,
                step_ns,
            })
    }
}

#[cfg(test)]
mod tests {
    use super::{CpuSplit, TimeSpent};

    #[test]
    fn the_shares_of_the_extra_time_on_the_cpu_and_in_the_run_queue_decide() {
        use TimeSpent::*;
        let split = |extra: f64, cpu: f64, wait: f64| CpuSplit {
            extra_ns: extra,
            cpu_ns: 100.0 + cpu,
            peer_cpu_ns: 100.0,
            runqueue_ns: 10.0 + wait,
            peer_runqueue_ns: 10.0,
        };
        for (extra, cpu, wait, want) in [
            (30.0, 28.0, 0.0, Some(OnCpu)),         // its extra time was CPU work
            (30.0, 15.0, 10.0, Some(OnCpu)),        // a contended node stretches wall time
            (30.0, 1.0, 0.0, Some(OffCpu)),         // slept or blocked
            (30.0, -2.0, 1.0, Some(OffCpu)),        // less CPU than its peers: not working
            (30.0, 1.0, 25.0, Some(WaitingForCpu)), // runnable, no core free
            (30.0, 1.0, 12.0, None),                // partly waiting for a core: undecided
            (30.0, 10.0, 0.0, None),                // in between: does not decide
            (30.0, 1.0, f64::NAN, Some(OffCpu)),    // no run-queue figure: as before
            (0.0, 5.0, 0.0, None),                  // not slower
            (-5.0, 5.0, 0.0, None),
            (f64::NAN, 5.0, 0.0, None),
        ] {
            assert_eq!(
                split(extra, cpu, wait).spent(),
                want,
                "extra {extra}, cpu {cpu}, wait {wait}"
            );
        }
    }
}
