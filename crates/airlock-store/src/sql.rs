//! Driver-neutral SQL access. The store's statements are written once, with
//! `?N` placeholders, and run on either engine: SQLite (rusqlite, here) or
//! PostgreSQL (a driver from another crate implements [`Conn`] and
//! [`crate::PgDriver`]; its placeholders are `$N`, translated in
//! [`crate::pg`]). Values are the four kinds both engines store: integers,
//! text, bytes and NULL.

use std::sync::Arc;

use crate::StoreError;

/// A value bound to a placeholder or read from a column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    Null,
    Int(i64),
    Text(String),
    Blob(Vec<u8>),
}

/// Turns a Rust value into a [`Value`] for binding.
pub trait ToValue {
    fn to_value(&self) -> Value;
}
impl ToValue for i64 {
    fn to_value(&self) -> Value {
        Value::Int(*self)
    }
}
impl ToValue for u32 {
    fn to_value(&self) -> Value {
        Value::Int(i64::from(*self))
    }
}
impl ToValue for bool {
    fn to_value(&self) -> Value {
        Value::Int(i64::from(*self))
    }
}
impl ToValue for str {
    fn to_value(&self) -> Value {
        Value::Text(self.to_owned())
    }
}
impl ToValue for String {
    fn to_value(&self) -> Value {
        Value::Text(self.clone())
    }
}
impl ToValue for [u8] {
    fn to_value(&self) -> Value {
        Value::Blob(self.to_vec())
    }
}
impl ToValue for Vec<u8> {
    fn to_value(&self) -> Value {
        Value::Blob(self.clone())
    }
}
impl<T: ToValue> ToValue for Option<T> {
    fn to_value(&self) -> Value {
        self.as_ref().map_or(Value::Null, ToValue::to_value)
    }
}
impl<T: ToValue + ?Sized> ToValue for &T {
    fn to_value(&self) -> Value {
        (**self).to_value()
    }
}

/// The arguments of a statement: `args![id, status, at_ms as i64]`.
macro_rules! args {
    ($($value:expr),* $(,)?) => {
        &[$($crate::sql::ToValue::to_value(&$value)),*] as &[$crate::sql::Value]
    };
}
pub(crate) use args;

/// One row of a result, its values by column name.
#[derive(Debug, Clone)]
pub struct Row {
    columns: Arc<[String]>,
    values: Vec<Value>,
}

impl Row {
    /// A row of `values`, named by `columns` (shared by a result's rows).
    pub fn new(columns: Arc<[String]>, values: Vec<Value>) -> Row {
        Row { columns, values }
    }

    /// The value of `column`, read as `T`; a missing column or a value of
    /// another kind is a corrupt row.
    pub(crate) fn get<T: FromValue>(&self, column: &str) -> Result<T, StoreError> {
        let at = self
            .columns
            .iter()
            .position(|name| name == column)
            .ok_or_else(|| StoreError::Corrupt(format!("no column {column}")))?;
        self.at(at)
    }

    /// The value at `index` as it is.
    pub(crate) fn value(&self, index: usize) -> Result<&Value, StoreError> {
        self.values
            .get(index)
            .ok_or_else(|| StoreError::Corrupt(format!("no column {index}")))
    }

    /// The value at `index`, read as `T`.
    pub(crate) fn at<T: FromValue>(&self, index: usize) -> Result<T, StoreError> {
        let value = self
            .values
            .get(index)
            .ok_or_else(|| StoreError::Corrupt(format!("no column {index}")))?;
        T::from_value(value).ok_or_else(|| {
            let name = self.columns.get(index).map_or("?", String::as_str);
            StoreError::Corrupt(format!("column {name} holds {value:?}"))
        })
    }
}

/// Reads a [`Value`] as a Rust value; `None` when it is of another kind.
pub(crate) trait FromValue: Sized {
    fn from_value(value: &Value) -> Option<Self>;
}
impl FromValue for i64 {
    fn from_value(value: &Value) -> Option<i64> {
        match value {
            Value::Int(int) => Some(*int),
            _ => None,
        }
    }
}
impl FromValue for u32 {
    fn from_value(value: &Value) -> Option<u32> {
        i64::from_value(value).and_then(|int| u32::try_from(int).ok())
    }
}
impl FromValue for bool {
    fn from_value(value: &Value) -> Option<bool> {
        i64::from_value(value).map(|int| int != 0)
    }
}
impl FromValue for String {
    fn from_value(value: &Value) -> Option<String> {
        match value {
            Value::Text(text) => Some(text.clone()),
            _ => None,
        }
    }
}
impl FromValue for Vec<u8> {
    fn from_value(value: &Value) -> Option<Vec<u8>> {
        match value {
            Value::Blob(bytes) => Some(bytes.clone()),
            _ => None,
        }
    }
}
impl<T: FromValue> FromValue for Option<T> {
    fn from_value(value: &Value) -> Option<Option<T>> {
        match value {
            Value::Null => Some(None),
            value => T::from_value(value).map(Some),
        }
    }
}

/// A connection (or a transaction on one) that runs the store's
/// statements. Statements come from airlock-store only; their text is
/// trusted, every value is bound.
pub trait Conn {
    /// Runs a statement that returns rows.
    fn query(&mut self, sql: &str, args: &[Value]) -> Result<Vec<Row>, StoreError>;
    /// Runs a statement; the number of rows it changed.
    fn execute(&mut self, sql: &str, args: &[Value]) -> Result<u64, StoreError>;
    /// Runs statements that take no values (the schema, a migration step).
    fn batch(&mut self, sql: &str) -> Result<(), StoreError>;
}

/// The first row of a query, if any.
pub(crate) fn first(
    conn: &mut dyn Conn,
    sql: &str,
    args: &[Value],
) -> Result<Option<Row>, StoreError> {
    Ok(conn.query(sql, args)?.into_iter().next())
}

/// The first column of the first row, which a query always returns
/// (`count(*)`, `max(…)`).
pub(crate) fn scalar<T: FromValue>(
    conn: &mut dyn Conn,
    sql: &str,
    args: &[Value],
) -> Result<T, StoreError> {
    first(conn, sql, args)?
        .ok_or_else(|| StoreError::Corrupt(format!("no row from {sql}")))?
        .at(0)
}
