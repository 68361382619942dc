//! How far a rank got: the stage it was in (process-group init, loading, training,
//! checkpointing, evaluation, shutdown) and the last training iteration it logged, read
//! from the progress lines that launchers and frameworks print. A failure's stage is the
//! last one its rank announced before it.

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use flare_model::JobStage;
use regex::Regex;
use std::sync::OnceLock;

/// What a progress line says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marker {
    Stage(JobStage),
    /// A training iteration (step) number.
    Iteration(u64),
}

/// Phrases that announce a stage (ASCII case-insensitive), by stage. Ordered so that the
/// first phrase found in a line decides (`successfully saved checkpoint` is training
/// again, not checkpointing).
const STAGES: &[(&str, JobStage)] = &[
    ("successfully saved checkpoint", JobStage::Training),
    ("saved checkpoint", JobStage::Training),
    ("checkpoint saved", JobStage::Training),
    ("saving checkpoint", JobStage::Checkpointing),
    ("save_checkpoint", JobStage::Checkpointing),
    ("saving model checkpoint", JobStage::Checkpointing),
    ("writing checkpoint", JobStage::Checkpointing),
    ("loading checkpoint", JobStage::Loading),
    ("load_checkpoint", JobStage::Loading),
    ("loading weights", JobStage::Loading),
    ("loading model", JobStage::Loading),
    ("loading dataset", JobStage::Loading),
    ("loading data", JobStage::Loading),
    ("building model", JobStage::Loading),
    ("> building", JobStage::Loading),
    (
        "building train, validation, and test datasets",
        JobStage::Loading,
    ),
    ("init_process_group", JobStage::Init),
    ("initializing process group", JobStage::Init),
    ("initializing torch distributed", JobStage::Init),
    ("initialized distributed", JobStage::Init),
    ("NCCL INFO Bootstrap", JobStage::Init),
    ("ncclCommInitRank", JobStage::Init),
    ("Init START", JobStage::Init),
    ("init.cc:", JobStage::Init),
    ("bootstrap.cc", JobStage::Init),
    ("rendezvous", JobStage::Init),
    ("***** running training *****", JobStage::Training),
    ("starting training", JobStage::Training),
    ("start training", JobStage::Training),
    ("training ...", JobStage::Training),
    ("before the start of training step", JobStage::Training),
    ("***** running evaluation *****", JobStage::Evaluation),
    ("running validation", JobStage::Evaluation),
    ("validation loss", JobStage::Evaluation),
    ("evaluating", JobStage::Evaluation),
    ("training completed", JobStage::Shutdown),
    ("training finished", JobStage::Shutdown),
    ("after training is done", JobStage::Shutdown),
    ("destroy_process_group", JobStage::Shutdown),
];

/// Iteration counters: Megatron's `iteration   10/  1000 |`, DeepSpeed's `step=10`,
/// torchtitan's `step:  10`, Lightning/tqdm's `| 450/1000 [`, and `iteration 10`,
/// `global_step 10`, `step 10` elsewhere.
const ITERATION: &str = r"(?i)(?:\biteration\s+(\d+)\s*/\s*\d+\s*\||\b(?:iteration|iter|global_step|step)\s*[:=#]?\s*(\d+)\b|\|\s*(\d+)/\d+ \[)";

struct Compiled {
    stages: AhoCorasick,
    iteration: Regex,
    iteration_needles: AhoCorasick,
}

fn compiled() -> &'static Compiled {
    static C: OnceLock<Compiled> = OnceLock::new();
    C.get_or_init(|| Compiled {
        stages: AhoCorasickBuilder::new()
            .ascii_case_insensitive(true)
            .match_kind(MatchKind::LeftmostFirst)
            .build(STAGES.iter().map(|(p, _)| p))
            .expect("stage phrases compile"),
        iteration: Regex::new(ITERATION).expect("the iteration pattern compiles"),
        iteration_needles: AhoCorasickBuilder::new()
            .ascii_case_insensitive(true)
            .build(["iter", "step", "/"])
            .expect("iteration needles compile"),
    })
}

/// What a line's message says about progress, if anything.
pub fn marker(message: &str) -> Option<Marker> {
    let c = compiled();
    if c.iteration_needles.is_match(message) {
        if let Some(caps) = c.iteration.captures(message) {
            let n = (1..=3).find_map(|i| caps.get(i))?.as_str().parse().ok()?;
            return Some(Marker::Iteration(n));
        }
    }
    // the phrase that comes first in the table wins, wherever it is in the line
    c.stages
        .find_iter(message)
        .map(|m| m.pattern().as_usize())
        .min()
        .map(|i| Marker::Stage(STAGES[i].1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers() {
        use JobStage::*;
        let cases: &[(&str, Option<Marker>)] = &[
            (
                " iteration      182/  250000 | consumed samples:       186368 |",
                Some(Marker::Iteration(182)),
            ),
            (
                "[Rank 0] step=40, skipped=0, lr=[0.0001]",
                Some(Marker::Iteration(40)),
            ),
            ("step:  10  loss:  9.1", Some(Marker::Iteration(10))),
            (
                "Epoch 0:  45%|████▌     | 450/1000 [01:02<01:16]",
                Some(Marker::Iteration(450)),
            ),
            (
                "saving checkpoint at iteration     500 to /ckpt",
                Some(Marker::Iteration(500)),
            ),
            (
                "Saving checkpoint to /ckpt/step-500",
                Some(Marker::Stage(Checkpointing)),
            ),
            (
                "  successfully saved checkpoint from iteration",
                Some(Marker::Stage(Training)),
            ),
            (
                "loading checkpoint from /ckpt",
                Some(Marker::Stage(Loading)),
            ),
            (
                "NCCL INFO Bootstrap : Using eth0:10.0.0.1<0>",
                Some(Marker::Stage(Init)),
            ),
            (
                "***** Running training *****",
                Some(Marker::Stage(Training)),
            ),
            ("hello world", None),
        ];
        for (line, want) in cases {
            assert_eq!(marker(line), *want, "{line}");
        }
    }
}
