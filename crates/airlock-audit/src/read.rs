//! Reading records back: `airlock audit query` and `airlock audit tail [-f]`.

use std::fs::File;
use std::io::{BufRead as _, BufReader};
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::AuditError;
use crate::tail;

/// Which records [`query`] returns; every condition given must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Query {
    /// The record's `event` equals this.
    pub event_type: Option<String>,
    /// `(field, value)`: the top-level `field` exists and its string form equals
    /// `value`. The string form of a string is the string itself, of anything else its
    /// compact JSON (`3200`, `false`, `null`).
    pub filters: Vec<(String, String)>,
    /// The record's `ts` is at or after this RFC 3339 timestamp (compared as text, which
    /// orders the log's own `ts` form correctly).
    pub since: Option<String>,
}

impl Query {
    /// Whether `record` satisfies the query.
    pub fn matches(&self, record: &Map<String, Value>) -> bool {
        if let Some(event_type) = &self.event_type
            && record.get("event").and_then(Value::as_str) != Some(event_type.as_str())
        {
            return false;
        }
        if let Some(since) = &self.since {
            let recent = record
                .get("ts")
                .and_then(Value::as_str)
                .is_some_and(|ts| ts >= since.as_str());
            if !recent {
                return false;
            }
        }
        self.filters
            .iter()
            .all(|(field, expected)| match record.get(field) {
                None => false,
                Some(Value::String(text)) => text == expected,
                Some(other) => other.to_string().as_str() == expected.as_str(),
            })
    }
}

/// The records of the log at `path` that match `query`, in log order. A torn last line
/// is not a record and is skipped; any other line that is not a JSON object is an
/// error naming it.
pub fn query(path: &Path, query: &Query) -> Result<Vec<Map<String, Value>>, AuditError> {
    let file = File::open(path).map_err(|error| AuditError::io(path, error))?;
    let mut reader = BufReader::with_capacity(256 * 1024, file);
    let mut line = Vec::new();
    let mut found = Vec::new();
    loop {
        line.clear();
        let read = reader
            .read_until(b'\n', &mut line)
            .map_err(|error| AuditError::io(path, error))?;
        if read == 0 || line.last() != Some(&b'\n') {
            break;
        }
        // A line that is no record (a blank line, a torn or tampered one) is
        // no answer to a query; `verify` is what reports it, with its place.
        let Ok(record) = serde_json::from_slice::<Map<String, Value>>(&line) else {
            continue;
        };
        if query.matches(&record) {
            found.push(record);
        }
    }
    Ok(found)
}

/// The last `count` complete lines of the log (without their `\n`), and the offset
/// just past them, from which a [`Follower`] continues.
pub fn tail_lines(path: &Path, count: usize) -> Result<(Vec<String>, u64), AuditError> {
    let io_error = |error| AuditError::io(path, error);
    let file = File::open(path).map_err(io_error)?;
    let len = file.metadata().map_err(io_error)?.len();
    let complete_len = tail::last_newline_before(&file, len)
        .map_err(io_error)?
        .map_or(0, |newline| newline + 1);
    let start = tail::last_line_starts(&file, complete_len, count).map_err(io_error)?;
    let bytes = tail::read_range(&file, start, complete_len).map_err(io_error)?;
    let lines = split_lines(&bytes);
    Ok((lines, complete_len))
}

/// Follows a log as it grows (`airlock audit tail -f`): each [`Follower::poll`] returns
/// the complete lines written since the last one. A line still being written is held
/// back until its `\n` arrives.
#[derive(Debug)]
pub struct Follower {
    path: PathBuf,
    file: File,
    offset: u64,
}

impl Follower {
    /// Follows the log at `path` from byte `offset` (0 for the whole log, or the offset
    /// [`tail_lines`] returned), which should be the start of a line.
    pub fn open(path: &Path, offset: u64) -> Result<Follower, AuditError> {
        let file = File::open(path).map_err(|error| AuditError::io(path, error))?;
        Ok(Follower {
            path: path.to_path_buf(),
            file,
            offset,
        })
    }

    /// The offset just past the last line returned.
    pub fn offset(&self) -> u64 {
        self.offset
    }

    /// The complete lines (without `\n`) added since the last poll; empty when there
    /// are none yet. It does not block: the caller decides how long to wait between
    /// polls.
    pub fn poll(&mut self) -> Result<Vec<String>, AuditError> {
        let io_error = |error| AuditError::io(&self.path, error);
        let len = self.file.metadata().map_err(io_error)?.len();
        if len < self.offset {
            // The file shrank under us (it was cut back or replaced): continue at its
            // end rather than read from the middle of a line.
            self.offset = len;
            return Ok(Vec::new());
        }
        if len == self.offset {
            return Ok(Vec::new());
        }
        let mut bytes = vec![0u8; (len - self.offset) as usize];
        let mut filled = 0;
        while filled < bytes.len() {
            let read = self
                .file
                .read_at(&mut bytes[filled..], self.offset + filled as u64)
                .map_err(io_error)?;
            if read == 0 {
                break;
            }
            filled += read;
        }
        bytes.truncate(filled);
        let Some(last_newline) = bytes.iter().rposition(|&byte| byte == b'\n') else {
            return Ok(Vec::new());
        };
        self.offset += last_newline as u64 + 1;
        Ok(split_lines(&bytes[..=last_newline]))
    }
}

/// The lines of `bytes`, which ends with `\n` (or is empty).
fn split_lines(bytes: &[u8]) -> Vec<String> {
    let Some(body) = bytes.strip_suffix(b"\n") else {
        return Vec::new();
    };
    body.split(|&byte| byte == b'\n')
        .map(|line| String::from_utf8_lossy(line).into_owned())
        .collect()
}
