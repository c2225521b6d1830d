//! Walking the chain: `airlock audit verify`.

use std::fmt;
use std::fs::File;
use std::ops::Range;
use std::os::unix::fs::FileExt as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use airlock_core::canonical::ZERO_HASH;

use crate::canonical_line::{ChainFields, LineCanonicalizer, LineError};
use crate::chain::{ChainHasher, HMAC_PREFIX, SHA256_PREFIX};
use crate::{AuditError, Head};

/// What [`verify`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifyReport {
    /// Records that verified, in order, before the problem if there is one.
    pub records: u64,
    /// The last record that verified.
    pub head: Option<Head>,
    /// The first problem, `None` when the whole log and the stored head agree.
    pub problem: Option<Problem>,
}

impl VerifyReport {
    pub fn is_ok(&self) -> bool {
        self.problem.is_none()
    }
}

/// The first place where the chain breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The first bad `seq`: the record's own when it has one that fits, else the one
    /// the chain expected there (for a missing record, the missing `seq`).
    pub seq: u64,
    /// The 1-based line of the log where it was found (one past the last line for a
    /// truncated tail).
    pub line: u64,
    /// The byte offset in the log where that line starts (the end of the log for
    /// a truncated tail).
    pub offset: u64,
    pub kind: ProblemKind,
}

/// Why the chain breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProblemKind {
    /// The line is not a JSON object.
    BadJson { reason: String },
    /// The record lacks `seq`, `prev_hash` or `event_hash`, or has the wrong type.
    MissingField { field: &'static str },
    /// The record has another `seq` than the one after its predecessor's: a record was
    /// removed (`found` is larger), repeated or moved.
    SeqMismatch { found: u64 },
    /// The record's `prev_hash` is not its predecessor's `event_hash`.
    PrevHashMismatch { expected: String, found: String },
    /// The record's content does not hash to its `event_hash`: it was changed.
    HashMismatch { recorded: String, computed: String },
    /// The record is hashed with HMAC-SHA256, and no key was given.
    KeyRequired,
    /// A key was given, and the record is hashed with plain SHA-256.
    KeyNotUsed,
    /// The file does not end with `\n`: its last record was torn mid-write.
    TornLastLine { bytes: u64 },
    /// The head store names a record the log does not have (the log ends before it, or
    /// holds another record at its `seq`): records were cut off the end.
    TruncatedTail {
        stored: Head,
        /// The `event_hash` the log holds at the stored `seq`, if it reaches it.
        found: Option<String>,
    },
}

impl fmt::Display for Problem {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            formatter,
            "seq {} (line {}, byte {}): {}",
            self.seq, self.line, self.offset, self.kind
        )
    }
}

impl fmt::Display for ProblemKind {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProblemKind::BadJson { reason } => write!(formatter, "not a json record: {reason}"),
            ProblemKind::MissingField { field } => write!(formatter, "missing or invalid {field}"),
            ProblemKind::SeqMismatch { found } => write!(
                formatter,
                "seq out of order: the next record is seq {found} (a record is missing, repeated or moved)"
            ),
            ProblemKind::PrevHashMismatch { expected, found } => write!(
                formatter,
                "prev_hash {found} is not the previous event_hash {expected}"
            ),
            ProblemKind::HashMismatch { recorded, computed } => write!(
                formatter,
                "hash mismatch: recorded {recorded}, computed {computed} (the record was changed)"
            ),
            ProblemKind::KeyRequired => {
                write!(formatter, "the record is hmac-sha256 and no key was given")
            }
            ProblemKind::KeyNotUsed => {
                write!(formatter, "a key was given and the record is plain sha256")
            }
            ProblemKind::TornLastLine { bytes } => write!(
                formatter,
                "torn last line: {bytes} bytes after the last newline"
            ),
            ProblemKind::TruncatedTail { stored, found } => match found {
                None => write!(
                    formatter,
                    "truncated tail: the stored head is seq {} ({}) and the log ends before it",
                    stored.seq, stored.event_hash
                ),
                Some(found) => write!(
                    formatter,
                    "truncated tail: the stored head is seq {} ({}) and the log has {found} there",
                    stored.seq, stored.event_hash
                ),
            },
        }
    }
}

