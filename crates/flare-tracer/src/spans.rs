//! Pairs begin and end events into spans: nested spans per thread (ring) by a stack,
//! async spans by id. Tolerates what a live stream really contains: ends whose begin was
//! dropped, begins never ended (a thread died, or the op hangs: see [`Assembler::open_spans`]).

use crate::layout::{Event, NameId, SpanArgs, Tag};
use flare_model::OpKind;
use std::collections::HashMap;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Span {
    pub ring: u32,
    pub name: NameId,
    pub kind: OpKind,
    pub start_ns: u64,
    pub end_ns: u64,
    /// Nesting depth on its thread (0: top level); async spans report 0.
    pub depth: u32,
    pub args: SpanArgs,
    /// Non-zero for async spans.
    pub async_id: u64,
    /// Progress events seen while it was open (async spans).
    pub progress: u32,
}

impl Span {
    pub fn duration_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}

/// What the assembler emits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Item {
    Span(Span),
    Step {
        ring: u32,
        step: u64,
        ts_ns: u64,
    },
    Counter {
        ring: u32,
        name: NameId,
        value: u64,
        ts_ns: u64,
    },
    Instant {
        ring: u32,
        name: NameId,
        ts_ns: u64,
    },
}

/// A span still open, with when it last showed progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpenSpan {
    pub ring: u32,
    pub name: NameId,
    pub kind: OpKind,
    pub start_ns: u64,
    pub depth: u32,
    pub args: SpanArgs,
    pub async_id: u64,
    /// The latest event on its thread (nested) or its latest progress event (async).
    pub last_progress_ns: u64,
    pub progress: u32,
}

#[derive(Default)]
pub struct Assembler {
    stacks: HashMap<u32, Vec<OpenSpan>>,
    asyncs: HashMap<u64, OpenSpan>,
    last_event_ns: HashMap<u32, u64>,
    /// Ends with no matching begin (the begin was dropped or recorded before tracing).
    pub unmatched_ends: u64,
    /// Begins abandoned because an outer span ended first.
    pub unclosed_begins: u64,
}

fn kind_of(ev: &Event) -> OpKind {
    OpKind::from_u8(ev.kind).unwrap_or(OpKind::HostOther)
}

impl Assembler {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn feed(&mut self, ring: u32, ev: &Event, out: &mut Vec<Item>) {
        let last = self.last_event_ns.entry(ring).or_insert(0);
        *last = (*last).max(ev.ts_ns);
        let Some(tag) = Tag::from_u8(ev.tag) else {
            return;
        };
        match tag {
            Tag::Begin => {
                let stack = self.stacks.entry(ring).or_default();
                let depth = stack.len() as u32;
                stack.push(OpenSpan {
                    ring,
                    name: NameId(ev.name),
                    kind: kind_of(ev),
                    start_ns: ev.ts_ns,
                    depth,
                    args: SpanArgs::unpack(ev),
                    async_id: 0,
                    last_progress_ns: ev.ts_ns,
                    progress: 0,
                });
            }
            Tag::End => {
                let stack = self.stacks.entry(ring).or_default();
                match stack.iter().rposition(|o| o.name.0 == ev.name) {
                    Some(i) => {
                        self.unclosed_begins += (stack.len() - i - 1) as u64;
                        stack.truncate(i + 1);
                        let o = stack.pop().expect("position is in the stack");
                        out.push(Item::Span(Span {
                            ring,
                            name: o.name,
                            kind: o.kind,
                            start_ns: o.start_ns,
                            end_ns: ev.ts_ns.max(o.start_ns),
                            depth: o.depth,
                            args: o.args,
                            async_id: 0,
                            progress: 0,
                        }));
                    }
                    None => self.unmatched_ends += 1,
                }
            }
            Tag::AsyncBegin => {
                self.asyncs.insert(
                    ev.id,
                    OpenSpan {
                        ring,
                        name: NameId(ev.name),
                        kind: kind_of(ev),
                        start_ns: ev.ts_ns,
                        depth: 0,
                        args: SpanArgs::unpack(ev),
                        async_id: ev.id,
                        last_progress_ns: ev.ts_ns,
                        progress: 0,
                    },
                );
            }
            Tag::AsyncState => {
                if let Some(o) = self.asyncs.get_mut(&ev.id) {
                    o.last_progress_ns = o.last_progress_ns.max(ev.ts_ns);
                    o.progress += 1;
                }
            }
            Tag::AsyncEnd => match self.asyncs.remove(&ev.id) {
                Some(o) => out.push(Item::Span(Span {
                    ring: o.ring,
                    name: o.name,
                    kind: o.kind,
                    start_ns: o.start_ns,
                    end_ns: ev.ts_ns.max(o.start_ns),
                    depth: 0,
                    args: o.args,
                    async_id: o.async_id,
                    progress: o.progress,
                })),
                None => self.unmatched_ends += 1,
            },
            Tag::Step => out.push(Item::Step {
                ring,
                step: ev.a,
                ts_ns: ev.ts_ns,
            }),
            Tag::Counter => out.push(Item::Counter {
                ring,
                name: NameId(ev.name),
                value: ev.a,
                ts_ns: ev.ts_ns,
            }),
            Tag::Instant => out.push(Item::Instant {
                ring,
                name: NameId(ev.name),
                ts_ns: ev.ts_ns,
            }),
        }
    }

    /// Spans begun and not yet ended. A nested span's progress is the latest event on its
    /// thread: a thread that records nothing while inside a span is not progressing.
    pub fn open_spans(&self) -> Vec<OpenSpan> {
        let mut v: Vec<OpenSpan> = self
            .stacks
            .iter()
            .flat_map(|(ring, s)| {
                let last = self.last_event_ns.get(ring).copied().unwrap_or(0);
                s.iter().map(move |o| OpenSpan {
                    last_progress_ns: last.max(o.start_ns),
                    ..*o
                })
            })
            .chain(self.asyncs.values().copied())
            .collect();
        v.sort_by_key(|o| (o.ring, o.depth, o.start_ns));
        v
    }

    /// Forgets a thread's open spans (its ring was released and reused).
    pub fn reset_ring(&mut self, ring: u32) {
        if let Some(s) = self.stacks.remove(&ring) {
            self.unclosed_begins += s.len() as u64;
        }
        self.last_event_ns.remove(&ring);
    }
}
