//! The fault library and its ground truth.

use flare_model::{ClusterTopology, Component, Culprit, FindingKind, ParallelConfig, PathElement};
use rand::Rng;
use serde::{Deserialize, Serialize};

/// Which kind of fault to inject; `flare demo --fault NAME` and the benchmark use these names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    None,
    SlowGpu,
    SlowNic,
    CongestedSwitch,
    HostStall,
    LaunchBound,
    StageImbalance,
    SequenceImbalance,
    Intermittent,
    Hang,
    /// A host stall the trace holds no span for (see [`Fault::UntracedStall`]).
    UntracedStall,
}

impl FaultKind {
    pub const ALL: [FaultKind; 11] = [
        FaultKind::None,
        FaultKind::SlowGpu,
        FaultKind::SlowNic,
        FaultKind::CongestedSwitch,
        FaultKind::HostStall,
        FaultKind::LaunchBound,
        FaultKind::StageImbalance,
        FaultKind::SequenceImbalance,
        FaultKind::Intermittent,
        FaultKind::Hang,
        FaultKind::UntracedStall,
    ];

    /// The kinds `flare train` learns abnormal ops from. Kinds added since the model was
    /// trained stay out, so that the benchmark measures the model on faults it never saw
    /// and the committed model stays what `flare train` produces.
    pub const TRAINING: [FaultKind; 9] = [
        FaultKind::None,
        FaultKind::SlowGpu,
        FaultKind::SlowNic,
        FaultKind::CongestedSwitch,
        FaultKind::HostStall,
        FaultKind::LaunchBound,
        FaultKind::StageImbalance,
        FaultKind::SequenceImbalance,
        FaultKind::Intermittent,
    ];

    /// Every kind whose job keeps running, so that its op durations can be compared with
    /// a fault-free twin's: all but a hang, in [`FaultKind::ALL`] order.
    pub fn with_durations() -> impl Iterator<Item = FaultKind> {
        Self::ALL.into_iter().filter(|k| *k != FaultKind::Hang)
    }

    pub fn name(&self) -> &'static str {
        match self {
            FaultKind::None => "none",
            FaultKind::SlowGpu => "slow_gpu",
            FaultKind::SlowNic => "slow_nic",
            FaultKind::CongestedSwitch => "congested_switch",
            FaultKind::HostStall => "host_stall",
            FaultKind::LaunchBound => "launch_bound",
            FaultKind::StageImbalance => "stage_imbalance",
            FaultKind::SequenceImbalance => "sequence_imbalance",
            FaultKind::Intermittent => "intermittent",
            FaultKind::Hang => "hang",
            FaultKind::UntracedStall => "untraced_stall",
        }
    }

    pub fn parse(s: &str) -> Option<FaultKind> {
        let s = s.replace('-', "_");
        Self::ALL.into_iter().find(|k| k.name() == s)
    }
}

/// Host stalls come from Python's garbage collector or from the input pipeline.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StallSource {
    Gc,
    DataLoader,
}

/// A concrete fault with its parameters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Fault {
    /// Compute on one GPU takes `factor` times longer (x1.05 to x2).
    SlowGpu { rank: u32, factor: f64 },
    /// One NIC (and its cable) moves data `factor` times slower (/2 to /10).
    SlowNic { node: u32, rail: u32, factor: f64 },
    /// Every path through one leaf switch is `factor` times slower.
    CongestedSwitch { pod: u32, rail: u32, factor: f64 },
    /// One rank pauses on the host for `pause_ms` in a fraction of iterations.
    HostStall {
        rank: u32,
        source: StallSource,
        pause_ms: f64,
        probability: f64,
    },
    /// One rank's CPU pauses for `pause_ms` in a fraction of iterations outside any op
    /// the trace holds (work nobody annotated, a blocked syscall): its GPU idles, no host
    /// span says why.
    UntracedStall {
        rank: u32,
        pause_ms: f64,
        /// The iterations it pauses in (at least two: a one-off pause is no fault).
        iterations: Vec<u32>,
    },
    /// Issuing kernels on one rank's CPU costs `factor` times more: its GPU starves.
    LaunchBound { rank: u32, factor: f64 },
    /// The last pipeline stage computes `factor` times more.
    StageImbalance { factor: f64 },
    /// Each iteration, one data-parallel replica gets sequences `factor` times costlier.
    SequenceImbalance { factor: f64 },
    /// `rank` stops for good before its `op_index`-th op of iteration `iteration`.
    Hang {
        rank: u32,
        iteration: u32,
        op_index: u32,
    },
}

