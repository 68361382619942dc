//! `flare bench accuracy`: localization accuracy on held-out simulated jobs, for Flare and
//! for two baselines implemented from their published methods (Holistic Trace Analysis'
//! straggler heuristic and nvidia-resiliency-ext's performance scores).
//!
//! Scenarios are every fault kind at several scales plus fault-free runs, on job shapes
//! and seeds that nothing in Flare was tuned or trained on: seeds from 1,000,000 (tests
//! use seeds below 1,000, `flare train` from 2,000,000), shapes that include 4-D and
//! 5-D parallelism (TP, CP, EP, DP, PP) and that the training set does not use.

use crate::baselines::{hta_stragglers, nvrx_gpu_stragglers, nvrx_scores, nvrx_stragglers};
use crate::bench::AccuracyArgs;
use anyhow::Result;
use flare_engine::{diagnose, EngineConfig};
use flare_model::ParallelConfig;
use flare_sim::fault::FaultKind;
use flare_sim::{simulate, SimConfig};
use serde_json::json;
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::Instant;

/// The methods compared.
const METHODS: [&str; 6] = ["flare", "graph", "hta", "nvrx_gpu", "nvrx", "minder"];

/// Held-out job shapes per scale: (tp, cp, ep, dp, pp). Every 8,192-rank shape has four
/// or more parallel dimensions.
pub fn bench_shapes(scale: u32) -> Vec<(u32, u32, u32, u32, u32)> {
    match scale {
        0..=64 => vec![(8, 1, 1, 4, 2), (4, 1, 1, 8, 2), (2, 2, 1, 8, 2)],
        65..=512 => vec![(8, 1, 1, 16, 4), (4, 2, 1, 16, 4), (8, 1, 4, 32, 2)],
        513..=2048 => vec![(8, 1, 1, 64, 4), (8, 2, 1, 32, 4), (4, 1, 8, 64, 8)],
        _ => vec![(8, 2, 1, 64, 8), (8, 1, 8, 128, 8), (4, 2, 4, 128, 8)],
    }
}

/// The simulated job of a scenario: a held-out shape of the scale, chosen by the seed.
pub fn scenario_config(scale: u32, seed: u64, kind: FaultKind, iterations: u32) -> SimConfig {
    let shapes = bench_shapes(scale);
    let (tp, cp, ep, dp, pp) = shapes[(seed / 7919) as usize % shapes.len()];
    let world = tp * cp * dp * pp;
    let mut cfg = SimConfig::megatron(tp, pp, dp);
    cfg.parallel = ParallelConfig::new(tp, cp, ep, dp, pp).expect("valid benchmark shape");
    debug_assert_eq!(world, cfg.parallel.world_size());
    cfg.iterations = iterations;
    cfg.seed = seed;
    cfg.fault = kind;
    cfg
}

#[derive(Clone, Debug)]
pub struct Scenario {
    pub kind: FaultKind,
    pub scale: u32,
    pub seed: u64,
}

/// The fault kinds named (`default` when none is), fault-free first: fault-free runs
/// always go with them.
pub fn parse_kinds(names: &[String], default: Vec<FaultKind>) -> Result<Vec<FaultKind>> {
    if names.is_empty() {
        return Ok(default);
    }
    let mut v = vec![FaultKind::None];
    for name in names {
        let k =
            FaultKind::parse(name).ok_or_else(|| anyhow::anyhow!("unknown fault kind '{name}'"))?;
        if !v.contains(&k) {
            v.push(k);
        }
    }
    Ok(v)
}

/// Every (scale, kind, run) with its held-out seed, the largest scale first so that
/// worker threads finish together.
pub fn scenarios(
    scales: &[u32],
    kinds: &[FaultKind],
    runs: impl Fn(u32, FaultKind) -> usize,
) -> Vec<Scenario> {
    let mut v = Vec::new();
    for &scale in scales {
        for &kind in kinds {
            for i in 0..runs(scale, kind) {
                v.push(Scenario {
                    kind,
                    scale,
                    seed: bench_seed(kind, scale, i),
                });
            }
        }
    }
    v.sort_by_key(|s| std::cmp::Reverse(s.scale));
    v
}

/// One method's verdict on one scenario.
#[derive(Clone, Debug, Default)]
struct Verdict {
    top1: bool,
    top3: bool,
    /// Named a culprit on a fault-free run.
    false_positive: bool,
    got: String,
}

