//! The database's files on disk: created readable by their owner only, and held by one
//! server at a time.
//!
//! SQLite lets two processes write one file, but each server keeps state beside the file
//! (caches of decoded windows, alert continuity): a second `flare serve` on the same file
//! would read the other's summaries as missing ranks, which looks like a hang. So a server
//! takes an exclusive lock on `<db>.lock` for as long as it runs and refuses to start
//! without it. The lock is the kernel's (`flock`): it goes away with the process, even on
//! `kill -9`, so a crashed server never blocks its successor.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, SeekFrom, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Why a database file could not be prepared or claimed.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("database {path} is in use by another flare server ({holder}); stop it, or give this one another --db")]
    InUse { path: PathBuf, holder: String },
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// Creates `path` empty with mode 0600 when it does not exist, so that neither the
/// database nor the write-ahead log and shared-memory files SQLite creates beside it
/// (with the database's mode) are readable by other users. An existing file keeps its
/// mode: it is the operator's.
pub fn create_private(path: &Path) -> Result<(), FileError> {
    let mut opts = OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    match opts.open(path) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(source) => Err(FileError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// The exclusive claim of one server on a database, released when dropped (or when the
/// process dies).
#[derive(Debug)]
pub struct ServerLock {
    _file: File,
}

impl ServerLock {
    /// Claims `db` for this process, recording who holds it (pid, address) for the
    /// error a second server gets.
    pub fn claim(db: &Path, listen: SocketAddr) -> Result<ServerLock, FileError> {
        let path = lock_path(db);
        let io = |source| FileError::Io {
            path: path.clone(),
            source,
        };
        create_private(&path)?;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = file.read_to_string(&mut holder);
                let holder = holder.trim();
                return Err(FileError::InUse {
                    path: db.to_path_buf(),
                    holder: if holder.is_empty() {
                        "it has not written its pid yet".into()
                    } else {
                        holder.to_string()
                    },
                });
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
        file.set_len(0).map_err(io)?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        writeln!(file, "pid {}, listening on {listen}", std::process::id()).map_err(io)?;
        Ok(ServerLock { _file: file })
    }
}

fn lock_path(db: &Path) -> PathBuf {
    let mut name = db.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_claim_is_refused_and_names_the_holder_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("f.db");
        let addr: SocketAddr = "127.0.0.1:7470".parse().unwrap();
        let first = ServerLock::claim(&db, addr).unwrap();
        let err = ServerLock::claim(&db, addr).unwrap_err().to_string();
        assert!(err.contains("in use by another flare server"), "{err}");
        assert!(
            err.contains(&format!("pid {}", std::process::id())),
            "{err}"
        );
        drop(first);
        ServerLock::claim(&db, addr).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn new_files_are_private_and_existing_ones_keep_their_mode() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let fresh = dir.path().join("new.db");
        create_private(&fresh).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&fresh), 0o600);
        let old = dir.path().join("old.db");
        std::fs::write(&old, b"").unwrap();
        std::fs::set_permissions(&old, std::fs::Permissions::from_mode(0o640)).unwrap();
        create_private(&old).unwrap();
        assert_eq!(mode(&old), 0o640);
    }
}
