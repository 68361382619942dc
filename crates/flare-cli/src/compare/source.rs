//! What `flare compare` reads: a trace (a .flare file, a directory of Kineto traces,
//! simulator output), a live job's window summaries written by `flare agent --out`, or a
//! live job on a Flare server (`http://HOST:PORT/jobs/ID?from=A&to=B`, the dashboard's
//! address of the job, read with the token in FLARE_TOKEN).

use anyhow::{bail, Context, Result};
use flare_import::{OpenOptions, Opened};
use flare_model::{Trace, WindowSummary};
use std::path::Path;
use std::time::Duration;

/// One side of a comparison.
pub enum Run {
    Trace(Box<Trace>),
    /// A live job's windows, in window order.
    Windows(Vec<WindowSummary>),
}

/// Reads `source` (see the module).
pub fn read(source: &str) -> Result<Run> {
    if source.starts_with("http://") || source.starts_with("https://") {
        return fetch(source).map(Run::Windows);
    }
    let path = Path::new(source);
    match flare_import::open(&[path.to_path_buf()], &OpenOptions::default())
        .with_context(|| format!("reading {source}"))?
    {
        Opened::Trace(mut t) => {
            if crate::diagnose::needs_alignment(&t.meta) {
                // Waiting is read across ranks: their clocks must agree.
                flare_engine::clock::align_clocks(&mut t);
            }
            Ok(Run::Trace(t))
        }
        Opened::AgentSummaries(w) => Ok(Run::Windows(w)),
        Opened::FlightRecorder(_) => {
            bail!("{source}: Flight Recorder dumps hold no timeline; expected a trace or a live job's summaries")
        }
    }
}

/// The summaries endpoint of a job's address on a server: `http://h:p/jobs/ID` or
/// `http://h:p/api/jobs/ID`, with its query (`from`, `to`) kept.
pub fn summaries_url(source: &str) -> Result<String> {
    let (scheme, rest) = source
        .split_once("://")
        .context("expected http://HOST:PORT/jobs/JOB")?;
    let (rest, query) = match rest.split_once('?') {
        Some((r, q)) => (r, Some(q)),
        None => (rest, None),
    };
    let (host, path) = rest.split_once('/').unwrap_or((rest, ""));
    let path = path.trim_end_matches('/');
    let job = path
        .strip_prefix("api/jobs/")
        .or_else(|| path.strip_prefix("jobs/"))
        .filter(|j| !j.is_empty() && !j.contains('/'))
        .with_context(|| {
            format!("{source}: expected a job's address, {scheme}://{host}/jobs/JOB[?from=A&to=B]")
        })?;
    let mut url = format!("{scheme}://{host}/api/jobs/{job}/summaries");
    if let Some(q) = query.filter(|q| !q.is_empty()) {
        url.push('?');
        url.push_str(q);
    }
    Ok(url)
}

/// The job's stored summaries, from the server.
fn fetch(source: &str) -> Result<Vec<WindowSummary>> {
    let url = summaries_url(source)?;
    let token = std::env::var("FLARE_TOKEN").ok();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(120)))
        .user_agent(concat!("flare-compare/", env!("CARGO_PKG_VERSION")))
        .build()
        .into();
    let mut req = agent.get(&url);
    if let Some(t) = &token {
        req = req.header("Authorization", format!("Bearer {t}"));
    }
    let mut resp = req.call().with_context(|| format!("fetching {url}"))?;
    let status = resp.status().as_u16();
    let body = resp
        .body_mut()
        .with_config()
        .limit(4 << 30)
        .read_to_vec()
        .with_context(|| format!("reading the answer of {url}"))?;
    if status != 200 {
        let text = String::from_utf8_lossy(&body[..body.len().min(2048)]).into_owned();
        let hint = if status == 401 && token.is_none() {
            " (set FLARE_TOKEN to the server's read token)"
        } else {
            ""
        };
        bail!("{url}: HTTP {status}: {}{hint}", text.trim());
    }
    let windows: Vec<WindowSummary> = serde_json::from_slice(&body)
        .with_context(|| format!("{url}: expected a JSON array of window summaries"))?;
    if windows.is_empty() {
        bail!("{url}: the job has no stored window in that range");
    }
    Ok(windows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jobs_address_becomes_its_summaries_endpoint() {
        for (given, want) in [
            (
                "http://srv:7470/jobs/train-42",
                "http://srv:7470/api/jobs/train-42/summaries",
            ),
            (
                "http://srv:7470/api/jobs/j/",
                "http://srv:7470/api/jobs/j/summaries",
            ),
            (
                "https://srv/jobs/j?from=3&to=9",
                "https://srv/api/jobs/j/summaries?from=3&to=9",
            ),
        ] {
            assert_eq!(summaries_url(given).unwrap(), want);
        }
        for bad in [
            "http://srv:7470/",
            "http://srv/jobs/",
            "http://srv/jobs/a/b",
            "srv/jobs/a",
        ] {
            assert!(summaries_url(bad).is_err(), "{bad}");
        }
    }
}
