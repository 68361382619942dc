//! A seeded, deterministic simulator of Megatron-style 3D/4D/5D-parallel training.
//!
//! Every rank runs the program of its pipeline stage ([`schedule`]); a collective or P2P
//! exchange ends when its last member arrives plus the transfer time over the slowest
//! element of its path through the fabric, so waiting shows up on the early members as
//! in real traces. Noise is per-op jitter, rare per-op outliers, a small static speed
//! spread between GPUs, and occasional cluster-wide spikes that must not be blamed on
//! any rank. Faults ([`fault`]) come with ground truth.
//!
//! All randomness is a pure function of (seed, what, where), so the result does not
//! depend on the order ranks are processed in.

pub mod fault;
pub mod logs;
pub mod machine;
pub mod noise;
pub mod schedule;

use fault::{draw_fault, truth_for, Fault, FaultKind, FaultSpec, StallSource, Truth};
use flare_model::trace::NameTable;
use flare_model::{
    ClusterTopology, CommId, Communicator, Dim, GroupKind, IterationSpan, JobInfo, Op, OpKind,
    ParallelConfig, PathElement, RankTrace, Trace, TraceMeta,
};
use noise::Noise;
use schedule::{stage_program, ProgramShape, Role, Step, Work};

/// Everything that shapes a simulated job.
#[derive(Clone, Debug)]
pub struct SimConfig {
    pub parallel: ParallelConfig,
    pub gpus_per_node: u32,
    pub nodes_per_pod: u32,
    pub iterations: u32,
    pub microbatches: u32,
    pub layer_blocks: u32,
    pub seed: u64,
    pub fault: FaultKind,
    /// Probability that an iteration has a cluster-wide spike.
    pub spike_probability: f64,
    pub costs: Costs,
    /// Which nodes the scheduler gave the job.
    pub placement: Placement,
    /// From iteration `.0` on, every rank's compute costs `.1` times more (the job moved to
    /// longer sequences or a bigger batch): a drift of iteration time that is no fault.
    pub workload_change: Option<(u32, f64)>,
}

/// How the job's nodes sit in the cluster.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Placement {
    /// Contiguous nodes, filling pods in order (what a topology-aware scheduler does).
    Dense,
    /// Nodes drawn at random from `spread` times as many pods as the job needs (a
    /// fragmented cluster and a scheduler that ignores topology).
    Scattered { spread: u32 },
}

/// Base costs of the simulated model and hardware.
#[derive(Clone, Debug)]
pub struct Costs {
    pub forward_block_ns: f64,
    pub optimizer_ns: f64,
    pub dataloader_ns: f64,
    pub gc_ns: f64,
    /// CPU time to issue a compute block, as a fraction of its GPU time.
    pub issue_fraction: f64,
    pub comm_issue_ns: f64,
    pub launch_latency_ns: f64,
    pub nvlink_bytes_per_s: f64,
    pub nic_bytes_per_s: f64,
    pub nvlink_latency_ns: f64,
    pub net_latency_ns: f64,
    pub compute_jitter: f64,
    pub comm_jitter: f64,
    /// Static spread of GPU speed (sigma of a lognormal factor): no two GPUs of a real
    /// cluster run at exactly the same clocks.
    pub gpu_spread: f64,
    /// Slow variation of each GPU's speed over time (thermal and power management):
    /// sigma of a factor that changes every few iterations.
    pub thermal_drift: f64,
    /// Probability that a rank's CPU is held up once in an iteration by untraced
    /// operating-system noise (interrupts, other processes), and the longest such pause.
    pub os_jitter_probability: f64,
    pub os_jitter_max_ns: f64,
    /// Probability per iteration that one leaf switch carries background traffic from
    /// other jobs, and the worst slowdown of the transfers crossing it.
    pub background_congestion_probability: f64,
    pub background_congestion_max: f64,
    /// Transfers that cross the spine (between pods) are this much slower than within a
    /// pod: fat trees are oversubscribed above the leaves.
    pub spine_slowdown: f64,
    pub tp_bytes: u64,
    pub pp_bytes: u64,
    pub cp_bytes: u64,
    pub ep_bytes: u64,
    pub dp_bytes: u64,
}

