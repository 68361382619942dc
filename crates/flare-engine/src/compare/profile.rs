//! One run's steps, class by class. A rank's steps partition its timeline: each runs from
//! its iteration's first op (on a GPU its first device op, so the steps follow the
//! device's cadence, which is the job's throughput however far the host runs ahead) to the
//! next iteration's first op, the last to the end the trace marks for it (where it marks
//! none, the last only ends the step before it). What runs inside that window
//! is its time, whatever iteration launched it. The step is cut at every op boundary; each
//! piece of time goes to what ran then, compute first (the device or CPU was working),
//! then communication (split into waiting for the collective's last member and moving the
//! data), then host phases (in a CPU-only trace host phases first: the CPU ops inside them
//! are their work). When nothing ran, the time is `untraced` between the iteration's own
//! first and last op, and `between_steps` after its last: the void a device sees while the
//! host runs the training loop's own work between steps (logging, metrics, reading values
//! back, a timer), which a span from first op to last op never sees. Pieces shared by ops
//! of the same rank go to them in equal parts. So the classes of a step add up to the step.

use flare_model::{IterationSpan, Op, OpKind, TimeClassKind, Trace};
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
    /// The steps, all ranks together.
    pub rank_iterations: u64,
    /// The (rank, iteration) pairs that ran an op: what per-iteration records that are
    /// not cut into steps (host calls) are counted over. The last iteration of a rank is
    /// one of these but no step of its own.
    pub iterations_with_ops: u64,
    /// Each iteration's span (a step of a rank): their sum is what the classes' times add
    /// up to.
    pub spans_ns: Vec<f64>,
    pub classes: BTreeMap<(TimeClassKind, String), ClassTime>,
    /// The algorithms and protocols of each communication class's kernels, where their
    /// names say.
    pub algorithms: BTreeMap<(TimeClassKind, String), BTreeSet<String>>,
    /// GPU kernels' issue latency (start minus launch).
    pub issue_latency: LatencyHistogram,
    /// Each rank's steps (what its classes' time is over), the iterations its ops are
    /// counted over, and each class's ops and time on each rank that ran it: where a
    /// change of a class is, when not every rank's changed (`ranks::changed_on`).
    pub rank_steps: BTreeMap<u32, u64>,
    pub rank_counted_iterations: BTreeMap<u32, u64>,
    pub by_rank: BTreeMap<(TimeClassKind, String), Vec<RankClassTime>>,
}

/// One class's ops on one rank over its counted iterations, and its time over its steps.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RankClassTime {
    pub rank: u32,
    pub count: u64,
    pub ns: f64,
}

