//! Progress inside NCCL's collectives, end to end without a GPU. Four child processes, each
//! one rank of a ring in one communicator, load the built plugin as NCCL does (profiler
//! API v7) and drive it the way NCCL's proxy thread does: each transfer a proxy op whose
//! steps move through NCCL's states, the time spent in each state set by the scenario, and
//! each kernel channel with its GPU timers and phases. They dump their events; the node
//! agent reads the dumps into a window summary; the live engine must name what the
//! scenario did: nothing (healthy), a slow link, a rank slow inside its kernel, or a
//! transfer that stopped mid-collective and the rank where it stopped.

#[path = "support/plugin_lib.rs"]
mod plugin_lib;

use flare_engine::live::{analyze_window, LiveConfig, LiveWindow};
use flare_model::{Component, DetectorId, FindingKind, OpKind, WindowSummary};
use nccl_profiler_flare::abi::*;
use plugin_lib::{dlopen, dlsym, plugin_path};
use std::ffi::{c_int, c_void};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

const CHILD: &str = "FLARE_NCCL_RING_CHILD";
const N: u32 = 4;
/// Collectives per rank, and steps per transfer.
const OPS: u32 = 24;
const STEPS: i32 = 4;
const CHUNK: i32 = 1 << 16;
/// One unit of time in a proxy state.
const UNIT_US: u64 = 300;
const HASH: u64 = 0xfeed_0000_0000_0001;

/// Units of time per step in each state, for the sender and the receiver of a path.
#[derive(Clone, Copy)]
struct Waits {
    send_gpu: u64,
    send_peer: u64,
    network: u64,
    recv_peer: u64,
    recv_gpu: u64,
}

const NORMAL: Waits = Waits {
    send_gpu: 1,
    send_peer: 1,
    network: 2,
    recv_peer: 3,
    recv_gpu: 1,
};

/// The per-step waits of the path `src -> dst` in a scenario.
fn waits(scenario: &str, src: u32, dst: u32) -> Waits {
    let mut w = NORMAL;
    match scenario {
        // The network between ranks 1 and 2 is slow one way.
        "slow_link" if (src, dst) == (1, 2) => {
            w.network *= 8;
            w.recv_peer *= 6;
        }
        // Rank 3's kernel is slow: its proxy waits for its GPU both ways, and its peers
        // wait for it.
        "slow_kernel" if src == 3 => {
            w.send_gpu *= 8;
            w.recv_peer *= 4;
        }
        "slow_kernel" if dst == 3 => {
            w.recv_gpu *= 8;
            w.send_peer *= 8;
        }
        _ => {}
    }
    w
}

fn sleep_units(u: u64) {
    std::thread::sleep(Duration::from_micros(u * UNIT_US));
}

// ---------------------------------------------------------------------------------------
// The child: one rank, playing NCCL's part.

struct Plugin {
    t: &'static ProfilerV7,
    ctx: *mut c_void,
}