impl Default for Costs {
    fn default() -> Self {
        Costs {
            forward_block_ns: 1.5e6,
            optimizer_ns: 4e6,
            dataloader_ns: 2e6,
            gc_ns: 3e5,
            issue_fraction: 0.7,
            comm_issue_ns: 3e4,
            launch_latency_ns: 8e3,
            nvlink_bytes_per_s: 300e9,
            nic_bytes_per_s: 50e9,
            nvlink_latency_ns: 15e3,
            net_latency_ns: 25e3,
            compute_jitter: 0.02,
            comm_jitter: 0.04,
            gpu_spread: 0.008,
            thermal_drift: 0.004,
            os_jitter_probability: 0.03,
            os_jitter_max_ns: 2e6,
            background_congestion_probability: 0.15,
            background_congestion_max: 1.6,
            spine_slowdown: 1.2,
            tp_bytes: 32 << 20,
            pp_bytes: 8 << 20,
            cp_bytes: 16 << 20,
            ep_bytes: 16 << 20,
            dp_bytes: 512 << 20,
        }
    }
}

impl SimConfig {
    /// A job of `world` ranks with TP8 and the given PP, DP = the rest.
    pub fn megatron(tp: u32, pp: u32, dp: u32) -> Self {
        SimConfig {
            parallel: ParallelConfig::new(tp, 1, 1, dp, pp).expect("valid sizes"),
            gpus_per_node: 8,
            nodes_per_pod: 32,
            iterations: 20,
            microbatches: 2 * pp,
            layer_blocks: 2,
            seed: 1,
            fault: FaultKind::None,
            spike_probability: 0.08,
            placement: Placement::Dense,
            workload_change: None,
            costs: Costs::default(),
        }
    }

