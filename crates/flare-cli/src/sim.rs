//! `flare sim`: write a simulated job's trace (native and optionally Kineto) and its truth.

use anyhow::{bail, Context, Result};
use clap::Args;
use flare_model::ParallelConfig;
use flare_sim::fault::FaultKind;
use flare_sim::{simulate, SimConfig, SimOutput};
use std::fs;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The job shape shared by `sim` and `demo`.
#[derive(Args, Clone, Debug)]
pub struct JobArgs {
    /// Tensor-parallel size.
    #[arg(long, default_value_t = 8)]
    pub tp: u32,
    /// Pipeline stages.
    #[arg(long, default_value_t = 4)]
    pub pp: u32,
    /// Data-parallel size.
    #[arg(long, default_value_t = 32)]
    pub dp: u32,
    /// Context-parallel size.
    #[arg(long, default_value_t = 1)]
    pub cp: u32,
    /// Expert-parallel size (divides dp; adds MoE all-to-alls).
    #[arg(long, default_value_t = 1)]
    pub ep: u32,
    /// Rank order, fastest-varying first (Megatron's default).
    #[arg(long, default_value = "tp-cp-ep-dp-pp")]
    pub order: String,
    /// Iterations to simulate.
    #[arg(long, default_value_t = 20)]
    pub iterations: u32,
    /// Microbatches per iteration (default: 2 x pp).
    #[arg(long)]
    pub microbatches: Option<u32>,
    /// Nodes per pod (under one set of leaf switches).
    #[arg(long, default_value_t = 32)]
    pub nodes_per_pod: u32,
    /// Random seed: same seed, same job.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Fault to inject: none, slow_gpu, slow_nic, congested_switch, host_stall,
    /// launch_bound, stage_imbalance, sequence_imbalance, intermittent, hang, untraced_stall (a host stall with no span).
    #[arg(long, default_value = "slow_gpu")]
    pub fault: String,
    /// Where the scheduler put the job's nodes: `packed` (contiguous, as few pods as
    /// possible) or `scattered:N` (drawn at random from N times as many pods).
    #[arg(long, default_value = "packed")]
    pub placement: String,
}

impl JobArgs {
    pub fn config(&self) -> Result<SimConfig> {
        let order = ParallelConfig::parse_order(&self.order)?;
        let parallel =
            ParallelConfig::with_order(self.tp, self.cp, self.ep, self.dp, self.pp, &order)?;
        let Some(fault) = FaultKind::parse(&self.fault) else {
            bail!(
                "unknown fault '{}': expected one of {}",
                self.fault,
                FaultKind::ALL.map(|k| k.name()).join(", ")
            )
        };
        let mut cfg = SimConfig::megatron(self.tp, self.pp, self.dp);
        cfg.parallel = parallel;
        cfg.iterations = self.iterations;
        cfg.microbatches = self.microbatches.unwrap_or(2 * self.pp).max(self.pp);
        cfg.nodes_per_pod = self.nodes_per_pod;
        cfg.seed = self.seed;
        cfg.fault = fault;
        cfg.placement = match self.placement.as_str() {
            "packed" | "dense" => flare_sim::Placement::Dense,
            p => match p
                .strip_prefix("scattered")
                .map(|r| r.trim_start_matches(':'))
            {
                Some("") => flare_sim::Placement::Scattered { spread: 2 },
                Some(n) => flare_sim::Placement::Scattered {
                    spread: n.parse().ok().filter(|&n: &u32| n >= 1).with_context(|| {
                        format!("--placement {p}: expected scattered:N with N >= 1")
                    })?,
                },
                None => bail!("--placement '{p}': expected packed or scattered:N"),
            },
        };
        Ok(cfg)
    }
}

#[derive(Args)]
pub struct SimArgs {
    #[command(flatten)]
    pub job: JobArgs,
    /// Output directory.
    #[arg(long, short, default_value = "out/sim")]
    pub out: PathBuf,
    /// Also write per-rank Kineto traces (gzipped) under OUT/kineto/.
    #[arg(long)]
    pub kineto: bool,
    /// Also write ten minutes of machine metrics around the run (GPU clocks, power,
    /// temperature, utilisation, NIC rates, CPU) as Prometheus query_range JSON in
    /// OUT/machine.json; `flare diagnose OUT` reads them.
    #[arg(long)]
    pub machine_metrics: bool,
}

pub fn run(a: SimArgs) -> Result<ExitCode> {
    let cfg = a.job.config()?;
    let sp = crate::present::spinner(&format!(
        "simulating {} ranks x {} iterations",
        cfg.parallel.world_size(),
        cfg.iterations
    ));
    let t0 = std::time::Instant::now();
    let out = simulate(&cfg)?;
    sp.finish_and_clear();
    eprintln!(
        "simulated {} ops in {:.2} s",
        out.trace.op_count(),
        t0.elapsed().as_secs_f64()
    );
    write_outputs(&out, &a.out, a.kineto)?;
    if a.machine_metrics {
        let m = flare_sim::machine::machine_metrics(
            &out.trace.job.cluster,
            out.trace.job.world_size,
            &out.truth,
            cfg.seed,
            &flare_sim::machine::MachineSimConfig::default(),
        );
        let path = a.out.join("machine.json");
        flare_import::prometheus::write_machine_metrics(&m, &path)
            .with_context(|| format!("writing {}", path.display()))?;
        eprintln!(
            "wrote {} ({} machines, {} samples every {} s)",
            path.display(),
            m.machines.len(),
            m.samples,
            m.interval_s
        );
    }
    println!("truth: {}", out.truth.description);
    println!("wrote {}", a.out.display());
    Ok(ExitCode::SUCCESS)
}

pub fn write_outputs(out: &SimOutput, dir: &Path, kineto: bool) -> Result<()> {
    fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let t0 = std::time::Instant::now();
    let trace_path = dir.join("trace.flare");
    flare_import::native::write_native_file(&out.trace, &trace_path)
        .with_context(|| format!("writing {}", trace_path.display()))?;
    let size = fs::metadata(&trace_path).map(|m| m.len()).unwrap_or(0);
    eprintln!(
        "wrote {} ({:.1} MB, {:.1} bytes/op) in {:.2} s",
        trace_path.display(),
        size as f64 / 1e6,
        size as f64 / out.trace.op_count().max(1) as f64,
        t0.elapsed().as_secs_f64()
    );
    let truth_path = dir.join("truth.json");
    fs::write(&truth_path, serde_json::to_string_pretty(&out.truth)?)
        .with_context(|| format!("writing {}", truth_path.display()))?;
    if kineto {
        let kdir = dir.join("kineto");
        fs::create_dir_all(&kdir).with_context(|| format!("creating {}", kdir.display()))?;
        let bar = crate::present::bar(out.trace.ranks.len() as u64, "writing Kineto traces");
        for i in 0..out.trace.ranks.len() {
            let path = kdir.join(format!("rank_{}.json.gz", out.trace.ranks[i].rank));
            let f =
                fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
            let mut gz =
                flate2::write::GzEncoder::new(BufWriter::new(f), flate2::Compression::fast());
            flare_import::kineto::write_kineto_rank(&out.trace, i, &mut gz)
                .and_then(|_| gz.finish().map(|_| ()))
                .with_context(|| format!("writing {}", path.display()))?;
            bar.inc(1);
        }
        bar.finish_and_clear();
        eprintln!(
            "wrote {} Kineto traces under {}",
            out.trace.ranks.len(),
            kdir.display()
        );
    }
    Ok(())
}
