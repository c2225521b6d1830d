//! The stored hashes of the Merkle tree over the chain, in a file beside
//! the state, so a tree head or a proof at any size costs O(log² n) reads
//! instead of hashing the whole log.
//!
//! The file is a 64-byte header (magic, records indexed, the source's
//! cursor after the last one) followed by 32-byte hashes in the order a
//! growing tree completes them: leaf `i`'s hash, then the hash of every
//! perfect subtree leaf `i` completes, lowest first. So `n` records take
//! `2n − popcount(n)` hashes, and the hash of the subtree at level `l`,
//! index `j` sits at `S(m) + l` with `m = (j+1)·2^l − 1` and `S(m) = 2m −
//! popcount(m)`.
//!
//! It is derived data: never synced, rebuilt from the log when it is
//! missing, short or inconsistent. A wrong index cannot make a tampered log
//! verify (verification recomputes the tree from the log), nor a signed
//! root wrong ([`crate::Checkpointer`] grows each tree head from the last
//! one signed and the log's records); at worst a proof made from it fails
//! to verify.

use std::fs::{File, OpenOptions};
use std::io::{BufRead as _, BufReader, Seek as _, SeekFrom};
use std::os::unix::fs::{FileExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use rustix::fs::FlockOperation;

use crate::AuditError;
use crate::merkle::{self, Frontier, Hash, Hashes};

const MAGIC: &[u8; 16] = b"airlock-merkle\x00\x01";
/// Records hashed per write while catching up.
const CHUNK: u64 = 65_536;
const HEADER: u64 = 64;

/// Where the index reads the records it has not hashed yet.
pub trait LeafSource {
    /// Calls `each` with the line (without `\n`) of every record from
    /// `next_seq` on, in order, up to `last` (a seq, inclusive) or the end;
    /// `cursor` is what the previous read returned (0 the first time).
    /// Returns the cursor after the last record given. A record whose seq is
    /// not the next one is an error.
    fn read(
        &mut self,
        next_seq: u64,
        cursor: u64,
        last: u64,
        each: &mut dyn FnMut(&[u8]),
    ) -> Result<u64, AuditError>;

    /// The cursor a [`LeafSource::read`] from record `seq` starts at.
    /// Reads from the start unless the source knows better.
    fn seek(&mut self, seq: u64) -> Result<u64, AuditError> {
        let _ = seq;
        Ok(0)
    }

    /// The line of record `seq`, if the source has it. Reads from the start
    /// unless the source knows better.
    fn line(&mut self, seq: u64) -> Result<Option<Vec<u8>>, AuditError> {
        let mut found = None;
        self.read(1, 0, seq, &mut |line| found = Some(line.to_vec()))?;
        Ok(found.filter(|line| line_seq(line) == Some(seq)))
    }
}

/// The records of a JSONL log file; the cursor is a byte offset.
pub struct FileLeaves {
    pub path: PathBuf,
}

impl LeafSource for FileLeaves {
    fn read(
        &mut self,
        next_seq: u64,
        cursor: u64,
        last: u64,
        each: &mut dyn FnMut(&[u8]),
    ) -> Result<u64, AuditError> {
        let io = |error| AuditError::io(&self.path, error);
        let mut file = match File::open(&self.path) {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound && next_seq == 1 => {
                return Ok(0);
            }
            Err(error) => return Err(io(error)),
        };
        let length = file.metadata().map_err(io)?.len();
        if cursor > length {
            return Err(AuditError::IndexAhead {
                path: self.path.clone(),
                indexed: next_seq - 1,
            });
        }
        file.seek(SeekFrom::Start(cursor)).map_err(io)?;
        let mut reader = BufReader::with_capacity(1 << 16, file);
        let mut position = cursor;
        let mut seq = next_seq;
        let mut line = Vec::with_capacity(1024);
        while seq <= last {
            line.clear();
            let read = reader.read_until(b'\n', &mut line).map_err(io)?;
            // The end, or a line still being written: stop before it.
            if read == 0 || line.last() != Some(&b'\n') {
                break;
            }
            line.pop();
            if line_seq(&line) != Some(seq) {
                return Err(AuditError::IndexMismatch {
                    path: self.path.clone(),
                    seq,
                    offset: position,
                });
            }
            each(&line);
            position += read as u64;
            seq += 1;
        }
        Ok(position)
    }

    /// The byte offset where record `seq` starts (the end of the file when
    /// it is the next one), found by bisecting.
    fn seek(&mut self, seq: u64) -> Result<u64, AuditError> {
        if seq <= 1 {
            return Ok(0);
        }
        match self.locate(seq)? {
            Some((start, _)) => Ok(start),
            None => match self.locate(seq - 1)? {
                Some((start, line)) => Ok(start + line.len() as u64 + 1),
                None => Err(AuditError::IndexMismatch {
                    path: self.path.clone(),
                    seq,
                    offset: 0,
                }),
            },
        }
    }

    /// Finds the line by bisecting the file on the seqs lines start with
    /// (they grow by one per line): O(log n) reads.
    fn line(&mut self, seq: u64) -> Result<Option<Vec<u8>>, AuditError> {
        Ok(self.locate(seq)?.map(|(_, line)| line))
    }
}

impl FileLeaves {
    /// Where record `seq` starts, and its line.
    fn locate(&mut self, seq: u64) -> Result<Option<(u64, Vec<u8>)>, AuditError> {
        let io = |error| AuditError::io(&self.path, error);
        let file = match File::open(&self.path) {
            Ok(file) => file,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(error) => return Err(io(error)),
        };
        let length = file.metadata().map_err(io)?.len();
        // The first whole line starting at or after `at`: (start, line).
        let line_from = |at: u64| -> Result<Option<(u64, Vec<u8>)>, AuditError> {
            let mut reader = BufReader::with_capacity(8192, &file);
            reader.seek(SeekFrom::Start(at)).map_err(io)?;
            let mut start = at;
            let mut line = Vec::new();
            if at > 0 {
                // Skip to the start of the next line unless `at` is one.
                let mut before = [0u8; 1];
                file.read_exact_at(&mut before, at - 1).map_err(io)?;
                if before[0] != b'\n' {
                    start += reader.read_until(b'\n', &mut line).map_err(io)? as u64;
                    line.clear();
                }
            }
            let read = reader.read_until(b'\n', &mut line).map_err(io)?;
            if read == 0 || line.last() != Some(&b'\n') {
                return Ok(None);
            }
            line.pop();
            Ok(Some((start, line)))
        };
        // Invariant: every line starting before `low` has a seq below `seq`.
        let (mut low, mut high) = (0u64, length);
        while low < high {
            let middle = low + (high - low) / 2;
            match line_from(middle)? {
                Some((start, line)) => match line_seq(&line) {
                    Some(found) if found == seq => return Ok(Some((start, line))),
                    Some(found) if found < seq => low = start + line.len() as u64 + 1,
                    Some(_) => high = middle,
                    // Not a record line: fall back to reading from the start.
                    None => return self.locate_from_start(seq),
                },
                None => high = middle,
            }
        }
        match line_from(low)? {
            Some((start, line)) if line_seq(&line) == Some(seq) => Ok(Some((start, line))),
            _ => Ok(None),
        }
    }

    fn locate_from_start(&mut self, seq: u64) -> Result<Option<(u64, Vec<u8>)>, AuditError> {
        let mut found = None;
        let mut position = 0u64;
        self.read(1, 0, seq, &mut |line| {
            found = Some((position, line.to_vec()));
            position += line.len() as u64 + 1;
        })?;
        Ok(found.filter(|(_, line)| line_seq(line) == Some(seq)))
    }
}

/// The `seq` a record line starts with (`{"seq":N,`), as the writer puts it.
pub fn line_seq(line: &[u8]) -> Option<u64> {
    let rest = line.strip_prefix(b"{\"seq\":")?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || rest.get(digits) != Some(&b',') || (digits > 1 && rest[0] == b'0') {
        return None;
    }
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}

/// The stored-hash file.
#[derive(Debug)]
pub struct MerkleIndex {
    path: PathBuf,
    file: File,
}

/// Stored hashes for `n` records.
fn stored_count(n: u64) -> u64 {
    2 * n - u64::from(n.count_ones())
}

/// Where the hash of the subtree at `level`, `index` is stored.
fn position(level: u32, index: u64) -> u64 {
    let last_leaf = ((index + 1) << level) - 1;
    stored_count(last_leaf) + u64::from(level)
}

/// The most records whose hashes fit in `count` stored hashes.
fn records_in(count: u64) -> u64 {
    // stored_count grows by at least 1 per record: search n ≤ count.
    let (mut low, mut high) = (0u64, count);
    while low < high {
        let middle = low + (high - low).div_ceil(2);
        if stored_count(middle) <= count {
            low = middle;
        } else {
            high = middle - 1;
        }
    }
    low
}

impl MerkleIndex {
    /// Opens (creating it, mode 0600) the index at `path`.
    pub fn open(path: &Path) -> Result<MerkleIndex, AuditError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(path)
            .map_err(|error| AuditError::io(path, error))?;
        Ok(MerkleIndex {
            path: path.to_path_buf(),
            file,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn io(&self, error: std::io::Error) -> AuditError {
        AuditError::io(&self.path, error)
    }

    /// Runs `work` holding the index's lock (other processes catching up
    /// wait), with the records indexed and the cursor.
    fn locked<T>(
        &self,
        work: impl FnOnce(&mut State<'_>) -> Result<T, AuditError>,
    ) -> Result<T, AuditError> {
        rustix::fs::flock(&self.file, FlockOperation::LockExclusive)
            .map_err(|error| self.io(error.into()))?;
        let result = (|| {
            let mut state = self.state()?;
            work(&mut state)
        })();
        let _ = rustix::fs::flock(&self.file, FlockOperation::Unlock);
        result
    }

    /// Reads the header and checks it against the file's length; an index
    /// that does not add up (a crash between writes, a stranger's file)
    /// starts again from nothing.
    fn state(&self) -> Result<State<'_>, AuditError> {
        let length = self.file.metadata().map_err(|error| self.io(error))?.len();
        let mut header = [0u8; HEADER as usize];
        let mut valid = false;
        let (mut records, mut cursor) = (0u64, 0u64);
        if length >= HEADER {
            self.file
                .read_exact_at(&mut header, 0)
                .map_err(|error| self.io(error))?;
            if &header[..16] == MAGIC {
                records = u64::from_le_bytes(header[16..24].try_into().unwrap_or_default());
                cursor = u64::from_le_bytes(header[24..32].try_into().unwrap_or_default());
                let count = (length - HEADER) / 32;
                valid = records_in(count) == records && stored_count(records) == count;
            }
        }
        let mut state = State {
            index: self,
            records,
            cursor,
        };
        if !valid {
            state.records = 0;
            state.cursor = 0;
            state.write(&[])?;
        }
        Ok(state)
    }

    /// Hashes the records the index does not have yet, up to seq `last`
    /// (or the end of `source`), and returns how many records it covers.
    pub fn catch_up(&self, source: &mut dyn LeafSource, last: u64) -> Result<u64, AuditError> {
        self.locked(|state| {
            // In chunks, so a first build over a large log holds a few MB.
            loop {
                if state.records >= last {
                    return Ok(state.records);
                }
                let chunk_last = last.min(state.records.saturating_add(CHUNK));
                let mut frontier = Frontier::of(&mut state.reader(), state.records)?;
                let mut fresh: Vec<u8> = Vec::new();
                let cursor =
                    source.read(state.records + 1, state.cursor, chunk_last, &mut |line| {
                        let leaf = merkle::leaf_hash(line);
                        fresh.extend_from_slice(&leaf);
                        frontier.push(leaf, &mut |_, _, hash| fresh.extend_from_slice(hash));
                    })?;
                if frontier.size() == state.records {
                    return Ok(state.records);
                }
                state.records = frontier.size();
                state.cursor = cursor;
                state.write(&fresh)?;
                if state.records < chunk_last {
                    // The source ended before the chunk did.
                    return Ok(state.records);
                }
            }
        })
    }

    /// Starts again from nothing (the log was replaced or repaired).
    pub fn reset(&self) -> Result<(), AuditError> {
        self.locked(|state| {
            state.records = 0;
            state.cursor = 0;
            state.write(&[])
        })
    }

    /// How many records the index covers.
    pub fn size(&self) -> Result<u64, AuditError> {
        self.locked(|state| Ok(state.records))
    }

    /// Runs `work` with a reader of the stored hashes of the first
    /// `records` records.
    pub fn read<T>(
        &self,
        work: impl FnOnce(&mut dyn Hashes, u64) -> Result<T, AuditError>,
    ) -> Result<T, AuditError> {
        self.locked(|state| {
            let records = state.records;
            work(&mut state.reader(), records)
        })
    }
}

struct State<'a> {
    index: &'a MerkleIndex,
    records: u64,
    cursor: u64,
}

impl State<'_> {
    fn reader(&self) -> Reader<'_> {
        Reader {
            index: self.index,
            records: self.records,
        }
    }

    /// Appends `fresh` hashes after those of the previous record count and
    /// writes the header.
    fn write(&mut self, fresh: &[u8]) -> Result<(), AuditError> {
        let index = self.index;
        let end = HEADER + 32 * stored_count(self.records);
        let start = end - fresh.len() as u64;
        index
            .file
            .write_all_at(fresh, start)
            .map_err(|error| index.io(error))?;
        index.file.set_len(end).map_err(|error| index.io(error))?;
        let mut header = [0u8; HEADER as usize];
        header[..16].copy_from_slice(MAGIC);
        header[16..24].copy_from_slice(&self.records.to_le_bytes());
        header[24..32].copy_from_slice(&self.cursor.to_le_bytes());
        index
            .file
            .write_all_at(&header, 0)
            .map_err(|error| index.io(error))
    }
}

