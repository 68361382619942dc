//! One run's steps, class by class. Each rank's iteration, from its first op's start to
//! its last op's end, is cut at every op boundary; each piece of time goes to what ran
//! then, compute first (the device or CPU was working), then communication (split into
//! waiting for the collective's last member and moving the data), then host phases (in a
//! CPU-only trace host phases first: the CPU ops inside them are their work), and to
//! `untraced` when nothing ran. Pieces shared by ops of the same rank go to them in
//! equal parts. So the classes of a step add up to the step.

use flare_model::{Op, OpKind, TimeClassKind, Trace};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// Time and op count of one class over a run (sums over ranks and iterations).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ClassTime {
    pub ns: f64,
    /// Its time in each (rank, iteration), summed squared: its spread from one step to
    /// the next, the noise a change of it is judged against.
    pub sq_ns: f64,
    pub count: u64,
    /// FLOPs (compute) or bus bytes (communication: bytes x the collective's bus factor)
    /// of its ops that carry them, and the time those ops ran (compute: their durations;
    /// communication: from the last arrival).
    pub amount: f64,
    pub amount_ns: f64,
}

impl ClassTime {
    /// The standard deviation of its time per step over `n` (rank, iteration) pairs, ns.
    pub fn sd_ns(&self, n: u64) -> f64 {
        sample_sd(self.ns, self.sq_ns, n)
    }

    /// TFLOPS for compute, bus GB/s for communication; `None` without amounts.
    pub fn rate(&self, kind: TimeClassKind) -> Option<f64> {
        (self.amount > 0.0 && self.amount_ns > 0.0).then(|| {
            let per_s = self.amount / (self.amount_ns / 1e9);
            match kind {
                TimeClassKind::Compute => per_s / 1e12,
                _ => per_s / 1e9,
            }
        })
    }
}

/// A run, summed over its (rank, iteration) pairs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Profile {
    pub ranks: u32,
    pub rank_iterations: u64,
    /// The iterations' spans, summed: the classes' times add up to it.
    pub span_ns: f64,
    /// The iterations' spans, summed squared (for their spread).
    pub span_sq_ns: f64,
    pub classes: BTreeMap<(TimeClassKind, String), ClassTime>,
    /// The algorithms and protocols of each communication class's kernels, where their
    /// names say.
    pub algorithms: BTreeMap<(TimeClassKind, String), BTreeSet<String>>,
    /// GPU kernels' issue latency (start minus launch).
    pub issue_latency: LatencyHistogram,
}

/// Issue latencies in logarithmic buckets (10% wide, from 10 ns): quantiles within 5%
/// for any number of kernels, in fixed memory.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LatencyHistogram {
    buckets: Vec<u64>,
    count: u64,
}

impl LatencyHistogram {
    const FLOOR_NS: f64 = 10.0;
    const GROWTH: f64 = 1.1;

    pub fn add(&mut self, ns: i64) {
        let x = (ns as f64).max(Self::FLOOR_NS);
        let i = ((x / Self::FLOOR_NS).ln() / Self::GROWTH.ln()) as usize;
        if self.buckets.len() <= i {
            self.buckets.resize(i + 1, 0);
        }
        self.buckets[i] += 1;
        self.count += 1;
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// The `q` quantile, µs (the bucket's geometric middle); 0 when empty.
    pub fn quantile_us(&self, q: f64) -> f64 {
        let want = (q * self.count as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= want {
                let lo = Self::FLOOR_NS * Self::GROWTH.powi(i as i32);
                return lo * Self::GROWTH.sqrt() / 1e3;
            }
        }
        0.0
    }
}

/// The algorithm and protocol in an NCCL kernel's name (`ncclKernel_AllReduce_RING_LL_Sum_float`,
/// `ncclDevKernel_AllReduce_Sum_f32_TREE_LL128`): `RING/LL`, `TREE/LL128`; `None` for
/// names that do not say (NCCL's generic kernels, other libraries).
pub fn nccl_algorithm(name: &str) -> Option<String> {
    const ALGORITHMS: [&str; 8] = [
        "RING",
        "TREE",
        "COLLNET",
        "COLLNETDIRECT",
        "COLLNETCHAIN",
        "NVLS",
        "NVLSTREE",
        "PAT",
    ];
    const PROTOCOLS: [&str; 3] = ["LL", "LL128", "SIMPLE"];
    if !name.starts_with("nccl") {
        return None;
    }
    let head = name.split('(').next().unwrap_or(name);
    let tokens: Vec<&str> = head.split('_').collect();
    let algorithm = tokens.iter().find(|t| ALGORITHMS.contains(t))?;
    let protocol = tokens.iter().find(|t| PROTOCOLS.contains(t));
    Some(match protocol {
        Some(p) => format!("{algorithm}/{p}"),
        None => algorithm.to_string(),
    })
}

/// A stretch of one op's time, of one class, at one priority (lower first).
#[derive(Clone, Copy)]
struct Piece {
    start: i64,
    end: i64,
    priority: u8,
    class: usize,
}

/// The classes seen so far: their keys, indexed.
#[derive(Default)]
struct Classes {
    keys: Vec<(TimeClassKind, String)>,
    index: HashMap<(TimeClassKind, String), usize>,
    by_name: HashMap<u32, usize>,
    by_transfer: HashMap<(OpKind, u64), usize>,
    by_host: HashMap<OpKind, usize>,
    time: Vec<ClassTime>,
    /// Per class, the algorithms its kernels ran.
    algorithms: HashMap<usize, BTreeSet<String>>,
    /// An op name's algorithm, once read.
    algorithm_of: HashMap<u32, Option<String>>,
}

impl Classes {
    fn of(&mut self, key: (TimeClassKind, String)) -> usize {
        if let Some(&i) = self.index.get(&key) {
            return i;
        }
        self.keys.push(key.clone());
        self.time.push(ClassTime::default());
        self.index.insert(key, self.keys.len() - 1);
        self.keys.len() - 1
    }