#[derive(Clone, Debug)]
struct Outcome {
    sc: Scenario,
    shape: String,
    verdicts: BTreeMap<&'static str, Verdict>,
    latency_ms: f64,
    truth: String,
    /// What Flare's first localized finding called it (`None`: nothing localized), and
    /// whether it named the culprit whatever the kind (the cause judged apart from the
    /// place).
    named: Option<flare_model::FindingKind>,
    place_right: bool,
}

/// Per injected fault, how often Flare's first localized finding named each kind, and
/// how often it named the right place: the cause judged apart from the localization.
#[derive(Default)]
struct CauseConfusion {
    rows: BTreeMap<&'static str, (usize, usize, BTreeMap<&'static str, usize>)>,
}

impl CauseConfusion {
    fn add(&mut self, o: &Outcome) {
        let row = self.rows.entry(o.sc.kind.name()).or_default();
        row.0 += 1;
        row.1 += o.place_right as usize;
        let named = o.named.map_or("nothing", |k| k.as_str());
        *row.2.entry(named).or_default() += 1;
    }

    fn json(&self) -> serde_json::Value {
        json!(self
            .rows
            .iter()
            .map(|(k, (n, place, named))| (
                k.to_string(),
                json!({"scenarios": n, "place_right": place, "named": named})
            ))
            .collect::<serde_json::Map<_, _>>())
    }

    fn print(&self) {
        println!("\nFlare's cause, judged apart from the place: per injected fault, the kind its first localized finding named (place right: it named the culprit, whatever the kind)");
        for (fault, (n, place, named)) in &self.rows {
            let cells: Vec<String> = named.iter().map(|(k, c)| format!("{k} {c}")).collect();
            println!(
                "  {fault:<20} {n:>4} scenarios, place right {place:>4}: {}",
                cells.join(", ")
            );
        }
    }
}

fn runs_for(scale: u32, kind: FaultKind, runs: Option<usize>) -> usize {
    let base = runs.unwrap_or(match scale {
        0..=512 => 12,
        513..=2048 => 6,
        _ => 3,
    });
    if kind == FaultKind::None {
        // Fault-free runs measure the false-positive rate: more of them.
        base * 3
    } else {
        base
    }
}

/// Seeds from 1,000,000 up: the unit and scenario tests use seeds below 1,000, and
/// `flare train` seeds from 2,000,000.
pub fn bench_seed(kind: FaultKind, scale: u32, i: usize) -> u64 {
    1_000_000 + (kind as u64) * 100_000 + (scale as u64 % 10_000) * 10 + i as u64 * 7919
}

/// The verdict on a list of localizing findings, most important first: top-1 when the
/// first names the injected kind and culprit, top-3 when one of the first three culprits
/// does; on a fault-free run, any finding is a false positive.
fn finding_verdict(
    localized: &[&flare_model::Finding],
    truth: &flare_sim::fault::Truth,
    fault_free: bool,
) -> Verdict {
    let got = localized
        .first()
        .map(|f| format!("{}: {}", f.kind.as_str(), f.summary))
        .unwrap_or_else(|| "nothing localized".into());
    // Localizing findings name at least one culprit each.
    let named = localized
        .iter()
        .flat_map(|f| f.culprits.iter().map(move |c| (f.kind, c)));
    Verdict::of(named, fault_free, got, |(k, c)| truth.matches(*k, c))
}

impl Verdict {
    /// The verdict on what a method named, most suspect first: top-1 when the first is
    /// the culprit, top-3 when one of the first three is; on a fault-free run, naming
    /// anything is a false positive.
    fn of<T>(
        named: impl IntoIterator<Item = T>,
        fault_free: bool,
        got: String,
        is_culprit: impl Fn(&T) -> bool,
    ) -> Verdict {
        let first3: Vec<T> = named.into_iter().take(3).collect();
        if fault_free {
            let none = first3.is_empty();
            return Verdict {
                top1: none,
                top3: none,
                false_positive: !none,
                got,
            };
        }
        Verdict {
            top1: first3.first().is_some_and(&is_culprit),
            top3: first3.iter().any(&is_culprit),
            false_positive: false,
            got,
        }
    }
}

