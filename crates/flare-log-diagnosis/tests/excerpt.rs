//! The excerpt an agent sends (failure lines, tracebacks, torchrun's summary, identity
//! lines, each writer's latest progress) must give the verdict the whole files give:
//! checked on every labelled log of the repository (real excerpts from public threads,
//! real failing torchrun jobs), and the excerpt must be a small part of a long log.

use flare_log_diagnosis::{diagnose, Collector, Excerpter, Limits, LogDiagnosis};
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/logs")
}

/// The log files of a case: text files but its truth and notes, in sorted order.
fn files(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let name = p.file_name().unwrap().to_string_lossy().to_string();
            if p.is_dir() {
                stack.push(p);
            } else if name != "truth.json" && !name.ends_with(".md") {
                let bytes = std::fs::read(&p).unwrap();
                if !bytes.contains(&0) {
                    let path = p.strip_prefix(dir).unwrap().display().to_string();
                    out.push((path, String::from_utf8_lossy(&bytes).into_owned()));
                }
            }
        }
    }
    out.sort();
    out
}

fn whole(files: &[(String, String)]) -> LogDiagnosis {
    let mut c = Collector::new(Limits::default());
    for (path, text) in files {
        let id = c.file(path);
        for l in text.lines() {
            c.line(id, l);
        }
        c.end_file(id);
    }
    diagnose(c.finish())
}

/// The excerpt of each file, as a receiver keeps it: the lines sent, each writer's
/// latest progress line, in line order. Returns the diagnosis and the lines sent.
fn excerpted(files: &[(String, String)]) -> (LogDiagnosis, usize) {
    let mut c = Collector::new(Limits::default());
    let mut sent = 0;
    for (path, text) in files {
        let mut x = Excerpter::for_path(path);
        let mut kept: Vec<(u64, String)> = Vec::new();
        for l in text.lines() {
            if x.line(l).is_some() {
                kept.push((x.line_no(), l.to_string()));
            }
        }
        kept.extend(x.take_progress().into_iter().map(|(_, n, t)| (n, t)));
        kept.sort_by_key(|(n, _)| *n);
        sent += kept.len();
        let id = c.file(path);
        for (n, t) in &kept {
            c.numbered_line(id, *n, t);
        }
        c.end_file(id);
    }
    (diagnose(c.finish()), sent)
}

/// What must not change: the top finding's category, root line (file and number),
/// culprit and stage.
fn verdict(d: &LogDiagnosis) -> String {
    let Some(f) = d.findings.first() else {
        return "no finding".into();
    };
    let fd = f.failure.as_ref();
    format!(
        "{:?} {:?} {:?} {:?} {:?}",
        fd.map(|d| d.category),
        fd.and_then(|d| d.lines.first()).map(|l| (&l.file, l.line)),
        f.culprits.first().map(|c| (c.rank, &c.host)),
        fd.map(|d| d.stage),
        f.severity
    )
}

#[test]
fn the_excerpt_gives_the_verdict_of_the_whole_files() {
    let mut cases = 0;
    for set in ["corpus", "real_jobs"] {
        for case in std::fs::read_dir(fixtures().join(set)).unwrap() {
            let dir = case.unwrap().path();
            if !dir.join("truth.json").is_file() {
                continue;
            }
            let f = files(&dir);
            let (x, _) = excerpted(&f);
            assert_eq!(verdict(&whole(&f)), verdict(&x), "{}", dir.display());
            cases += 1;
        }
    }
    assert!(cases >= 55, "{cases} cases");
}

#[test]
fn a_long_run_is_a_few_lines() {
    // 64 ranks' progress for 2,000 iterations, then one rank's OOM and the others' timeouts
    let mut text = String::new();
    for it in 1..=2000 {
        for r in 0..64 {
            text.push_str(&format!(
                "[rank{r}]:[2026-11-25 10:00:00] iteration {it}/ 5000 | lm loss: 2.1E+00 | loss scale: 1.0 |\n"
            ));
        }
    }
    text.push_str("[rank7]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 7 has a total capacity of 79.15 GiB of which 1.21 GiB is free.\n");
    for r in (0..64).filter(|&r| r != 7) {
        text.push_str(&format!("[rank{r}]:[E1125 10:10:00.000000000 ProcessGroupNCCL.cpp:616] [PG ID 0 PG GUID 0(default_pg) Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600012 milliseconds before timing out.\n"));
    }
    let f = vec![("console.log".to_string(), text)];
    let (x, sent) = excerpted(&f);
    assert_eq!(verdict(&whole(&f)), verdict(&x));
    // the failure lines, and per rank its first progress line (training began) and its
    // latest, of 128,064 lines
    assert!(sent <= 3 * 64, "{sent} lines sent");
    let top = &x.findings[0];
    assert_eq!(top.culprits[0].rank, Some(7));
    assert_eq!(top.failure.as_ref().unwrap().iteration, Some(2000));
}

#[test]
fn a_collector_s_verdict_along_the_way_is_the_verdict_at_the_end() {
    for case in std::fs::read_dir(fixtures().join("real_jobs")).unwrap() {
        let dir = case.unwrap().path();
        if !dir.join("truth.json").is_file() {
            continue;
        }
        let f = files(&dir);
        let mut c = Collector::new(Limits::default());
        for (path, text) in &f {
            let id = c.file(path);
            for l in text.lines() {
                c.line(id, l);
            }
            c.end_file(id);
        }
        let along = c.diagnosis();
        // asked twice, the same: the hits it resolves are its own copy
        assert_eq!(verdict(&along), verdict(&c.diagnosis()));
        assert_eq!(
            verdict(&along),
            verdict(&diagnose(c.finish())),
            "{}",
            dir.display()
        );
    }
}
