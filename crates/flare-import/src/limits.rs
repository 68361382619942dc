//! Bounds on what a read may cost, in one place.
//!
//! Every reader goes through here: a path is checked to be a regular file (or a
//! directory, where one is expected) before it is opened, so a FIFO, a character device
//! such as `/dev/zero` or a socket is refused instead of hanging or filling memory; the
//! bytes read from one file and the bytes inflated from one gzip or LZ4 stream are capped;
//! and a directory yields at most so many files.
//!
//! The defaults are generous enough for real traces (multi-GB Kineto files exist; the
//! native trace of a 10,240-rank job is a few hundred MB) but finite. `flare diagnose`
//! raises them with `--max-input-bytes`, `--max-inflated-bytes` and `--max-files`.

use std::io::Read;
use std::path::Path;

/// The default cap on the bytes read from one file: 8 GiB.
pub const DEFAULT_MAX_INPUT_BYTES: u64 = 8 << 30;
/// The default cap on the bytes inflated from one gzip or LZ4 stream: 8 GiB.
pub const DEFAULT_MAX_INFLATED_BYTES: u64 = 8 << 30;
/// The default cap on the files read from one directory: 131,072 (a file per rank of a
/// 100,000-rank job, with room to spare).
pub const DEFAULT_MAX_FILES: usize = 1 << 17;

/// How much one read may take. See the module docs for the defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Bytes read from any one file, as stored (compressed or not).
    pub max_input_bytes: u64,
    /// Bytes inflated from any one gzip or LZ4 stream.
    pub max_inflated_bytes: u64,
    /// Files read from one directory (subdirectories included, where a reader descends).
    pub max_files: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_input_bytes: DEFAULT_MAX_INPUT_BYTES,
            max_inflated_bytes: DEFAULT_MAX_INFLATED_BYTES,
            max_files: DEFAULT_MAX_FILES,
        }
    }
}

/// Why an input was refused before or while it was read.
#[derive(Debug, thiserror::Error)]
pub enum LimitError {
    #[error("{path}: no such file or directory")]
    NotFound {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: cannot read: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: is {what}, not a regular file or directory: refusing to read it")]
    NotAFile { path: String, what: &'static str },
    #[error("{path}: is a directory: expected a file")]
    IsADirectory { path: String },
    #[error("{path}: {size} bytes, more than the limit of {limit} bytes read from one file (max_input_bytes; raise it with `flare diagnose --max-input-bytes`)")]
    TooLarge { path: String, size: u64, limit: u64 },
    #[error("{path}: more than {limit} bytes, the limit read from one file (max_input_bytes; raise it with `flare diagnose --max-input-bytes`)")]
    ReadPastLimit { path: String, limit: u64 },
    #[error("{path}: the {codec} stream inflates to more than {limit} bytes, the limit on decompressed data from one file (max_inflated_bytes; raise it with `flare diagnose --max-inflated-bytes`)")]
    Inflated {
        path: String,
        codec: &'static str,
        limit: u64,
    },
    #[error("{path}: more than {limit} files to read, the limit for one directory (max_files; raise it with `flare diagnose --max-files`)")]
    TooManyFiles { path: String, limit: usize },
}

impl LimitError {
    /// The path and the I/O error, when the input could not be read at all (missing,
    /// unreadable) rather than refused: importers report those as their own I/O errors.
    pub fn into_io(self) -> Result<(String, std::io::Error), LimitError> {
        match self {
            LimitError::NotFound { path, source } | LimitError::Io { path, source } => {
                Ok((path, source))
            }
            e => Err(e),
        }
    }
}

/// `From<LimitError>` for an importer's error type: unreadable inputs become its `Io`
/// variant (field `$field` names the file), refusals its `Limit` variant.
macro_rules! limit_error_into {
    ($ty:ident, $field:ident) => {
        impl From<$crate::limits::LimitError> for $ty {
            fn from(e: $crate::limits::LimitError) -> Self {
                match e.into_io() {
                    Ok((path, source)) => Self::Io {
                        $field: path,
                        source,
                    },
                    Err(e) => Self::Limit(e),
                }
            }
        }
    };
}
pub(crate) use limit_error_into;

/// What a path is, in words, when it is neither a regular file nor a directory.
fn special_kind(ft: &std::fs::FileType) -> &'static str {
    #[cfg(unix)]
    {
        use std::os::unix::fs::FileTypeExt;
        if ft.is_fifo() {
            return "a FIFO (named pipe)";
        }
        if ft.is_char_device() {
            return "a character device";
        }
        if ft.is_block_device() {
            return "a block device";
        }
        if ft.is_socket() {
            return "a socket";
        }
    }
    let _ = ft;
    "a special file"
}

/// What an input path is, once checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    File {
        /// Its size, as `stat` gives it.
        len: u64,
    },
    Directory,
}