    /// The standard job shape for a scale in the benchmark and tests.
    pub fn for_scale(world: u32) -> Self {
        match world {
            0..=64 => Self::megatron(8, 2, (world / 16).max(1)),
            65..=1024 => Self::megatron(8, 4, (world / 32).max(1)),
            1025..=4096 => Self::megatron(8, 4, world / 32),
            _ => Self::megatron(8, 8, world / 64),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("invalid simulation config: {0}")]
    Config(String),
}

/// A simulated trace and what was injected into it.
pub struct SimOutput {
    pub trace: Trace,
    pub truth: Truth,
}

/// One iteration of a streamed simulation: every rank's ops and span for it, ranks in
/// order (a rank that hung before the iteration has none).
pub struct SimChunk {
    pub iteration: u32,
    pub ranks: Vec<RankTrace>,
}

/// What a streamed simulation hands over, in order: the job once, then its iterations.
pub enum SimEvent<'a> {
    /// The job, its communicators and op names (no ranks' ops yet).
    Start(&'a Trace),
    Iteration(SimChunk),
}

struct CommState {
    members: Vec<u32>,
    /// Pending (rank, op index) of the instance in progress.
    pending: Vec<(u32, u32)>,
    max_arrival: i64,
    seq: u32,
    base_bw: f64,
    fault_bw: f64,
    latency_ns: f64,
    inter_node: bool,
    kind: GroupKind,
    /// Leaf switches (pod, rail) its ring crosses.
    leaves: Vec<(u32, u32)>,
}

struct RankState {
    pc: usize,
    iteration: u32,
    gpu_free: i64,
    cpu: i64,
    stage: u32,
    dp: u32,
    comms: [CommId; 7],
    speed: f64,
    done: bool,
    /// Ops already handed over: op indices count from the start of the run.
    ops_base: u32,
    trace: RankTrace,
}

impl RankState {
    /// Takes the rank's ops and span of iteration `it`, which come first: every earlier
    /// iteration was handed over already.
    fn drain_iteration(&mut self, it: u32) -> RankTrace {
        let k = self.trace.ops.partition_point(|o| o.iteration <= it);
        let j = self.trace.iterations.partition_point(|s| s.iteration <= it);
        self.ops_base += k as u32;
        RankTrace {
            rank: self.trace.rank,
            ops: self.trace.ops.drain(..k).collect(),
            iterations: self.trace.iterations.drain(..j).collect(),
        }
    }
}

fn role_index(r: Role) -> usize {
    match r {
        Role::Local => 0,
        Role::Tp => 1,
        Role::Cp => 2,
        Role::Ep => 3,
        Role::Dp => 4,
        Role::PrevStage => 5,
        Role::NextStage => 6,
    }
}

/// Runs the simulation and returns the whole trace.
pub fn simulate(cfg: &SimConfig) -> Result<SimOutput, SimError> {
    let mut ranks: Vec<RankTrace> = Vec::new();
    let mut out = simulate_streaming(cfg, |event| {
        let SimEvent::Iteration(chunk) = event else {
            return;
        };
        if ranks.is_empty() {
            ranks = chunk.ranks;
            return;
        }
        for (acc, r) in ranks.iter_mut().zip(chunk.ranks) {
            acc.ops.extend(r.ops);
            acc.iterations.extend(r.iterations);
        }
    })?;
    out.trace.ranks = ranks;
    Ok(out)
}

/// Runs the simulation and hands over the job, then each iteration as soon as every rank
/// has finished it (then the rest at the end, for a job that hangs), so that memory holds
/// about two iterations of ops whatever the run length. The returned trace has the job,
/// its communicators and names but no ranks.
pub fn simulate_streaming(
    cfg: &SimConfig,
    mut on_event: impl FnMut(SimEvent),
) -> Result<SimOutput, SimError> {
    let par = &cfg.parallel;
    let world = par.world_size();
    if cfg.microbatches < par.pp {
        return Err(SimError::Config(format!(
            "microbatches ({}) must be at least the number of pipeline stages ({})",
            cfg.microbatches, par.pp
        )));
    }
    if cfg.iterations == 0 {
        return Err(SimError::Config("at least one iteration".into()));
    }
    let noise = Noise::new(cfg.seed);
    let mut cluster = ClusterTopology::for_world(world, cfg.gpus_per_node, cfg.nodes_per_pod);
    if let Placement::Scattered { spread } = cfg.placement {
        // The job's nodes drawn without replacement from `spread` times its pods.
        let blocks = world.div_ceil(cfg.gpus_per_node.max(1));
        let pool = cluster.pods() * spread.max(1) * cfg.nodes_per_pod.max(1);
        let mut ids: Vec<u32> = (0..pool).collect();
        for i in 0..blocks.min(pool) as usize {
            let j = i + (noise.uniform(&[50, i as u64]) * (pool as usize - i) as f64) as usize;
            ids.swap(i, j.min(pool as usize - 1));
        }
        ids.truncate(blocks as usize);
        cluster = cluster.with_placement(ids);
    }
    let mut fault_rng = noise.rng(0xFA17);
    let mut spec = draw_fault(cfg.fault, par, &cluster, cfg.iterations, &mut fault_rng);
    let costs = &cfg.costs;

    // Programs per stage.
    let shape = ProgramShape {
        stages: par.pp,
        microbatches: cfg.microbatches,
        layer_blocks: cfg.layer_blocks,
        tp: par.tp,
        cp: par.cp,
        ep: par.ep,
        dp: par.dp,
        tp_bytes: costs.tp_bytes,
        pp_bytes: costs.pp_bytes,
        cp_bytes: costs.cp_bytes,
        ep_bytes: costs.ep_bytes,
        dp_bytes: costs.dp_bytes,
    };
    let programs: Vec<Vec<Step>> = (0..par.pp).map(|s| stage_program(&shape, s)).collect();
    if let Some(FaultSpec {
        fault: Fault::Hang { op_index, .. },
        ..
    }) = spec.as_mut()
    {
        // Stop before a collective somewhere in the middle of the iteration.
        let len = programs[0].len() as u32;
        *op_index = fault_rng_index(&noise, len);
    }

    // Communicators.
    let mut communicators: Vec<Communicator> = Vec::new();
    let mut rank_comms = vec![[Op::NO_COMM; 7]; world as usize];
    let mut add_groups = |groups: Vec<Vec<u32>>, kind: GroupKind, role: Role| {
        for members in groups {
            if members.len() < 2 {
                continue;
            }
            let id = communicators.len() as CommId;
            for &m in &members {
                rank_comms[m as usize][role_index(role)] = id;
            }
            communicators.push(Communicator {
                id,
                kind,
                label: format!("{}{}", kind.as_str(), id),
                members,
            });
        }
    };
    add_groups(par.groups(Dim::Tp), GroupKind::Tp, Role::Tp);
    add_groups(par.groups(Dim::Cp), GroupKind::Cp, Role::Cp);
    if par.ep > 1 {
        add_groups(par.ep_groups(), GroupKind::Ep, Role::Ep);
    }
    add_groups(par.groups(Dim::Dp), GroupKind::Dp, Role::Dp);
    for pipe in par.groups(Dim::Pp) {
        for pair in pipe.windows(2) {
            let id = communicators.len() as CommId;
            rank_comms[pair[0] as usize][role_index(Role::NextStage)] = id;
            rank_comms[pair[1] as usize][role_index(Role::PrevStage)] = id;
            communicators.push(Communicator {
                id,
                kind: GroupKind::Pp,
                label: format!("pp{id}"),
                members: pair.to_vec(),
            });
        }
    }
    for c in &mut communicators {
        let co = par.coords(c.members[0]);
        c.label = match c.kind {
            GroupKind::Tp => format!("tp[dp{} pp{} cp{}]", co.dp, co.pp, co.cp),
            GroupKind::Dp => format!("dp[tp{} pp{} cp{}]", co.tp, co.pp, co.cp),
            GroupKind::Pp => format!("pp[stage{}-{} tp{} dp{}]", co.pp, co.pp + 1, co.tp, co.dp),
            _ => format!("{}[{}]", c.kind.as_str(), c.members[0]),
        };
    }

    // Fabric: the elements each communicator's ring crosses, and its bandwidth.
    let faulted: Option<(PathElement, f64)> = spec.as_ref().and_then(|s| match s.fault {
        Fault::SlowNic { node, rail, factor } => Some((PathElement::Nic { node, rail }, factor)),
        Fault::CongestedSwitch { pod, rail, factor } => {
            Some((PathElement::Leaf { pod, rail }, factor))
        }
        _ => None,
    });
    let elem_bw = |e: &PathElement, with_fault: bool| -> f64 {
        let base = match e {
            PathElement::NvLink { .. } => costs.nvlink_bytes_per_s,
            PathElement::Nic { .. } => costs.nic_bytes_per_s,
            PathElement::Leaf { .. } => f64::INFINITY,
            // Leaves reach each other through an oversubscribed spine.
            PathElement::Spine => costs.nic_bytes_per_s / costs.spine_slowdown.max(1.0),
        };
        match faulted {
            Some((fe, factor)) if with_fault && fe == *e => {
                if base.is_finite() {
                    base / factor
                } else {
                    costs.nic_bytes_per_s / factor
                }
            }
            _ => base,
        }
    };
    let mut comm_states: Vec<CommState> = Vec::with_capacity(communicators.len());
    let mut path = Vec::new();
    for c in &communicators {
        let (mut base_bw, mut fault_bw) = (f64::INFINITY, f64::INFINITY);
        let mut inter_node = false;
        let mut leaves = Vec::new();
        let n = c.members.len();
        for i in 0..n {
            let a = cluster.loc(c.members[i]);
            let b = cluster.loc(c.members[(i + 1) % n]);
            cluster.path(a, b, &mut path);
            inter_node |= a.node != b.node;
            for e in &path {
                base_bw = base_bw.min(elem_bw(e, false));
                fault_bw = fault_bw.min(elem_bw(e, true));
                if let PathElement::Leaf { pod, rail } = *e {
                    if !leaves.contains(&(pod, rail)) {
                        leaves.push((pod, rail));
                    }
                }
            }
        }
        comm_states.push(CommState {
            members: c.members.clone(),
            pending: Vec::with_capacity(n),
            max_arrival: i64::MIN,
            seq: 0,
            base_bw,
            fault_bw,
            latency_ns: if inter_node {
                costs.net_latency_ns
            } else {
                costs.nvlink_latency_ns
            },
            inter_node,
            kind: c.kind,
            leaves,
        });
    }

    // Cluster-wide spikes: a shared-storage hiccup stalls every dataloader alike, or the
    // whole network slows for an iteration.
    let mut spike_iterations = Vec::new();
    let mut dl_spike = vec![0.0f64; cfg.iterations as usize];
    let mut net_spike = vec![1.0f64; cfg.iterations as usize];
    for it in 0..cfg.iterations {
        if noise.uniform(&[1, it as u64]) < cfg.spike_probability {
            spike_iterations.push(it);
            if noise.uniform(&[2, it as u64]) < 0.5 {
                dl_spike[it as usize] = 20e6 + 60e6 * noise.uniform(&[3, it as u64]);
            } else {
                net_spike[it as usize] = 1.5 + 1.5 * noise.uniform(&[3, it as u64]);
            }
        }
    }

    // Background traffic of other jobs: in some iterations one leaf switch is busier.
    let mut background = Vec::new();
    let congestion: Vec<Option<(u32, u32, f64)>> = (0..cfg.iterations)
        .map(|it| {
            let k = it as u64;
            (noise.uniform(&[40, k]) < costs.background_congestion_probability).then(|| {
                let pod = (noise.uniform(&[41, k]) * cluster.pods() as f64) as u32;
                let rail = (noise.uniform(&[42, k]) * cluster.gpus_per_node as f64) as u32;
                let f = 1.0 + (costs.background_congestion_max - 1.0) * noise.uniform(&[43, k]);
                background.push(format!(
                    "iteration {it}: {} carries background traffic (x{f:.2})",
                    PathElement::Leaf { pod, rail }.label()
                ));
                (pod, rail, f)
            })
        })
        .collect();

    let mut names = NameTable::default();
    for n in schedule::NAMES {
        names.intern(n);
    }

    let mut ranks: Vec<RankState> = (0..world)
        .map(|r| {
            let co = par.coords(r);
            RankState {
                pc: 0,
                iteration: 0,
                gpu_free: 0,
                cpu: 0,
                stage: co.pp,
                dp: co.dp,
                comms: rank_comms[r as usize],
                speed: 1.0 + costs.gpu_spread * noise.normal(&[4, r as u64]),
                done: false,
                ops_base: 0,
                trace: RankTrace {
                    rank: r,
                    ops: Vec::with_capacity(programs[co.pp as usize].len() * 2),
                    iterations: Vec::with_capacity(2),
                },
            }
        })
        .collect();

    let ctx = Ctx {
        cfg,
        costs,
        noise: &noise,
        spec: spec.as_ref(),
        programs: &programs,
        dl_spike: &dl_spike,
        net_spike: &net_spike,
        congestion: &congestion,
    };
    let mut truth = truth_for(spec.as_ref(), par, &cluster, cfg.seed, spike_iterations);
    truth.background = background;
    let trace = Trace {
        meta: TraceMeta {
            source: "simulator".into(),
            detail: format!(
                "seed {} fault {} TP{} CP{} EP{} DP{} PP{} x {} iterations",
                cfg.seed,
                cfg.fault.name(),
                par.tp,
                par.cp,
                par.ep,
                par.dp,
                par.pp,
                cfg.iterations
            ),
            missing_ranks: vec![],
            cpu_compute: false,
            notes: Vec::new(),
            host_calls: Default::default(),
        },
        job: JobInfo {
            job_id: format!("sim-{}-{}-s{}", world, cfg.fault.name(), cfg.seed),
            world_size: world,
            cluster,
            parallel: Some(par.clone()),
            microbatches: Some(cfg.microbatches),
        },
        communicators,
        names: names.names.clone(),
        ranks: Vec::new(),
    };
    on_event(SimEvent::Start(&trace));
    let mut runnable: Vec<u32> = (0..world).rev().collect();
    let mut completed = vec![0u32; cfg.iterations as usize];
    let mut next_emit = 0u32;
    let mut emit = |it: u32, ranks: &mut [RankState]| {
        let chunk = SimChunk {
            iteration: it,
            ranks: ranks.iter_mut().map(|st| st.drain_iteration(it)).collect(),
        };
        on_event(SimEvent::Iteration(chunk));
    };
    while let Some(r) = runnable.pop() {
        ctx.run_rank(
            r,
            &mut ranks,
            &mut comm_states,
            &mut runnable,
            &mut completed,
        );
        while next_emit < cfg.iterations && completed[next_emit as usize] == world {
            emit(next_emit, &mut ranks);
            next_emit += 1;
        }
    }
    // A hung job: what the ranks did in the iterations nobody finished.
    for it in next_emit..cfg.iterations {
        if ranks
            .iter()
            .any(|st| st.trace.iterations.iter().any(|s| s.iteration == it))
        {
            emit(it, &mut ranks);
        }
    }

    Ok(SimOutput { trace, truth })
}

fn fault_rng_index(noise: &Noise, len: u32) -> u32 {
    (len as f64 * (0.3 + 0.4 * noise.uniform(&[0xFA18]))) as u32
}

struct Ctx<'a> {
    cfg: &'a SimConfig,
    costs: &'a Costs,
    noise: &'a Noise,
    spec: Option<&'a FaultSpec>,
    programs: &'a [Vec<Step>],
    dl_spike: &'a [f64],
    net_spike: &'a [f64],
    congestion: &'a [Option<(u32, u32, f64)>],
}

