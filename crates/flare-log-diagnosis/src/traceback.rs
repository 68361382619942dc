//! Python tracebacks, read as they stream by: where the exception was raised (the
//! innermost frame of the job's own code, not of a library) and whether it was raised
//! while handling another (a chain, whose first exception is the cause). One traceback is
//! followed per stream (a rank's lines in a console that interleaves ranks).

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
    },
}

#[derive(Default)]
struct Open {
    innermost: Option<Frame>,
    innermost_own: Option<Frame>,
    lines: u32,
    chained: bool,
}

/// The traceback of one stream.
#[derive(Default)]
pub struct Traceback {
    open: Option<Open>,
    /// The last traceback ended in an exception that the next one is raised from.
    chain_next: bool,
}

/// Lines a traceback may span before it is given up (a traceback never ended).
const MAX_LINES: u32 = 2_000;

fn frame(message: &str) -> Option<Frame> {
    // `File "train.py", line 123, in forward`
    let rest = message.strip_prefix("File \"")?;
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
    /// Follows one line (its message, prefixes removed).
    pub fn step(&mut self, message: &str) -> Step {
        let m = message.trim();
        if m.starts_with("Traceback (most recent call last)") {
            self.open = Some(Open {
                chained: std::mem::take(&mut self.chain_next),
                ..Open::default()
            });
            return Step::Other;
        }
        if m.starts_with("The above exception was the direct cause")
            || m.starts_with("During handling of the above exception")
        {
            self.chain_next = true;
            return Step::Other;
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
            open.innermost = Some(f);
            return Step::Other;
        }
        if open.innermost.is_some() && is_exception_line(m) {
            let open = self.open.take().expect("open");
            return Step::Exception {
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
                    chained: false
                },
                Step::Exception {
                    location: Some(Frame {
                        file: "/work/run.py".into(),
                        line: 3,
                        function: "<module>".into()
                    }),
                    chained: true
                },
            ]
        );
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