/// Walks the chain of the log at `path` and reports the first problem.
///
/// `key` is the HMAC key when the chain is keyed; `stored_head` is the head kept in the
/// store, which the log must reach with the same hash. An `Err` is an IO failure (or an
/// unusable key), never a broken chain.
///
/// Each line carries its own `prev_hash`, so its hash can be checked without the lines
/// before it: the file is cut into one contiguous range per core, every core reads,
/// canonicalizes, hashes and links the lines of its range on its own, and then the
/// ranges are linked in order. Only when something does not verify is the log walked
/// again, one line after another, to say exactly what is wrong and where.
pub fn verify(
    path: &Path,
    key: Option<&[u8]>,
    stored_head: Option<&Head>,
) -> Result<VerifyReport, AuditError> {
    const WORTH_A_THREAD: u64 = 256 * 1024;
    let hasher = ChainHasher::new(key)?;
    let file = File::open(path).map_err(|error| AuditError::io(path, error))?;
    let size = file
        .metadata()
        .map_err(|error| AuditError::io(path, error))?
        .len();
    let workers = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(16)
        .min(usize::try_from(size / WORTH_A_THREAD).unwrap_or(usize::MAX))
        .max(1);
    let stored_seq = stored_head.map(|stored| stored.seq);
    let ranges = scan_ranges(&file, size, workers, &hasher, stored_seq)
        .map_err(|error| AuditError::io(path, error))?;
    if let Some(mut chain) = link_ranges(&ranges, stored_head) {
        // Every line verified: the chain ends where the file does.
        chain.bytes = size;
        let problem = chain.check_stored_head();
        return Ok(chain.report(problem));
    }
    // Something does not verify: walk again, one line at a time, for the exact verdict.
    walk(&file, path, &hasher, stored_head)
}

/// What one core learned about its range: its lines all verify and link one to the
/// next. `None` in its place means some line of the range does not.
struct RangeSummary {
    lines: u64,
    /// The `seq` and `prev_hash` of the first line, when there is one.
    first: Option<(u64, HashText)>,
    /// The `seq` and `event_hash` of the last line.
    last: (u64, HashText),
    /// The `event_hash` of the line at the stored head's `seq`, when in the range.
    at_stored: Option<HashText>,
}

