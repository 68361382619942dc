//! Scale-out end to end: a real `nats-server` with JetStream, a real PostgreSQL
//! (`FLARE_TEST_POSTGRES`, as `scripts/postgres-env.sh` prints), two `flare serve --nats`
//! workers sharing it, and the agent's own publisher. One worker is killed with SIGKILL
//! while summaries flow; nothing the agent published is lost, nothing is counted twice,
//! and the survivor names the simulated slow GPU. Without nats-server or PostgreSQL the
//! test says so and passes, unless `FLARE_E2E_REQUIRED=1` (as in the test script).

use flare_agent::{PushConfig, Pusher};
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const TOKEN: &str = "nats-test-token-0123";

fn required() -> bool {
    std::env::var("FLARE_E2E_REQUIRED").as_deref() == Ok("1")
}

fn skip(why: &str) {
    assert!(!required(), "{why}");
    eprintln!("skipped: {why}");
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A child process killed when the test ends, however it ends.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_nats(dir: &std::path::Path) -> (Proc, String) {
    let port = free_port();
    let child = Command::new("nats-server")
        .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
        .arg(dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("nats-server starts");
    let t = Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(t.elapsed() < Duration::from_secs(20), "nats-server not up");
        std::thread::sleep(Duration::from_millis(50));
    }
    (Proc(child), format!("nats://127.0.0.1:{port}"))
}

/// A new database on the test PostgreSQL server, as a URL.
fn fresh_database(admin: &str) -> String {
    let name = format!("flare_nats_{}", std::process::id());
    let mut c = postgres::Client::connect(admin, postgres::NoTls).expect("admin connection");
    c.batch_execute(&format!("DROP DATABASE IF EXISTS {name}"))
        .unwrap();
    c.batch_execute(&format!("CREATE DATABASE {name}")).unwrap();
    let (base, _) = admin.rsplit_once('/').expect("a URL with a database");
    format!("{base}/{name}")
}

/// `flare serve` consuming NATS into the database; its API's address.
fn start_worker(db: &str, nats: &str) -> (Proc, String) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_flare"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--db",
            db,
            "--nats",
            nats,
        ])
        .env("FLARE_TOKEN", TOKEN)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("flare serve starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    (Proc(child), addr)
}

/// Messages the servers' consumer delivered and has not had acknowledged.
fn unacknowledged(nats: &str) -> u64 {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let js = async_nats::jetstream::new(async_nats::connect(nats).await.unwrap());
        let stream = js.get_stream(flare_server::nats::STREAM).await.unwrap();
        let mut consumer: async_nats::jetstream::consumer::PullConsumer = stream
            .get_consumer(flare_server::nats::CONSUMER)
            .await
            .unwrap();
        consumer.info().await.unwrap().num_ack_pending as u64
    })
}

/// The API's JSON reply (`null` for an unknown job, while nothing is stored yet).
fn get(base: &str, path: &str) -> Value {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut resp = agent
        .get(&format!("{base}{path}"))
        .header("Authorization", format!("Bearer {TOKEN}"))
        .call()
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    if resp.status() == 404 {
        return Value::Null;
    }
    serde_json::from_str(&resp.body_mut().read_to_string().unwrap()).unwrap()
}

#[test]
fn a_worker_killed_mid_stream_loses_nothing_the_agents_published() {
    let Ok(admin) = std::env::var("FLARE_TEST_POSTGRES") else {
        return skip("FLARE_TEST_POSTGRES is not set: start a server with scripts/postgres-env.sh");
    };
    if Command::new("nats-server")
        .arg("--version")
        .output()
        .is_err()
    {
        return skip("nats-server is not installed (apt-get install nats-server)");
    }
    let dir = tempfile::tempdir().unwrap();
    let (_nats, nats_url) = start_nats(dir.path());
    let db = fresh_database(&admin);
    let (mut doomed, _) = start_worker(&db, &nats_url);

    // A 64-rank job (8 nodes) with a slow GPU, as its agents would have summarised it.
    let mut cfg = flare_sim::SimConfig::for_scale(64);
    cfg.iterations = 24;
    cfg.fault = flare_sim::fault::FaultKind::SlowGpu;
    let sim = flare_sim::simulate(&cfg).unwrap();
    let slow = sim.truth.culprits[0].rank.unwrap();
    let span = sim.trace.ranks[0].ops.last().unwrap().start_ns - sim.trace.ranks[0].ops[0].start_ns;
    let windows =
        flare_agent::replay::summaries_of_trace(&sim.trace, "nats-job", (span / 6).max(1) as u64);
    let published: usize = windows.iter().map(Vec::len).sum();
    let pusher = Pusher::start(PushConfig::new(nats_url.clone(), None)).unwrap();
    let half = windows.len() / 2;
    // The first worker pulls, then freezes (SIGSTOP) with what it was handed, and dies
    // (SIGKILL) without acknowledging any of it.
    std::thread::sleep(Duration::from_millis(500));
    unsafe { libc::kill(doomed.0.id() as i32, libc::SIGSTOP) };
    for w in &windows[..half] {
        for s in w {
            pusher.submit(s).unwrap();
        }
    }
    let t = Instant::now();
    while pusher.stats().sent < windows[..half].iter().map(Vec::len).sum::<usize>() as u64 {
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{:?}",
            pusher.stats()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let in_flight = unacknowledged(&nats_url);
    assert!(in_flight > 0, "the frozen worker was handed nothing");
    doomed.0.kill().unwrap();
    let (_survivor, api) = start_worker(&db, &nats_url);
    for w in &windows[half..] {
        for s in w {
            pusher.submit(s).unwrap();
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let stats = pusher.shutdown(Duration::from_secs(20));
    assert_eq!(
        (stats.sent as usize, stats.dropped, stats.queued),
        (published, 0, 0),
        "{stats:?}"
    );

    // Everything stored once, within the redelivery delay.
    let last = windows.last().unwrap()[0].window;
    let deadline = Instant::now() + flare_server::nats::ACK_WAIT + Duration::from_secs(30);
    let stored = loop {
        let v = get(
            &api,
            &format!("/api/jobs/nats-job/summaries?from=0&to={last}"),
        );
        let n = v.as_array().map_or(0, Vec::len);
        if n >= published || Instant::now() > deadline {
            break n;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    assert_eq!(
        stored, published,
        "summaries stored by the survivor's database"
    );
    let job = get(&api, "/api/jobs");
    assert_eq!(job[0]["ranks_seen"], 64, "{job}");
    // Each window holds every rank once (a summary stored twice counts once), and the
    // slow GPU is named.
    let mut named = 0;
    for w in &windows[..windows.len() - 1] {
        let window = w[0].window;
        let doc = get(
            &api,
            &format!("/api/jobs/nats-job/findings?window={window}"),
        );
        assert_eq!(doc["job"]["ranks_with_data"], 64, "window {window}: {doc}");
        assert_eq!(doc["job"]["nodes"], 8, "window {window}");
        if doc["findings"][0]["culprits"][0]["rank"] == slow {
            named += 1;
        }
    }
    assert!(named >= 2, "the slow rank {slow} named in {named} windows");
    assert_eq!(unacknowledged(&nats_url), 0);
    eprintln!("{in_flight} summaries were in flight with the killed worker");
}
