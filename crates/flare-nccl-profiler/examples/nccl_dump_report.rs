//! What the plugin recorded, from its dumps (`FLARE_DUMP` files): per NCCL event type how
//! many were recorded and left open, then per collective call its GPU time (longest
//! kernel channel, GPU timers) and where its proxy steps spent their time (the state a
//! step was in until the next one: waiting for this rank's GPU, for the peer, for the
//! network). Used to check a run on a real GPU (scripts/gpu/); prints plain text.
//!
//! cargo run --release -p flare-nccl-profiler --example nccl_dump_report -- DUMP...

use flare_tracer::{Event, RingFile, Tag};
use nccl_profiler_flare::abi::{event, state};
use nccl_profiler_flare::{FLAG_DETAIL, FLAG_NCCL, TYPE_DROPS, TYPE_MASK};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

const TYPES: [&str; 16] = [
    "Group",
    "Coll",
    "P2p",
    "ProxyOp",
    "ProxyStep",
    "ProxyCtrl",
    "KernelCh",
    "NetPlugin",
    "GroupApi",
    "CollApi",
    "P2pApi",
    "KernelLaunch",
    "CeColl",
    "CeSync",
    "CeBatch",
    "KernelPhase",
];

/// Proxy-step states whose time is reported, with what the time means.
const STEP_STATES: [(i32, &str); 6] = [
    (state::PROXY_STEP_SEND_GPU_WAIT, "send: own GPU"),
    (state::PROXY_STEP_SEND_PEER_WAIT_V4, "send: peer's buffer"),
    (state::PROXY_STEP_SEND_WAIT, "send: network"),
    (state::PROXY_STEP_RECV_WAIT, "recv: peer's data"),
    (state::PROXY_STEP_RECV_FLUSH_WAIT, "recv: flush"),
    (state::PROXY_STEP_RECV_GPU_WAIT, "recv: own GPU"),
];

#[derive(Default)]
struct Async {
    ty: usize,
    begin: Option<Event>,
    states: Vec<Event>,
    end: Option<Event>,
}

fn main() {
    let paths: Vec<String> = std::env::args().skip(1).collect();
    if paths.is_empty() {
        eprintln!("usage: nccl_dump_report DUMP...");
        std::process::exit(2);
    }
    for p in &paths {
        if let Err(e) = report(Path::new(p)) {
            eprintln!("{p}: {e}");
            std::process::exit(1);
        }
    }
}

fn report(path: &Path) -> Result<(), String> {
    let mut file = RingFile::open(path).map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    file.drain(&mut raw);
    let info = file.info().clone();
    println!(
        "== {} (rank {} of {}, job {}): {} events, {} lost in the rings",
        path.display(),
        info.rank,
        info.world_size,
        info.job_id,
        raw.len(),
        file.drops().total()
    );
    let mut spans: HashMap<u64, Async> = HashMap::new();
    let mut dropped = Vec::new();
    for r in &raw {
        let e = r.event;
        if e.flags & FLAG_NCCL == 0 || e.flags & FLAG_DETAIL != 0 {
            continue;
        }
        if e.flags & TYPE_MASK == TYPE_DROPS {
            dropped.push(e.a);
            continue;
        }
        let ty = (e.flags & TYPE_MASK) as usize;
        if ty >= TYPES.len() || e.id == 0 {
            continue;
        }
        let s = spans.entry(e.id).or_default();
        s.ty = ty;
        match Tag::from_u8(e.tag) {
            Some(Tag::AsyncBegin) => s.begin = Some(e),
            Some(Tag::AsyncState) => s.states.push(e),
            Some(Tag::AsyncEnd) => s.end = Some(e),
            _ => {}
        }
    }
    let mut per_type: BTreeMap<usize, (u64, u64)> = BTreeMap::new();
    for s in spans.values() {
        let c = per_type.entry(s.ty).or_default();
        c.0 += 1;
        c.1 += u64::from(s.end.is_none());
    }
    println!("events by type (recorded, left open):");
    for (ty, (n, open)) in &per_type {
        println!("  {:<12} {n:>8} {open:>6}", TYPES[*ty]);
    }
    println!("dropped for lack of handles (per communicator): {dropped:?}");

    // Children by the low 32 bits of their parent's id.
    let mut children: HashMap<u32, Vec<u64>> = HashMap::new();
    for (id, s) in &spans {
        if let Some(b) = s.begin {
            if b.c as u32 != 0 {
                children.entry(b.c as u32).or_default().push(*id);
            }
        }
    }
    let kids = |id: u64, ty: u64| -> Vec<&Async> {
        children
            .get(&(id as u32))
            .into_iter()
            .flatten()
            .filter_map(|c| spans.get(c))
            .filter(|s| s.ty == ty.trailing_zeros() as usize)
            .collect()
    };
    let mut colls: Vec<(u64, &Async)> = spans
        .iter()
        .filter(|(_, s)| s.ty == event::COLL.trailing_zeros() as usize && s.begin.is_some())
        .map(|(id, s)| (*id, s))
        .collect();
    colls.sort_by_key(|(_, s)| s.begin.map(|b| b.ts_ns));
    println!(
        "per collective: GPU = longest kernel channel (GPU timers); then the longest time any \
         proxy op of the call spent in each step state, summed over its steps (us)"
    );
    print!("  {:>4} {:<10} {:>9} {:>9}", "call", "name", "bytes", "GPU");
    for (_, label) in STEP_STATES {
        print!(" {label:>19}");
    }
    println!();
    for (i, (id, c)) in colls.iter().enumerate() {
        let b = c.begin.expect("filtered");
        let gpu_ns = kids(*id, event::KERNEL_CH)
            .iter()
            .filter_map(|k| Some(k.end?.a.saturating_sub(k.begin?.a)))
            .max()
            .unwrap_or(0);
        let mut waits = [0u64; STEP_STATES.len()];
        for op in kids(*id, event::PROXY_OP) {
            let Some(op_begin) = op.begin else { continue };
            let mut in_op = [0u64; STEP_STATES.len()];
            for step in kids(op_begin.id, event::PROXY_STEP) {
                let Some(end) = step.end else { continue };
                for (j, st) in step.states.iter().enumerate() {
                    let next = step.states.get(j + 1).map_or(end.ts_ns, |n| n.ts_ns);
                    if let Some(k) = STEP_STATES.iter().position(|(c, _)| *c as u64 == st.a) {
                        in_op[k] += next.saturating_sub(st.ts_ns);
                    }
                }
            }
            for k in 0..waits.len() {
                waits[k] = waits[k].max(in_op[k]);
            }
        }
        print!(
            "  {i:>4} {:<10} {:>9} {:>9.1}",
            file.name_or(flare_tracer::NameId(b.name)),
            b.a,
            gpu_ns as f64 / 1e3
        );
        for w in waits {
            print!(" {:>19.1}", w as f64 / 1e3);
        }
        println!();
    }
    Ok(())
}