/// Scans `workers` contiguous ranges of the file, one per thread.
fn scan_ranges(
    file: &File,
    size: u64,
    workers: usize,
    hasher: &ChainHasher,
    stored_seq: Option<u64>,
) -> std::io::Result<Vec<Option<RangeSummary>>> {
    let workers_u64 = workers as u64;
    let bounds = |index: usize| {
        let begin = size * index as u64 / workers_u64;
        // The last range reads to the end, whatever the size is by then.
        let end = if index + 1 == workers {
            u64::MAX
        } else {
            size * (index as u64 + 1) / workers_u64
        };
        (begin, end)
    };
    let abort = AtomicBool::new(false);
    let abort = &abort;
    if workers == 1 {
        return Ok(vec![scan_range(
            file,
            0,
            u64::MAX,
            hasher,
            stored_seq,
            abort,
        )?]);
    }
    std::thread::scope(|scope| {
        let handles: Vec<_> = (1..workers)
            .map(|index| {
                let (begin, end) = bounds(index);
                scope.spawn(move || scan_range(file, begin, end, hasher, stored_seq, abort))
            })
            .collect();
        let (begin, end) = bounds(0);
        let mut summaries = vec![scan_range(file, begin, end, hasher, stored_seq, abort)?];
        for handle in handles {
            match handle.join() {
                Ok(summary) => summaries.push(summary?),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        Ok(summaries)
    })
}

/// Verifies the lines that start in `begin..end` of the file (a line that starts
/// before `end` is read to its `\n` even past it). `None` when a line does not verify
/// or link to the one before it, when the range ends in a torn line, or when another
/// range gave up (`abort`).
fn scan_range(
    file: &File,
    begin: u64,
    end: u64,
    hasher: &ChainHasher,
    stored_seq: Option<u64>,
    abort: &AtomicBool,
) -> std::io::Result<Option<RangeSummary>> {
    const READ_SIZE: usize = 1024 * 1024;
    let give_up = || {
        abort.store(true, Ordering::Relaxed);
        Ok(None)
    };
    let mut canonicalizer = LineCanonicalizer::new();
    let mut canonical = Vec::with_capacity(4096);
    let mut buffer = vec![0u8; READ_SIZE];
    let mut filled = 0;
    // The file offset of `buffer[0]`. A range after the first starts after the first
    // `\n` at or after `begin - 1`: a line that starts before `begin` is the previous
    // range's.
    let mut offset = begin.saturating_sub(1);
    let mut skipping = begin > 0;
    let mut summary = RangeSummary {
        lines: 0,
        first: None,
        last: (0, HashText::EMPTY),
        at_stored: None,
    };
    loop {
        if abort.load(Ordering::Relaxed) {
            return Ok(None);
        }
        if filled == buffer.len() {
            buffer.resize(buffer.len() * 2, 0);
        }
        let read = match file.read_at(&mut buffer[filled..], offset + filled as u64) {
            Ok(read) => read,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        filled += read;
        let bytes = &buffer[..filled];
        let mut start = 0;
        if skipping {
            match find_newline(bytes, 0) {
                Some(newline) => {
                    start = newline + 1;
                    skipping = false;
                }
                None if read == 0 => return Ok(Some(summary)),
                None => {
                    offset += filled as u64;
                    filled = 0;
                    continue;
                }
            }
        }
        while let Some(newline) = find_newline(bytes, start) {
            if offset + start as u64 >= end {
                return Ok(Some(summary));
            }
            let line = &bytes[start..newline];
            canonical.clear();
            let Ok(ChainFields {
                seq: Some(seq),
                prev_hash: Some(prev_hash),
                event_hash: Some(event_hash),
            }) = canonicalizer.canonicalize(line, &mut canonical)
            else {
                return give_up();
            };
            let (Some(prev_text), Some(event_text)) = (
                HashText::new(&line[prev_hash]),
                HashText::new(&line[event_hash]),
            ) else {
                return give_up();
            };
            if !hasher.matches(prev_text.as_str(), &canonical, event_text.as_str()) {
                return give_up();
            }
            if summary.lines == 0 {
                summary.first = Some((seq, prev_text));
            } else if summary.last.0.checked_add(1) != Some(seq) || summary.last.1 != prev_text {
                return give_up();
            }
            if stored_seq == Some(seq) {
                summary.at_stored = Some(event_text);
            }
            summary.last = (seq, event_text);
            summary.lines += 1;
            start = newline + 1;
        }
        if read == 0 {
            // A torn last line is a problem: the walk reports it.
            return if start < filled {
                give_up()
            } else {
                Ok(Some(summary))
            };
        }
        if offset + start as u64 >= end {
            return Ok(Some(summary));
        }
        buffer.copy_within(start..filled, 0);
        filled -= start;
        offset += start as u64;
    }
}

/// Links the ranges in order into the whole chain, or `None` when they do not link.
fn link_ranges<'stored>(
    ranges: &[Option<RangeSummary>],
    stored_head: Option<&'stored Head>,
) -> Option<Chain<'stored>> {
    let mut chain = Chain::new(stored_head);
    for range in ranges {
        let range = range.as_ref()?;
        let Some((first_seq, first_prev)) = &range.first else {
            continue;
        };
        if *first_seq != chain.expected_seq || first_prev.as_str() != chain.last_hash {
            return None;
        }
        chain.lines += range.lines;
        chain.records += range.lines - 1;
        chain.accept(range.last.0, range.last.1.as_str());
        if let Some(at_stored) = &range.at_stored {
            chain.found_at_stored_seq = Some(at_stored.as_str().to_owned());
        }
    }
    Some(chain)
}

/// The walk one line after another, which says exactly what the first problem is.
fn walk(
    file: &File,
    path: &Path,
    hasher: &ChainHasher,
    stored_head: Option<&Head>,
) -> Result<VerifyReport, AuditError> {
    const READ_SIZE: u64 = 8 * 1024 * 1024;
    let mut chain = Chain::new(stored_head);
    let mut buffer: Vec<u8> = Vec::with_capacity(READ_SIZE as usize + 64 * 1024);
    let mut position = 0u64;
    loop {
        let before = buffer.len();
        buffer.resize(before + READ_SIZE as usize, 0);
        let read = loop {
            match file.read_at(&mut buffer[before..], position) {
                Ok(read) => break read,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => {}
                Err(error) => return Err(AuditError::io(path, error)),
            }
        };
        buffer.truncate(before + read);
        position += read as u64;
        if read == 0 {
            break;
        }
        let Some(last_newline) = buffer.iter().rposition(|&byte| byte == b'\n') else {
            continue;
        };
        let part = &buffer[..=last_newline];
        for summary in &summarize(part, hasher) {
            if let Some(problem) = chain.link(part, summary, hasher) {
                return Ok(chain.report(Some(problem)));
            }
        }
        buffer.drain(..=last_newline);
    }
    if !buffer.is_empty() {
        let problem = Problem {
            seq: chain.expected_seq,
            line: chain.lines + 1,
            offset: chain.bytes,
            kind: ProblemKind::TornLastLine {
                bytes: buffer.len() as u64,
            },
        };
        return Ok(chain.report(Some(problem)));
    }
    let problem = chain.check_stored_head();
    Ok(chain.report(problem))
}

/// A hash as text, kept inline so that summarizing a line allocates nothing. Real
/// hashes are 71 (`sha256:`) or 76 (`hmac-sha256:`) bytes.
#[derive(Clone, Copy, PartialEq, Eq)]
struct HashText {
    bytes: [u8; 80],
    len: u8,
}

impl HashText {
    const EMPTY: HashText = HashText {
        bytes: [0; 80],
        len: 0,
    };

    fn new(text: &[u8]) -> Option<HashText> {
        let mut bytes = [0u8; 80];
        bytes.get_mut(..text.len())?.copy_from_slice(text);
        Some(HashText {
            bytes,
            len: u8::try_from(text.len()).ok()?,
        })
    }

    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or_default()
    }
}