/// A fault and the iterations it is active in (`None`: all).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FaultSpec {
    pub fault: Fault,
    pub active_iterations: Option<Vec<u32>>,
    /// The library kind it was drawn as (an intermittent slow GPU has kind `intermittent`).
    pub library_kind: FaultKind,
}

impl FaultSpec {
    pub fn active(&self, iteration: u32) -> bool {
        self.active_iterations
            .as_ref()
            .is_none_or(|its| its.binary_search(&iteration).is_ok())
    }
}

/// What was injected, written beside a simulated trace as `truth.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Truth {
    pub fault_kind: FaultKind,
    pub fault: Option<FaultSpec>,
    pub description: String,
    /// The finding kind a correct diagnosis reports.
    pub expected_finding: Option<FindingKind>,
    /// What a correct diagnosis blames (any one of them counts).
    pub culprits: Vec<Culprit>,
    /// Iterations with a cluster-wide spike that must not be blamed on anyone.
    pub spike_iterations: Vec<u32>,
    /// Background noise injected besides the fault (busy switches), for reading misses.
    #[serde(default)]
    pub background: Vec<String>,
    pub seed: u64,
}

impl Truth {
    /// Does a culprit named by a finding of kind `kind` identify the injected fault?
    pub fn matches(&self, kind: FindingKind, culprit: &Culprit) -> bool {
        if self.expected_finding != Some(kind) {
            return false;
        }
        if kind == FindingKind::SequenceImbalance {
            // The imbalance is in the data, not a device: naming it is the localization.
            return true;
        }
        self.culprits.iter().any(|t| match t.component {
            Component::Gpu | Component::Host | Component::Process => t.rank == culprit.rank,
            Component::Nic | Component::Link => {
                t.node == culprit.node && t.local_gpu == culprit.local_gpu
            }
            Component::Switch => t.element == culprit.element,
            Component::Stage => t.stage == culprit.stage,
            Component::Network => false,
        })
    }
}

impl Truth {
    /// Whether naming `rank` (without saying what is wrong with it) points at the
    /// injected fault: the rank itself, a rank behind the faulty NIC or switch, or a
    /// rank of the imbalanced stage. Used to score tools that only name ranks; a
    /// sequence imbalance has no rank to name.
    pub fn locates_rank(&self, rank: u32, cluster: &ClusterTopology, par: &ParallelConfig) -> bool {
        let Some(kind) = self.expected_finding else {
            return false;
        };
        let loc = cluster.loc(rank);
        self.culprits.iter().any(|t| match kind {
            FindingKind::SequenceImbalance => false,
            FindingKind::StageImbalance => t.stage == Some(par.coords(rank).pp),
            FindingKind::SlowLink => t.node == Some(loc.node) && t.local_gpu == Some(loc.local),
            FindingKind::SlowSwitch => {
                t.element
                    == Some(
                        PathElement::Leaf {
                            pod: cluster.pod_of(loc.node),
                            rail: loc.local,
                        }
                        .label(),
                    )
            }
            _ => t.rank == Some(rank),
        })
    }
}

impl Truth {
    /// Whether naming machine `node` points at the injected fault: the node of the faulty
    /// GPU, host or NIC, or a node under the congested switch. Structural faults and hangs
    /// have no machine to name.
    pub fn locates_node(&self, node: u32, cluster: &ClusterTopology) -> bool {
        let Some(kind) = self.expected_finding else {
            return false;
        };
        self.culprits.iter().any(|t| match kind {
            FindingKind::SequenceImbalance | FindingKind::StageImbalance | FindingKind::Hang => {
                false
            }
            FindingKind::SlowSwitch => (0..cluster.gpus_per_node).any(|rail| {
                t.element
                    == Some(
                        PathElement::Leaf {
                            pod: cluster.pod_of(node),
                            rail,
                        }
                        .label(),
                    )
            }),
            _ => t.node == Some(node),
        })
    }
}