    fn compute(&mut self, trace: &Trace, name: u32) -> usize {
        if let Some(&i) = self.by_name.get(&name) {
            return i;
        }
        let label = trace
            .names
            .get(name as usize)
            .cloned()
            .unwrap_or_else(|| format!("op #{name}"));
        let i = self.of((TimeClassKind::Compute, label));
        self.by_name.insert(name, i);
        i
    }

    fn transfer(&mut self, kind: OpKind, bytes: u64) -> usize {
        if let Some(&i) = self.by_transfer.get(&(kind, bytes)) {
            return i;
        }
        let label = format!("{} {}", kind.as_str(), size_words(bytes));
        let i = self.of((TimeClassKind::Communication, label));
        self.by_transfer.insert((kind, bytes), i);
        i
    }

    fn host(&mut self, kind: OpKind) -> usize {
        if let Some(&i) = self.by_host.get(&kind) {
            return i;
        }
        let i = self.of((TimeClassKind::Host, kind.as_str().to_string()));
        self.by_host.insert(kind, i);
        i
    }
}

/// "4.0 MiB", "512 B", "size unknown".
pub(super) fn size_words(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    if bytes == 0 {
        return "size unknown".into();
    }
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

impl Profile {
    /// The standard deviation of a rank's step, ns.
    pub fn span_sd_ns(&self) -> f64 {
        sample_sd(self.span_ns, self.span_sq_ns, self.rank_iterations)
    }
}

/// The sample standard deviation of `n` values from their sum and sum of squares.
fn sample_sd(sum: f64, sum_sq: f64, n: u64) -> f64 {
    let n = n as f64;
    if n < 2.0 {
        return 0.0;
    }
    let mean = sum / n;
    ((sum_sq - n * mean * mean) / (n - 1.0)).max(0.0).sqrt()
}

/// The run's classes of time (see the module).
pub fn profile(trace: &Trace) -> Profile {
    // What ran at a moment, by priority. On a GPU the compute is the device's and a host
    // phase the CPU's, so compute comes first; in a CPU-only trace the CPU ops inside a
    // host phase (a DataLoader's `__getitem__`, an optimizer's updates) are its work.
    let (compute, comm, host) = if trace.meta.cpu_compute {
        (1, 2, 0)
    } else {
        (0, 1, 2)
    };
    // When each collective instance's last member arrived: before it, a member waits.
    let mut last_arrival: HashMap<(u32, u32), i64> = HashMap::new();
    for r in &trace.ranks {
        for o in r
            .ops
            .iter()
            .filter(|o| o.kind.is_sync() && o.comm != Op::NO_COMM)
        {
            let e = last_arrival.entry((o.comm, o.seq)).or_insert(i64::MIN);
            *e = (*e).max(o.start_ns);
        }
    }
    let mut classes = Classes::default();
    let waiting = classes.of((TimeClassKind::Waiting, "waiting for other ranks".into()));
    let untraced = classes.of((TimeClassKind::Untraced, "untraced time".into()));
    let mut out = Profile {
        ranks: trace.ranks.len() as u32,
        ..Profile::default()
    };
    let mut pieces: BTreeMap<u32, Vec<Piece>> = BTreeMap::new();
    // One iteration's time per class, and the classes it touched.
    let mut step_time: Vec<f64> = Vec::new();
    let mut touched: Vec<usize> = Vec::new();
    for r in &trace.ranks {
        pieces.values_mut().for_each(Vec::clear);
        for o in &r.ops {
            let Some(end) = o.end().filter(|&e| e > o.start_ns) else {
                continue;
            };
            let v = pieces.entry(o.iteration).or_default();
            let piece = |priority, class| Piece {
                start: o.start_ns,
                end,
                priority,
                class,
            };
            if o.kind == OpKind::Compute {
                if !trace.meta.cpu_compute && o.issue_ns != Op::UNKNOWN && o.issue_ns <= o.start_ns
                {
                    out.issue_latency.add(o.start_ns - o.issue_ns);
                }
                let c = classes.compute(trace, o.name);
                let t = &mut classes.time[c];
                t.count += 1;
                if o.amount > 0 {
                    t.amount += o.amount as f64;
                    t.amount_ns += (end - o.start_ns) as f64;
                }
                v.push(piece(compute, c));
            } else if o.kind.is_sync() {
                let c = classes.transfer(o.kind, o.amount);
                classes.time[c].count += 1;
                let algorithm = classes
                    .algorithm_of
                    .entry(o.name)
                    .or_insert_with(|| nccl_algorithm(trace.name(o.name)));
                if let Some(a) = algorithm.clone() {
                    classes.algorithms.entry(c).or_default().insert(a);
                }
                let last = last_arrival
                    .get(&(o.comm, o.seq))
                    .copied()
                    .unwrap_or(o.start_ns)
                    .clamp(o.start_ns, end);
                if o.amount > 0 && end > last {
                    // Bus bandwidth, NCCL's convention: comparable across group sizes.
                    let n = trace
                        .communicators
                        .get(o.comm as usize)
                        .map_or(2, |c| c.members.len() as u32);
                    let t = &mut classes.time[c];
                    t.amount += o.amount as f64 * o.kind.bus_factor(n);
                    t.amount_ns += (end - last) as f64;
                }
                if last > o.start_ns {
                    v.push(Piece {
                        end: last,
                        ..piece(comm, waiting)
                    });
                }
                if end > last {
                    v.push(Piece {
                        start: last,
                        ..piece(comm, c)
                    });
                }
            } else if o.kind.is_host() {
                let c = classes.host(o.kind);
                classes.time[c].count += 1;
                v.push(piece(host, c));
            }
        }
        for v in pieces.values().filter(|v| !v.is_empty()) {
            out.rank_iterations += 1;
            step_time.resize(classes.time.len(), 0.0);
            let span = sweep(v, untraced, &mut step_time, &mut touched);
            for c in touched.drain(..) {
                let t = std::mem::take(&mut step_time[c]);
                classes.time[c].ns += t;
                classes.time[c].sq_ns += t * t;
            }
            out.span_ns += span;
            out.span_sq_ns += span * span;
        }
    }
    for (i, (key, t)) in classes.keys.into_iter().zip(classes.time).enumerate() {
        if t.ns > 0.0 || t.count > 0 {
            if let Some(a) = classes.algorithms.remove(&i) {
                out.algorithms.insert(key.clone(), a);
            }
            out.classes.insert(key, t);
        }
    }
    out
}

/// Adds one iteration's time to its classes in `time` (see the module), listing in
/// `touched` the classes it added to; returns its span.
fn sweep(pieces: &[Piece], untraced: usize, time: &mut [f64], touched: &mut Vec<usize>) -> f64 {
    let mut add = |c: usize, dt: f64| {
        if time[c] == 0.0 {
            touched.push(c);
        }
        time[c] += dt;
    };
    let mut events: Vec<(i64, bool, usize)> = Vec::with_capacity(pieces.len() * 2);
    for (i, p) in pieces.iter().enumerate() {
        events.push((p.start, true, i));
        events.push((p.end, false, i));
    }
    // Ends before starts at the same instant: touching ops do not overlap.
    events.sort_unstable_by_key(|&(t, starts, i)| (t, starts, i));
    let mut active: [Vec<usize>; 3] = Default::default();
    let (lo, hi) = (events[0].0, events[events.len() - 1].0);
    let mut prev = lo;
    for (t, starts, i) in events {
        let dt = (t - prev) as f64;
        if dt > 0.0 {
            match active.iter().find(|a| !a.is_empty()) {
                Some(top) => {
                    let share = dt / top.len() as f64;
                    for &k in top {
                        add(pieces[k].class, share);
                    }
                }
                None => add(untraced, dt),
            }
            prev = t;
        }
        let set = &mut active[pieces[i].priority as usize];
        if starts {
            set.push(i);
        } else if let Some(pos) = set.iter().position(|&k| k == i) {
            set.swap_remove(pos);
        }
    }
    (hi - lo) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nccl_kernel_names_say_their_algorithm_and_protocol() {
        for (name, want) in [
            (
                "ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
                Some("RING/LL"),
            ),
            (
                "ncclDevKernel_AllReduce_Sum_bf16_TREE_LL128",
                Some("TREE/LL128"),
            ),
            (
                "ncclDevKernel_ReduceScatter_Sum_f32_NVLS_SIMPLE",
                Some("NVLS/SIMPLE"),
            ),
            ("ncclDevKernel_Generic", None),
            ("gloo:all_reduce", None),
            ("sm90_xmma_gemm_RING", None),
        ] {
            assert_eq!(nccl_algorithm(name).as_deref(), want, "{name}");
        }
    }

    #[test]
    fn latency_quantiles_come_within_the_bucket_width() {
        let mut h = LatencyHistogram::default();
        for us in 1..=1000 {
            h.add(us * 1000);
        }
        assert_eq!(h.count(), 1000);
        for (q, want) in [(0.1, 100.0), (0.5, 500.0), (0.99, 990.0)] {
            let got = h.quantile_us(q);
            assert!(
                (got / want - 1.0).abs() < 0.06,
                "q{q}: {got} against {want}"
            );
        }
        assert_eq!(LatencyHistogram::default().quantile_us(0.5), 0.0);
    }
}
