//! Python tracebacks, read as they stream by: where the exception was raised (the
//! innermost frame of the job's own code, not of a library), what the program was doing
//! (the stage its frames' functions name: saving a checkpoint, evaluating, training),
//! and whether it was raised while handling another (a chain, whose first exception is
//! the cause). One traceback is followed per stream (a rank's lines in a console that
//! interleaves ranks).

use flare_model::JobStage;

/// A frame of a traceback: `train.py:123 in forward`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    pub file: String,
    pub line: u32,
    pub function: String,
}

impl Frame {
    pub fn describe(&self) -> String {
        format!("{}:{} in {}", self.file, self.line, self.function)
    }

    /// Whether it is a library's frame (site-packages, the standard library), not the job's.
    fn is_library(&self) -> bool {
        let f = &self.file;
        f.contains("site-packages")
            || f.contains("dist-packages")
            || f.contains("/lib/python")
            || f.starts_with('<')
            || f.contains("/torch/")
    }
}

/// What a traceback line turned out to be.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Not part of a traceback, or inside one.
    Other,
    /// The line ending a traceback: the exception. `location` is the innermost frame of
    /// the job's code (the innermost frame if all are libraries'); `chained`: raised while
    /// handling the exception of the traceback before it.
    Exception {
        location: Option<Frame>,
        chained: bool,
        /// The stage the frames' functions name.
        stage: Option<JobStage>,
        /// The torch.distributed call it was raised in (`all_reduce`, `broadcast`), when
        /// the traceback passes through one.
        collective: Option<String>,
    },
}

/// What a frame's function name says the program was doing: keys with `_` match as
/// substrings (`save_checkpoint`), single words as whole words of the name split at `_`
/// (`multi_gpu_test` is a test, `get_latest` is not). A stage other than training named
/// anywhere in the stack wins (a forward pass inside `evaluate` is evaluation); among
/// those the innermost.
const FRAME_STAGES: &[(&str, JobStage)] = &[
    ("save_for_backward", JobStage::Training),
    ("init_process_group", JobStage::Init),
    ("init_distributed", JobStage::Init),
    ("initialize_distributed", JobStage::Init),
    ("initialize_megatron", JobStage::Init),
    ("setup_distributed", JobStage::Init),
    ("new_group", JobStage::Init),
    ("rendezvous", JobStage::Init),
    ("parse_args", JobStage::Launch),
    ("save", JobStage::Checkpointing),
    ("load", JobStage::Loading),
    ("from_pretrained", JobStage::Loading),
    ("build_model", JobStage::Loading),
    ("build_dataset", JobStage::Loading),
    ("get_model", JobStage::Loading),
    ("eval", JobStage::Evaluation),
    ("evaluate", JobStage::Evaluation),
    ("evaluation", JobStage::Evaluation),
    ("validate", JobStage::Evaluation),
    ("validation", JobStage::Evaluation),
    ("test", JobStage::Evaluation),
    ("predict", JobStage::Evaluation),
    ("train", JobStage::Training),
    ("training", JobStage::Training),
    ("fit", JobStage::Training),
    ("forward", JobStage::Training),
    ("backward", JobStage::Training),
    ("step", JobStage::Training),
];

fn frame_stage(frames: &[String]) -> Option<JobStage> {
    let stage_of = |f: &str| {
        FRAME_STAGES
            .iter()
            .find(|(k, _)| {
                if k.contains('_') {
                    f.contains(k)
                } else {
                    f.split(|c: char| !c.is_ascii_alphanumeric())
                        .any(|w| w == *k)
                }
            })
            .map(|(_, s)| *s)
    };
    // innermost first
    let stages: Vec<JobStage> = frames.iter().rev().filter_map(|f| stage_of(f)).collect();
    stages
        .iter()
        .find(|s| **s != JobStage::Training)
        .or_else(|| stages.first())
        .copied()
}

#[derive(Default)]
struct Open {
    innermost: Option<Frame>,
    innermost_own: Option<Frame>,
    /// The frames' function names, lower case, outermost first (at most `MAX_FRAMES`).
    functions: Vec<String>,
    /// The innermost frame's function in torch.distributed's collectives module.
    collective: Option<String>,
    lines: u32,
    chained: bool,
}

const MAX_FRAMES: usize = 256;

/// The traceback of one stream.
#[derive(Default)]
pub struct Traceback {
    open: Option<Open>,
    /// The last traceback ended in an exception that the next one is raised from.
    chain_next: bool,
}

/// Lines a traceback may span before it is given up (a traceback never ended).
const MAX_LINES: u32 = 2_000;

/// A traceback's first line.
const OPENING: &str = "Traceback (most recent call last)";
/// The lines that chain the next traceback to the one before.
const CHAINING: [&str; 2] = [
    "The above exception was the direct cause",
    "During handling of the above exception",
];
/// A frame's line starts so.
const FRAME: &str = "File \"";

fn frame(message: &str) -> Option<Frame> {
    // `File "train.py", line 123, in forward`
    let rest = message.strip_prefix(FRAME)?;
    let (file, rest) = rest.split_once("\", line ")?;
    let (line, rest) = rest.split_once(", in ").unwrap_or((rest, "?"));
    Some(Frame {
        file: file.to_string(),
        line: line.trim().parse().ok()?,
        function: rest.trim().to_string(),
    })
}

/// `ValueError: x`, `torch.OutOfMemoryError: ...`, `KeyboardInterrupt`: a dotted name
/// whose last part starts upper case, then `:` or the end of the line.
fn is_exception_line(message: &str) -> bool {
    let name_end = message
        .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.'))
        .unwrap_or(message.len());
    let name = &message[..name_end];
    let rest = &message[name_end..];
    let last = name.rsplit('.').next().unwrap_or("");
    !name.is_empty()
        && last.chars().next().is_some_and(|c| c.is_ascii_uppercase())
        && (rest.is_empty() || rest.starts_with(':'))
}