fn run_one(
    sc: &Scenario,
    iterations: u32,
    baselines: bool,
    ecfg: &EngineConfig,
) -> Result<Outcome> {
    let cfg = scenario_config(sc.scale, sc.seed, sc.kind, iterations);
    let p = &cfg.parallel;
    let shape = format!("TP{} CP{} EP{} DP{} PP{}", p.tp, p.cp, p.ep, p.dp, p.pp);
    let out = simulate(&cfg)?;
    let truth = &out.truth;
    let fault_free = sc.kind == FaultKind::None;
    let t0 = Instant::now();
    let d = diagnose(&out.trace, ecfg);
    let latency_ms = t0.elapsed().as_secs_f64() * 1e3;
    let mut verdicts = BTreeMap::new();
    let localized: Vec<_> = d.localized().collect();
    verdicts.insert("flare", finding_verdict(&localized, truth, fault_free));
    let first = localized.first();
    let named = first.map(|f| f.kind);
    // The place: the expected kind's culprit test applied to the first culprit as if its
    // kind were the expected one.
    let place_right = match (first, truth.expected_finding) {
        (Some(f), Some(k)) => f.culprits.first().is_some_and(|c| truth.matches(k, c)),
        _ => false,
    };
    // Holmes' method alone: the graph detector's own findings.
    verdicts.insert(
        "graph",
        finding_verdict(
            &d.localized_by(flare_model::DetectorId::Graph),
            truth,
            fault_free,
        ),
    );
    if baselines {
        let cluster = &out.trace.job.cluster;
        let rank_verdict = |ranks: &[u32], what: String| {
            Verdict::of(ranks.iter().copied(), fault_free, what, |&r| {
                truth.locates_rank(r, cluster, p)
            })
        };
        let hta: Vec<u32> = hta_stragglers(&out.trace, 2)
            .into_iter()
            .map(|x| x.0)
            .collect();
        let what = format!("latest starters {:?}", &hta[..hta.len().min(3)]);
        verdicts.insert("hta", rank_verdict(&hta, what));
        // Machine metrics alone (Minder's method): node-level credit.
        let m = flare_sim::machine::machine_metrics(
            cluster,
            out.trace.job.world_size,
            truth,
            sc.seed,
            &flare_sim::machine::MachineSimConfig::default(),
        );
        let ctx = flare_engine::JobContext::from_trace(&out.trace);
        let mf =
            flare_engine::detectors::machine::detect_machines(&ctx, &m, &EngineConfig::default());
        let nodes: Vec<u32> = mf.iter().filter_map(|f| f.culprits[0].node).collect();
        let what = mf
            .first()
            .map(|f| f.summary.clone())
            .unwrap_or_else(|| "no machine stands out".into());
        verdicts.insert(
            "minder",
            Verdict::of(nodes, fault_free, what, |&n| truth.locates_node(n, cluster)),
        );
        let scores = nvrx_scores(&out.trace);
        for (name, flagged) in [
            ("nvrx_gpu", nvrx_gpu_stragglers(&scores, 0.75)),
            ("nvrx", nvrx_stragglers(&scores, 0.75)),
        ] {
            let what = format!(
                "scores below 0.75: {:?}",
                flagged
                    .iter()
                    .take(3)
                    .map(|(r, s)| format!("{r} ({s:.2})"))
                    .collect::<Vec<_>>()
            );
            let ranks: Vec<u32> = flagged.iter().map(|x| x.0).collect();
            verdicts.insert(name, rank_verdict(&ranks, what));
        }
    }
    Ok(Outcome {
        sc: sc.clone(),
        shape,
        verdicts,
        latency_ms,
        truth: truth.description.clone(),
        named,
        place_right,
    })
}

#[derive(Default, Clone)]
struct Tally {
    n: usize,
    top1: usize,
    top3: usize,
}

impl Tally {
    fn add(&mut self, v: &Verdict) {
        self.n += 1;
        self.top1 += v.top1 as usize;
        self.top3 += v.top3 as usize;
    }
    fn json(&self) -> serde_json::Value {
        json!({"top1": self.rate(self.top1), "top3": self.rate(self.top3), "scenarios": self.n})
    }
    /// A table cell: `top-1%/top-3% (scenarios)`, with `decimals` digits.
    fn cell(&self, decimals: usize) -> String {
        format!(
            "{:>21}",
            format!(
                "{:.*}%/{:.*}% ({})",
                decimals,
                self.rate(self.top1) * 100.0,
                decimals,
                self.rate(self.top3) * 100.0,
                self.n
            )
        )
    }
    fn rate(&self, k: usize) -> f64 {
        if self.n == 0 {
            0.0
        } else {
            k as f64 / self.n as f64
        }
    }
}

