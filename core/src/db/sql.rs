//! One way to run a query on either backend: values, rows and a connection
//! that speak both SQLite (rusqlite) and PostgreSQL (postgres).
//!
//! The stores write each query once, in the SQL both databases accept, with
//! `?N` placeholders (rewritten to `$N` for PostgreSQL). Integers are `i64`
//! and flags 0/1 in both schemas, so a value converts the same way on both.

use std::sync::MutexGuard;

use postgres::types::{FromSql, IsNull, ToSql, Type, to_sql_checked};

use super::error::DbError;
use super::postgres::{Manager, off_runtime};
use crate::error::{CoreError, Result};

/// A value passed to or read from a query.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// Any integer or flag.
    Int(i64),
    /// A floating point number.
    Real(f64),
    /// Text.
    Text(String),
    /// Bytes.
    Blob(Vec<u8>),
}

/// What can be passed as a query argument.
pub trait Arg {
    /// The value sent to the database.
    fn value(&self) -> Value;
}

macro_rules! int_arg {
    ($($t:ty),*) => {$(
        impl Arg for $t {
            fn value(&self) -> Value {
                // Counts and sizes beyond i64 do not occur; saturate rather than wrap.
                Value::Int(i64::try_from(*self).unwrap_or(i64::MAX))
            }
        }
    )*};
}
int_arg!(i64, i32, u32, u64, usize, u16, u8);

impl Arg for bool {
    fn value(&self) -> Value {
        Value::Int(i64::from(*self))
    }
}
impl Arg for f64 {
    fn value(&self) -> Value {
        Value::Real(*self)
    }
}
impl Arg for str {
    fn value(&self) -> Value {
        Value::Text(self.to_owned())
    }
}
impl Arg for String {
    fn value(&self) -> Value {
        Value::Text(self.clone())
    }
}
/// Ids are stored as their text.
macro_rules! text_id_columns {
    ($($id:ty),*) => {$(
        impl Arg for $id {
            fn value(&self) -> Value {
                Value::Text(self.as_str().to_string())
            }
        }
        impl FromValue for $id {
            fn from_value(value: Value) -> std::result::Result<Self, String> {
                String::from_value(value).map(Self::from)
            }
        }
    )*};
}
text_id_columns!(gatehouse_model::ExecutionId, gatehouse_model::CredentialId, gatehouse_model::GrantId);
/// Stored as its number.
impl Arg for gatehouse_model::UserId {
    fn value(&self) -> Value {
        Value::Int(self.get())
    }
}
impl FromValue for gatehouse_model::UserId {
    fn from_value(value: Value) -> std::result::Result<Self, String> {
        i64::from_value(value).map(Self::from)
    }
}
impl Arg for [u8] {
    fn value(&self) -> Value {
        Value::Blob(self.to_vec())
    }
}
impl Arg for Vec<u8> {
    fn value(&self) -> Value {
        Value::Blob(self.clone())
    }
}
impl Arg for Value {
    fn value(&self) -> Value {
        self.clone()
    }
}
impl<T: Arg + ?Sized> Arg for &T {
    fn value(&self) -> Value {
        (**self).value()
    }
}
impl<T: Arg> Arg for Option<T> {
    fn value(&self) -> Value {
        self.as_ref().map_or(Value::Null, Arg::value)
    }
}

/// Query arguments: `args![id, now, owner]`.
#[macro_export]
macro_rules! args {
    () => { &[] as &[$crate::db::Value] };
    ($($x:expr),+ $(,)?) => { &[$($crate::db::Arg::value(&$x)),+] as &[$crate::db::Value] };
}

/// What a column can be read as.
pub trait FromValue: Sized {
    /// Converts, or says why not.
    fn from_value(value: Value) -> std::result::Result<Self, String>;
}

