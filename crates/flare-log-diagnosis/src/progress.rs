//! How far a rank got: the stage it was in (process-group init, loading, training,
//! checkpointing, evaluation, shutdown) and the last training iteration it logged, read
//! from the progress lines that launchers and frameworks print. A failure's stage is the
//! last one its rank announced before it.

use flare_model::JobStage;

/// What a progress line says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marker {
    Stage(JobStage),
    /// A training iteration (step) number.
    Iteration(u64),
    /// A checkpoint being saved at a training iteration (Megatron's `saving checkpoint at
    /// iteration 500`).
    CheckpointAt(u64),
}

impl Marker {
    /// The stage the line puts its writer in.
    pub fn stage(self) -> JobStage {
        match self {
            Marker::Stage(s) => s,
            Marker::Iteration(_) => JobStage::Training,
            Marker::CheckpointAt(_) => JobStage::Checkpointing,
        }
    }
}

/// Phrases that announce a stage (ASCII case-insensitive), by stage. Ordered so that the
/// first phrase found in a line decides (`successfully saved checkpoint` is training
/// again, not checkpointing).
pub(crate) const STAGES: &[(&str, JobStage)] = &[
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
    // Lightning's progress bars (TQDMProgressBar's and RichProgressBar's descriptions)
    ("validation dataloader", JobStage::Evaluation),
    ("sanity checking dataloader", JobStage::Evaluation),
    ("testing dataloader", JobStage::Evaluation),
    ("running validation", JobStage::Evaluation),
    ("validation loss", JobStage::Evaluation),
    ("evaluating", JobStage::Evaluation),
    ("training completed", JobStage::Shutdown),
    ("training finished", JobStage::Shutdown),
    ("after training is done", JobStage::Shutdown),
    ("destroy_process_group", JobStage::Shutdown),
];

/// Words after which an iteration number follows: Megatron's `iteration   10/  1000 |`,
/// DeepSpeed's `step=10`, torchtitan's `step:  10`, `global_step 10`, `iter 10`; and
/// tqdm's `| 450/1000 [01:02<01:16, 7.3it/s]` (Lightning, Hugging Face).
pub(crate) const COUNTERS: &[&str] = &["iteration", "global_step", "iter", "step"];

/// The number right after a counter word: `step: 10`, `step=10`, `iteration 10`,
/// `global_step 10`, at most a separator (`:`, `=`, `#`) and spaces between; the word
/// must stand alone (not `steps`, not `sub_step`).
/// The number and where its digits start.
pub(crate) fn counter(message: &str, at: &[(usize, usize)]) -> Option<(u64, usize)> {
    let b = message.as_bytes();
    for &(start, end) in at {
        let before_ok =
            start == 0 || !(b[start - 1].is_ascii_alphanumeric() || b[start - 1] == b'_');
        if !before_ok {
            continue;
        }
        let mut i = end;
        while i < b.len() && b[i] == b' ' {
            i += 1;
        }
        if i < b.len() && matches!(b[i], b':' | b'=' | b'#') {
            i += 1;
        }
        while i < b.len() && b[i] == b' ' {
            i += 1;
        }
        let start = i;
        while i < b.len() && b[i].is_ascii_digit() && i - start < 12 {
            i += 1;
        }
        if i > start && (i == b.len() || !b[i].is_ascii_alphanumeric()) {
            return message[start..i].parse().ok().map(|n| (n, start));
        }
    }
    None
}

/// tqdm's `| 450/1000 [`: the number before the slash.
fn tqdm(message: &str) -> Option<u64> {
    if !(message.contains("it/s") || message.contains("s/it")) {
        return None;
    }
    let bar = message.rfind("| ")?;
    let rest = &message[bar + 2..];
    let (done, tail) = rest.trim_start().split_once('/')?;
    let total: String = tail.chars().take_while(|c| c.is_ascii_digit()).collect();
    if total.is_empty() {
        return None;
    }
    done.trim().parse().ok()
}

/// What a line's message says about progress, if anything.
pub fn marker(message: &str) -> Option<Marker> {
    marker_scanned(message, &crate::lexicon::scan(message).words())
}

/// The same, from the line's scan: the phrase first in the table wins, wherever it is
/// in the line. A step counter (`iteration 1000`) says training, even beside a phrase
/// (`validation loss at iteration 1000` is a result printed as training goes on), except
/// that a checkpoint saved `at iteration 500` is being saved; a progress bar under another
/// stage's name (`Validation DataLoader 0: 45%|... | 45/100 [`) counts that stage's
/// batches, not training steps.
pub fn marker_scanned(message: &str, words: &crate::lexicon::Words) -> Option<Marker> {
    let stage = words.stage.map(|i| STAGES[i as usize].1);
    if let Some(n) = words.counter {
        return Some(if stage == Some(JobStage::Checkpointing) {
            Marker::CheckpointAt(n)
        } else {
            Marker::Iteration(n)
        });
    }
    match (stage, tqdm(message)) {
        (Some(s), _) if s != JobStage::Training => Some(Marker::Stage(s)),
        (_, Some(n)) => Some(Marker::Iteration(n)),
        (s, None) => s.map(Marker::Stage),
    }
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
                "Epoch 0:  45%|████▌     | 450/1000 [01:02<01:16, 7.30it/s]",
                Some(Marker::Iteration(450)),
            ),
            (
                "saving checkpoint at iteration     500 to /ckpt",
                Some(Marker::CheckpointAt(500)),
            ),
            // Lightning's bars: an evaluation's batches are not training steps
            (
                "Validation DataLoader 0:  45%|████▌     | 45/100 [00:02<00:03, 17.30it/s]",
                Some(Marker::Stage(Evaluation)),
            ),
            (
                "Sanity Checking DataLoader 0: 100%|██████████| 2/2 [00:00<00:00,  9.86it/s]",
                Some(Marker::Stage(Evaluation)),
            ),
            (
                " validation loss at iteration 1000 | lm loss value: 2.31",
                Some(Marker::Iteration(1000)),
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
