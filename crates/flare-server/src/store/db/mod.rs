//! The one SQL interface the store speaks, over SQLite (the default: one server, one
//! file) or PostgreSQL (shared by several servers).
//!
//! Statements are written once, in the SQL both understand: `?N` placeholders, upserts
//! with `ON CONFLICT`, columns of the table being upserted qualified by its name (bare
//! names are ambiguous in PostgreSQL's `DO UPDATE`), `CAST(... AS BIGINT)` around sums
//! (PostgreSQL sums BIGINTs into NUMERIC). Only the DDL and the placeholders are
//! rewritten for PostgreSQL ([`postgres::ddl`], [`postgres::placeholders`]).
//!
//! Values cross as four kinds ([`Param`], [`Value`]): 64-bit integers, text, bytes, NULL:
//! what the schema holds.

pub(crate) mod postgres;
mod sqlite;

use super::StoreError;
use std::fmt;
use std::path::PathBuf;

/// Where the server keeps its data: `--db FILE` or `--db postgres://...`.
#[derive(Clone, PartialEq, Eq)]
pub enum DbLocation {
    Sqlite(PathBuf),
    /// A libpq-style URL (`postgres://user:password@host:port/database`, or
    /// `postgresql://`); TLS to the database is not built in: use a local socket, a
    /// private network or a tunnel.
    Postgres(String),
}

impl DbLocation {
    /// A `postgres://` or `postgresql://` URL, else a SQLite file's path.
    pub fn parse(s: &str) -> DbLocation {
        let lower = s.to_ascii_lowercase();
        if lower.starts_with("postgres://") || lower.starts_with("postgresql://") {
            DbLocation::Postgres(s.to_string())
        } else {
            DbLocation::Sqlite(PathBuf::from(s))
        }
    }

    /// Several servers may share it (PostgreSQL), so what one server caches may be
    /// changed by another.
    pub fn shared(&self) -> bool {
        matches!(self, DbLocation::Postgres(_))
    }
}

impl From<PathBuf> for DbLocation {
    fn from(path: PathBuf) -> Self {
        DbLocation::Sqlite(path)
    }
}

/// For logs and errors: a PostgreSQL URL's password is never shown.
impl fmt::Display for DbLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DbLocation::Sqlite(p) => write!(f, "{}", p.display()),
            DbLocation::Postgres(url) => f.write_str(&postgres::redact(url)),
        }
    }
}

impl fmt::Debug for DbLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A statement's parameter.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Param<'a> {
    Null,
    Int(i64),
    Text(&'a str),
    Bytes(&'a [u8]),
}

impl From<i64> for Param<'_> {
    fn from(v: i64) -> Self {
        Param::Int(v)
    }
}

impl From<u32> for Param<'_> {
    fn from(v: u32) -> Self {
        Param::Int(v.into())
    }
}

impl<'a> From<&'a str> for Param<'a> {
    fn from(v: &'a str) -> Self {
        Param::Text(v)
    }
}

impl<'a> From<&'a String> for Param<'a> {
    fn from(v: &'a String) -> Self {
        Param::Text(v)
    }
}

impl<'a> From<&'a [u8]> for Param<'a> {
    fn from(v: &'a [u8]) -> Self {
        Param::Bytes(v)
    }
}

impl<'a> From<&'a Vec<u8>> for Param<'a> {
    fn from(v: &'a Vec<u8>) -> Self {
        Param::Bytes(v)
    }
}

impl<'a> From<Option<&'a str>> for Param<'a> {
    fn from(v: Option<&'a str>) -> Self {
        v.map_or(Param::Null, Param::Text)
    }
}

/// `params![a, b]`: a statement's parameters, each converted into a [`Param`].
macro_rules! params {
    ($($p:expr),* $(,)?) => {
        &[$($crate::store::db::Param::from($p)),*][..]
    };
}
pub(crate) use params;

/// A value read back.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Int(i64),
    Text(String),
    Bytes(Vec<u8>),
}

impl Value {
    fn kind(&self) -> &'static str {
        match self {
            Value::Null => "NULL",
            Value::Int(_) => "an integer",
            Value::Text(_) => "text",
            Value::Bytes(_) => "bytes",
        }
    }
}

/// One row of a result.
#[derive(Clone, Debug, PartialEq)]
pub struct Row(Vec<Value>);

impl Row {
    fn at(&mut self, i: usize) -> Value {
        self.0
            .get_mut(i)
            .map(|v| std::mem::replace(v, Value::Null))
            .unwrap_or(Value::Null)
    }

    fn wrong(i: usize, expected: &'static str, found: &Value) -> StoreError {
        StoreError::Column {
            index: i,
            expected,
            found: found.kind(),
        }
    }

    pub fn int(&mut self, i: usize) -> Result<i64, StoreError> {
        match self.at(i) {
            Value::Int(v) => Ok(v),
            other => Err(Self::wrong(i, "an integer", &other)),
        }
    }

    pub fn opt_int(&mut self, i: usize) -> Result<Option<i64>, StoreError> {
        match self.at(i) {
            Value::Int(v) => Ok(Some(v)),
            Value::Null => Ok(None),
            other => Err(Self::wrong(i, "an integer or NULL", &other)),
        }
    }

    /// A non-negative integer (counts, windows, times the store wrote from `u64`s).
    pub fn uint(&mut self, i: usize) -> Result<u64, StoreError> {
        Ok(self.int(i)?.max(0) as u64)
    }

