//! Following a job's logs: a real failed torchrun job's files (torchrun's `--log-dir` and
//! its console) under a directory the agent follows; the lines the diagnosis needs reach
//! the summaries, with the job's processes gone (summaries of logs alone), and the
//! configuration says what `--logs` needs.

use flare_agent::{Agent, AgentConfig, LogConfig};
use flare_model::WindowSummary;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        let dest = to.join(p.file_name().unwrap());
        if p.is_dir() {
            copy_dir(&p, &dest);
        } else {
            std::fs::copy(&p, &dest).unwrap();
        }
    }
}

fn config(shm: &Path, logs: Vec<PathBuf>) -> AgentConfig {
    AgentConfig {
        shm_dir: shm.to_path_buf(),
        job: Some("job-7".into()),
        node: "node-a".into(),
        window: Duration::from_millis(500),
        poll: Duration::from_millis(50),
        heartbeat: false,
        logs: Some(LogConfig::new(logs)),
        ..AgentConfig::default()
    }
}

#[test]
fn a_failed_job_s_logs_reach_the_summaries_alone() {
    let case =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/logs/real_jobs/host_oom");
    let dir = tempfile::tempdir().unwrap();
    let shm = dir.path().join("shm");
    std::fs::create_dir_all(&shm).unwrap();
    let job = dir.path().join("job");
    copy_dir(&case, &job);
    let agent = Agent::new(config(&shm, vec![job.clone()])).unwrap();
    let (summaries, report) = agent.run_once();
    let logs = report.logs.expect("log stats");
    assert!(logs.tail.files >= 9, "{logs:?}");
    // no process was traced: the excerpts come in summaries of their own
    assert!(!summaries.is_empty());
    assert!(summaries
        .iter()
        .all(|s: &WindowSummary| s.ranks.is_empty() && s.job_id == "job-7" && s.node == "node-a"));
    let lines: Vec<&str> = summaries
        .iter()
        .flat_map(|s| {
            s.logs
                .iter()
                .flat_map(|x| x.lines.iter().map(|l| l.text.as_str()))
        })
        .collect();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("DefaultCPUAllocator: can't allocate memory")),
        "{lines:#?}"
    );
    // a small part of what was read; every line read was counted, templates too
    let read: u64 = summaries
        .iter()
        .filter_map(|s| s.logs.as_ref())
        .map(|x| x.lines_read)
        .sum();
    assert_eq!(read, logs.lines_read);
    assert!((lines.len() as u64) < read, "{} of {read}", lines.len());
    assert!(summaries
        .iter()
        .filter_map(|s| s.logs.as_ref())
        .any(|x| !x.templates.is_empty()));
    // the Flight Recorder dumps beside the logs are not logs
    assert!(summaries
        .iter()
        .filter_map(|s| s.logs.as_ref())
        .all(|x| x.lines.iter().all(|l| !l.file.contains("nccl_trace"))));
}

#[test]
fn following_logs_needs_the_job() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = AgentConfig {
        job: None,
        ..config(dir.path(), vec![dir.path().to_path_buf()])
    };
    let e = Agent::new(cfg).err().expect("refused").to_string();
    assert!(e.contains("--job"), "{e}");
}