/// The iterations a rank's ops are counted over, from those it ran ops in (sorted, each
/// once): by the iteration that launched them, not the step window they started in (an op
/// near a step's edge moves between windows as the timing shifts, and a pipeline's sends
/// then seem to change in number); without the first and last where there are four or
/// more, which a profiler's window may cut.
fn counted_iterations(its: &[u32]) -> &[u32] {
    if its.len() >= 4 {
        &its[1..its.len() - 1]
    } else {
        its
    }
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
    /// Whether it can begin a step: a device op on a GPU, any op on CPUs.
    begins_step: bool,
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
    /// The iterations' spans, summed, ns.
    pub fn span_ns(&self) -> f64 {
        self.spans_ns.iter().sum()
    }

    /// The standard deviation of a rank's step, ns.
    pub fn span_sd_ns(&self) -> f64 {
        let sq: f64 = self.spans_ns.iter().map(|s| s * s).sum();
        sample_sd(self.span_ns(), sq, self.spans_ns.len() as u64)
    }

    /// The median of a rank's steps and their spread without the rare long ones (1.4826
    /// times the median absolute deviation, the standard deviation where the steps are
    /// normal), ns: what a run's few long steps (a full garbage collection, a checkpoint)
    /// leave of the noise the others show.
    pub fn span_median_and_robust_sd_ns(&self) -> (f64, f64) {
        if self.spans_ns.is_empty() {
            return (0.0, 0.0);
        }
        crate::stats::median_mad(&self.spans_ns)
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

/// The class of time ranks spend in collectives before their last member arrives.
pub const WAITING: &str = "waiting for other ranks";

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
    let waiting = classes.of((TimeClassKind::Waiting, WAITING.into()));
    let gaps = Gaps {
        untraced: classes.of((TimeClassKind::Untraced, "untraced time".into())),
        between: classes.of((
            TimeClassKind::BetweenSteps,
            "host time between steps".into(),
        )),
    };
    let mut out = Profile {
        ranks: trace.ranks.len() as u32,
        ..Profile::default()
    };
    let mut pieces: BTreeMap<u32, Vec<Piece>> = BTreeMap::new();
    // One iteration's time per class, and the classes it touched.
    let mut step_time: Vec<f64> = Vec::new();
    let mut touched: Vec<usize> = Vec::new();
    // Each op's start and class: an op counts in the step it starts in.
    let mut started: Vec<(i64, usize)> = Vec::new();
    // Each class's time before the rank, and its ops and time on each rank after it.
    let mut before_rank: Vec<f64> = Vec::new();
    let mut by_rank: Vec<Vec<RankClassTime>> = Vec::new();
    // The rank's ops by (iteration, class), and its ops per class in counted iterations.
    let mut tagged: Vec<(u32, usize)> = Vec::new();
    let mut its: Vec<u32> = Vec::new();
    let mut rank_counts: Vec<u64> = Vec::new();
    for r in &trace.ranks {
        pieces.values_mut().for_each(Vec::clear);
        started.clear();
        before_rank.clear();
        before_rank.extend(classes.time.iter().map(|t| t.ns));
        tagged.clear();
        let steps_before = out.rank_iterations;
        for o in &r.ops {
            let c = if o.kind == OpKind::Compute {
                classes.compute(trace, o.name)
            } else if o.kind.is_sync() {
                classes.transfer(o.kind, o.amount)
            } else if o.kind.is_host() {
                classes.host(o.kind)
            } else {
                continue;
            };
            // every call counts, whatever the trace says of its end
            tagged.push((o.iteration, c));
            let Some(end) = o.end().filter(|&e| e > o.start_ns) else {
                continue;
            };
            let v = pieces.entry(o.iteration).or_default();
            let piece = |priority, class| Piece {
                start: o.start_ns,
                end,
                priority,
                class,
                begins_step: begins_step(trace, o),
            };
            if o.kind == OpKind::Compute {
                if !trace.meta.cpu_compute && o.issue_ns != Op::UNKNOWN && o.issue_ns <= o.start_ns
                {
                    out.issue_latency.add(o.start_ns - o.issue_ns);
                }
                started.push((o.start_ns, c));
                let t = &mut classes.time[c];
                if o.amount > 0 {
                    t.amount += o.amount as f64;
                    t.amount_ns += (end - o.start_ns) as f64;
                }
                v.push(piece(compute, c));
            } else if o.kind.is_sync() {
                started.push((o.start_ns, c));
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
                started.push((o.start_ns, c));
                v.push(piece(host, c));
            }
        }
        out.iterations_with_ops += pieces.values().filter(|v| !v.is_empty()).count() as u64;
        let windows = step_windows(
            pieces.iter().flat_map(|(&iteration, v)| {
                v.iter().map(move |p| StepPiece {
                    iteration,
                    start: p.start,
                    end: p.end,
                    begins_step: p.begins_step,
                })
            }),
            &r.iterations,
        );
        for &(start, c) in &started {
            let k = windows.partition_point(|w| w.2 <= start);
            if windows.get(k).is_some_and(|w| w.1 <= start) {
                classes.time[c].count += 1;
            }
        }
        for (v, extent) in within_windows(&pieces, &windows) {
            out.rank_iterations += 1;
            step_time.resize(classes.time.len(), 0.0);
            let span = sweep(&v, extent, gaps, &mut step_time, &mut touched);
            for c in touched.drain(..) {
                let t = std::mem::take(&mut step_time[c]);
                classes.time[c].ns += t;
                classes.time[c].sq_ns += t * t;
            }
            out.spans_ns.push(span);
        }
        out.rank_steps
            .insert(r.rank, out.rank_iterations - steps_before);
        its.clear();
        its.extend(tagged.iter().map(|t| t.0));
        its.sort_unstable();
        its.dedup();
        let counted = counted_iterations(&its);
        out.rank_counted_iterations
            .insert(r.rank, counted.len() as u64);
        rank_counts.clear();
        rank_counts.resize(classes.time.len(), 0);
        for &(it, c) in &tagged {
            if counted.binary_search(&it).is_ok() {
                rank_counts[c] += 1;
            }
        }
        by_rank.resize(classes.time.len(), Vec::new());
        for (c, t) in classes.time.iter().enumerate() {
            let ns = t.ns - before_rank.get(c).copied().unwrap_or_default();
            if rank_counts[c] > 0 || ns > 0.0 {
                by_rank[c].push(RankClassTime {
                    rank: r.rank,
                    count: rank_counts[c],
                    ns,
                });
            }
        }
    }
    by_rank.resize(classes.time.len(), Vec::new());
    for (i, ((key, t), ranks)) in classes
        .keys
        .into_iter()
        .zip(classes.time)
        .zip(by_rank)
        .enumerate()
    {
        if t.ns > 0.0 || t.count > 0 {
            if let Some(a) = classes.algorithms.remove(&i) {
                out.algorithms.insert(key.clone(), a);
            }
            out.by_rank.insert(key.clone(), ranks);
            out.classes.insert(key, t);
        }
    }
    out
}

/// The classes that time no op covers goes to.
#[derive(Clone, Copy)]
struct Gaps {
    /// Between the step's own first and last op.
    untraced: usize,
    /// Outside the step's own ops' extent, inside its window.
    between: usize,
}

/// Whether an op can begin a step: a device op on a GPU (the steps follow the device's
/// cadence), any op on CPUs.
fn begins_step(trace: &Trace, o: &Op) -> bool {
    trace.meta.cpu_compute || !o.kind.is_host()
}

/// What cuts a rank's timeline into steps: an op's (or a piece of one's) iteration and
/// extent, and whether it can begin a step.
struct StepPiece {
    iteration: u32,
    start: i64,
    end: i64,
    begins_step: bool,
}

/// Each rank's steps (iteration, start, end) in order, cut as [`profile`] cuts them: the
/// series a persistent change of the step is looked for in, on the same steps a
/// comparison then splits into classes (a span from a step's first op to its last would
/// miss what the loop adds between steps).
pub fn rank_steps(trace: &Trace) -> impl Iterator<Item = Vec<(u32, i64, i64)>> + '_ {
    trace.ranks.iter().map(move |r| {
        let pieces = r.ops.iter().filter_map(|o| {
            let timed = o.kind == OpKind::Compute || o.kind.is_sync() || o.kind.is_host();
            let end = o.end().filter(|&e| timed && e > o.start_ns)?;
            Some(StepPiece {
                iteration: o.iteration,
                start: o.start_ns,
                end,
                begins_step: begins_step(trace, o),
            })
        });
        step_windows(pieces, &r.iterations)
    })
}

