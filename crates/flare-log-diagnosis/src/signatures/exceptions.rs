//! What a Python exception's type says, when no row recognised its message: Python's own
//! exception hierarchy (an `IndexError` is the program's, a `FileNotFoundError` is data,
//! a `ModuleNotFoundError` is the environment), and the types torch.distributed raises
//! when another rank failed (`DistBackendError`, `ChildFailedError`): effects, not
//! causes. A type that says nothing (`RuntimeError`, `Exception`) is a symptom whose
//! message must be read.

use super::{Reading, Role};
use flare_model::{FailureCategory as C, LogSignature as S};

struct Kind {
    names: &'static [&'static str],
    role: Role,
    category: C,
    weight: u8,
    meaning: &'static str,
    action: &'static str,
    restart_helps: Option<bool>,
}

const TABLE: &[Kind] = &[
    Kind {
        names: &[
            "DistBackendError", "DistNetworkError", "DistStoreError", "ChildFailedError",
            "ConnectionResetError", "BrokenPipeError", "ConnectionAbortedError",
            "ConnectionError", "KeyboardInterrupt", "SignalException", "RendezvousClosedError",
            "RendezvousGracefulExitError",
        ],
        role: Role::Cascade,
        category: C::Unknown,
        weight: 0,
        meaning: "an error torch.distributed and its launcher raise when another process failed, a connection to it broke, or the job was stopped",
        action: "look for the process that failed first",
        restart_helps: None,
    },
    Kind {
        // torchelastic's rendezvous (torch/distributed/elastic/rendezvous/api.py)
        names: &["RendezvousConnectionError", "RendezvousStateError", "RendezvousError"],
        role: Role::Symptom,
        category: C::Unknown,
        weight: 40,
        meaning: "torchrun's rendezvous failed: the store the nodes meet at could not be reached or read (the agent holding it ended, or the endpoint is wrong or blocked)",
        action: "check that the rendezvous endpoint (--rdzv-endpoint, MASTER_ADDR:MASTER_PORT) is reachable from every node, and whether the agent holding the store, on the first node, was still running",
        restart_helps: None,
    },
    Kind {
        names: &[
            "ValueError", "TypeError", "IndexError", "KeyError", "AttributeError", "NameError",
            "AssertionError", "ZeroDivisionError", "NotImplementedError", "UnboundLocalError",
            "RecursionError", "StopIteration", "SyntaxError", "IndentationError", "LookupError",
            "ArithmeticError",
        ],
        role: Role::Root,
        category: C::UserCode,
        weight: 80,
        meaning: "the program raised an error of its own logic",
        action: "fix the program where the traceback points (the innermost frame of the job's own code)",
        restart_helps: Some(false),
    },
    Kind {
        names: &[
            "FileNotFoundError", "IsADirectoryError", "NotADirectoryError", "EOFError",
            "UnpicklingError", "JSONDecodeError", "UnicodeDecodeError", "ParserError",
            "ArrowInvalid", "DatasetGenerationError",
        ],
        role: Role::Root,
        category: C::DataStorage,
        weight: 80,
        meaning: "a file the job reads is missing or unreadable",
        action: "check that the path exists and is readable on every node (a shared file system mounted everywhere), and that the file is complete",
        restart_helps: Some(false),
    },
    Kind {
        names: &["ModuleNotFoundError", "ImportError", "PermissionError"],
        role: Role::Root,
        category: C::Configuration,
        weight: 80,
        meaning: "the environment is not what the job expects (a package missing, a permission denied)",
        action: "fix the job's image or environment on every node",
        restart_helps: Some(false),
    },
    Kind {
        names: &["MemoryError", "OutOfMemoryError"],
        role: Role::Root,
        category: C::OutOfMemory,
        weight: 80,
        meaning: "the process ran out of memory",
        action: "lower the batch size or the data kept in memory",
        restart_helps: Some(false),
    },
    Kind {
        names: &["FloatingPointError"],
        role: Role::Root,
        category: C::Numerical,
        weight: 80,
        meaning: "a computation became NaN or infinite",
        action: "the run diverged: lower the learning rate, clip gradients, use bf16 instead of fp16; resume from a checkpoint before the divergence",
        restart_helps: Some(false),
    },
    Kind {
        names: &[
            "RuntimeError", "Exception", "Error", "OSError", "IOError", "TimeoutError",
            "SystemError", "SystemExit", "CalledProcessError", "ProcessExitedException",
            "ProcessRaisedException", "AcceleratorError",
        ],
        role: Role::Symptom,
        category: C::Unknown,
        weight: 35,
        meaning: "the program raised a general error; its message says what went wrong",
        action: "read the exception's message and the traceback above it",
        restart_helps: None,
    },
];

/// The reading of an exception line from its type (the last dotted component).
pub fn refine(caps: &regex::Captures) -> Option<Reading> {
    let full = caps.name("exc")?.as_str();
    let name = full.rsplit('.').next().unwrap_or(full);
    let reading = |k: &Kind, meaning: String| Reading {
        signature: S::PythonException,
        role: k.role,
        category: k.category,
        weight: k.weight,
        meaning,
        action: k.action.to_string(),
        restart_helps: k.restart_helps,
        stage: None,
    };
    match TABLE.iter().find(|k| k.names.contains(&name)) {
        Some(k) => Some(reading(k, format!("{name}: {}", k.meaning))),
        // A type of the program's or a library's own: it names an error, but whether
        // the program or its input is at fault its message must say.
        None => Some(Reading {
            signature: S::PythonException,
            role: Role::Root,
            category: C::UserCode,
            weight: 60,
            meaning: format!("the program raised {name}"),
            action: "read the exception's message and fix the program or its input where the traceback points".into(),
            restart_helps: Some(false),
            stage: None,
        }),
    }
}
