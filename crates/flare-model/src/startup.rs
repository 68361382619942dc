//! A rank's start-up, phase by phase: what Flare's Python package records between the
//! process's launch and the end of its first training step, and what the node agent
//! ships of it (the rank's [`StartupRecord`], in its window summaries until start-up is
//! over).

use serde::{Deserialize, Serialize};

string_enum! {
    /// A start-up phase. Each has a code for the tracer's events (see
    /// [`StartupPhase::code`]); the strings are part of the wire format.
    pub enum StartupPhase {
        /// From the process's start to `flare.init()`: the interpreter, and the imports
        /// and work the program does before it starts tracing.
        Launch => "launch",
        /// `import torch`, when the program imports it after `flare.init()`.
        ImportTorch => "import_torch",
        /// `torch.distributed.init_process_group`: the rendezvous, where every rank waits
        /// for the last one to arrive.
        InitProcessGroup => "init_process_group",
        /// The model built, where the program marks it (`flare.startup_phase`).
        ModelBuild => "model_build",
        /// Loading a checkpoint (`torch.load`, `torch.distributed.checkpoint.load`).
        CheckpointLoad => "checkpoint_load",
        /// Wrapping the model for data parallelism (DDP's constructor, which broadcasts
        /// rank 0's parameters: the ranks meet there).
        ModelWrap => "model_wrap",
        /// The first batch of the first DataLoader (its workers started, the first
        /// samples read).
        FirstBatch => "first_batch",
        /// From the first `flare.step()` to the second: the first iteration, with its
        /// one-time costs (lazy communicator set-up, autotuning, compilation).
        FirstStep => "first_step",
        /// A phase the program named itself (`flare.startup_phase("...")`).
        Custom => "custom",
    }
}

impl StartupPhase {
    /// The phase's code in a tracer event (0 is no phase).
    pub fn code(self) -> u64 {
        match self {
            StartupPhase::Launch => 1,
            StartupPhase::ImportTorch => 2,
            StartupPhase::InitProcessGroup => 3,
            StartupPhase::ModelBuild => 4,
            StartupPhase::CheckpointLoad => 5,
            StartupPhase::ModelWrap => 6,
            StartupPhase::FirstBatch => 7,
            StartupPhase::FirstStep => 8,
            StartupPhase::Custom => 9,
        }
    }

    pub fn from_code(code: u64) -> Option<StartupPhase> {
        StartupPhase::ALL.iter().copied().find(|p| p.code() == code)
    }

    /// Whether every rank of the job meets the others in it: a rank that enters it late
    /// keeps all the others waiting there.
    pub fn synchronizes(self) -> bool {
        matches!(
            self,
            StartupPhase::InitProcessGroup | StartupPhase::ModelWrap | StartupPhase::FirstStep
        )
    }

    /// What the phase is, for a person.
    pub fn describe(self) -> &'static str {
        match self {
            StartupPhase::Launch => {
                "launch (the interpreter and what the program ran before flare.init)"
            }
            StartupPhase::ImportTorch => "importing torch",
            StartupPhase::InitProcessGroup => "init_process_group",
            StartupPhase::ModelBuild => "building the model",
            StartupPhase::CheckpointLoad => "loading the checkpoint",
            StartupPhase::ModelWrap => "wrapping the model (DDP)",
            StartupPhase::FirstBatch => "the first DataLoader batch",
            StartupPhase::FirstStep => "the first step",
            StartupPhase::Custom => "a phase the program named",
        }
    }
}

/// A rank's start-up so far: its phases in start order, the last possibly still open.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StartupRecord {
    pub phases: Vec<StartupPhaseRecord>,
    /// The first step ended: start-up is over for this rank.
    #[serde(default)]
    pub complete: bool,
}

/// One phase of one rank (Unix ns, on the node's clock).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct StartupPhaseRecord {
    pub phase: StartupPhase,
    /// The program's own name for a [`StartupPhase::Custom`] phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub start_unix_ns: u64,
    /// `None` while the phase is in progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_unix_ns: Option<u64>,
}

impl StartupPhaseRecord {
    /// What a person calls it: the program's name for a custom phase.
    pub fn label(&self) -> &str {
        match (&self.name, self.phase) {
            (Some(n), StartupPhase::Custom) => n,
            _ => self.phase.as_str(),
        }
    }
}

impl StartupRecord {
    /// The first phase of `phase`, if recorded.
    pub fn phase(&self, phase: StartupPhase) -> Option<&StartupPhaseRecord> {
        self.phases.iter().find(|p| p.phase == phase)
    }

    /// When the process started (the launch phase's start), if recorded.
    pub fn process_start_unix_ns(&self) -> Option<u64> {
        self.phase(StartupPhase::Launch).map(|p| p.start_unix_ns)
    }

    /// When start-up ended (the first step's end), once complete.
    pub fn end_unix_ns(&self) -> Option<u64> {
        self.complete
            .then(|| {
                self.phase(StartupPhase::FirstStep)
                    .and_then(|p| p.end_unix_ns)
            })
            .flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phase_codes_round_trip_and_are_distinct() {
        for &p in StartupPhase::ALL {
            assert_eq!(StartupPhase::from_code(p.code()), Some(p));
        }
        assert_eq!(StartupPhase::from_code(0), None);
        let mut codes: Vec<u64> = StartupPhase::ALL.iter().map(|p| p.code()).collect();
        codes.dedup();
        assert_eq!(codes.len(), StartupPhase::ALL.len());
    }

    #[test]
    fn a_record_reads_its_start_and_end() {
        let phase = |phase, start, end| StartupPhaseRecord {
            phase,
            name: None,
            start_unix_ns: start,
            end_unix_ns: end,
        };
        let mut r = StartupRecord {
            phases: vec![
                phase(StartupPhase::Launch, 10, Some(20)),
                phase(StartupPhase::FirstStep, 30, Some(40)),
            ],
            complete: false,
        };
        assert_eq!(r.process_start_unix_ns(), Some(10));
        assert_eq!(r.end_unix_ns(), None);
        r.complete = true;
        assert_eq!(r.end_unix_ns(), Some(40));
        let json = serde_json::to_string(&r).unwrap();
        assert!(json.contains("\"phase\":\"first_step\""), "{json}");
        assert_eq!(serde_json::from_str::<StartupRecord>(&json).unwrap(), r);
    }
}