pub(crate) fn percentile(v: &mut [f64], p: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * p).round() as usize]
}

/// One method's tallies.
#[derive(Default)]
struct MethodTable {
    overall: Tally,
    by_scale: BTreeMap<u32, Tally>,
    by_fault: BTreeMap<&'static str, Tally>,
    by_both: BTreeMap<(&'static str, u32), Tally>,
    clean: usize,
    false_positives: usize,
}

impl MethodTable {
    fn fp_rate(&self) -> f64 {
        if self.clean == 0 {
            0.0
        } else {
            self.false_positives as f64 / self.clean as f64
        }
    }

    fn json(&self) -> serde_json::Value {
        let mut overall = self.overall.json();
        overall["false_positive_rate"] = json!(self.fp_rate());
        overall["fault_free_scenarios"] = json!(self.clean);
        json!({
            "overall": overall,
            "by_scale": self.by_scale.iter().map(|(k, t)| (k.to_string(), t.json())).collect::<serde_json::Map<_, _>>(),
            "by_fault": self.by_fault.iter().map(|(k, t)| (k.to_string(), t.json())).collect::<serde_json::Map<_, _>>(),
        })
    }

    fn print(&self, title: &str, scales: &[u32], kinds: &[FaultKind]) {
        println!("\n{title}");
        println!(
            "{:<20}{}{:>21}",
            "fault \\ ranks",
            scales
                .iter()
                .map(|s| format!("{:>21}", s))
                .collect::<String>(),
            "all"
        );
        for kind in kinds.iter().filter(|k| **k != FaultKind::None) {
            let mut line = format!("{:<20}", kind.name());
            for &s in scales {
                let t = self
                    .by_both
                    .get(&(kind.name(), s))
                    .cloned()
                    .unwrap_or_default();
                line.push_str(&t.cell(0));
            }
            let t = self.by_fault.get(kind.name()).cloned().unwrap_or_default();
            line.push_str(&t.cell(0));
            println!("{line}");
        }
        let mut line = format!("{:<20}", "all faults");
        for &s in scales {
            let t = self.by_scale.get(&s).cloned().unwrap_or_default();
            line.push_str(&t.cell(1));
        }
        line.push_str(&self.overall.cell(1));
        println!("{line}");
        println!(
            "false positives on fault-free runs: {}/{} = {:.1}%",
            self.false_positives,
            self.clean,
            self.fp_rate() * 100.0
        );
    }
}

pub fn accuracy(a: AccuracyArgs) -> Result<ExitCode> {
    if !METHODS.contains(&a.misses.as_str()) {
        anyhow::bail!(
            "--misses {}: expected one of {}",
            a.misses,
            METHODS.join(", ")
        );
    }
    let kinds = parse_kinds(&a.faults, FaultKind::ALL.to_vec())?;
    let scenarios = scenarios(&a.scales, &kinds, |scale, kind| {
        runs_for(scale, kind, a.runs)
    });
    let wall = Instant::now();
    let baselines = !a.no_baselines;
    let ecfg = EngineConfig {
        abnormal: a.abnormal,
        ..EngineConfig::default()
    };
    let results = crate::bench::run_parallel(
        &scenarios,
        a.threads,
        "scenarios",
        |sc| run_one(sc, a.iterations, baselines, &ecfg),
        |sc| format!("{sc:?}"),
    )?;
    let mut results: Vec<Outcome> = results.into_iter().map(|(_, o)| o).collect();
    results.sort_by_key(|o| (o.sc.scale, o.sc.kind, o.sc.seed));
    let mut tables: BTreeMap<&str, MethodTable> = BTreeMap::new();
    let mut lat_by_scale: BTreeMap<u32, Vec<f64>> = BTreeMap::new();
    for o in &results {
        lat_by_scale
            .entry(o.sc.scale)
            .or_default()
            .push(o.latency_ms);
        for (&m, v) in &o.verdicts {
            let t = tables.entry(m).or_default();
            if o.sc.kind == FaultKind::None {
                t.clean += 1;
                t.false_positives += v.false_positive as usize;
                continue;
            }
            t.overall.add(v);
            t.by_scale.entry(o.sc.scale).or_default().add(v);
            t.by_fault.entry(o.sc.kind.name()).or_default().add(v);
            t.by_both
                .entry((o.sc.kind.name(), o.sc.scale))
                .or_default()
                .add(v);
        }
    }
    let mut causes = CauseConfusion::default();
    for o in &results {
        causes.add(o);
    }
    let mut all_lat: Vec<f64> = results.iter().map(|o| o.latency_ms).collect();
    let latency = json!({
        "p50": percentile(&mut all_lat.clone(), 0.5),
        "p95": percentile(&mut all_lat, 0.95),
        "by_scale": lat_by_scale.iter_mut().map(|(k, v)| (k.to_string(), json!({"p50": percentile(v, 0.5), "max": percentile(v, 1.0)}))).collect::<serde_json::Map<_, _>>(),
    });
    let n_fault = results
        .iter()
        .filter(|o| o.sc.kind != FaultKind::None)
        .count();
    if a.json {
        let mut doc = serde_json::Map::new();
        for m in METHODS {
            if let Some(t) = tables.get(m) {
                doc.insert(m.to_string(), t.json());
            }
        }
        doc.insert("latency_ms".into(), latency);
        doc.insert("causes".into(), causes.json());
        doc.insert("iterations".into(), json!(a.iterations));
        doc.insert("abnormal_ops".into(), json!(a.abnormal.name()));
        doc.insert("wall_s".into(), json!(wall.elapsed().as_secs_f64()));
        println!("{}", serde_json::to_string_pretty(&doc)?);
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "Localization accuracy on held-out simulated jobs: {} scenarios ({} with a fault, {} fault-free), {} iterations each, abnormal ops by {}, {:.0} s",
        results.len(),
        n_fault,
        results.len() - n_fault,
        a.iterations,
        a.abnormal.describe(),
        wall.elapsed().as_secs_f64()
    );
    println!(
        "(cells: top-1 / top-3 (scenarios); shapes per scale: {})",
        a.scales
            .iter()
            .map(|&s| format!(
                "{s}: {}",
                bench_shapes(s)
                    .iter()
                    .map(|(tp, cp, ep, dp, pp)| format!("TP{tp} CP{cp} EP{ep} DP{dp} PP{pp}"))
                    .collect::<Vec<_>>()
                    .join(" / ")
            ))
            .collect::<Vec<_>>()
            .join("; ")
    );
    let titles = [
        ("flare", "Flare (the first localized finding must name the injected kind and culprit)"),
        ("graph", "Flare's graph detector alone (Holmes' method: abnormal op groups, graph search, topology-aware decay); credited like Flare. It leaves structural delays (stage, sequence imbalance) and hangs to the other detectors"),
        ("hta", "Baseline: Holistic Trace Analysis' straggler heuristic (latest starters of the dominant NCCL kernel, 2 per iteration); credited when its first rank sits on the culprit (the rank, behind the NIC or switch, or in the stage); it always names ranks"),
        ("nvrx_gpu", "Baseline: nvidia-resiliency-ext GPU scores (relative and individual over kernels, below 0.75), as its Megatron integration reports them; credited like HTA"),
        ("nvrx", "Baseline: nvidia-resiliency-ext GPU and section scores (host phases timed as sections: dataloader, GC, optimizer), below 0.75; credited like HTA"),
        ("minder", "Flare's machine-metric detector alone (Minder's method on ten minutes of simulated DCGM/NIC/CPU series, 4-minute continuity); credited when its first machine holds the culprit (structural faults and hangs have none; intermittent faults come in bursts shorter than 4 minutes and should not alert)"),
    ];
    for (m, title) in titles {
        if let Some(t) = tables.get(m) {
            t.print(title, &a.scales, &kinds);
        }
    }
    causes.print();
    println!("\nFlare's diagnosis latency (ms): {latency}");
    let whose = a.misses.as_str();
    let misses: Vec<&Outcome> = results
        .iter()
        .filter(|o| o.verdicts.get(whose).is_some_and(|v| !v.top1))
        .collect();
    if !misses.is_empty() {
        println!("\nMisses of {whose} (top-1):");
        for o in misses.iter().take(100) {
            println!(
                "  {} {} ranks ({}) seed {}: truth: {} | got: {}",
                o.sc.kind.name(),
                o.sc.scale,
                o.shape,
                o.sc.seed,
                o.truth,
                o.verdicts[whose].got
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