impl FromValue for Value {
    fn from_value(value: Value) -> std::result::Result<Self, String> {
        Ok(value)
    }
}
impl FromValue for i64 {
    fn from_value(value: Value) -> std::result::Result<Self, String> {
        match value {
            Value::Int(i) => Ok(i),
            other => Err(format!("expected an integer, found {other:?}")),
        }
    }
}
macro_rules! int_from {
    ($($t:ty),*) => {$(
        impl FromValue for $t {
            fn from_value(value: Value) -> std::result::Result<Self, String> {
                let i = i64::from_value(value)?;
                <$t>::try_from(i).map_err(|_| format!("{i} is out of range for {}", stringify!($t)))
            }
        }
    )*};
}
int_from!(i32, u32, u64, usize);

impl FromValue for bool {
    fn from_value(value: Value) -> std::result::Result<Self, String> {
        Ok(i64::from_value(value)? != 0)
    }
}
impl FromValue for f64 {
    fn from_value(value: Value) -> std::result::Result<Self, String> {
        match value {
            Value::Real(f) => Ok(f),
            #[allow(clippy::cast_precision_loss)]
            Value::Int(i) => Ok(i as f64),
            other => Err(format!("expected a number, found {other:?}")),
        }
    }
}
impl FromValue for String {
    fn from_value(value: Value) -> std::result::Result<Self, String> {
        match value {
            Value::Text(s) => Ok(s),
            other => Err(format!("expected text, found {other:?}")),
        }
    }
}
impl FromValue for Vec<u8> {
    fn from_value(value: Value) -> std::result::Result<Self, String> {
        match value {
            Value::Blob(b) => Ok(b),
            Value::Text(s) => Ok(s.into_bytes()),
            other => Err(format!("expected bytes, found {other:?}")),
        }
    }
}
impl<T: FromValue> FromValue for Option<T> {
    fn from_value(value: Value) -> std::result::Result<Self, String> {
        match value {
            Value::Null => Ok(None),
            other => T::from_value(other).map(Some),
        }
    }
}

/// One row of a result.
pub enum Row<'a> {
    /// A SQLite row.
    Sqlite(&'a rusqlite::Row<'a>),
    /// A PostgreSQL row.
    Postgres(&'a postgres::Row),
}

impl Row<'_> {
    /// Column `index` (from 0) as `T`.
    pub fn get<T: FromValue>(&self, index: usize) -> Result<T> {
        let value = match self {
            Row::Sqlite(row) => match row.get::<_, rusqlite::types::Value>(index)? {
                rusqlite::types::Value::Null => Value::Null,
                rusqlite::types::Value::Integer(i) => Value::Int(i),
                rusqlite::types::Value::Real(f) => Value::Real(f),
                rusqlite::types::Value::Text(s) => Value::Text(s),
                rusqlite::types::Value::Blob(b) => Value::Blob(b),
            },
            Row::Postgres(row) => row.try_get::<_, Value>(index)?,
        };
        T::from_value(value).map_err(|reason| CoreError::Db(DbError::Type { column: index, reason }))
    }
}

/// Which database a [`Conn`] speaks to, for the few statements that differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// Embedded SQLite.
    Sqlite,
    /// A PostgreSQL server.
    Postgres,
}

/// A connection borrowed for one unit of work: the SQLite connection under
/// its lock, or a PostgreSQL connection from the pool. (Short-lived on the
/// stack, one at a time: the size difference of the variants does not matter.)
#[allow(clippy::large_enum_variant)]
pub enum Conn<'a> {
    /// SQLite, locked for as long as this lives.
    Sqlite(MutexGuard<'a, rusqlite::Connection>),
    /// PostgreSQL, back to the pool when dropped.
    Postgres(r2d2::PooledConnection<Manager>),
}

