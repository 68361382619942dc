//! What an Xid number means, after NVIDIA's Xid catalog
//! (<https://docs.nvidia.com/deploy/xid-errors/>): some are the hardware failing (drain
//! the node), some are the application's kernel faulting (fix the code; the GPU is fine),
//! and 45 is the driver cleaning up after an earlier error (an effect, never a cause).

use super::{Reading, Role};
use flare_model::{FailureCategory as C, LogSignature as S};

/// Signatures only this refinement produces (no row of their own).
#[cfg(test)]
pub const REFINED: &[S] = &[S::GpuXidCleanup];

struct Xid {
    numbers: &'static [u32],
    signature: S,
    role: Role,
    category: C,
    weight: u8,
    meaning: &'static str,
    action: &'static str,
    restart_helps: Option<bool>,
}

const DRAIN: &str = "drain the node and have the GPU checked (nvidia-smi -q, DCGM diagnostics level 3) before it runs jobs again; restart the job from its last checkpoint on other nodes";
const RESET: &str = "reset the GPU (nvidia-smi -r, or reboot the node) before it runs jobs again, and drain it if the error recurs; restart the job from its last checkpoint";

const TABLE: &[Xid] = &[
    Xid {
        numbers: &[79],
        signature: S::GpuFellOffBus,
        role: Role::Root,
        category: C::GpuHardware,
        weight: 100,
        meaning: "Xid 79: the GPU fell off the bus",
        action: "drain the node; reseat or replace the GPU and check its power and PCIe slot; restart the job on other nodes",
        restart_helps: Some(true),
    },
    Xid {
        numbers: &[48, 63, 64, 92, 94, 95, 140],
        signature: S::GpuEccError,
        role: Role::Root,
        category: C::GpuHardware,
        weight: 100,
        meaning: "a GPU memory (ECC) error: 48 double-bit, 63/64 row remapping, 92 high single-bit rate, 94 contained, 95 uncontained, 140 unrecovered",
        action: RESET,
        restart_helps: Some(true),
    },
    Xid {
        numbers: &[61, 62, 119, 120, 143, 154],
        signature: S::GpuXid,
        role: Role::Root,
        category: C::GpuHardware,
        weight: 100,
        meaning: "the GPU's internal micro-controller or GSP firmware failed (61/62 micro-controller, 119/120 GSP, 143 initialisation, 154 recovery action required)",
        action: DRAIN,
        restart_helps: Some(true),
    },
    Xid {
        numbers: &[74, 121, 144, 145, 146, 147, 148, 149, 150],
        signature: S::NvlinkError,
        role: Role::Root,
        category: C::Interconnect,
        weight: 100,
        meaning: "an NVLink error (74; 121 C2C; 144-150 NVLink on newer GPUs)",
        action: "drain the node; check `nvidia-smi nvlink -s -e` and the NVSwitch fabric, reset the GPUs",
        restart_helps: Some(true),
    },
    Xid {
        numbers: &[13, 31, 43],
        signature: S::GpuXid,
        role: Role::Symptom,
        category: C::Software,
        weight: 55,
        meaning: "a GPU kernel faulted (13 graphics engine exception, 31 memory page fault, 43 the GPU stopped the channel): usually an out-of-range access by the program or a library, rarely the GPU itself",
        action: "look for a CUDA error (illegal memory access, device-side assert) in the same process's log; run it with CUDA_LAUNCH_BLOCKING=1 or compute-sanitizer; suspect the GPU only if the same GPU faults under other jobs",
        restart_helps: None,
    },
    Xid {
        numbers: &[45],
        signature: S::GpuXidCleanup,
        role: Role::Cascade,
        category: C::Unknown,
        weight: 0,
        meaning: "Xid 45: the driver stopped the GPU's work because the process ended or an earlier error occurred",
        action: "look for the error before it",
        restart_helps: None,
    },
];

/// The reading of an Xid line from its number. An Xid 45 that names the error it
/// cleans up after (`caused by previous Xid 149`) is read as that error.
pub fn refine(caps: &regex::Captures) -> Option<Reading> {
    let mut n: u32 = caps.name("xid")?.as_str().parse().ok()?;
    if n == 45 {
        let detail = caps.name("detail").map_or("", |m| m.as_str());
        if let Some(prev) = detail
            .split("previous Xid")
            .nth(1)
            .and_then(|r| {
                r.split(|c: char| !c.is_ascii_digit())
                    .find(|t| !t.is_empty())
            })
            .and_then(|t| t.parse::<u32>().ok())
        {
            n = prev;
        }
    }
    let reading = |x: &Xid| Reading {
        signature: x.signature,
        role: x.role,
        category: x.category,
        weight: x.weight,
        meaning: x.meaning.to_string(),
        action: x.action.to_string(),
        restart_helps: x.restart_helps,
        stage: None,
    };
    match TABLE.iter().find(|x| x.numbers.contains(&n)) {
        Some(x) => Some(reading(x)),
        None => Some(Reading {
            signature: S::GpuXid,
            role: Role::Symptom,
            category: C::GpuHardware,
            weight: 80,
            meaning: format!("Xid {n}: a GPU error (see NVIDIA's Xid catalog for this number)"),
            action: DRAIN.to_string(),
            restart_helps: None,
            stage: None,
        }),
    }
}