impl Traceback {
    /// Whether a traceback is being read (its header and frames are structure, not
    /// events of their own).
    pub fn in_traceback(&self) -> bool {
        self.open.is_some()
    }

    /// Whether a line whose message is `message` may open a traceback, chain one or be
    /// one's frame (outside a traceback every other line leaves the state as it is).
    pub(crate) fn opens(message: &str) -> bool {
        // most lines start with none of the phrases' letters
        let Some(&first) = message.trim_start().as_bytes().first() else {
            return false;
        };
        if ![OPENING, CHAINING[0], CHAINING[1], FRAME]
            .iter()
            .any(|p| p.as_bytes()[0] == first)
        {
            return false;
        }
        let m = message.trim();
        m.starts_with(OPENING) || CHAINING.iter().any(|c| m.starts_with(c)) || m.starts_with(FRAME)
    }

    /// Follows one line (its message, prefixes removed).
    pub fn step(&mut self, message: &str) -> Step {
        let m = message.trim();
        // most lines start with neither phrase's letter: no comparison runs for them
        let first = m.as_bytes().first().copied();
        if first == Some(b'T') && m.starts_with(OPENING) {
            self.open = Some(Open {
                chained: std::mem::take(&mut self.chain_next),
                ..Open::default()
            });
            return Step::Other;
        }
        if matches!(first, Some(b'T' | b'D')) && CHAINING.iter().any(|c| m.starts_with(c)) {
            self.chain_next = true;
            return Step::Other;
        }
        if self.open.is_none() && frame(m).is_some() {
            // a log excerpt may start inside a traceback
            self.open = Some(Open::default());
        }
        let Some(open) = self.open.as_mut() else {
            return Step::Other;
        };
        open.lines += 1;
        if open.lines > MAX_LINES {
            self.open = None;
            return Step::Other;
        }
        if let Some(f) = frame(m) {
            if !f.is_library() {
                open.innermost_own = Some(f.clone());
            }
            if open.functions.len() < MAX_FRAMES {
                open.functions.push(f.function.to_ascii_lowercase());
            }
            if f.file.ends_with("distributed_c10d.py") {
                open.collective = Some(f.function.clone());
            }
            open.innermost = Some(f);
            return Step::Other;
        }
        if open.innermost.is_some() && is_exception_line(m) {
            let open = self.open.take().expect("open");
            return Step::Exception {
                stage: frame_stage(&open.functions),
                collective: open.collective,
                location: open.innermost_own.or(open.innermost),
                chained: open.chained,
            };
        }
        Step::Other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(lines: &[&str]) -> Vec<Step> {
        let mut t = Traceback::default();
        lines
            .iter()
            .map(|l| t.step(l))
            .filter(|s| *s != Step::Other)
            .collect()
    }

    #[test]
    fn the_job_frame_and_the_chain() {
        let steps = run(&[
            "Traceback (most recent call last):",
            "File \"/work/train.py\", line 88, in <module>",
            "main()",
            "File \"/work/train.py\", line 40, in step",
            "loss = model(batch)",
            "File \"/usr/lib/python3.11/site-packages/torch/nn/modules/module.py\", line 1501, in _call_impl",
            "return forward_call(*args, **kwargs)",
            "^^^^^^^^^^^",
            "KeyError: 'labels'",
            "",
            "The above exception was the direct cause of the following exception:",
            "",
            "Traceback (most recent call last):",
            "File \"/work/run.py\", line 3, in <module>",
            "RuntimeError: step failed",
            "IndexError: not in a traceback",
        ]);
        assert_eq!(
            steps,
            vec![
                Step::Exception {
                    location: Some(Frame {
                        file: "/work/train.py".into(),
                        line: 40,
                        function: "step".into()
                    }),
                    chained: false,
                    stage: Some(JobStage::Training),
                    collective: None,
                },
                Step::Exception {
                    location: Some(Frame {
                        file: "/work/run.py".into(),
                        line: 3,
                        function: "<module>".into()
                    }),
                    chained: true,
                    stage: None,
                    collective: None,
                },
            ]
        );
    }

    #[test]
    fn stage_from_frames() {
        let f = |v: &[&str]| frame_stage(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
        assert_eq!(
            f(&["<module>", "main", "train", "train_step", "forward"]),
            Some(JobStage::Training)
        );
        assert_eq!(
            f(&["main", "train", "evaluate", "forward"]),
            Some(JobStage::Evaluation)
        );
        assert_eq!(
            f(&["main", "train", "save_checkpoint", "save"]),
            Some(JobStage::Checkpointing)
        );
        assert_eq!(
            f(&["main", "multi_gpu_test", "collect_results"]),
            Some(JobStage::Evaluation)
        );
        assert_eq!(
            f(&["main", "get_latest", "forward"]),
            Some(JobStage::Training)
        );
        assert_eq!(
            f(&["forward", "save_for_backward"]),
            Some(JobStage::Training)
        );
        assert_eq!(
            f(&["main", "init_process_group", "_store_based_barrier"]),
            Some(JobStage::Init)
        );
        assert_eq!(f(&["<module>", "main"]), None);
    }

    #[test]
    fn exception_lines() {
        for yes in [
            "ValueError: x",
            "torch.OutOfMemoryError: CUDA",
            "KeyboardInterrupt",
            "SystemExit: 1",
        ] {
            assert!(is_exception_line(yes), "{yes}");
        }
        for no in [
            "raise ValueError('x')",
            "loss.backward()",
            "pass",
            "x = 1",
            "^^^^",
        ] {
            assert!(!is_exception_line(no), "{no}");
        }
    }
}