impl Conn<'_> {
    /// Which database this is.
    pub fn backend(&self) -> Backend {
        match self {
            Conn::Sqlite(_) => Backend::Sqlite,
            Conn::Postgres(_) => Backend::Postgres,
        }
    }

    /// Runs a statement; returns how many rows it changed.
    pub fn execute(&mut self, sql: &str, args: &[Value]) -> Result<usize> {
        match self {
            Conn::Sqlite(conn) => Ok(conn.prepare_cached(sql)?.execute(rusqlite::params_from_iter(args))?),
            Conn::Postgres(conn) => off_runtime(|| {
                let statement = conn.statement(sql)?;
                let n = conn.client().execute(&statement, &pg_args(args))?;
                Ok(usize::try_from(n).unwrap_or(usize::MAX))
            }),
        }
    }

    /// Runs statements without arguments or results (DDL, `BEGIN`).
    pub fn batch(&mut self, sql: &str) -> Result<()> {
        match self {
            Conn::Sqlite(conn) => conn.execute_batch(sql)?,
            Conn::Postgres(conn) => off_runtime(|| Ok(conn.client().batch_execute(sql)?))?,
        }
        Ok(())
    }

    /// Every row of a query, each mapped by `f`.
    pub fn query<T>(&mut self, sql: &str, args: &[Value], mut f: impl FnMut(&Row<'_>) -> Result<T>) -> Result<Vec<T>> {
        match self {
            Conn::Sqlite(conn) => {
                let mut statement = conn.prepare_cached(sql)?;
                let mut rows = statement.query(rusqlite::params_from_iter(args))?;
                let mut out = Vec::new();
                while let Some(row) = rows.next()? {
                    out.push(f(&Row::Sqlite(row))?);
                }
                Ok(out)
            }
            Conn::Postgres(conn) => {
                let rows = off_runtime(|| {
                    let statement = conn.statement(sql)?;
                    Ok(conn.client().query(&statement, &pg_args(args))?)
                })?;
                rows.iter().map(|row| f(&Row::Postgres(row))).collect()
            }
        }
    }

    /// The first row of a query, if there is one.
    pub fn query_opt<T>(
        &mut self,
        sql: &str,
        args: &[Value],
        f: impl FnOnce(&Row<'_>) -> Result<T>,
    ) -> Result<Option<T>> {
        match self {
            Conn::Sqlite(conn) => {
                let mut statement = conn.prepare_cached(sql)?;
                let mut rows = statement.query(rusqlite::params_from_iter(args))?;
                match rows.next()? {
                    Some(row) => f(&Row::Sqlite(row)).map(Some),
                    None => Ok(None),
                }
            }
            Conn::Postgres(conn) => {
                let row = off_runtime(|| {
                    let statement = conn.statement(sql)?;
                    Ok(conn.client().query_opt(&statement, &pg_args(args))?)
                })?;
                match row {
                    Some(row) => f(&Row::Postgres(&row)).map(Some),
                    None => Ok(None),
                }
            }
        }
    }

    /// The first row of a query, which must exist (`COUNT(*)`, `EXISTS`).
    pub fn query_one<T>(&mut self, sql: &str, args: &[Value], f: impl FnOnce(&Row<'_>) -> Result<T>) -> Result<T> {
        self.query_opt(sql, args, f)?.ok_or(CoreError::Db(DbError::NoRow))
    }

    /// Runs `f` in a transaction: committed if it returns `Ok`, rolled back
    /// otherwise. Transactions take the write lock at once, so a
    /// read-then-write inside cannot be overtaken (the last admin, a
    /// thread's re-issue): SQLite's `IMMEDIATE`; on PostgreSQL, whose
    /// default isolation would let two such transactions interleave, a
    /// transaction-scoped advisory lock per schema does the same.
    pub fn transaction<T>(&mut self, f: impl FnOnce(&mut Self) -> Result<T>) -> Result<T> {
        self.batch(match self.backend() {
            Backend::Sqlite => "BEGIN IMMEDIATE",
            Backend::Postgres => "BEGIN; SELECT pg_advisory_xact_lock(hashtext(current_schema()))",
        })?;
        match f(self) {
            Ok(value) => {
                self.batch("COMMIT")?;
                Ok(value)
            }
            Err(e) => {
                if let Err(rollback) = self.batch("ROLLBACK") {
                    tracing::warn!(error = %rollback, "rollback failed");
                }
                Err(e)
            }
        }
    }

    /// The SQLite connection itself, for what only SQLite has (the backup
    /// API, pragmas); `None` on PostgreSQL.
    pub fn sqlite(&self) -> Option<&rusqlite::Connection> {
        match self {
            Conn::Sqlite(conn) => Some(conn),
            Conn::Postgres(_) => None,
        }
    }
}

fn pg_args(args: &[Value]) -> Vec<&(dyn ToSql + Sync)> {
    args.iter().map(|a| a as &(dyn ToSql + Sync)).collect()
}

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        use rusqlite::types::{ToSqlOutput, ValueRef};
        Ok(ToSqlOutput::Borrowed(match self {
            Value::Null => ValueRef::Null,
            Value::Int(i) => ValueRef::Integer(*i),
            Value::Real(f) => ValueRef::Real(*f),
            Value::Text(s) => ValueRef::Text(s.as_bytes()),
            Value::Blob(b) => ValueRef::Blob(b),
        }))
    }
}