/// What the fast pass learned about one line.
struct Summary {
    /// The line within its part, without the `\n`.
    line: Range<usize>,
    /// Whether the line parsed, has its chain fields, and hashes to its `event_hash`;
    /// the other fields mean something only then.
    intact: bool,
    seq: u64,
    prev_hash: HashText,
    event_hash: HashText,
}

/// Summarizes every line of `part` (which ends with `\n`).
fn summarize(part: &[u8], hasher: &ChainHasher) -> Vec<Summary> {
    let mut canonicalizer = LineCanonicalizer::new();
    let mut canonical = Vec::with_capacity(4096);
    let mut summaries = Vec::with_capacity(part.len() / 256 + 1);
    let mut start = 0;
    while let Some(end) = find_newline(part, start) {
        let line = &part[start..end];
        let mut summary = Summary {
            line: start..end,
            intact: false,
            seq: 0,
            prev_hash: HashText::EMPTY,
            event_hash: HashText::EMPTY,
        };
        canonical.clear();
        if let Ok(ChainFields {
            seq: Some(seq),
            prev_hash: Some(prev_hash),
            event_hash: Some(event_hash),
        }) = canonicalizer.canonicalize(line, &mut canonical)
            && let (Some(prev_text), Some(event_text)) = (
                HashText::new(&line[prev_hash]),
                HashText::new(&line[event_hash]),
            )
        {
            summary.intact = hasher.matches(prev_text.as_str(), &canonical, event_text.as_str());
            summary.seq = seq;
            summary.prev_hash = prev_text;
            summary.event_hash = event_text;
        }
        summaries.push(summary);
        start = end + 1;
    }
    summaries
}

/// The index of the first `\n` at or after `from`, eight bytes at a time.
fn find_newline(bytes: &[u8], from: usize) -> Option<usize> {
    let mut position = from;
    while let Some(word) = crate::canonical_line::word_at(bytes, position) {
        if crate::canonical_line::bytes_equal(word, b'\n') != 0 {
            break;
        }
        position += 8;
    }
    bytes
        .get(position..)?
        .iter()
        .position(|&byte| byte == b'\n')
        .map(|offset| position + offset)
}

/// One line, checked on its own in detail (the slow path, for a line that does not
/// link).
enum Checked {
    Record {
        seq: u64,
        prev_hash: String,
        event_hash: String,
        /// Whether the content hashes to `event_hash`.
        hash: Result<(), ProblemKind>,
    },
    Unreadable(ProblemKind),
}

fn check_line(line: &[u8], hasher: &ChainHasher) -> Checked {
    let mut canonical = Vec::with_capacity(4096);
    let fields = match LineCanonicalizer::new().canonicalize(line, &mut canonical) {
        Ok(fields) => fields,
        Err(LineError::Json(reason)) => {
            return Checked::Unreadable(ProblemKind::BadJson { reason });
        }
    };
    let text = |range: Option<Range<usize>>| {
        range.map(|range| String::from_utf8_lossy(&line[range]).into_owned())
    };
    let Some(event_hash) = text(fields.event_hash) else {
        return Checked::Unreadable(ProblemKind::MissingField {
            field: "event_hash",
        });
    };
    let Some(seq) = fields.seq else {
        return Checked::Unreadable(ProblemKind::MissingField { field: "seq" });
    };
    let Some(prev_hash) = text(fields.prev_hash) else {
        return Checked::Unreadable(ProblemKind::MissingField { field: "prev_hash" });
    };
    let hash = if !hasher.is_keyed() && event_hash.starts_with(HMAC_PREFIX) {
        Err(ProblemKind::KeyRequired)
    } else if hasher.is_keyed() && event_hash.starts_with(SHA256_PREFIX) {
        Err(ProblemKind::KeyNotUsed)
    } else if hasher.matches(&prev_hash, &canonical, &event_hash) {
        Ok(())
    } else {
        Err(ProblemKind::HashMismatch {
            computed: hasher.event_hash(&prev_hash, &canonical),
            recorded: event_hash.clone(),
        })
    };
    Checked::Record {
        seq,
        prev_hash,
        event_hash,
        hash,
    }
}