/// A step: its window, and the extent of its own iteration's ops inside it (`None` when
/// none ran there).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Extent {
    span: (i64, i64),
    own: Option<(i64, i64)>,
}

/// The rank's steps as windows of its timeline, in order: (iteration, start, end), each
/// from the iteration's first op that can begin a step to the next one's. The last
/// iteration runs to the end the trace marks for it (`ProfilerStep#N`'s, or its last op's
/// if later); where the trace marks none it only ends the step before it (a window to its
/// last op would be shorter than the rest and read as noise), unless it is the only one,
/// which runs to its last op's end. An iteration with no op that can begin a step is no
/// step of its own.
fn step_windows(
    pieces: impl Iterator<Item = StepPiece>,
    marks: &[IterationSpan],
) -> Vec<(u32, i64, i64)> {
    // each iteration's first start of a piece that can begin a step, and its last end
    let mut extents: BTreeMap<u32, (Option<i64>, i64)> = BTreeMap::new();
    for p in pieces {
        let e = extents.entry(p.iteration).or_insert((None, p.end));
        if p.begins_step {
            e.0 = Some(e.0.map_or(p.start, |s| s.min(p.start)));
        }
        e.1 = e.1.max(p.end);
    }
    let mut starts: Vec<(i64, u32, i64)> = extents
        .into_iter()
        .filter_map(|(it, (first, last))| Some((first?, it, last)))
        .collect();
    starts.sort_unstable();
    let mut out: Vec<(u32, i64, i64)> = starts
        .windows(2)
        .filter(|w| w[1].0 > w[0].0)
        .map(|w| (w[0].1, w[0].0, w[1].0))
        .collect();
    if let Some(&(start, it, last)) = starts.last() {
        let marked_end = marks
            .iter()
            .find(|m| m.iteration == it)
            .and_then(|m| m.end_ns);
        let end = match marked_end {
            Some(end) => Some(end.max(last)),
            None if starts.len() == 1 => Some(last),
            None => None,
        };
        if let Some(end) = end.filter(|&e| e > start) {
            out.push((it, start, end));
        }
    }
    out
}