impl Ctx<'_> {
    fn active(&self, it: u32) -> Option<&Fault> {
        self.spec.filter(|s| s.active(it)).map(|s| &s.fault)
    }

    /// Advances rank `r` until it blocks in a sync op, hangs or finishes.
    fn run_rank(
        &self,
        r: u32,
        ranks: &mut [RankState],
        comms: &mut [CommState],
        runnable: &mut Vec<u32>,
        completed: &mut [u32],
    ) {
        let c = self.costs;
        loop {
            let st = &mut ranks[r as usize];
            if st.done {
                return;
            }
            let it = st.iteration;
            let program = &self.programs[st.stage as usize];
            if st.pc == 0 {
                st.trace.iterations.push(IterationSpan {
                    iteration: it,
                    start_ns: st.cpu.max(st.gpu_free),
                    end_ns: None,
                });
            }
            if st.pc == program.len() {
                // The optimizer's gradient-norm check syncs the CPU with the GPU.
                st.cpu = st.cpu.max(st.gpu_free);
                if let Some(span) = st.trace.iterations.last_mut() {
                    span.end_ns = Some(st.gpu_free);
                }
                st.pc = 0;
                completed[st.iteration as usize] += 1;
                st.iteration += 1;
                if st.iteration == self.cfg.iterations {
                    st.done = true;
                    return;
                }
                continue;
            }
            let step = program[st.pc];
            if let Some(Fault::Hang {
                rank,
                iteration,
                op_index,
            }) = self.active(it)
            {
                if *rank == r
                    && *iteration == it
                    && st.pc as u32 >= *op_index
                    && step.kind.is_sync()
                {
                    st.done = true;
                    return;
                }
            }
            let key = [r as u64, it as u64, st.pc as u64];
            let jitter = |sigma: f64, tag: u64| {
                let k = [tag, key[0], key[1], key[2]];
                let mut f = (sigma * self.noise.normal(&k)).exp();
                // Rare per-op outliers: real kernels sometimes hiccup.
                if self.noise.uniform(&[tag ^ 0x55, key[0], key[1], key[2]]) < 0.002 {
                    f *= 1.3;
                }
                f
            };
            let fault = self.active(it);
            // Untraced operating-system noise holds the CPU up once in some iterations.
            let (rk, ik) = (r as u64, it as u64);
            if self.noise.uniform(&[32, rk, ik]) < c.os_jitter_probability
                && st.pc == (self.noise.uniform(&[34, rk, ik]) * program.len() as f64) as usize
            {
                st.cpu += (c.os_jitter_max_ns * self.noise.uniform(&[33, rk, ik])) as i64;
            }
            match step.work {
                Work::DataLoader | Work::Gc => {
                    let mut dur = if step.work == Work::DataLoader {
                        c.dataloader_ns * jitter(0.05, 10) + self.dl_spike[it as usize]
                    } else {
                        c.gc_ns * jitter(0.1, 11)
                    };
                    if let Some(Fault::HostStall {
                        rank,
                        source,
                        pause_ms,
                        probability,
                    }) = fault
                    {
                        let matches = match source {
                            StallSource::Gc => step.work == Work::Gc,
                            StallSource::DataLoader => step.work == Work::DataLoader,
                        };
                        if *rank == r
                            && matches
                            && self.noise.uniform(&[12, r as u64, it as u64]) < *probability
                        {
                            dur +=
                                pause_ms * 1e6 * (0.7 + 0.6 * self.noise.uniform(&[13, it as u64]));
                        }
                    }
                    if let Some(Fault::UntracedStall {
                        rank,
                        pause_ms,
                        iterations,
                    }) = fault
                    {
                        // Before the next batch is fetched, nothing traced: a gap on
                        // the CPU that holds back the iteration's first launches.
                        if *rank == r && step.work == Work::DataLoader && iterations.contains(&it) {
                            st.cpu += (pause_ms
                                * 1e6
                                * (0.7 + 0.6 * self.noise.uniform(&[15, it as u64])))
                                as i64;
                        }
                    }
                    let start = st.cpu;
                    st.cpu += dur as i64;
                    st.trace.ops.push(Op {
                        kind: step.kind,
                        name: step.name,
                        iteration: it,
                        comm: Op::NO_COMM,
                        seq: 0,
                        peer: Op::NO_PEER,
                        start_ns: start,
                        end_ns: st.cpu,
                        issue_ns: start,
                        amount: 0,
                    });
                }
                Work::Forward | Work::Backward | Work::Optimizer => {
                    let base = match step.work {
                        Work::Forward => c.forward_block_ns,
                        Work::Backward => 2.0 * c.forward_block_ns,
                        _ => c.optimizer_ns,
                    };
                    // Clocks drift with temperature and power: a factor that changes every
                    // few iterations.
                    let thermal = (c.thermal_drift
                        * self.noise.normal(&[31, r as u64, (it / 3) as u64]))
                    .exp();
                    let mut factor = st.speed * thermal;
                    // More work (longer sequences, more layers) takes longer and carries
                    // more FLOPs; a slow device only takes longer.
                    let mut work = 1.0;
                    if let Some((from, f)) = self.cfg.workload_change {
                        if it >= from && step.work != Work::Optimizer {
                            work *= f;
                        }
                    }
                    let mut issue_factor = 1.0;
                    match fault {
                        Some(Fault::SlowGpu { rank, factor: f }) if *rank == r => factor *= f,
                        Some(Fault::LaunchBound { rank, factor: f }) if *rank == r => {
                            issue_factor = *f
                        }
                        Some(Fault::StageImbalance { factor: f })
                            if st.stage + 1 == self.cfg.parallel.pp
                                && step.work != Work::Optimizer =>
                        {
                            work *= f
                        }
                        Some(Fault::SequenceImbalance { factor: f })
                            if step.work != Work::Optimizer =>
                        {
                            let heavy = (self.noise.uniform(&[14, it as u64])
                                * self.cfg.parallel.dp as f64)
                                as u32;
                            if st.dp == heavy {
                                work *= f
                            }
                        }
                        _ => {}
                    }
                    let dur = base * work * factor * jitter(c.compute_jitter, 15);
                    let issue = st.cpu;
                    st.cpu += (base * c.issue_fraction * issue_factor * jitter(0.03, 16)) as i64;
                    let start = st.gpu_free.max(issue + c.launch_latency_ns as i64);
                    // The GPU cannot finish a block before its last kernel was issued.
                    let end = (start + dur as i64).max(st.cpu + c.launch_latency_ns as i64);
                    st.gpu_free = end;
                    st.trace.ops.push(Op {
                        kind: OpKind::Compute,
                        name: step.name,
                        iteration: it,
                        comm: Op::NO_COMM,
                        seq: 0,
                        peer: Op::NO_PEER,
                        start_ns: start,
                        end_ns: end,
                        issue_ns: issue,
                        // About 400 TFLOP/s at base speed (an H100 near 40% MFU).
                        amount: (base * work * 4e5) as u64,
                    });
                }
                Work::Comm => {
                    let comm = st.comms[role_index(step.role)];
                    debug_assert_ne!(comm, Op::NO_COMM);
                    let issue = st.cpu;
                    st.cpu += c.comm_issue_ns as i64;
                    let arrival = st.gpu_free.max(issue + c.launch_latency_ns as i64);
                    let cs = &mut comms[comm as usize];
                    let peer = if step.kind.is_p2p() {
                        *cs.members.iter().find(|&&m| m != r).unwrap_or(&Op::NO_PEER)
                    } else {
                        Op::NO_PEER
                    };
                    let op_index = st.ops_base + st.trace.ops.len() as u32;
                    st.trace.ops.push(Op {
                        kind: step.kind,
                        name: step.name,
                        iteration: it,
                        comm,
                        seq: cs.seq,
                        peer,
                        start_ns: arrival,
                        end_ns: Op::IN_FLIGHT,
                        issue_ns: issue,
                        amount: step.bytes,
                    });
                    st.pc += 1;
                    cs.pending.push((r, op_index));
                    cs.max_arrival = cs.max_arrival.max(arrival);
                    if cs.pending.len() < cs.members.len() {
                        return; // blocked until the others arrive
                    }
                    self.complete(comm, step, it, ranks, comms, runnable, r);
                    continue;
                }
            }
            ranks[r as usize].pc += 1;
        }
    }

    /// The last member arrived: everyone ends after the transfer.
    #[allow(clippy::too_many_arguments)]
    fn complete(
        &self,
        comm: CommId,
        step: Step,
        it: u32,
        ranks: &mut [RankState],
        comms: &mut [CommState],
        runnable: &mut Vec<u32>,
        last: u32,
    ) {
        let c = self.costs;
        let cs = &mut comms[comm as usize];
        let n = cs.members.len() as u32;
        let fault_on = self.spec.is_some_and(|s| s.active(it));
        let bw = if fault_on { cs.fault_bw } else { cs.base_bw };
        let net = if cs.inter_node {
            self.net_spike[it as usize]
        } else {
            1.0
        };
        let factor = match cs.kind {
            GroupKind::Pp => 1.0,
            _ => step.kind.bus_factor(n),
        };
        let jit = (c.comm_jitter * self.noise.normal(&[20, comm as u64, cs.seq as u64])).exp();
        let background = match self.congestion[it as usize] {
            Some((pod, rail, f)) if cs.leaves.contains(&(pod, rail)) => f,
            _ => 1.0,
        };
        let transfer =
            (cs.latency_ns + factor * step.bytes as f64 / bw * 1e9) * net * jit * background;
        let end_base = cs.max_arrival + transfer as i64;
        for &(m, idx) in &cs.pending {
            let st = &mut ranks[m as usize];
            // Members see the end a few microseconds apart.
            let skew =
                (2e3 * self
                    .noise
                    .uniform(&[21, m as u64, comm as u64, cs.seq as u64])) as i64;
            let end = end_base + skew;
            let local = (idx - st.ops_base) as usize;
            st.trace.ops[local].end_ns = end;
            st.gpu_free = end;
            if step.kind.is_p2p() {
                // Megatron synchronises after batched P2P exchanges.
                st.cpu = st.cpu.max(end);
            }
            if m != last {
                runnable.push(m);
            }
        }
        cs.pending.clear();
        cs.max_arrival = i64::MIN;
        cs.seq += 1;
    }
}