/// The walk so far.
struct Chain<'stored> {
    stored_head: Option<&'stored Head>,
    /// The `event_hash` the log holds at the stored head's `seq`.
    found_at_stored_seq: Option<String>,
    expected_seq: u64,
    /// The `event_hash` of the last record that verified (`ZERO_HASH` before the first).
    last_hash: String,
    lines: u64,
    /// Where the next line starts in the log.
    bytes: u64,
    records: u64,
}

impl<'stored> Chain<'stored> {
    fn new(stored_head: Option<&'stored Head>) -> Self {
        Chain {
            stored_head,
            found_at_stored_seq: None,
            expected_seq: 1,
            last_hash: ZERO_HASH.to_owned(),
            lines: 0,
            bytes: 0,
            records: 0,
        }
    }

    /// Links the next line, or returns why it does not fit.
    fn link(&mut self, part: &[u8], summary: &Summary, hasher: &ChainHasher) -> Option<Problem> {
        let length = summary.line.len() as u64 + 1;
        if summary.intact
            && summary.seq == self.expected_seq
            && summary.prev_hash.as_str() == self.last_hash
        {
            self.lines += 1;
            self.bytes += length;
            self.accept(summary.seq, summary.event_hash.as_str());
            return None;
        }
        let line = part.get(summary.line.clone()).unwrap_or_default();
        let problem = self.link_checked(check_line(line, hasher));
        self.bytes += length;
        problem
    }

    fn accept(&mut self, seq: u64, event_hash: &str) {
        if self.stored_head.is_some_and(|stored| stored.seq == seq) {
            self.found_at_stored_seq = Some(event_hash.to_owned());
        }
        self.records += 1;
        self.expected_seq = seq + 1;
        self.last_hash.clear();
        self.last_hash.push_str(event_hash);
    }

    /// The exact verdict on a line, in the order a plain walk checks: readable, `seq`,
    /// `prev_hash`, hash.
    fn link_checked(&mut self, checked: Checked) -> Option<Problem> {
        self.lines += 1;
        let problem = |seq, kind| Problem {
            seq,
            line: self.lines,
            offset: self.bytes,
            kind,
        };
        let (seq, prev_hash, event_hash, hash) = match checked {
            Checked::Unreadable(kind) => return Some(problem(self.expected_seq, kind)),
            Checked::Record {
                seq,
                prev_hash,
                event_hash,
                hash,
            } => (seq, prev_hash, event_hash, hash),
        };
        if seq != self.expected_seq {
            return Some(problem(
                self.expected_seq,
                ProblemKind::SeqMismatch { found: seq },
            ));
        }
        if prev_hash != self.last_hash {
            return Some(problem(
                seq,
                ProblemKind::PrevHashMismatch {
                    expected: self.last_hash.clone(),
                    found: prev_hash,
                },
            ));
        }
        if let Err(kind) = hash {
            return Some(problem(seq, kind));
        }
        self.accept(seq, &event_hash);
        None
    }

    fn check_stored_head(&self) -> Option<Problem> {
        let stored = self.stored_head?;
        match &self.found_at_stored_seq {
            Some(found) if *found == stored.event_hash => None,
            Some(found) => Some(Problem {
                seq: stored.seq,
                line: stored.seq,
                offset: self.bytes,
                kind: ProblemKind::TruncatedTail {
                    stored: stored.clone(),
                    found: Some(found.clone()),
                },
            }),
            None => Some(Problem {
                seq: self.expected_seq,
                line: self.lines + 1,
                offset: self.bytes,
                kind: ProblemKind::TruncatedTail {
                    stored: stored.clone(),
                    found: None,
                },
            }),
        }
    }

    fn report(self, problem: Option<Problem>) -> VerifyReport {
        let head = (self.records > 0).then(|| Head {
            seq: self.expected_seq - 1,
            event_hash: self.last_hash,
        });
        VerifyReport {
            records: self.records,
            head,
            problem,
        }
    }
}
