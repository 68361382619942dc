//! Replays the window summaries an agent kept (`flare agent --out DIR`) through the live
//! diagnosis, window by window as the server runs it, and prints each window's warnings,
//! infos and per-rank figures: for finding out why a live job was or was not named.
//!
//! cargo run --release -p flare-engine --example live_replay -- DIR

use flare_engine::live::{diagnose_window, LiveConfig, LiveWindow};
use flare_model::{Finding, Severity, WindowSummary};
use std::collections::BTreeMap;

fn main() {
    let dir = std::env::args().nth(1).expect("usage: live_replay DIR");
    let mut by_window: BTreeMap<u64, Vec<WindowSummary>> = BTreeMap::new();
    for e in std::fs::read_dir(&dir).expect("a directory of summaries") {
        let path = e.expect("an entry").path();
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let text = std::fs::read_to_string(&path).expect("readable");
        let s: WindowSummary = serde_json::from_str(&text)
            .unwrap_or_else(|err| panic!("{}: not a window summary: {err}", path.display()));
        by_window.entry(s.window).or_default().push(s);
    }
    let cfg = LiveConfig::default();
    let windows: Vec<(u64, LiveWindow)> = by_window
        .iter()
        .map(|(w, s)| (*w, LiveWindow::from_summaries(s)))
        .collect();
    let mut previous: Option<Vec<Finding>> = None;
    for (k, (w, current)) in windows.iter().enumerate() {
        let earlier: Vec<&LiveWindow> = windows[k.saturating_sub(cfg.history)..k]
            .iter()
            .map(|x| &x.1)
            .collect();
        let d = diagnose_window(current, &earlier, previous.as_deref(), &cfg);
        println!("window {w}: conclusive {}", d.conclusive);
        for r in current.with_data() {
            println!(
                "    rank {}: {} iterations, own {:.1} ms, in collectives {:.1} ms",
                r.rank,
                r.iterations,
                r.own_ns() / 1e6,
                r.in_sync_ns() / 1e6
            );
        }
        for f in &d.findings {
            let tag = if f.severity >= Severity::Warning {
                "WARN"
            } else {
                "info"
            };
            println!("  {tag} {} {}", f.kind.as_str(), f.summary);
        }
        for n in &d.notes {
            println!("  note: {n}");
        }
        previous = Some(d.findings);
    }
}
