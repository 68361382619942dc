//! Snapshots of what a person and a tool read: the text output, the findings JSON and the
//! report's findings section, for a few fixed scenarios (small simulated jobs with a fixed
//! seed, and a real Flight Recorder dump). Compared byte for byte with the files under
//! `tests/snapshots/`, timing fields normalised. After an intended change, rewrite them
//! with `FLARE_BLESS=1 cargo test -p flare-cli --test snapshots` and review the diff.

use std::path::{Path, PathBuf};
use std::process::Command;

fn flare() -> Command {
    Command::new(env!("CARGO_BIN_EXE_flare"))
}

fn shared_data() -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data");
    assert!(p.is_dir(), "shared data not found at {}", p.display());
    p
}

fn snapshot_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots")
}

/// Compares `actual` with the committed snapshot `name`, or writes it under `FLARE_BLESS`.
fn check(name: &str, actual: &str) {
    let path = snapshot_dir().join(name);
    if std::env::var_os("FLARE_BLESS").is_some() {
        std::fs::create_dir_all(snapshot_dir()).unwrap();
        std::fs::write(&path, actual).unwrap();
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; run with FLARE_BLESS=1 to write it",
            path.display()
        )
    });
    if committed != actual {
        let line = committed
            .lines()
            .zip(actual.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| committed.lines().count().min(actual.lines().count()));
        panic!(
            "{} differs from the output at line {}:\n  committed: {:?}\n  actual:    {:?}\nrun with FLARE_BLESS=1 and review the diff",
            path.display(),
            line + 1,
            committed.lines().nth(line),
            actual.lines().nth(line)
        );
    }
}

/// Replaces the number in every `in N ms` (the diagnosis time) with `N`.
fn normalise_ms(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find(" in ") {
        out.push_str(&rest[..at + 4]);
        rest = &rest[at + 4..];
        let digits = rest.bytes().take_while(|b| b.is_ascii_digit()).count();
        if digits > 0 && rest[digits..].starts_with(" ms") {
            out.push('N');
            rest = &rest[digits..];
        }
    }
    out.push_str(rest);
    out
}

/// `s` with the shared data's path, if any, written `<data>`.
fn unpath(s: String, data: Option<&str>) -> String {
    match data {
        Some(d) => s.replace(d, "<data>"),
        None => s,
    }
}

/// Text output with the diagnosis time and the data path normalised.
fn text(out: &std::process::Output, data: Option<&str>) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    unpath(
        normalise_ms(&String::from_utf8(out.stdout.clone()).unwrap()),
        data,
    )
}

/// The findings JSON as printed, with the value of `diagnosis_ms` written `N` and the data
/// path normalised; it must parse.
fn json(out: &std::process::Output, data: Option<&str>) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let s = String::from_utf8(out.stdout.clone()).unwrap();
    let _: serde_json::Value = serde_json::from_str(&s).expect("JSON");
    unpath(normalise_field(&s, "\"diagnosis_ms\": "), data)
}

/// Replaces the number after every `field` with `N`.
fn normalise_field(s: &str, field: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find(field) {
        out.push_str(&rest[..at + field.len()]);
        rest = &rest[at + field.len()..];
        let n = rest
            .bytes()
            .take_while(|b| b.is_ascii_digit() || matches!(b, b'.' | b'-' | b'e' | b'E' | b'+'))
            .count();
        out.push('N');
        rest = &rest[n..];
    }
    out.push_str(rest);
    out
}

/// The report's findings section.
fn findings_section(html: &str) -> String {
    let start = html
        .find("<section id=\"findings\">")
        .expect("findings section");
    let end = start + html[start..].find("</section>").expect("section end") + "</section>".len();
    assert!(!html.to_ascii_lowercase().contains("<script"));
    html[start..end].to_string() + "\n"
}

/// A small simulated job (TP2 x PP2 x DP4, 8 iterations, seed 1) with `fault`.
fn demo(fault: &str) {
    let dir =
        std::env::temp_dir().join(format!("flare-cli-snapshot-{}-{fault}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let report = dir.join("report.html");
    let run = |json: bool| {
        let mut c = flare();
        c.args([
            "demo",
            "--tp",
            "2",
            "--pp",
            "2",
            "--dp",
            "4",
            "--iterations",
            "8",
            "--seed",
            "1",
            "--fault",
            fault,
        ])
        .arg("--report")
        .arg(&report);
        if json {
            c.arg("--json");
        }
        c.output().expect("runs")
    };
    check(&format!("{fault}.txt"), &text(&run(false), None));
    let html = std::fs::read_to_string(&report).unwrap();
    check(&format!("{fault}.findings.html"), &findings_section(&html));
    check(&format!("{fault}.json"), &json(&run(true), None));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn slow_gpu_job() {
    demo("slow_gpu");
}

#[test]
fn hung_job() {
    demo("hang");
}

#[test]
fn healthy_job() {
    demo("none");
}

#[test]
fn flight_recorder_gpu_error() {
    let data = shared_data().display().to_string();
    let path = shared_data().join("flight-recorder").join("gpu_error_2nd");
    let run = |json: bool| {
        let mut c = flare();
        c.arg("diagnose").arg(&path);
        if json {
            c.arg("--json");
        }
        c.output().expect("runs")
    };
    check("fr_gpu_error_2nd.txt", &text(&run(false), Some(&data)));
    check("fr_gpu_error_2nd.json", &json(&run(true), Some(&data)));
}

#[test]
fn diagnosis_time_is_normalised() {
    for (s, want) in [
        ("x (1 ranks) in 7 ms\n", "x (1 ranks) in N ms\n"),
        ("took in 1234 ms", "took in N ms"),
        ("in iterations 0-7", "in iterations 0-7"),
        ("in 3 ranks in 12 ms", "in 3 ranks in N ms"),
    ] {
        assert_eq!(normalise_ms(s), want);
    }
    assert_eq!(
        normalise_field(
            "{\"a\": 1,\n\"diagnosis_ms\": 2.98e-3\n}",
            "\"diagnosis_ms\": "
        ),
        "{\"a\": 1,\n\"diagnosis_ms\": N\n}"
    );
}
