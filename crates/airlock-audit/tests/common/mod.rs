//! Helpers shared by the integration tests: head stores and file surgery.

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use airlock_audit::{Head, HeadStore, HeadStoreError};
use serde_json::{Map, Value};

/// A head store in memory that, like airlock-store's, only moves forward.
#[derive(Default)]
pub struct MemoryHeadStore(pub Mutex<Option<Head>>);

impl MemoryHeadStore {
    pub fn with(head: Head) -> Self {
        MemoryHeadStore(Mutex::new(Some(head)))
    }

    pub fn head(&self) -> Option<Head> {
        self.0.lock().unwrap().clone()
    }
}

impl HeadStore for MemoryHeadStore {
    fn load_head(&self) -> Result<Option<Head>, HeadStoreError> {
        Ok(self.head())
    }

    fn save_head(&self, head: &Head) -> Result<(), HeadStoreError> {
        let mut stored = self.0.lock().unwrap();
        if stored.as_ref().is_none_or(|stored| head.seq > stored.seq) {
            *stored = Some(head.clone());
        }
        Ok(())
    }
}

/// A head store in a small file (`<seq> <hash>`), replaced atomically, so processes
/// share it. It overwrites blindly: the log calls it under its lock, in order.
pub struct FileHeadStore(pub PathBuf);

impl HeadStore for FileHeadStore {
    fn load_head(&self) -> Result<Option<Head>, HeadStoreError> {
        match fs::read_to_string(&self.0) {
            Ok(text) => {
                let (seq, hash) = text.split_once(' ').ok_or_else(|| bad("bad head file"))?;
                Ok(Some(Head {
                    seq: seq.parse().map_err(|_| bad("bad seq"))?,
                    event_hash: hash.to_owned(),
                }))
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(error) => Err(HeadStoreError::new(error)),
        }
    }

    fn save_head(&self, head: &Head) -> Result<(), HeadStoreError> {
        let temporary = self.0.with_extension("tmp");
        fs::write(&temporary, format!("{} {}", head.seq, head.event_hash))
            .and_then(|()| fs::rename(&temporary, &self.0))
            .map_err(HeadStoreError::new)
    }
}

/// A record with `event` and the given string fields.
pub fn record(event: &str, fields: &[(&str, Value)]) -> Map<String, Value> {
    let mut record = Map::new();
    record.insert("event".into(), event.into());
    for (name, value) in fields {
        record.insert((*name).into(), value.clone());
    }
    record
}

pub fn lines(path: &Path) -> Vec<String> {
    fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

pub fn write_lines(path: &Path, lines: &[String]) {
    let mut text = lines.join("\n");
    if !lines.is_empty() {
        text.push('\n');
    }
    fs::write(path, text).unwrap();
}

pub fn records(path: &Path) -> Vec<Map<String, Value>> {
    lines(path)
        .iter()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn bad(what: &str) -> HeadStoreError {
    HeadStoreError::new(std::io::Error::other(what.to_owned()))
}
