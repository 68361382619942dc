//! How start-up phases are recorded: async spans (they run across threads and may be
//! written after the fact, as the launch phase is at `init`) flagged [`FLAG_STARTUP`],
//! with the phase's [`StartupPhase::code`] in `a` and, for a phase the program named,
//! the name in `name`. They are not ops: the agent keeps them apart from the window's
//! op statistics (see `flare_model::StartupRecord`).

use crate::layout::{Event, NameId, Tag};
use flare_model::{OpKind, StartupPhase};

/// Set on every start-up event (NCCL's events use the bits above it).
pub const FLAG_STARTUP: u16 = 0x2000;

/// The event that opens (`Tag::AsyncBegin`) or closes (`Tag::AsyncEnd`) phase `phase`
/// of span `id` at `ts_ns` (`CLOCK_MONOTONIC`).
pub fn event(tag: Tag, phase: StartupPhase, name: NameId, id: u64, ts_ns: u64) -> Event {
    Event {
        ts_ns,
        name: name.0,
        tag: tag as u8,
        kind: OpKind::HostOther as u8,
        flags: FLAG_STARTUP,
        id,
        a: phase.code(),
        b: 0,
        c: 0,
    }
}

/// The phase of a start-up event; `None` for other events and unknown codes.
pub fn phase_of(ev: &Event) -> Option<StartupPhase> {
    if ev.flags & crate::nccl::FLAG_NCCL != 0 || ev.flags & FLAG_STARTUP == 0 {
        return None;
    }
    StartupPhase::from_code(ev.a)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn startup_events_carry_their_phase_and_nothing_else_does() {
        let ev = event(
            Tag::AsyncBegin,
            StartupPhase::InitProcessGroup,
            NameId(3),
            9,
            100,
        );
        assert_eq!(phase_of(&ev), Some(StartupPhase::InitProcessGroup));
        let plain = Event {
            a: StartupPhase::Launch.code(),
            ..Event::default()
        };
        assert_eq!(phase_of(&plain), None);
        let nccl = Event {
            flags: crate::nccl::FLAG_NCCL | FLAG_STARTUP,
            a: 1,
            ..Event::default()
        };
        assert_eq!(phase_of(&nccl), None);
        let unknown = Event { a: 999, ..ev };
        assert_eq!(phase_of(&unknown), None);
    }
}