    pub fn text(&mut self, i: usize) -> Result<String, StoreError> {
        match self.at(i) {
            Value::Text(v) => Ok(v),
            other => Err(Self::wrong(i, "text", &other)),
        }
    }

    pub fn bytes(&mut self, i: usize) -> Result<Vec<u8>, StoreError> {
        match self.at(i) {
            Value::Bytes(v) => Ok(v),
            other => Err(Self::wrong(i, "bytes", &other)),
        }
    }
}

/// An open database.
pub enum Db {
    Sqlite(sqlite::Sqlite),
    // Boxed: its client and statement cache are three times SQLite's connection.
    Postgres(Box<postgres::Postgres>),
}

impl Db {
    /// Opens (creating a SQLite file if missing) and brings the schema up to date.
    pub fn open(at: &DbLocation) -> Result<Db, StoreError> {
        Ok(match at {
            DbLocation::Sqlite(path) => Db::Sqlite(sqlite::Sqlite::open(path)?),
            DbLocation::Postgres(url) => Db::Postgres(Box::new(postgres::Postgres::open(url)?)),
        })
    }

    /// Several servers may write it: caches must be checked against it.
    pub fn shared(&self) -> bool {
        matches!(self, Db::Postgres(_))
    }

    /// Runs a statement; returns the rows it changed.
    pub fn execute(&self, sql: &str, params: &[Param]) -> Result<u64, StoreError> {
        match self {
            Db::Sqlite(db) => db.execute(sql, params),
            Db::Postgres(db) => db.execute(sql, params),
        }
    }

    pub fn query(&self, sql: &str, params: &[Param]) -> Result<Vec<Row>, StoreError> {
        match self {
            Db::Sqlite(db) => db.query(sql, params),
            Db::Postgres(db) => db.query(sql, params),
        }
    }

    /// The first row, if any.
    pub fn query_opt(&self, sql: &str, params: &[Param]) -> Result<Option<Row>, StoreError> {
        Ok(self.query(sql, params)?.into_iter().next())
    }

    /// The first row of a query that always returns one (an aggregate).
    pub fn query_one(&self, sql: &str, params: &[Param]) -> Result<Row, StoreError> {
        self.query_opt(sql, params)?
            .ok_or_else(|| StoreError::NoRow(sql.split_whitespace().collect::<Vec<_>>().join(" ")))
    }

    /// Runs `f` in a transaction that holds the database's write lock from its start
    /// (SQLite's `BEGIN IMMEDIATE`; PostgreSQL locks rows as it writes them): committed
    /// when `f` succeeds, rolled back when it fails.
    pub fn transaction<T>(
        &self,
        f: impl FnOnce(&Db) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        self.batch(match self {
            Db::Sqlite(_) => "BEGIN IMMEDIATE",
            Db::Postgres(_) => "BEGIN",
        })?;
        match f(self) {
            Ok(v) => {
                self.batch("COMMIT")?;
                Ok(v)
            }
            Err(e) => {
                // The error that made it roll back is the one to report.
                let _ = self.batch("ROLLBACK");
                Err(e)
            }
        }
    }

    /// Statements without parameters or results, separated by `;`.
    pub fn batch(&self, sql: &str) -> Result<(), StoreError> {
        match self {
            Db::Sqlite(db) => db.batch(sql),
            Db::Postgres(db) => db.batch(sql),
        }
    }

    /// Holds the job's lock, across servers sharing the database, until
    /// [`Db::unlock_job`]: one server at a time ingests a job's summaries, so its
    /// analysis sees every summary stored before it. A server that dies lets go with its
    /// connection. SQLite has one server (the file is locked for it): nothing to do.
    pub fn lock_job(&self, job_id: &str) -> Result<(), StoreError> {
        match self {
            Db::Sqlite(_) => Ok(()),
            Db::Postgres(db) => db.advisory_lock(job_key(job_id)),
        }
    }

    pub fn unlock_job(&self, job_id: &str) -> Result<(), StoreError> {
        match self {
            Db::Sqlite(_) => Ok(()),
            Db::Postgres(db) => db.advisory_unlock(job_key(job_id)),
        }
    }
}

/// A job's advisory-lock key: 64 bits of FNV-1a over its id, the same in every server.
fn job_key(job_id: &str) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in job_id.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_location_is_postgres_only_by_its_scheme() {
        for (s, pg) in [
            ("postgres://u:p@h/db", true),
            ("POSTGRESQL://h/db", true),
            ("flare-server.db", false),
            ("/var/lib/postgres/flare.db", false),
            ("postgres.db", false),
        ] {
            assert_eq!(DbLocation::parse(s).shared(), pg, "{s}");
        }
    }

    #[test]
    fn rows_say_which_column_had_what() {
        let mut row = Row(vec![Value::Int(3), Value::Text("a".into()), Value::Null]);
        assert_eq!(row.int(0).unwrap(), 3);
        assert_eq!(row.opt_int(2).unwrap(), None);
        let err = row.int(1).unwrap_err().to_string();
        assert!(err.contains("column 1") && err.contains("text"), "{err}");
    }

    #[test]
    fn job_keys_are_stable_across_processes() {
        // FNV-1a 64 of "job-7", fixed: servers of different builds must agree.
        assert_eq!(job_key(""), 0xcbf2_9ce4_8422_2325_u64 as i64);
        assert_ne!(job_key("job-7"), job_key("job-8"));
    }
}
