//! A process's start-up phases (events flagged `flare_tracer::startup::FLAG_STARTUP`),
//! kept apart from the window's ops: the launch phase is written at `flare.init` with
//! its start in the past, and a rank's start-up spans many windows. The rank's record is
//! sent with every window while its start-up lasts (a rank busy in work no phase marks is
//! still starting; a program that never steps stops being sent after
//! [`MAX_QUIET_WINDOWS`] without change), and for [`LINGER_WINDOWS`] windows after its
//! first step, so that every rank's record meets the others' in some window.

use flare_model::{StartupPhase, StartupPhaseRecord, StartupRecord};
use flare_tracer::{Event, NameId, Tag};
use std::collections::HashMap;

/// Windows a complete record is still sent after it last changed.
pub const LINGER_WINDOWS: u32 = 3;
/// Windows an incomplete record with no phase open is sent without changing.
pub const MAX_QUIET_WINDOWS: u32 = 60;
/// Phases kept per process: a program that marks a phase per batch forever would
/// otherwise grow its record (and every summary) without bound.
pub const MAX_PHASES: usize = 64;

#[derive(Debug, Default)]
pub struct StartupTracker {
    record: StartupRecord,
    /// Open phases: span id -> index in `record.phases`.
    open: HashMap<u64, usize>,
    changed: bool,
    windows_since_change: u32,
    /// Phases not kept (past [`MAX_PHASES`]).
    pub ignored: u64,
}

impl StartupTracker {
    /// Folds one start-up event (`ts_unix`: its time on the node's Unix clock); `name`
    /// resolves a custom phase's name.
    pub fn feed(
        &mut self,
        ev: &Event,
        phase: StartupPhase,
        ts_unix: u64,
        name: impl FnOnce(NameId) -> String,
    ) {
        match Tag::from_u8(ev.tag) {
            Some(Tag::AsyncBegin) => {
                if self.record.phases.len() >= MAX_PHASES {
                    self.ignored += 1;
                    return;
                }
                let label =
                    (phase == StartupPhase::Custom && ev.name != 0).then(|| name(NameId(ev.name)));
                self.open.insert(ev.id, self.record.phases.len());
                self.record.phases.push(StartupPhaseRecord {
                    phase,
                    name: label,
                    start_unix_ns: ts_unix,
                    end_unix_ns: None,
                });
                self.changed = true;
            }
            Some(Tag::AsyncEnd) => {
                let Some(i) = self.open.remove(&ev.id) else {
                    return;
                };
                let p = &mut self.record.phases[i];
                p.end_unix_ns = Some(ts_unix.max(p.start_unix_ns));
                if p.phase == StartupPhase::FirstStep {
                    self.record.complete = true;
                }
                self.changed = true;
            }
            _ => {}
        }
    }

    /// The record to send with a window that closes now, if it is to be sent (see the
    /// module's comment).
    pub fn for_window(&mut self) -> Option<StartupRecord> {
        if self.record.phases.is_empty() {
            return None;
        }
        if std::mem::take(&mut self.changed) {
            self.windows_since_change = 0;
        } else {
            self.windows_since_change = self.windows_since_change.saturating_add(1);
        }
        let quiet_limit = if self.record.complete {
            LINGER_WINDOWS
        } else {
            MAX_QUIET_WINDOWS
        };
        if self.open.is_empty() && self.windows_since_change >= quiet_limit {
            return None;
        }
        let mut r = self.record.clone();
        // Phases written after the fact (launch) come after ones that started later.
        r.phases.sort_by_key(|p| p.start_unix_ns);
        Some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flare_tracer::startup::event;

    fn feed(t: &mut StartupTracker, tag: Tag, phase: StartupPhase, id: u64, ts: u64) {
        t.feed(&event(tag, phase, NameId(0), id, ts), phase, ts, |_| {
            String::new()
        });
    }

    #[test]
    fn phases_are_paired_sorted_and_complete_with_the_first_step() {
        let mut t = StartupTracker::default();
        assert_eq!(t.for_window(), None);
        feed(
            &mut t,
            Tag::AsyncBegin,
            StartupPhase::InitProcessGroup,
            2,
            500,
        );
        // Launch arrives after (written at init, with its start in the past).
        feed(&mut t, Tag::AsyncBegin, StartupPhase::Launch, 1, 100);
        feed(&mut t, Tag::AsyncEnd, StartupPhase::Launch, 1, 400);
        let r = t.for_window().unwrap();
        let order: Vec<_> = r.phases.iter().map(|p| (p.phase, p.end_unix_ns)).collect();
        assert_eq!(
            order,
            vec![
                (StartupPhase::Launch, Some(400)),
                (StartupPhase::InitProcessGroup, None)
            ]
        );
        assert!(!r.complete);
        feed(
            &mut t,
            Tag::AsyncEnd,
            StartupPhase::InitProcessGroup,
            2,
            900,
        );
        feed(&mut t, Tag::AsyncBegin, StartupPhase::FirstStep, 3, 1000);
        feed(&mut t, Tag::AsyncEnd, StartupPhase::FirstStep, 3, 2000);
        // An end without its begin changes nothing.
        feed(&mut t, Tag::AsyncEnd, StartupPhase::FirstBatch, 77, 2100);
        let r = t.for_window().unwrap();
        assert!(r.complete);
        assert_eq!(r.end_unix_ns(), Some(2000));
        assert_eq!(r.phases.len(), 3);
    }

    #[test]
    fn a_record_is_sent_while_start_up_lasts_and_a_few_windows_after() {
        let mut t = StartupTracker::default();
        feed(&mut t, Tag::AsyncBegin, StartupPhase::Launch, 1, 100);
        feed(&mut t, Tag::AsyncEnd, StartupPhase::Launch, 1, 200);
        // Between phases (work nothing marks): still starting, sent until it is clearly
        // not a start-up any more.
        let sent = (0..100).take_while(|_| t.for_window().is_some()).count();
        assert_eq!(sent, MAX_QUIET_WINDOWS as usize);
        // A phase that stays open (a rank waiting in the rendezvous) is sent every window.
        feed(
            &mut t,
            Tag::AsyncBegin,
            StartupPhase::InitProcessGroup,
            2,
            300,
        );
        assert!((0..100).all(|_| t.for_window().is_some()));
        feed(
            &mut t,
            Tag::AsyncEnd,
            StartupPhase::InitProcessGroup,
            2,
            400,
        );
        feed(&mut t, Tag::AsyncBegin, StartupPhase::FirstStep, 3, 500);
        feed(&mut t, Tag::AsyncEnd, StartupPhase::FirstStep, 3, 600);
        // Complete: a few windows more.
        let sent: Vec<bool> = (0..6).map(|_| t.for_window().is_some()).collect();
        assert_eq!(sent, vec![true, true, true, false, false, false]);
    }

    #[test]
    fn phases_past_the_cap_are_counted_not_kept() {
        let mut t = StartupTracker::default();
        for i in 0..(MAX_PHASES as u64 + 5) {
            feed(&mut t, Tag::AsyncBegin, StartupPhase::Custom, i + 1, i);
            feed(&mut t, Tag::AsyncEnd, StartupPhase::Custom, i + 1, i + 1);
        }
        assert_eq!(t.for_window().unwrap().phases.len(), MAX_PHASES);
        assert_eq!(t.ignored, 5);
    }
}