/// Draws a random fault of `kind` for a job; `iterations` is the run length.
pub fn draw_fault<R: Rng>(
    kind: FaultKind,
    par: &ParallelConfig,
    cluster: &ClusterTopology,
    iterations: u32,
    rng: &mut R,
) -> Option<FaultSpec> {
    let world = par.world_size();
    let spec = |fault| FaultSpec {
        fault,
        active_iterations: None,
        library_kind: kind,
    };
    Some(match kind {
        FaultKind::None => return None,
        FaultKind::SlowGpu => spec(Fault::SlowGpu {
            rank: rng.random_range(0..world),
            factor: rng.random_range(1.05..2.0),
        }),
        FaultKind::SlowNic => {
            let rank = rng.random_range(0..world);
            let loc = cluster.loc(rank);
            spec(Fault::SlowNic {
                node: loc.node,
                rail: loc.local,
                factor: rng.random_range(2.0..10.0),
            })
        }
        FaultKind::CongestedSwitch => {
            let rank = rng.random_range(0..world);
            let loc = cluster.loc(rank);
            spec(Fault::CongestedSwitch {
                pod: cluster.pod_of(loc.node),
                rail: loc.local,
                factor: rng.random_range(2.0..10.0),
            })
        }
        FaultKind::HostStall => spec(Fault::HostStall {
            rank: rng.random_range(0..world),
            source: if rng.random_bool(0.5) {
                StallSource::Gc
            } else {
                StallSource::DataLoader
            },
            pause_ms: rng.random_range(30.0..300.0),
            probability: rng.random_range(0.3..0.8),
        }),
        FaultKind::LaunchBound => spec(Fault::LaunchBound {
            rank: rng.random_range(0..world),
            factor: rng.random_range(1.6..3.0),
        }),
        FaultKind::StageImbalance => spec(Fault::StageImbalance {
            factor: rng.random_range(1.15..1.6),
        }),
        FaultKind::SequenceImbalance => spec(Fault::SequenceImbalance {
            factor: rng.random_range(1.3..1.8),
        }),
        FaultKind::Intermittent => {
            let inner = if rng.random_bool(0.5) {
                FaultKind::SlowGpu
            } else {
                FaultKind::SlowNic
            };
            let mut s = draw_fault(inner, par, cluster, iterations, rng)?;
            // Make a slow GPU clearly slow while it is active: intermittent faults are
            // typically thermal throttling or flapping links, not a 5% drift.
            if let Fault::SlowGpu { factor, .. } = &mut s.fault {
                *factor = rng.random_range(1.2..2.0);
            }
            let start = rng.random_range(0..iterations.max(2) / 2);
            let len = (iterations / 4).max(2);
            let mut its: Vec<u32> = (start..(start + len).min(iterations)).collect();
            its.sort_unstable();
            s.active_iterations = Some(its);
            s.library_kind = FaultKind::Intermittent;
            s
        }
        FaultKind::UntracedStall => {
            let rank = rng.random_range(0..world);
            let pause_ms = rng.random_range(30.0..300.0);
            let probability = rng.random_range(0.3..0.8);
            let mut its: Vec<u32> = (0..iterations)
                .filter(|_| rng.random_bool(probability))
                .collect();
            while its.len() < 2.min(iterations as usize) {
                let it = rng.random_range(0..iterations);
                if !its.contains(&it) {
                    its.push(it);
                }
            }
            its.sort_unstable();
            spec(Fault::UntracedStall {
                rank,
                pause_ms,
                iterations: its,
            })
        }
        FaultKind::Hang => spec(Fault::Hang {
            rank: rng.random_range(0..world),
            iteration: rng.random_range(iterations / 2..iterations.max(1)),
            op_index: 0,
        }),
    })
}

