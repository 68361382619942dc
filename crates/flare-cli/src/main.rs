//! `flare`: diagnose distributed training jobs.

mod abnormal_bench;
mod accuracy;
mod agent;
mod baselines;
mod bench;
mod compare;
mod demo;
mod diagnose;
mod labels;
mod load_bench;
mod logs;
mod overhead;
mod present;
mod serve;
mod sim;
mod sim_logs;
mod store_bench;
mod timeline;
mod train;
mod whatif;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "flare",
    version,
    about = "Find which GPU, NIC, link, node, stage or piece of code makes a training job fail, hang or run slow"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Simulate a Megatron-style job with an injected fault; writes trace.flare and truth.json.
    Sim(sim::SimArgs),
    /// Write the logs of a simulated job that fails one way (a file per rank, each node's
    /// kernel log and launcher output) and its truth.json.
    SimLogs(sim_logs::SimLogsArgs),
    /// Diagnose a trace: a .flare file or a directory of per-rank Kineto traces.
    Diagnose(diagnose::DiagnoseArgs),
    /// Compare two runs of a job: why the current one's steps are slower (or faster) than
    /// the baseline's, class of time by class.
    Compare(compare::CompareArgs),
    /// Simulate a 1,024-GPU job (TP8 x PP4 x DP32) with a fault, diagnose it and write report.html.
    Demo(demo::DemoArgs),
    /// What-if straggler analysis of an NDTimeline parquet trace: slowdown, M_W, M_S.
    Whatif(whatif::WhatIfArgs),
    /// Benchmarks that print figures (accuracy, speed).
    Bench(bench::BenchArgs),
    /// Train the abnormal-op classifier (a random forest, after Holmes) on simulated jobs and write the model the engine compiles in.
    Train(train::TrainArgs),
    /// Run the node agent: drain the tracer rings on this node, summarise each window, watch for hangs, serve metrics, push to the server.
    Agent(agent::AgentArgs),
    /// Work on text logs: mine templates; find why a job failed.
    Logs(logs::LogsArgs),
    /// Run the ingest server: node agents post window summaries, it diagnoses each window and serves the findings.
    Serve(serve::ServeArgs),
    /// Copy the server's database while it runs (a consistent snapshot into a new file).
    Backup(serve::BackupArgs),
    /// Write a trace as one Perfetto-readable timeline: every rank on one clock, grouped by
    /// parallel group, launches linked to their ops, the diagnosis's culprits marked.
    Timeline(timeline::TimelineArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Sim(a) => sim::run(a),
        Command::SimLogs(a) => sim_logs::run(a),
        Command::Diagnose(a) => diagnose::run(a),
        Command::Compare(a) => compare::run(a),
        Command::Demo(a) => demo::run(a),
        Command::Whatif(a) => whatif::run(a),
        Command::Bench(a) => bench::run(a),
        Command::Train(a) => train::run(a),
        Command::Agent(a) => agent::run(a),
        Command::Serve(a) => serve::run(a),
        Command::Backup(a) => serve::run_backup(a),
        Command::Timeline(a) => timeline::run(a),
        Command::Logs(a) => logs::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