/// Checks that `path` exists and is a regular file or a directory (symbolic links
/// followed), without opening it.
pub fn check_input(path: &Path) -> Result<InputKind, LimitError> {
    let name = || path.display().to_string();
    let md = std::fs::metadata(path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            LimitError::NotFound {
                path: name(),
                source,
            }
        } else {
            LimitError::Io {
                path: name(),
                source,
            }
        }
    })?;
    let ft = md.file_type();
    if ft.is_dir() {
        Ok(InputKind::Directory)
    } else if ft.is_file() {
        Ok(InputKind::File { len: md.len() })
    } else {
        Err(LimitError::NotAFile {
            path: name(),
            what: special_kind(&ft),
        })
    }
}

/// Checks that `path` is a regular file no larger than the limit; returns its size.
pub fn check_file(path: &Path, limits: &Limits) -> Result<u64, LimitError> {
    match check_input(path)? {
        InputKind::Directory => Err(LimitError::IsADirectory {
            path: path.display().to_string(),
        }),
        InputKind::File { len } if len > limits.max_input_bytes => Err(LimitError::TooLarge {
            path: path.display().to_string(),
            size: len,
            limit: limits.max_input_bytes,
        }),
        InputKind::File { len } => Ok(len),
    }
}

/// Opens a regular file for reading, after [`check_file`].
pub fn open_file(path: &Path, limits: &Limits) -> Result<(std::fs::File, u64), LimitError> {
    let len = check_file(path, limits)?;
    let f = std::fs::File::open(path).map_err(|source| LimitError::Io {
        path: path.display().to_string(),
        source,
    })?;
    Ok((f, len))
}

/// Reads a whole regular file, refusing special files and files over
/// [`Limits::max_input_bytes`] (also when a file grows while it is read).
pub fn read_file(path: &Path, limits: &Limits) -> Result<Vec<u8>, LimitError> {
    let (f, len) = open_file(path, limits)?;
    let mut out = Vec::with_capacity(len.min(limits.max_input_bytes) as usize);
    f.take(limits.max_input_bytes.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|source| LimitError::Io {
            path: path.display().to_string(),
            source,
        })?;
    if out.len() as u64 > limits.max_input_bytes {
        // The file grew while it was read.
        return Err(LimitError::ReadPastLimit {
            path: path.display().to_string(),
            limit: limits.max_input_bytes,
        });
    }
    Ok(out)
}

/// Reads up to `n` bytes from the start of a regular file (for format sniffing); special
/// files and unreadable files give `None`.
pub fn read_head(path: &Path, n: usize) -> Option<Vec<u8>> {
    if !matches!(check_input(path), Ok(InputKind::File { .. })) {
        return None;
    }
    let f = std::fs::File::open(path).ok()?;
    let mut head = Vec::with_capacity(n);
    f.take(n as u64).read_to_end(&mut head).ok()?;
    Some(head)
}

/// Why a gzip stream could not be inflated.
#[derive(Debug)]
pub enum InflateError {
    /// The stream is corrupt or truncated.
    Corrupt(std::io::Error),
    /// It inflates to more than [`Limits::max_inflated_bytes`].
    Limit(LimitError),
}

/// Inflates a gzip stream (several members allowed) of at most
/// [`Limits::max_inflated_bytes`]; `path` names it in the error.
pub fn gunzip(path: &str, data: &[u8], limits: &Limits) -> Result<Vec<u8>, InflateError> {
    let cap = limits.max_inflated_bytes;
    let mut out =
        Vec::with_capacity((data.len() as u64).saturating_mul(8).min(1 << 28).min(cap) as usize);
    flate2::read::MultiGzDecoder::new(data)
        .take(cap.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(InflateError::Corrupt)?;
    if out.len() as u64 > cap {
        return Err(InflateError::Limit(LimitError::Inflated {
            path: path.to_string(),
            codec: "gzip",
            limit: cap,
        }));
    }
    Ok(out)
}

/// Counts files listed from a directory against [`Limits::max_files`].
pub fn check_file_count(dir: &Path, count: usize, limits: &Limits) -> Result<(), LimitError> {
    if count > limits.max_files {
        return Err(LimitError::TooManyFiles {
            path: dir.display().to_string(),
            limit: limits.max_files,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gunzip_stops_at_the_limit() {
        use std::io::Write;
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(&vec![0u8; 1 << 20]).unwrap();
        let gz = enc.finish().unwrap();
        let small = Limits {
            max_inflated_bytes: 1000,
            ..Limits::default()
        };
        let Err(InflateError::Limit(e)) = gunzip("z.json.gz", &gz, &small) else {
            panic!("expected the inflate limit");
        };
        assert!(
            e.to_string().contains("z.json.gz") && e.to_string().contains("1000 bytes"),
            "{e}"
        );
        assert_eq!(gunzip("z", &gz, &Limits::default()).unwrap().len(), 1 << 20);
    }
}
