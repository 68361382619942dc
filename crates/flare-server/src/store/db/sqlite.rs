//! SQLite: one file in WAL mode, its schema version in `user_version`.

use super::{Param, Row, Value};
use crate::store::{StoreError, SCHEMA_VERSION};
use rusqlite::types::{ToSqlOutput, ValueRef};
use rusqlite::Connection;
use std::path::Path;

pub struct Sqlite {
    conn: Connection,
}

impl rusqlite::ToSql for Param<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match *self {
            Param::Null => ValueRef::Null,
            Param::Int(v) => ValueRef::Integer(v),
            Param::Text(v) => ValueRef::Text(v.as_bytes()),
            Param::Bytes(v) => ValueRef::Blob(v),
        }))
    }
}

impl Sqlite {
    /// Opens or creates the database in WAL mode and brings its schema up to date.
    pub fn open(path: &Path) -> Result<Sqlite, StoreError> {
        let open_err = |source| StoreError::Open {
            at: path.display().to_string(),
            source: Box::new(source),
        };
        crate::files::create_private(path)?;
        let conn = Connection::open(path).map_err(open_err)?;
        // WAL lets readers run while a summary is written; NORMAL syncs at checkpoints,
        // which in WAL mode can lose the last commits on power loss but never corrupts,
        // and agents re-send.
        let mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(open_err)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(StoreError::NoWal {
                path: path.to_path_buf(),
                mode,
            });
        }
        conn.execute_batch(
            "PRAGMA synchronous=NORMAL; PRAGMA foreign_keys=ON; PRAGMA busy_timeout=5000;",
        )
        .map_err(open_err)?;
        let found: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .map_err(open_err)?;
        if found > SCHEMA_VERSION {
            return Err(StoreError::SchemaTooNew {
                at: path.display().to_string(),
                found,
                supported: SCHEMA_VERSION,
            });
        }
        conn.execute_batch(&format!(
            "BEGIN; {} PRAGMA user_version={SCHEMA_VERSION}; COMMIT;",
            crate::store::schema()
        ))
        .map_err(open_err)?;
        Ok(Sqlite { conn })
    }

    pub fn execute(&self, sql: &str, params: &[Param]) -> Result<u64, StoreError> {
        let n = self
            .conn
            .prepare_cached(sql)?
            .execute(rusqlite::params_from_iter(params))?;
        Ok(n as u64)
    }

    pub fn query(&self, sql: &str, params: &[Param]) -> Result<Vec<Row>, StoreError> {
        let mut st = self.conn.prepare_cached(sql)?;
        let columns = st.column_count();
        let mut rows = st.query(rusqlite::params_from_iter(params))?;
        let mut out = Vec::new();
        while let Some(r) = rows.next()? {
            let mut values = Vec::with_capacity(columns);
            for i in 0..columns {
                values.push(match r.get_ref(i)? {
                    ValueRef::Null => Value::Null,
                    ValueRef::Integer(v) => Value::Int(v),
                    // The schema has no REAL columns; a hand-edited one reads as truncated.
                    ValueRef::Real(v) => Value::Int(v as i64),
                    ValueRef::Text(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
                    ValueRef::Blob(b) => Value::Bytes(b.to_vec()),
                });
            }
            out.push(Row(values));
        }
        Ok(out)
    }

    pub fn batch(&self, sql: &str) -> Result<(), StoreError> {
        Ok(self.conn.execute_batch(sql)?)
    }
}
