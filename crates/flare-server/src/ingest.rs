//! Turning a request body into a checked summary: decompression with a bound on the
//! output (a small zstd body can expand to gigabytes), JSON decoding, version and sanity
//! checks, and the compressed form the store keeps.

use axum::http::StatusCode;
use flare_model::summary::SUMMARY_VERSION;
use flare_model::WindowSummary;
use std::collections::HashSet;
use std::io::Read;

/// Largest job the server accepts: it bounds the missing-rank lists it computes.
pub const MAX_WORLD_SIZE: u32 = 1 << 20;
/// Longest job id or node name.
const MAX_NAME_BYTES: usize = 256;
/// zstd level for plain bodies the store compresses itself: fast, and summaries are small.
const STORE_ZSTD_LEVEL: i32 = 3;
const ZSTD_MAGIC: [u8; 4] = [0x28, 0xb5, 0x2f, 0xfd];

#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error("Content-Encoding {0:?} is not supported: send the JSON plain or with Content-Encoding: zstd")]
    UnsupportedEncoding(String),
    #[error("the body is empty: expected a JSON window summary")]
    Empty,
    #[error("the body is not valid zstd (Content-Encoding: zstd): {0}")]
    BadZstd(#[source] std::io::Error),
    #[error("the summary is larger than {limit} bytes once decompressed")]
    TooLarge { limit: usize },
    #[error("the body is not a valid window summary: {source}{hint}")]
    BadJson {
        #[source]
        source: serde_json::Error,
        hint: &'static str,
    },
    #[error("summary version {found} is newer than this server understands ({supported}); upgrade the flare server")]
    VersionTooNew { found: u32, supported: u32 },
    #[error("invalid summary: {0}")]
    Invalid(String),
    #[error("cannot compress the summary for storage: {0}")]
    Compress(#[source] std::io::Error),
}

impl IngestError {
    pub fn status(&self) -> StatusCode {
        match self {
            IngestError::UnsupportedEncoding(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            IngestError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            IngestError::Compress(_) => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::BAD_REQUEST,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Identity,
    Zstd,
}

impl Encoding {
    /// From a `Content-Encoding` header value (absent: identity).
    pub fn parse(header: Option<&str>) -> Result<Encoding, IngestError> {
        match header.map(str::trim) {
            None => Ok(Encoding::Identity),
            Some(v) if v.is_empty() || v.eq_ignore_ascii_case("identity") => Ok(Encoding::Identity),
            Some(v) if v.eq_ignore_ascii_case("zstd") => Ok(Encoding::Zstd),
            Some(v) => Err(IngestError::UnsupportedEncoding(v.to_string())),
        }
    }
}

/// A checked summary and its zstd-compressed JSON for the store.
pub struct Prepared {
    pub summary: WindowSummary,
    pub compressed: Vec<u8>,
}

/// Decodes, checks and compresses one request body. CPU-bound: call off the async
/// workers.
pub fn prepare(body: &[u8], encoding: Encoding, limit: usize) -> Result<Prepared, IngestError> {
    if body.is_empty() {
        return Err(IngestError::Empty);
    }
    let json = match encoding {
        Encoding::Zstd => decompress(body, limit)?,
        Encoding::Identity => body.to_vec(),
    };
    let summary = parse(&json, encoding)?;
    let compressed = match encoding {
        // The body is already what the store keeps, and it decoded within the limit.
        Encoding::Zstd => body.to_vec(),
        Encoding::Identity => {
            zstd::encode_all(json.as_slice(), STORE_ZSTD_LEVEL).map_err(IngestError::Compress)?
        }
    };
    Ok(Prepared {
        summary,
        compressed,
    })
}

/// Decompresses at most `limit` bytes; more is an error, not a truncation.
pub fn decompress(body: &[u8], limit: usize) -> Result<Vec<u8>, IngestError> {
    let decoder = zstd::stream::read::Decoder::new(body).map_err(IngestError::BadZstd)?;
    let mut out = Vec::new();
    decoder
        .take(limit as u64 + 1)
        .read_to_end(&mut out)
        .map_err(IngestError::BadZstd)?;
    if out.len() > limit {
        return Err(IngestError::TooLarge { limit });
    }
    Ok(out)
}

/// Only the version, read first: a newer summary may not fit today's struct, and
/// "upgrade the server" is a better answer than a missing-field error.
#[derive(serde::Deserialize)]
struct VersionOnly {
    version: u32,
}

fn parse(json: &[u8], encoding: Encoding) -> Result<WindowSummary, IngestError> {
    let hint = if encoding == Encoding::Identity && json.starts_with(&ZSTD_MAGIC) {
        " (the body looks zstd-compressed: send Content-Encoding: zstd)"
    } else {
        ""
    };
    let bad = |source| IngestError::BadJson { source, hint };
    let v: VersionOnly = serde_json::from_slice(json).map_err(bad)?;
    if v.version > SUMMARY_VERSION {
        return Err(IngestError::VersionTooNew {
            found: v.version,
            supported: SUMMARY_VERSION,
        });
    }
    if v.version == 0 {
        return Err(IngestError::Invalid(format!(
            "version 0 is not a summary version (this server reads 1 to {SUMMARY_VERSION})"
        )));
    }
    let s: WindowSummary = serde_json::from_slice(json).map_err(bad)?;
    validate(&s)?;
    Ok(s)
}

fn check_name(what: &str, v: &str) -> Result<(), IngestError> {
    if v.trim().is_empty() {
        return Err(IngestError::Invalid(format!("{what} is empty")));
    }
    if v.len() > MAX_NAME_BYTES {
        return Err(IngestError::Invalid(format!(
            "{what} is {} bytes long (at most {MAX_NAME_BYTES})",
            v.len()
        )));
    }
    if v.chars().any(char::is_control) {
        return Err(IngestError::Invalid(format!(
            "{what} {v:?} contains control characters"
        )));
    }
    Ok(())
}

/// What the store and the engine rely on.
fn validate(s: &WindowSummary) -> Result<(), IngestError> {
    check_name("job_id", &s.job_id)?;
    check_name("node", &s.node)?;
    if s.window > i64::MAX as u64 {
        return Err(IngestError::Invalid(format!(
            "window {} is out of range (at most {})",
            s.window,
            i64::MAX
        )));
    }
    if s.world_size > MAX_WORLD_SIZE {
        return Err(IngestError::Invalid(format!(
            "world_size {} is larger than this server accepts ({MAX_WORLD_SIZE})",
            s.world_size
        )));
    }
    let mut seen = HashSet::with_capacity(s.ranks.len());
    for r in &s.ranks {
        if s.world_size > 0 && r.rank >= s.world_size {
            return Err(IngestError::Invalid(format!(
                "rank {} is outside world_size {}",
                r.rank, s.world_size
            )));
        }
        if !seen.insert(r.rank) {
            return Err(IngestError::Invalid(format!(
                "rank {} appears twice in the summary of node {}",
                r.rank, s.node
            )));
        }
    }
    for h in &s.hangs {
        if s.world_size > 0 && h.rank >= s.world_size {
            return Err(IngestError::Invalid(format!(
                "hang record of rank {} is outside world_size {}",
                h.rank, s.world_size
            )));
        }
    }
    if let Some(x) = &s.logs {
        validate_logs(x)?;
    }
    Ok(())
}

/// Longest log file path accepted.
const MAX_PATH_BYTES: usize = 4096;

fn validate_logs(x: &flare_model::LogExcerpt) -> Result<(), IngestError> {
    let big = |v: u64| v > i64::MAX as u64;
    if big(x.lines_read) || big(x.lines_dropped) {
        return Err(IngestError::Invalid(
            "log line counts are out of range".into(),
        ));
    }
    let lines = x.lines.iter().map(|l| (&l.file, l.line));
    let progress = x.progress.iter().map(|p| (&p.file, p.line));
    for (file, line) in lines.chain(progress) {
        if file.is_empty() || file.len() > MAX_PATH_BYTES || file.chars().any(char::is_control) {
            return Err(IngestError::Invalid(format!(
                "log file path {:?} is empty, longer than {MAX_PATH_BYTES} bytes or holds control characters",
                file.chars().take(80).collect::<String>()
            )));
        }
        if line == 0 || big(line) {
            return Err(IngestError::Invalid(format!(
                "log line number {line} of {file} is out of range (1 to {})",
                i64::MAX
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary_json(version: u32) -> String {
        format!(
            r#"{{"version":{version},"job_id":"j","node":"n0","window":3,"window_ns":1000,
               "start_unix_ns":3000,"end_unix_ns":4000,"world_size":2,
               "ranks":[{{"rank":1,"local_rank":1,"pid":7,"iterations":[],"ops":[],
                          "busy_ns":0,"observed_ns":1000,"events":0,"dropped_total":0}}]}}"#
        )
    }

    #[test]
    fn plain_and_zstd_bodies_decode_to_the_same_summary() {
        let json = summary_json(1);
        let plain = prepare(json.as_bytes(), Encoding::Identity, 1 << 20).unwrap();
        let z = zstd::encode_all(json.as_bytes(), 3).unwrap();
        let zs = prepare(&z, Encoding::Zstd, 1 << 20).unwrap();
        assert_eq!(plain.summary, zs.summary);
        assert_eq!(zs.compressed, z);
        assert_eq!(
            decompress(&plain.compressed, 1 << 20).unwrap(),
            json.as_bytes()
        );
    }

    #[test]
    fn bad_bodies_say_what_is_wrong() {
        let json = summary_json(1);
        let cases: Vec<(Vec<u8>, Encoding, &str)> = vec![
            (vec![], Encoding::Identity, "empty"),
            (
                b"{".to_vec(),
                Encoding::Identity,
                "not a valid window summary",
            ),
            (b"not zstd".to_vec(), Encoding::Zstd, "not valid zstd"),
            (
                zstd::encode_all(json.as_bytes(), 3).unwrap(),
                Encoding::Identity,
                "looks zstd-compressed",
            ),
            (
                summary_json(2).into_bytes(),
                Encoding::Identity,
                "newer than this server",
            ),
            (
                summary_json(0).into_bytes(),
                Encoding::Identity,
                "version 0",
            ),
            (
                json.replace("\"rank\":1", "\"rank\":5").into_bytes(),
                Encoding::Identity,
                "outside world_size 2",
            ),
            (
                json.replace("\"node\":\"n0\"", "\"node\":\"\"")
                    .into_bytes(),
                Encoding::Identity,
                "node is empty",
            ),
            (
                json.replace("\"pid\":7,", "").into_bytes(),
                Encoding::Identity,
                "missing field `pid`",
            ),
            (
                json.replacen(
                    "\"world_size\"",
                    r#""logs":{"lines_read":1,"lines_dropped":0,"lines":[{"file":"a.log","line":0,"text":"x"}]},"world_size""#,
                    1,
                )
                .into_bytes(),
                Encoding::Identity,
                "log line number 0 of a.log is out of range",
            ),
            (
                json.replacen(
                    "\"world_size\"",
                    r#""logs":{"lines_read":1,"lines_dropped":0,"lines":[{"file":"a\nb","line":3,"text":"x"}]},"world_size""#,
                    1,
                )
                .into_bytes(),
                Encoding::Identity,
                "control characters",
            ),
        ];
        for (body, enc, want) in cases {
            let err = prepare(&body, enc, 1 << 20).err().expect(want).to_string();
            assert!(err.contains(want), "{want:?} not in {err:?}");
        }
    }

    #[test]
    fn decompression_is_bounded() {
        let big = vec![b' '; 10_000];
        let z = zstd::encode_all(big.as_slice(), 3).unwrap();
        assert!(z.len() < 100);
        let err = decompress(&z, 1000).unwrap_err();
        assert!(matches!(err, IngestError::TooLarge { limit: 1000 }));
        assert_eq!(err.status(), StatusCode::PAYLOAD_TOO_LARGE);
        assert_eq!(decompress(&z, 10_000).unwrap().len(), 10_000);
    }

    #[test]
    fn content_encodings() {
        assert_eq!(Encoding::parse(None).unwrap(), Encoding::Identity);
        assert_eq!(Encoding::parse(Some("ZSTD")).unwrap(), Encoding::Zstd);
        let e = Encoding::parse(Some("gzip")).unwrap_err();
        assert_eq!(e.status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
    }
}