/// Each step's pieces: every piece of the rank that overlaps its window, clipped to it,
/// and the extent of the step's own ones.
fn within_windows(
    pieces: &BTreeMap<u32, Vec<Piece>>,
    windows: &[(u32, i64, i64)],
) -> Vec<(Vec<Piece>, Extent)> {
    let mut out: Vec<(Vec<Piece>, Extent)> = windows
        .iter()
        .map(|&(_, s, e)| {
            (
                Vec::new(),
                Extent {
                    span: (s, e),
                    own: None,
                },
            )
        })
        .collect();
    for (&iteration, v) in pieces {
        for p in v {
            let mut k = windows.partition_point(|w| w.2 <= p.start);
            while k < windows.len() && windows[k].1 < p.end {
                let (w_iteration, ws, we) = windows[k];
                let clipped = Piece {
                    start: p.start.max(ws),
                    end: p.end.min(we),
                    ..*p
                };
                let (step, extent) = &mut out[k];
                step.push(clipped);
                if w_iteration == iteration {
                    extent.own = Some(match extent.own {
                        None => (clipped.start, clipped.end),
                        Some((a, b)) => (a.min(clipped.start), b.max(clipped.end)),
                    });
                }
                k += 1;
            }
        }
    }
    out
}

/// Adds one step's time to its classes in `time` (see the module), listing in `touched`
/// the classes it added to; returns its span.
fn sweep(
    pieces: &[Piece],
    extent: Extent,
    gaps: Gaps,
    time: &mut [f64],
    touched: &mut Vec<usize>,
) -> f64 {
    let mut add = |c: usize, dt: f64| {
        if dt <= 0.0 {
            return;
        }
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
    let (lo, hi) = extent.span;
    // Time no op covers: inside the step's own ops' extent it is untraced, outside it
    // between steps.
    let own = extent.own;
    let split = |from: i64, to: i64| -> (f64, f64) {
        let inside = own.map_or(0, |(a, b)| (to.min(b) - from.max(a)).max(0));
        (inside as f64, ((to - from) - inside) as f64)
    };
    let mut active: [Vec<usize>; 3] = Default::default();
    let mut prev = lo;
    for (t, starts, i) in events {
        if t > prev {
            match active.iter().find(|a| !a.is_empty()) {
                Some(top) => {
                    let share = (t - prev) as f64 / top.len() as f64;
                    for &k in top {
                        add(pieces[k].class, share);
                    }
                }
                None => {
                    let (inside, outside) = split(prev, t);
                    add(gaps.untraced, inside);
                    add(gaps.between, outside);
                }
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
    if hi > prev {
        let (inside, outside) = split(prev, hi);
        add(gaps.untraced, inside);
        add(gaps.between, outside);
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

    /// One rank, two iterations: a kernel (name 0) of iteration 0 runs 2-6 ms and one
    /// (name 1) 6.5-8 ms (with `tail`, on to 11 ms); iteration 1's kernel runs 12-16 ms.
    /// With `loader`, iteration 1 first reads its batch on the CPU, 9-11 ms.
    fn two_iterations(tail: bool, loader: bool, cpu: bool) -> Trace {
        use flare_model::{ClusterTopology, JobInfo, RankTrace, TraceMeta};
        // Half-milliseconds, so that 6.5 ms is whole.
        const HALF_MS: i64 = 500_000;
        let op = |kind: OpKind, name: u32, iteration: u32, start: i64, end: i64| Op {
            kind,
            name,
            iteration,
            comm: Op::NO_COMM,
            seq: 0,
            peer: Op::NO_PEER,
            start_ns: start * HALF_MS,
            end_ns: end * HALF_MS,
            issue_ns: Op::UNKNOWN,
            amount: 0,
        };
        let mut ops = vec![
            op(OpKind::Compute, 0, 0, 4, 12),
            op(OpKind::Compute, 1, 0, 13, if tail { 22 } else { 16 }),
            op(OpKind::Compute, 0, 1, 24, 32),
        ];
        if loader {
            ops.push(op(OpKind::DataLoader, 2, 1, 18, 22));
        }
        ops.sort_by_key(|o| o.start_ns);
        Trace {
            meta: TraceMeta {
                cpu_compute: cpu,
                ..TraceMeta::default()
            },
            job: JobInfo {
                job_id: "t".into(),
                world_size: 1,
                cluster: ClusterTopology::for_world(1, 8, 1),
                parallel: None,
                microbatches: None,
            },
            communicators: vec![],
            names: vec!["gemm".into(), "softmax".into(), "dataloader".into()],
            ranks: vec![RankTrace {
                rank: 0,
                ops,
                iterations: vec![],
            }],
        }
    }

    #[test]
    fn a_step_runs_from_its_first_op_to_the_next_ones_and_the_void_after_is_between_steps() {
        let ms = |p: &Profile, kind: TimeClassKind, class: &str| {
            p.classes
                .get(&(kind, class.to_string()))
                .map_or(0.0, |t| t.ns / 1e6)
        };
        // (case, tail, loader, cpu, span ms, gemm, softmax, dataloader, untraced, between)
        let cases = [
            (
                "the step runs 2-12 ms, to the next one's first op: the 0.5-ms gap inside it is untraced, 8-12 ms between steps",
                false,
                false,
                false,
                10.0,
                [4.0, 1.5, 0.0, 0.5, 4.0],
            ),
            (
                "a kernel running on to 11 ms is busy time, not void",
                true,
                false,
                false,
                10.0,
                [4.0, 4.5, 0.0, 0.5, 1.0],
            ),
            (
                "on a GPU the next batch's read (9-11 ms) does not begin a step: the device waits for it in step 0",
                false,
                true,
                false,
                10.0,
                [4.0, 1.5, 2.0, 0.5, 2.0],
            ),
            (
                "on CPUs it does: the step runs 2-9 ms",
                false,
                true,
                true,
                7.0,
                [4.0, 1.5, 0.0, 0.5, 1.0],
            ),
        ];
        for (case, tail, loader, cpu, span, want) in cases {
            let p = profile(&two_iterations(tail, loader, cpu));
            // The last iteration only ends the step before it.
            assert_eq!(p.rank_iterations, 1, "{case}");
            assert!(
                (p.span_ns() / 1e6 - span).abs() < 1e-9,
                "{case}: {}",
                p.span_ns()
            );
            for ((kind, class), want) in [
                (TimeClassKind::Compute, "gemm"),
                (TimeClassKind::Compute, "softmax"),
                (TimeClassKind::Host, "dataloader"),
                (TimeClassKind::Untraced, "untraced time"),
                (TimeClassKind::BetweenSteps, "host time between steps"),
            ]
            .into_iter()
            .zip(want)
            {
                let got = ms(&p, kind, class);
                assert!(
                    (got - want).abs() < 1e-9,
                    "{case}: {class} {got} against {want}"
                );
            }
            let total: f64 = p.classes.values().map(|t| t.ns).sum();
            assert!(
                (total - p.span_ns()).abs() < 1.0,
                "{case}: the classes add up to the steps"
            );
        }
    }

    #[test]
    fn a_marked_last_iteration_runs_to_its_mark() {
        let mut t = two_iterations(false, false, false);
        // ProfilerStep#1 ends at 20 ms: its last 4 ms are the loop's, after its kernel.
        t.ranks[0].iterations = vec![flare_model::IterationSpan {
            iteration: 1,
            start_ns: 11_000_000,
            end_ns: Some(20_000_000),
        }];
        let p = profile(&t);
        assert_eq!(p.rank_iterations, 2);
        assert!((p.span_ns() / 1e6 - 18.0).abs() < 1e-9, "{}", p.span_ns());
        let between = p.classes[&(
            TimeClassKind::BetweenSteps,
            "host time between steps".into(),
        )];
        assert!((between.ns / 1e6 - 8.0).abs() < 1e-9, "{between:?}");
        // An unfinished mark is no end.
        t.ranks[0].iterations[0].end_ns = None;
        assert_eq!(profile(&t).rank_iterations, 1);
    }

    #[test]
    fn a_lone_iteration_runs_from_its_first_op_to_its_last() {
        let mut t = two_iterations(false, false, false);
        t.ranks[0].ops.retain(|o| o.iteration == 0);
        let p = profile(&t);
        assert_eq!(p.rank_iterations, 1);
        assert!((p.span_ns() / 1e6 - 6.0).abs() < 1e-9, "{}", p.span_ns());
        assert!(!p.classes.contains_key(&(
            TimeClassKind::BetweenSteps,
            "host time between steps".into()
        )));
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