/// Sends a value as whatever type PostgreSQL inferred for the placeholder,
/// so the stores need not know whether a column is `INT4` or `INT8`.
impl ToSql for Value {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut postgres::types::private::BytesMut,
    ) -> std::result::Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        match self {
            Value::Null => Ok(IsNull::Yes),
            Value::Int(i) => match *ty {
                Type::INT8 => i.to_sql(ty, out),
                Type::INT4 => i32::try_from(*i)?.to_sql(ty, out),
                Type::INT2 => i16::try_from(*i)?.to_sql(ty, out),
                Type::BOOL => (*i != 0).to_sql(ty, out),
                #[allow(clippy::cast_precision_loss)]
                Type::FLOAT8 => (*i as f64).to_sql(ty, out),
                Type::TEXT | Type::VARCHAR | Type::UNKNOWN => i.to_string().to_sql(&Type::TEXT, out),
                _ => Err(format!("cannot send an integer as {ty}").into()),
            },
            Value::Real(f) => match *ty {
                Type::FLOAT8 => f.to_sql(ty, out),
                #[allow(clippy::cast_possible_truncation)]
                Type::FLOAT4 => (*f as f32).to_sql(ty, out),
                _ => Err(format!("cannot send a number as {ty}").into()),
            },
            Value::Text(s) => match *ty {
                Type::TEXT | Type::VARCHAR | Type::BPCHAR | Type::NAME | Type::UNKNOWN => {
                    s.as_str().to_sql(&Type::TEXT, out)
                }
                _ => Err(format!("cannot send text as {ty}").into()),
            },
            Value::Blob(b) => b.as_slice().to_sql(ty, out),
        }
    }

    fn accepts(_ty: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

impl<'a> FromSql<'a> for Value {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> std::result::Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(match *ty {
            Type::INT8 => Value::Int(i64::from_sql(ty, raw)?),
            Type::INT4 => Value::Int(i32::from_sql(ty, raw)?.into()),
            Type::INT2 => Value::Int(i16::from_sql(ty, raw)?.into()),
            Type::BOOL => Value::Int(bool::from_sql(ty, raw)?.into()),
            Type::FLOAT8 => Value::Real(f64::from_sql(ty, raw)?),
            Type::FLOAT4 => Value::Real(f32::from_sql(ty, raw)?.into()),
            Type::BYTEA => Value::Blob(raw.to_vec()),
            _ => Value::Text(String::from_sql(ty, raw)?),
        })
    }

    fn from_sql_null(_ty: &Type) -> std::result::Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Value::Null)
    }

    fn accepts(ty: &Type) -> bool {
        matches!(
            *ty,
            Type::INT8
                | Type::INT4
                | Type::INT2
                | Type::BOOL
                | Type::FLOAT8
                | Type::FLOAT4
                | Type::BYTEA
                | Type::TEXT
                | Type::VARCHAR
                | Type::BPCHAR
                | Type::NAME
                | Type::UNKNOWN
        )
    }
}
