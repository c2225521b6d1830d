//! The embedded engine: SQLite (bundled) in WAL mode, one connection per
//! process, serialised writers (`BEGIN IMMEDIATE`).

use std::sync::Arc;

use rusqlite::Connection;
use rusqlite::types::{ToSqlOutput, ValueRef};

use crate::StoreError;
use crate::sql::{Conn, Row, Value};

/// How many statements a connection keeps prepared.
pub(crate) const STATEMENT_CACHE: usize = 64;

/// A rusqlite connection (or transaction, which derefs to one) as a [`Conn`].
pub(crate) struct Lite<'c>(pub &'c Connection);

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match self {
            Value::Null => ValueRef::Null,
            Value::Int(int) => ValueRef::Integer(*int),
            Value::Text(text) => ValueRef::Text(text.as_bytes()),
            Value::Blob(bytes) => ValueRef::Blob(bytes),
        }))
    }
}

impl Conn for Lite<'_> {
    fn query(&mut self, sql: &str, args: &[Value]) -> Result<Vec<Row>, StoreError> {
        let mut statement = self.0.prepare_cached(sql)?;
        let columns: Arc<[String]> = statement.column_names().map(str::to_owned).collect();
        let mut rows = statement.query(rusqlite::params_from_iter(args))?;
        let mut out = Vec::new();
        while let Some(row) = rows.next()? {
            let mut values = Vec::with_capacity(columns.len());
            for index in 0..columns.len() {
                values.push(match row.get_ref(index)? {
                    ValueRef::Null => Value::Null,
                    ValueRef::Integer(int) => Value::Int(int),
                    // No column of the store holds a float; one read as
                    // text is a corrupt row where it is read.
                    ValueRef::Real(real) => Value::Text(real.to_string()),
                    ValueRef::Text(text) => Value::Text(
                        String::from_utf8(text.to_vec())
                            .map_err(|_| StoreError::Corrupt("text is not UTF-8".into()))?,
                    ),
                    ValueRef::Blob(bytes) => Value::Blob(bytes.to_vec()),
                });
            }
            out.push(Row::new(Arc::clone(&columns), values));
        }
        Ok(out)
    }

    fn execute(&mut self, sql: &str, args: &[Value]) -> Result<u64, StoreError> {
        let changed = self
            .0
            .prepare_cached(sql)?
            .execute(rusqlite::params_from_iter(args))?;
        Ok(changed as u64)
    }

    fn batch(&mut self, sql: &str) -> Result<(), StoreError> {
        Ok(self.0.execute_batch(sql)?)
    }
}

pub(crate) fn is_busy(error: &rusqlite::Error) -> bool {
    matches!(
        error.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}
