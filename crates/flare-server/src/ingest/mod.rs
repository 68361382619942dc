//! Turning a request body into a checked summary: decompression with a bound on the
//! output (a small zstd body can expand to gigabytes), JSON decoding, version and sanity
//! checks, and the compressed form the store keeps.

use axum::http::StatusCode;
use flare_model::summary::SUMMARY_VERSION;
use flare_model::WindowSummary;
use std::io::Read;

mod validate;

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
    validate::summary(&s)?;
    Ok(s)
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