struct Reader<'a> {
    index: &'a MerkleIndex,
    records: u64,
}

impl Hashes for Reader<'_> {
    fn subtree(&mut self, level: u32, index: u64) -> Result<Hash, AuditError> {
        let end = (index + 1) << level;
        if end > self.records {
            return Err(AuditError::OutOfRange {
                index: end - 1,
                size: self.records,
            });
        }
        let mut hash = [0u8; 32];
        self.index
            .file
            .read_exact_at(&mut hash, HEADER + 32 * position(level, index))
            .map_err(|error| self.index.io(error))?;
        Ok(hash)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_follow_the_order_a_growing_tree_completes_subtrees() {
        // Leaves 0..4: h0 h1 n01 h2 h3 n23 n0123.
        assert_eq!(position(0, 0), 0);
        assert_eq!(position(0, 1), 1);
        assert_eq!(position(1, 0), 2);
        assert_eq!(position(0, 2), 3);
        assert_eq!(position(0, 3), 4);
        assert_eq!(position(1, 1), 5);
        assert_eq!(position(2, 0), 6);
        assert_eq!(stored_count(4), 7);
        for n in 0..2000 {
            assert_eq!(records_in(stored_count(n)), n);
        }
        assert_eq!(records_in(stored_count(5) + 1), 5);
    }

    #[test]
    fn line_seq_reads_only_the_writers_prefix() {
        assert_eq!(line_seq(b"{\"seq\":12,\"ts\":\"x\"}"), Some(12));
        assert_eq!(line_seq(b"{\"seq\":012,"), None);
        assert_eq!(line_seq(b"{\"seq\":12}"), None);
        assert_eq!(line_seq(b"{ \"seq\":12,"), None);
    }
}