/// The ground truth for a fault.
pub fn truth_for(
    spec: Option<&FaultSpec>,
    par: &ParallelConfig,
    cluster: &ClusterTopology,
    seed: u64,
    spike_iterations: Vec<u32>,
) -> Truth {
    let Some(spec) = spec else {
        return Truth {
            fault_kind: FaultKind::None,
            fault: None,
            description: "no fault injected".into(),
            expected_finding: None,
            culprits: vec![],
            spike_iterations,
            background: vec![],
            seed,
        };
    };
    let rank_culprit = |component, rank: u32| Culprit::at_rank(component, rank, cluster, Some(par));
    let (expected, culprits, description) = match &spec.fault {
        Fault::SlowGpu { rank, factor } => (
            FindingKind::SlowGpu,
            vec![rank_culprit(Component::Gpu, *rank)],
            format!("GPU of rank {rank} computes x{factor:.2} slower"),
        ),
        Fault::SlowNic { node, rail, factor } => {
            let mut c = Culprit::new(Component::Nic);
            c.node = Some(*node);
            c.local_gpu = Some(*rail);
            c.element = Some(
                PathElement::Nic {
                    node: *node,
                    rail: *rail,
                }
                .label(),
            );
            (
                FindingKind::SlowLink,
                vec![c],
                format!("NIC {rail} of node {node} has 1/{factor:.1} of its bandwidth"),
            )
        }
        Fault::CongestedSwitch { pod, rail, factor } => {
            let mut c = Culprit::new(Component::Switch);
            c.element = Some(
                PathElement::Leaf {
                    pod: *pod,
                    rail: *rail,
                }
                .label(),
            );
            (
                FindingKind::SlowSwitch,
                vec![c],
                format!("leaf switch of rail {rail} in pod {pod} is congested (paths x{factor:.1} slower)"),
            )
        }
        Fault::HostStall {
            rank,
            source,
            pause_ms,
            probability,
        } => (
            FindingKind::HostStall,
            vec![rank_culprit(Component::Host, *rank)],
            format!(
                "rank {rank} stalls {pause_ms:.0} ms in {} in {:.0}% of iterations",
                match source {
                    StallSource::Gc => "garbage collection",
                    StallSource::DataLoader => "the dataloader",
                },
                probability * 100.0
            ),
        ),
        Fault::UntracedStall {
            rank,
            pause_ms,
            iterations,
        } => (
            // Nothing traced says where the time went: the rank is the place, its own
            // process the component, and no more can be claimed.
            FindingKind::SlowRank,
            vec![rank_culprit(Component::Process, *rank)],
            format!(
                "rank {rank} pauses {pause_ms:.0} ms on its CPU outside any traced op in iterations {iterations:?}"
            ),
        ),
        Fault::LaunchBound { rank, factor } => (
            FindingKind::LaunchBound,
            vec![rank_culprit(Component::Process, *rank)],
            format!("rank {rank}'s CPU issues kernels x{factor:.2} slower (launch-bound)"),
        ),
        Fault::StageImbalance { factor } => {
            let mut c = Culprit::new(Component::Stage);
            c.stage = Some(par.pp - 1);
            (
                FindingKind::StageImbalance,
                vec![c],
                format!("last pipeline stage computes x{factor:.2} more than the others"),
            )
        }
        Fault::SequenceImbalance { factor } => (
            FindingKind::SequenceImbalance,
            vec![Culprit::new(Component::Process)],
            format!(
                "each iteration one data-parallel replica gets x{factor:.2} costlier sequences"
            ),
        ),
        Fault::Hang {
            rank, iteration, ..
        } => (
            FindingKind::Hang,
            vec![rank_culprit(Component::Process, *rank)],
            format!("rank {rank} stops before its first collective of iteration {iteration}"),
        ),
    };
    let description = match &spec.active_iterations {
        Some(its) => format!(
            "{description}, intermittently (iterations {}-{})",
            its.first().unwrap_or(&0),
            its.last().unwrap_or(&0)
        ),
        None => description,
    };
    Truth {
        fault_kind: spec.library_kind,
        fault: Some(spec.clone()),
        description,
        expected_finding: Some(expected),
        culprits,
        spike_iterations,
        background: vec![],
        seed,
    }
}