impl Plugin {
    fn load(rank: u32) -> Plugin {
        let lib = dlopen(&plugin_path(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        // SAFETY: the symbol is the v7 table, 'static in the loaded library.
        let t = unsafe { &*(dlsym(lib, "ncclProfiler_v7") as *const ProfilerV7) };
        let mut ctx = std::ptr::null_mut();
        let mut mask: c_int = 0;
        // SAFETY: valid out pointers, NCCL's argument order.
        let r = unsafe {
            (t.init)(
                &mut ctx,
                HASH,
                &mut mask,
                c"ring".as_ptr(),
                N as c_int,
                N as c_int,
                rank as c_int,
                None,
            )
        };
        assert_eq!(r, NCCL_SUCCESS);
        Plugin { t, ctx }
    }

    fn start(&self, parent: *mut c_void, fill: impl FnOnce(&mut EventDescrV7)) -> *mut c_void {
        // SAFETY: all-zero is a valid descriptor (integers and pointers).
        let mut d: EventDescrV7 = unsafe { std::mem::zeroed() };
        d.parent_obj = parent;
        fill(&mut d);
        let mut h = std::ptr::null_mut();
        // SAFETY: the context from init and a filled descriptor.
        assert_eq!(
            unsafe { (self.t.start_event)(self.ctx, &mut h, &mut d) },
            NCCL_SUCCESS
        );
        h
    }

    fn state(&self, h: *mut c_void, code: c_int, args: StateArgsV7) {
        let mut a = args;
        // SAFETY: a handle from start.
        unsafe { (self.t.record_event_state)(h, code, &mut a) };
    }

    fn stop(&self, h: *mut c_void) {
        // SAFETY: a handle from start.
        unsafe { (self.t.stop_event)(h) };
    }
}

fn step_args() -> StateArgsV7 {
    StateArgsV7 {
        proxy_step: ProxyStepStateArgs {
            trans_size: CHUNK as usize,
        },
    }
}

/// One transfer with `peer`: a proxy op of STEPS steps, each through the states of its
/// direction. With `stop_after`, the op stops in that state of its first step (never
/// ends).
fn transfer(
    p: &Plugin,
    coll: *mut c_void,
    peer: u32,
    send: bool,
    w: Waits,
    channel: u8,
    stop_after: Option<c_int>,
) {
    let op = p.start(coll, |d| {
        d.type_ = event::PROXY_OP;
        d.u.proxy_op = ProxyOpDescr {
            pid: std::process::id() as i32,
            channel_id: channel,
            peer: peer as c_int,
            n_steps: STEPS,
            chunk_size: CHUNK,
            is_send: send as c_int,
        };
    });
    p.state(op, state::PROXY_OP_IN_PROGRESS_V4, step_args());
    let states: [(c_int, u64); 3] = if send {
        [
            (state::PROXY_STEP_SEND_GPU_WAIT, w.send_gpu),
            (state::PROXY_STEP_SEND_PEER_WAIT_V4, w.send_peer),
            (state::PROXY_STEP_SEND_WAIT, w.network),
        ]
    } else {
        [
            (state::PROXY_STEP_RECV_WAIT, w.recv_peer),
            (state::PROXY_STEP_RECV_FLUSH_WAIT, 0),
            (state::PROXY_STEP_RECV_GPU_WAIT, w.recv_gpu),
        ]
    };
    for step in 0..STEPS {
        let s = p.start(op, |d| {
            d.type_ = event::PROXY_STEP;
            d.u.proxy_step = ProxyStepDescr { step };
        });
        for (code, units) in states {
            p.state(s, code, step_args());
            if stop_after == Some(code) {
                return; // stuck: the step and its op never end
            }
            sleep_units(units);
        }
        p.stop(s);
    }
    p.stop(op);
}

fn child(scenario: &str, rank: u32) {
    let p = Plugin::load(rank);
    let (next, prev) = ((rank + 1) % N, (rank + N - 1) % N);
    let null = std::ptr::null_mut();
    let gpu_t0 = 1_000_000_000u64;
    for k in 0..OPS + 1 {
        let last = k == OPS;
        if last && scenario != "stuck" {
            break;
        }
        // Host: the collective, stopped at enqueue.
        let coll = p.start(null, |d| {
            d.type_ = event::COLL;
            d.u.coll = CollDescrV7 {
                seq_number: k as u64,
                func: c"AllReduce".as_ptr(),
                send_buff: std::ptr::null(),
                recv_buff: null,
                count: (STEPS * CHUNK / 4) as usize,
                root: 0,
                datatype: c"ncclFloat32".as_ptr(),
                // One kernel channel per call below.
                n_channels: 1,
                n_warps: 16,
                algo: c"RING".as_ptr(),
                proto: c"SIMPLE".as_ptr(),
                parent_group: null,
                kernel_variant: std::ptr::null(),
                is_sym_coll: 0,
                user_tag: 0,
            };
        });
        p.stop(coll);
        let channel = (k % 2) as u8;
        if last {
            // Stuck: rank 2's kernel never fills its chunk for rank 3, which waits for it;
            // the others finished.
            match rank {
                2 => transfer(
                    &p,
                    coll,
                    next,
                    true,
                    NORMAL,
                    channel,
                    Some(state::PROXY_STEP_SEND_GPU_WAIT),
                ),
                3 => transfer(
                    &p,
                    coll,
                    prev,
                    false,
                    NORMAL,
                    channel,
                    Some(state::PROXY_STEP_RECV_WAIT),
                ),
                _ => {}
            }
            break;
        }
        // Proxy: the kernel channel, then the transfers it drives.
        let start = gpu_t0 + k as u64 * 10_000_000;
        let kch = p.start(coll, |d| {
            d.type_ = event::KERNEL_CH;
            d.u.kernel_ch = KernelChDescrV4 {
                channel_id: channel,
                p_timer: start,
            };
        });
        transfer(
            &p,
            coll,
            next,
            true,
            waits(scenario, rank, next),
            channel,
            None,
        );
        transfer(
            &p,
            coll,
            prev,
            false,
            waits(scenario, prev, rank),
            channel,
            None,
        );
        p.state(
            kch,
            state::KERNEL_CH_STOP,
            StateArgsV7 {
                kernel_ch: KernelChStateArgs {
                    p_timer: start + 2_000_000,
                },
            },
        );
        p.stop(kch);
    }
    if scenario == "stuck" {
        // Long enough without progress for the agent to call the transfers stalled.
        std::thread::sleep(Duration::from_millis(1300));
    }
    // SAFETY: the context from init, finalized once (the process exits next and the
    // plugin's tracer writes FLARE_DUMP).
    unsafe { (p.t.finalize)(p.ctx) };
}

#[test]
fn child_entry() {
    let Ok(spec) = std::env::var(CHILD) else {
        return;
    };
    let (scenario, rank) = spec.split_once(':').expect("scenario:rank");
    child(scenario, rank.parse().unwrap());
}

// ---------------------------------------------------------------------------------------
// The parent: four ranks, the agent, the engine.

/// What a scenario's window says: the in-collective findings, and the bytes of the ranks'
/// raw events against the bytes of their NCCL progress in the summary.
struct Outcome {
    findings: Vec<flare_model::Finding>,
    raw_bytes: u64,
    wire_bytes: u64,
    /// What the agent wrote as NCCL Inspector output, read back by Flare's importer.
    inspector: flare_model::Trace,
    prom: String,
}

fn run(scenario: &str) -> Outcome {
    let dir = tempfile::tempdir().unwrap();
    let (shm, dumps) = (dir.path().join("shm"), dir.path().join("dumps"));
    std::fs::create_dir_all(&shm).unwrap();
    std::fs::create_dir_all(&dumps).unwrap();
    let job = format!("ring-{}", scenario.replace('_', "-"));
    let children: Vec<_> = (0..N)
        .map(|r| {
            Command::new(std::env::current_exe().unwrap())
                .args(["--exact", "child_entry", "--nocapture", "--test-threads=1"])
                .env(CHILD, format!("{scenario}:{r}"))
                .env("RANK", r.to_string())
                .env("LOCAL_RANK", r.to_string())
                .env("WORLD_SIZE", N.to_string())
                .env("FLARE_JOB_ID", &job)
                .env("FLARE_SHM_DIR", &shm)
                .env(
                    "FLARE_DUMP",
                    dumps.join(format!("flare-{job}-r{r}-p{r}.ring")),
                )
                .env("FLARE_NCCL_EVENT_MASK", "default,proxystep")
                .env_remove("NCCL_PROFILE_EVENT_MASK")
                .env_remove("FLARE_LIBRARY")
                .stdout(Stdio::null())
                .spawn()
                .expect("spawning a rank")
        })
        .collect();
    for mut c in children {
        assert!(c.wait().unwrap().success(), "{scenario}: a rank failed");
    }
    summaries_to_findings(&dumps, &job)
}

fn summaries_to_findings(dumps: &Path, job: &str) -> Outcome {
    let inspector_dir = dumps.with_file_name("inspector");
    let cfg = flare_agent::AgentConfig {
        inspector_dir: Some(inspector_dir.clone()),
        shm_dir: dumps.to_path_buf(),
        job: Some(job.to_string()),
        node: "node-0".into(),
        // One window holds the whole run (a boundary inside it is rare; then the window
        // with the most transfers is read).
        window: Duration::from_secs(3600),
        poll: Duration::from_millis(50),
        scan_interval: Duration::from_millis(50),
        liveness_grace: Duration::ZERO,
        heartbeat: false,
        ..flare_agent::AgentConfig::default()
    };
    let (summaries, _) = flare_agent::Agent::new(cfg).unwrap().run_once();
    let links = |s: &WindowSummary| {
        s.ranks
            .iter()
            .filter_map(|r| r.nccl.as_ref())
            .map(|n| n.links.iter().map(|l| l.ops).sum::<u64>() + n.stalled.len() as u64)
            .sum::<u64>()
    };
    let s = summaries
        .iter()
        .max_by_key(|s| links(s))
        .expect("a summary");
    assert_eq!(s.ranks.len(), N as usize, "{s:#?}");
    // 48 bytes per tracer event.
    let raw_bytes = s.ranks.iter().map(|r| r.events * 48).sum();
    let wire_bytes = s
        .ranks
        .iter()
        .map(|r| serde_json::to_vec(&r.nccl).unwrap().len() as u64)
        .sum();
    let w = LiveWindow::from_summaries(std::slice::from_ref(s));
    let d = analyze_window(&w, &[], &LiveConfig::default());
    assert!(
        d.skipped
            .iter()
            .all(|k| k.detector != DetectorId::InCollective),
        "{:?}",
        d.skipped
    );
    let findings = d
        .findings
        .into_iter()
        .filter(|f| {
            f.detector == DetectorId::InCollective
                || f.corroborated_by
                    .iter()
                    .any(|c| c.detector == DetectorId::InCollective)
        })
        .collect();
    let opts = flare_import::nccl_inspector::NcclOptions::default();
    let inspector = flare_import::nccl_inspector::read_inspector_dir(&inspector_dir, &opts)
        .expect("Flare's importer reads the agent's Inspector output");
    let prom = std::fs::read_to_string(inspector_dir.join("nccl_inspector_metrics_rank0.prom"))
        .expect("rank 0's Prometheus file");
    Outcome {
        findings,
        raw_bytes,
        wire_bytes,
        inspector,
        prom,
    }
}

/// What the engine must say: kind, culprit component and rank, text in the summary.
type Expect = (FindingKind, Component, u32, &'static str);

#[test]
fn the_engine_names_what_happened_inside_the_collective() {
    let cases: [(&str, Option<Expect>); 4] = [
        ("healthy", None),
        (
            "slow_link",
            Some((
                FindingKind::SlowLink,
                Component::Link,
                1,
                "rank 1 to rank 2",
            )),
        ),
        (
            "slow_kernel",
            Some((FindingKind::SlowGpu, Component::Gpu, 3, "waited")),
        ),
        (
            "stuck",
            Some((FindingKind::Hang, Component::Gpu, 2, "its kernel stopped")),
        ),
    ];
    for (scenario, expect) in cases {
        let out = run(scenario);
        // The agent ships the transfers' progress, not their events: within 2% of the
        // raw event bytes (before the wire's compression).
        assert!(
            out.wire_bytes * 50 <= out.raw_bytes,
            "{scenario}: {} bytes of NCCL progress for {} bytes of events",
            out.wire_bytes,
            out.raw_bytes
        );
        // Inspector's output: every rank's calls, each lasting its kernel's GPU time.
        assert_eq!(out.inspector.ranks.len(), N as usize, "{scenario}");
        for r in &out.inspector.ranks {
            let calls: Vec<_> = r
                .ops
                .iter()
                .filter(|o| o.kind == OpKind::AllReduce)
                .collect();
            assert_eq!(calls.len(), OPS as usize, "{scenario}: rank {}", r.rank);
            assert!(
                calls.iter().all(|o| o.end_ns - o.start_ns == 2_000_000),
                "{scenario}"
            );
        }
        assert!(
            out.prom.contains("nccl_collective_exec_time_microseconds{")
                && out.prom.contains("collective=\"AllReduce\""),
            "{}",
            out.prom
        );
        let found = out.findings;
        match expect {
            None => assert!(found.is_empty(), "{scenario}: {found:#?}"),
            Some((kind, component, rank, text)) => {
                assert_eq!(found.len(), 1, "{scenario}: {found:#?}");
                let f = &found[0];
                assert_eq!(
                    (f.kind, f.culprits[0].component),
                    (kind, component),
                    "{scenario}: {}",
                    f.summary
                );
                assert_eq!(f.culprits[0].rank, Some(rank), "{scenario}: {}", f.summary);
                assert!(f.summary.contains(text), "{scenario}: {}", f.summary);
            }
        }
    }
}
