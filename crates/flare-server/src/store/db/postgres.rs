//! PostgreSQL, shared by any number of servers: the same tables as SQLite (DDL rewritten
//! by [`ddl`]), the schema version in `flare_schema`, created under an advisory lock so
//! servers starting together do not race.

use super::{Param, Row, Value};
use crate::store::{StoreError, SCHEMA_VERSION};
use postgres::types::{IsNull, ToSql, Type};
use postgres::{Client, NoTls, Statement};
use std::cell::RefCell;
use std::collections::HashMap;
use std::mem::ManuallyDrop;

/// The advisory-lock key that serialises schema changes (any constant no job key is
/// likely to hit; job keys are hashes).
const SCHEMA_LOCK: i64 = 0x466c_6172_6553_6368; // "FlareSch"

pub struct Postgres {
    // `postgres::Client` needs `&mut` for every call; the store's reads take `&self`
    // (the server serialises them behind one mutex). Dropped by hand: see `Drop`.
    client: ManuallyDrop<RefCell<Client>>,
    statements: RefCell<HashMap<String, Statement>>,
}

impl ToSql for Param<'_> {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut postgres::types::private::BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match *self {
            Param::Null => Ok(IsNull::Yes),
            Param::Int(v) => match *ty {
                Type::INT8 => v.to_sql(ty, out),
                Type::INT4 => i32::try_from(v)?.to_sql(ty, out),
                Type::INT2 => i16::try_from(v)?.to_sql(ty, out),
                _ => Err(format!("an integer given for a {ty} parameter").into()),
            },
            Param::Text(v) => v.to_sql(ty, out),
            Param::Bytes(v) => v.to_sql(ty, out),
        }
    }

    // Each variant checks its own type in `to_sql`.
    fn accepts(_: &Type) -> bool {
        true
    }

    postgres::types::to_sql_checked!();
}

impl Postgres {
    pub fn open(url: &str) -> Result<Postgres, StoreError> {
        let open_err = |source: postgres::Error| StoreError::Open {
            at: redact(url),
            source: Box::new(source),
        };
        let mut client = Client::connect(url, NoTls).map_err(open_err)?;
        let mut tx = client.transaction().map_err(open_err)?;
        tx.execute("SELECT pg_advisory_xact_lock($1)", &[&SCHEMA_LOCK])
            .map_err(open_err)?;
        tx.batch_execute("CREATE TABLE IF NOT EXISTS flare_schema (version BIGINT NOT NULL)")
            .map_err(open_err)?;
        let found: Option<i64> = tx
            .query_opt("SELECT max(version) FROM flare_schema", &[])
            .map_err(open_err)?
            .and_then(|r| r.get(0));
        if let Some(found) = found.filter(|&f| f > SCHEMA_VERSION) {
            return Err(StoreError::SchemaTooNew {
                at: redact(url),
                found,
                supported: SCHEMA_VERSION,
            });
        }
        tx.batch_execute(&ddl(&crate::store::schema()))
            .map_err(open_err)?;
        if found != Some(SCHEMA_VERSION) {
            tx.execute("DELETE FROM flare_schema", &[])
                .map_err(open_err)?;
            tx.execute(
                "INSERT INTO flare_schema (version) VALUES ($1)",
                &[&SCHEMA_VERSION],
            )
            .map_err(open_err)?;
        }
        tx.commit().map_err(open_err)?;
        Ok(Postgres {
            client: ManuallyDrop::new(RefCell::new(client)),
            statements: RefCell::new(HashMap::new()),
        })
    }

    fn statement(&self, sql: &str) -> Result<Statement, StoreError> {
        if let Some(st) = self.statements.borrow().get(sql) {
            return Ok(st.clone());
        }
        let st = self.client.borrow_mut().prepare(&placeholders(sql))?;
        self.statements
            .borrow_mut()
            .insert(sql.to_string(), st.clone());
        Ok(st)
    }

    fn args<'p>(params: &'p [Param]) -> Vec<&'p (dyn ToSql + Sync)> {
        params.iter().map(|p| p as &(dyn ToSql + Sync)).collect()
    }

    pub fn execute(&self, sql: &str, params: &[Param]) -> Result<u64, StoreError> {
        let st = self.statement(sql)?;
        Ok(self.client.borrow_mut().execute(&st, &Self::args(params))?)
    }

    pub fn query(&self, sql: &str, params: &[Param]) -> Result<Vec<Row>, StoreError> {
        let st = self.statement(sql)?;
        let rows = self.client.borrow_mut().query(&st, &Self::args(params))?;
        rows.iter()
            .map(|r| {
                (0..r.len())
                    .map(|i| value(r, i))
                    .collect::<Result<Vec<_>, _>>()
                    .map(Row)
            })
            .collect()
    }

    pub fn batch(&self, sql: &str) -> Result<(), StoreError> {
        Ok(self.client.borrow_mut().batch_execute(sql)?)
    }

    pub fn advisory_lock(&self, key: i64) -> Result<(), StoreError> {
        self.query("SELECT pg_advisory_lock(?1)", &[Param::Int(key)])
            .map(drop)
    }

    pub fn advisory_unlock(&self, key: i64) -> Result<(), StoreError> {
        self.query("SELECT pg_advisory_unlock(?1)", &[Param::Int(key)])
            .map(drop)
    }
}

/// The client blocks on its own runtime to close the connection, which panics on a thread
/// that drives async tasks (a server's store is dropped there at shutdown): it is closed
/// on a thread of its own.
impl Drop for Postgres {
    fn drop(&mut self) {
        // SAFETY: `client` is not used after this; `drop` runs once.
        let client = unsafe { ManuallyDrop::take(&mut self.client) };
        if tokio::runtime::Handle::try_current().is_ok() {
            let _ = std::thread::spawn(move || drop(client)).join();
        } else {
            drop(client);
        }
    }
}

/// One column of a row, by its type; the schema's types only.
fn value(r: &postgres::Row, i: usize) -> Result<Value, StoreError> {
    let ty = r.columns()[i].type_().clone();
    let v = match ty {
        Type::INT8 => r.try_get::<_, Option<i64>>(i)?.map(Value::Int),
        Type::INT4 => r
            .try_get::<_, Option<i32>>(i)?
            .map(|v| Value::Int(v.into())),
        Type::INT2 => r
            .try_get::<_, Option<i16>>(i)?
            .map(|v| Value::Int(v.into())),
        Type::BOOL => r
            .try_get::<_, Option<bool>>(i)?
            .map(|v| Value::Int(v.into())),
        Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME => {
            r.try_get::<_, Option<String>>(i)?.map(Value::Text)
        }
        Type::BYTEA => r.try_get::<_, Option<Vec<u8>>>(i)?.map(Value::Bytes),
        // `pg_advisory_lock` returns void.
        Type::VOID => None,
        other => {
            return Err(StoreError::ColumnType {
                index: i,
                found: other.to_string(),
            })
        }
    };
    Ok(v.unwrap_or(Value::Null))
}

/// `?N` placeholders as PostgreSQL's `$N` (the store's SQL has no `?` in string literals).
pub(crate) fn placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '?' && chars.peek().is_some_and(|d| d.is_ascii_digit()) {
            out.push('$');
        } else {
            out.push(c);
        }
    }
    out
}

/// The schema's SQLite DDL as PostgreSQL's: 64-bit `INTEGER`s, `BYTEA` for `BLOB`, a
/// `BIGSERIAL` for the one auto-increment key, no `WITHOUT ROWID`.
pub(crate) fn ddl(sqlite: &str) -> String {
    sqlite
        .replace("INTEGER PRIMARY KEY AUTOINCREMENT", "BIGSERIAL PRIMARY KEY")
        .replace(" INTEGER ", " BIGINT ")
        .replace(" BLOB ", " BYTEA ")
        .replace(") WITHOUT ROWID;", ");")
}

/// The URL with its password replaced by `***`, for logs and errors.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, tail) = match rest.find(['/', '?']) {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let authority = match authority.rsplit_once('@') {
        Some((user_info, host)) => match user_info.split_once(':') {
            Some((user, _)) => format!("{user}:***@{host}"),
            None => authority.to_string(),
        },
        None => authority.to_string(),
    };
    // A password given as a query parameter is hidden too.
    let tail = match tail.split_once('?') {
        Some((path, query)) => {
            let query: Vec<String> = query
                .split('&')
                .map(|kv| match kv.split_once('=') {
                    Some((k, _)) if k.eq_ignore_ascii_case("password") => format!("{k}=***"),
                    _ => kv.to_string(),
                })
                .collect();
            format!("{path}?{}", query.join("&"))
        }
        None => tail.to_string(),
    };
    format!("{scheme}://{authority}{tail}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_become_dollars_and_nothing_else_changes() {
        assert_eq!(
            placeholders("SELECT a FROM t WHERE x = ?1 AND y = ?12 OR z IS NULL"),
            "SELECT a FROM t WHERE x = $1 AND y = $12 OR z IS NULL"
        );
        assert_eq!(placeholders("a ? b"), "a ? b");
    }

    #[test]
    fn the_ddl_is_rewritten_for_postgres() {
        let pg = ddl(&crate::store::schema());
        for gone in ["WITHOUT ROWID", " BLOB ", " INTEGER ", "AUTOINCREMENT"] {
            assert!(!pg.contains(gone), "{gone} left in {pg}");
        }
        assert!(pg.contains("body             BYTEA NOT NULL"), "{pg}");
        assert!(pg.contains("id      BIGSERIAL PRIMARY KEY"), "{pg}");
    }

    #[test]
    fn passwords_never_show() {
        for (url, shown) in [
            (
                "postgres://flare:s3cret@db:5432/flare",
                "postgres://flare:***@db:5432/flare",
            ),
            ("postgres://flare@db/flare", "postgres://flare@db/flare"),
            (
                "postgresql://db/flare?user=a&password=s3cret&sslmode=disable",
                "postgresql://db/flare?user=a&password=***&sslmode=disable",
            ),
            ("postgres://a:b:c@h", "postgres://a:***@h"),
        ] {
            assert_eq!(redact(url), shown);
        }
    }
}
