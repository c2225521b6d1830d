//! Locating chunks in a file's text and applying them.
//!
//! Each pass compares lines through a key: the line itself, without trailing
//! whitespace, trimmed, or trimmed with whitespace runs and punctuation normalised.
//! Searches go through an index of the file's lines by the hash of their key, built
//! when first needed and then shared by every chunk, so a search costs the
//! occurrences of the chunk's rarest line rather than a scan of the file. Two
//! indexes serve the four passes: one of exact lines, and one of normalised lines,
//! whose candidates cover the three lenient passes (lines equal without trailing or
//! surrounding whitespace are equal normalised too).

use super::{Chunk, LineEdit, PatchError, excerpt};
use crate::edit::ascii_punctuation;

/// Applies `chunks` to `original`, the current text of `path` (named in errors).
///
/// Unified hunks that `git apply` would accept are applied exactly as it applies them
/// (see `git.rs`): the same bytes, the patch's own line endings on added lines.
/// Everything else goes through the lenient search. Each chunk is located after the
/// previous one (see the module documentation of
/// [`crate::patch`] for the passes); context lines keep the file's own text, removed
/// lines go and added lines come in with the file's line ending (CRLF when its
/// first line ends so). The file keeps or lacks its final newline as before unless a
/// chunk says otherwise ([`Chunk::final_newline`]).
pub fn apply_chunks(path: &str, original: &str, chunks: &[Chunk]) -> Result<String, PatchError> {
    if !chunks.is_empty()
        && let Some(text) = super::git::apply(original, chunks)
    {
        return Ok(text);
    }
    let file = FileLines::new(original);
    let mut searcher = Searcher {
        file: &file,
        indexes: [None, None],
    };
    let mut placed = Vec::with_capacity(chunks.len());
    let mut cursor = 0;
    // How far the chunks with line hints were found from their hints so far.
    let mut drift: isize = 0;
    for chunk in chunks {
        check_script(path, chunk)?;
        let position = searcher.locate(path, chunk, cursor, drift)?;
        if let Some(hint) = chunk.line_hint {
            drift = offset(hint_index(chunk, hint), usize::from(position));
        }
        match position {
            Position::At(at) => {
                cursor = at + chunk.old_lines.len();
                placed.push((at, chunk));
            }
            Position::Appended { cursor: after } => {
                cursor = after;
                placed.push((file.len(), chunk));
            }
        }
    }
    // Appended chunks go last, in their order, whatever follows them in the patch.
    placed.sort_by_key(|(at, _)| *at);
    Ok(render(&file, &placed))
}

/// Where a chunk goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Position {
    /// Its old lines start at this line (or its new lines go before it).
    At(usize),
    /// A V4A chunk that only adds lines: at the end of the file, as Codex's
    /// apply_patch puts it even after an `@@` anchor. The next chunk is searched for
    /// from `cursor` (after the anchor).
    Appended { cursor: usize },
}

impl From<Position> for usize {
    fn from(position: Position) -> usize {
        match position {
            Position::At(at) | Position::Appended { cursor: at } => at,
        }
    }
}

/// A file's text cut into lines, by byte offsets.
struct FileLines<'a> {
    text: &'a str,
    /// Where each line ends, after its line ending (if it has one).
    ends: Vec<usize>,
    /// The line ending for inserted lines.
    eol: &'static str,
}

impl<'a> FileLines<'a> {
    fn new(text: &'a str) -> FileLines<'a> {
        let mut ends = line_ends(text.as_bytes());
        if !text.ends_with('\n') && !text.is_empty() {
            ends.push(text.len());
        }
        let eol = match ends.first() {
            Some(end) if text[..*end].ends_with("\r\n") => "\r\n",
            _ => "\n",
        };
        FileLines { text, ends, eol }
    }

    fn len(&self) -> usize {
        self.ends.len()
    }

    /// Where line `index` starts.
    fn start(&self, index: usize) -> usize {
        index
            .checked_sub(1)
            .map_or(0, |previous| self.ends[previous])
    }

    /// Line `index` without its line ending.
    fn content(&self, index: usize) -> &'a str {
        let line = &self.text[self.start(index)..self.ends[index]];
        match line.strip_suffix('\n') {
            Some(line) => line.strip_suffix('\r').unwrap_or(line),
            None => line,
        }
    }

    /// Lines `start..end` with their line endings.
    fn span(&self, start: usize, end: usize) -> &'a str {
        &self.text[self.start(start)..self.ends[end - 1]]
    }
}

/// The offsets just after each `\n`. Lines are short, so rather than a `memchr` per
/// line this tests eight bytes at a time for a newline (the classic "has zero
/// byte" bit trick on the bytes XOR `\n`).
fn line_ends(bytes: &[u8]) -> Vec<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH_BITS: u64 = 0x8080_8080_8080_8080;
    const NEWLINES: u64 = ONES * b'\n' as u64;
    let mut ends = Vec::with_capacity(bytes.len() / 32 + 1);
    let mut at = 0;
    while at + 8 <= bytes.len() {
        let word = read_u64(bytes, at) ^ NEWLINES;
        let mut candidates = word.wrapping_sub(ONES) & !word & HIGH_BITS;
        while candidates != 0 {
            // The trick can flag a byte above a real newline too: check each one.
            let offset = at + (candidates.trailing_zeros() / 8) as usize;
            if bytes[offset] == b'\n' {
                ends.push(offset + 1);
            }
            candidates &= candidates - 1;
        }
        at += 8;
    }
    for (offset, byte) in bytes.iter().enumerate().skip(at) {
        if *byte == b'\n' {
            ends.push(offset + 1);
        }
    }
    ends
}

/// How leniently lines are compared, strictest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    Exact,
    TrimEnd,
    Trim,
    Punctuation,
}

const PASSES: [Pass; 4] = [Pass::Exact, Pass::TrimEnd, Pass::Trim, Pass::Punctuation];

impl Pass {
    fn matches(self, file_line: &str, patch_line: &str) -> bool {
        match self {
            Pass::Exact => file_line == patch_line,
            Pass::TrimEnd => file_line.trim_end() == patch_line.trim_end(),
            Pass::Trim => file_line.trim() == patch_line.trim(),
            Pass::Punctuation => normalized(file_line).eq(normalized(patch_line)),
        }
    }

    /// The hash of the line's key; `scratch` is a buffer for keys that are not a
    /// slice of the line.
    fn hash(self, line: &str, scratch: &mut String) -> u64 {
        match self {
            Pass::Exact => hash_bytes(line.as_bytes()),
            Pass::TrimEnd => hash_bytes(line.trim_end().as_bytes()),
            Pass::Trim => hash_bytes(line.trim().as_bytes()),
            Pass::Punctuation => {
                let trimmed = line.trim();
                // Most lines are ASCII with single spaces, which normalise to
                // themselves.
                let plain = trimmed.bytes().all(|byte| {
                    byte.is_ascii() && !matches!(byte, b'\t' | b'\n' | 0x0B | 0x0C | b'\r')
                }) && !trimmed.contains("  ");
                if plain {
                    hash_bytes(trimmed.as_bytes())
                } else {
                    scratch.clear();
                    scratch.extend(normalized(line));
                    hash_bytes(scratch.as_bytes())
                }
            }
        }
    }

    /// For messages: what the pass ignored.
    fn leniency(self) -> &'static str {
        match self {
            Pass::Exact => "",
            Pass::TrimEnd => " (ignoring trailing whitespace)",
            Pass::Trim => " (ignoring surrounding whitespace)",
            Pass::Punctuation => " (ignoring whitespace and punctuation style)",
        }
    }
}

/// The characters of a line for the punctuation pass: trimmed, each whitespace run
/// one space, typographic quotes and dashes in ASCII (as edit_file's fuzzy match).
fn normalized(line: &str) -> Normalized<'_> {
    Normalized {
        chars: line.trim().chars(),
        pending: "".chars(),
    }
}

struct Normalized<'a> {
    chars: std::str::Chars<'a>,
    /// The rest of a multi-character replacement (`...` for `…`).
    pending: std::str::Chars<'static>,
}

impl Iterator for Normalized<'_> {
    type Item = char;

    fn next(&mut self) -> Option<char> {
        if let Some(c) = self.pending.next() {
            return Some(c);
        }
        let c = self.chars.next()?;
        if c.is_whitespace() {
            self.chars = self.chars.as_str().trim_start().chars();
            return Some(' ');
        }
        match ascii_punctuation(c) {
            Some(ascii) => {
                self.pending = ascii.chars();
                self.pending.next()
            }
            None => Some(c),
        }
    }
}

const HASH_MULTIPLIER: u64 = 0x9E37_79B9_7F4A_7C15;

/// A fast, non-cryptographic hash; collisions only cost a comparison, since every
/// candidate is compared in full.
fn hash_bytes(bytes: &[u8]) -> u64 {
    let len = bytes.len();
    let mut hash = (len as u64).wrapping_mul(HASH_MULTIPLIER);
    let mut step = |word: u64| {
        hash = (hash.rotate_left(23) ^ word).wrapping_mul(HASH_MULTIPLIER);
    };
    if len >= 8 {
        let mut at = 0;
        while at + 8 < len {
            step(read_u64(bytes, at));
            at += 8;
        }
        // The last word may overlap the one before; the length is in the seed.
        step(read_u64(bytes, len - 8));
    } else if len >= 4 {
        step(u64::from(read_u32(bytes, 0)) << 32 | u64::from(read_u32(bytes, len - 4)));
    } else if len > 0 {
        step(
            u64::from(bytes[0]) << 16 | u64::from(bytes[len / 2]) << 8 | u64::from(bytes[len - 1]),
        );
    }
    mix(hash)
}

fn read_u64(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

fn read_u32(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(word)
}

fn mix(hash: u64) -> u64 {
    let hash = (hash ^ (hash >> 31)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    hash ^ (hash >> 29)
}

/// The file's lines grouped by the hash of their key under one pass.
struct LineIndex {
    hashes: Vec<u64>,
    /// Bucket `b` (the low bits of a hash) holds
    /// `lines[bucket_starts[b]..bucket_starts[b + 1]]`.
    bucket_starts: Vec<usize>,
    /// Line numbers, grouped by bucket, ascending within each.
    lines: Vec<usize>,
}

impl LineIndex {
    fn new(file: &FileLines<'_>, pass: Pass) -> LineIndex {
        let mut scratch = String::new();
        let hashes: Vec<u64> = (0..file.len())
            .map(|index| pass.hash(file.content(index), &mut scratch))
            .collect();
        // A counting sort by bucket: one pass to count, one to place.
        let buckets = hashes.len().next_power_of_two().max(16);
        let mut bucket_starts = vec![0; buckets + 1];
        for hash in &hashes {
            bucket_starts[bucket(*hash, buckets) + 1] += 1;
        }
        for index in 0..buckets {
            bucket_starts[index + 1] += bucket_starts[index];
        }
        let mut free = bucket_starts[..buckets].to_vec();
        let mut lines = vec![0; hashes.len()];
        for (line, hash) in hashes.iter().enumerate() {
            let slot = &mut free[bucket(*hash, buckets)];
            lines[*slot] = line;
            *slot += 1;
        }
        LineIndex {
            hashes,
            bucket_starts,
            lines,
        }
    }

    /// The lines from `from` on in the bucket of `hash`, ascending; a superset of
    /// the lines whose key has this hash.
    fn bucket_from(&self, hash: u64, from: usize) -> &[usize] {
        let index = bucket(hash, self.bucket_starts.len() - 1);
        let lines = &self.lines[self.bucket_starts[index]..self.bucket_starts[index + 1]];
        &lines[lines.partition_point(|line| *line < from)..]
    }

    /// The lines whose key hashes to `hash`, ascending, from line `from` on.
    fn lines(&self, hash: u64, from: usize) -> impl Iterator<Item = usize> + '_ {
        self.bucket_from(hash, from)
            .iter()
            .copied()
            .filter(move |line| self.hashes[*line] == hash)
    }
}

fn bucket(hash: u64, buckets: usize) -> usize {
    // `buckets` is a power of two; the hash's low bits are well mixed.
    (hash as usize) & (buckets - 1)
}

struct Searcher<'f, 'a> {
    file: &'f FileLines<'a>,
    /// The index of exact lines, and that of normalised lines (which serves the
    /// three lenient passes: lines equal under any of them are equal normalised).
    indexes: [Option<LineIndex>; 2],
}

impl Searcher<'_, '_> {
    /// Where the chunk goes: the line at which its old lines start (or its new lines
    /// go), or the end of the file for a V4A chunk that only adds lines.
    fn locate(
        &mut self,
        path: &str,
        chunk: &Chunk,
        cursor: usize,
        drift: isize,
    ) -> Result<Position, PatchError> {
        let old = &chunk.old_lines;
        let total = self.file.len();
        if let Some(hint) = chunk.line_hint {
            // The line numbers say where: trust them when the lines are there.
            let hinted = hint_index(chunk, hint).checked_add_signed(drift);
            if let Some(at) = hinted
                && at >= cursor
                && fits(at, old.len(), total)
                && self.matches_at(Pass::Exact, old, at)
            {
                return Ok(Position::At(at));
            }
            if old.is_empty() {
                return Err(rejected(
                    path,
                    format!(
                        "the chunk starting `{}` inserts after line {hint}, which is not after the previous chunk or not in the file ({total} lines)",
                        excerpt(chunk.first_line())
                    ),
                ));
            }
        }
        let mut from = cursor;
        if let Some(anchor) = &chunk.anchor {
            from = self.find_anchor(path, anchor, cursor)? + 1;
            if old.is_empty() && !chunk.end_of_file {
                return Ok(Position::Appended { cursor: from });
            }
        }
        if chunk.end_of_file {
            if let Some(at) = total.checked_sub(old.len())
                && at >= from
                && PASSES.iter().any(|pass| self.matches_at(*pass, old, at))
            {
                return Ok(Position::At(at));
            }
            return Err(rejected(
                path,
                format!(
                    "cannot find the lines of the chunk starting `{}` at the end of the file",
                    excerpt(chunk.first_line())
                ),
            ));
        }
        if old.is_empty() {
            // Nothing to find: V4A appends such a chunk.
            return Ok(Position::Appended { cursor: from });
        }
        for pass in PASSES {
            match self.find(pass, old, from)[..] {
                [] => continue,
                [at] => return Ok(Position::At(at)),
                [first, second, ..] => {
                    return Err(PatchError::Ambiguous {
                        path: path.to_owned(),
                        message: format!(
                            "the chunk starting `{}` matches at line {} and at line {}{}; add context lines or an `@@` anchor to make it unique",
                            excerpt(chunk.first_line()),
                            first + 1,
                            second + 1,
                            pass.leniency()
                        ),
                    });
                }
            }
        }
        let first_line = excerpt(chunk.first_line());
        let before = from > 0
            && PASSES
                .iter()
                .any(|pass| !self.find(*pass, old, 0).is_empty());
        Err(rejected(
            path,
            match (&chunk.anchor, before) {
                (_, true) => format!(
                    "the lines of the chunk starting `{first_line}` are only found before the end of the previous chunk or anchor; chunks must be in file order and must not overlap"
                ),
                (Some(anchor), false) => format!(
                    "cannot find the lines of the chunk starting `{first_line}` after its anchor `{}`",
                    excerpt(anchor)
                ),
                (None, false) => {
                    format!("cannot find the lines of the chunk starting `{first_line}`")
                }
            },
        ))
    }

    fn find_anchor(
        &mut self,
        path: &str,
        anchor: &str,
        cursor: usize,
    ) -> Result<usize, PatchError> {
        let anchor = [anchor.to_owned()];
        for pass in PASSES {
            match self.find(pass, &anchor, cursor)[..] {
                [] => continue,
                [at] => return Ok(at),
                [first, second, ..] => {
                    return Err(PatchError::Ambiguous {
                        path: path.to_owned(),
                        message: format!(
                            "the anchor `{}` matches line {} and line {}{}; use a line that occurs once",
                            excerpt(&anchor[0]),
                            first + 1,
                            second + 1,
                            pass.leniency()
                        ),
                    });
                }
            }
        }
        Err(rejected(
            path,
            format!(
                "cannot find the anchor line `{}` after the previous chunk",
                excerpt(&anchor[0])
            ),
        ))
    }

    fn matches_at(&self, pass: Pass, old: &[String], at: usize) -> bool {
        fits(at, old.len(), self.file.len())
            && old
                .iter()
                .enumerate()
                .all(|(offset, line)| pass.matches(self.file.content(at + offset), line))
    }

    /// Up to two positions at or after `from` where `old` (not empty) matches.
    fn find(&mut self, pass: Pass, old: &[String], from: usize) -> Vec<usize> {
        let file = self.file;
        if from + old.len() > file.len() {
            return Vec::new();
        }
        let index_pass = match pass {
            Pass::Exact => Pass::Exact,
            Pass::TrimEnd | Pass::Trim | Pass::Punctuation => Pass::Punctuation,
        };
        let index = self.indexes[usize::from(index_pass != Pass::Exact)]
            .get_or_insert_with(|| LineIndex::new(file, index_pass));
        let mut scratch = String::new();
        let hashes: Vec<u64> = old
            .iter()
            .map(|line| index_pass.hash(line, &mut scratch))
            .collect();
        // Candidates come from the line of the chunk with the fewest occurrences (as
        // its bucket's size estimates), typically a line found once.
        let mut key = 0;
        let mut key_count = usize::MAX;
        for (offset, hash) in hashes.iter().enumerate() {
            let count = index.bucket_from(*hash, from + offset).len();
            if count < key_count {
                key = offset;
                key_count = count;
                if count <= 1 {
                    break;
                }
            }
        }
        let mut found = Vec::new();
        for line in index.lines(hashes[key], from + key) {
            let at = line - key;
            if at + old.len() > file.len() {
                break;
            }
            let matches = old.iter().enumerate().all(|(offset, old_line)| {
                index.hashes[at + offset] == hashes[offset]
                    && pass.matches(file.content(at + offset), old_line)
            });
            if matches {
                found.push(at);
                if found.len() == 2 {
                    break;
                }
            }
        }
        found
    }
}

/// Whether `len` lines starting at line `at` lie within `total` lines (`at` may be
/// anything a patch's line numbers say).
fn fits(at: usize, len: usize, total: usize) -> bool {
    at.checked_add(len).is_some_and(|end| end <= total)
}

/// How far `found` is from `hinted`; 0 for hints too large to mean anything.
fn offset(hinted: usize, found: usize) -> isize {
    match (isize::try_from(hinted), isize::try_from(found)) {
        (Ok(hinted), Ok(found)) => found.checked_sub(hinted).unwrap_or(0),
        _ => 0,
    }
}

/// The 0-based line a line hint points at: the first old line, or with no old lines
/// the line before which the new lines go.
fn hint_index(chunk: &Chunk, hint: usize) -> usize {
    if chunk.old_lines.is_empty() {
        hint
    } else {
        hint.saturating_sub(1)
    }
}

fn rejected(path: &str, message: String) -> PatchError {
    PatchError::HunkRejected {
        path: path.to_owned(),
        message,
    }
}

/// A hand-made chunk whose script does not fit its line lists cannot be applied.
fn check_script(path: &str, chunk: &Chunk) -> Result<(), PatchError> {
    let (mut old, mut new) = (0, 0);
    for edit in &chunk.script {
        match edit {
            LineEdit::Context => {
                old += 1;
                new += 1;
            }
            LineEdit::Remove => old += 1,
            LineEdit::Add => new += 1,
        }
    }
    if old == chunk.old_lines.len() && new == chunk.new_lines.len() {
        Ok(())
    } else {
        Err(rejected(
            path,
            format!(
                "the chunk starting `{}` is malformed: its script does not match its old and new lines",
                excerpt(chunk.first_line())
            ),
        ))
    }
}

/// The new text: unchanged stretches copied in one piece, each chunk's context lines
/// from the file, its added lines with the file's line ending.
fn render(file: &FileLines<'_>, placed: &[(usize, &Chunk)]) -> String {
    let added: usize = placed
        .iter()
        .flat_map(|(_, chunk)| &chunk.new_lines)
        .map(|line| line.len() + file.eol.len())
        .sum();
    let mut out = String::with_capacity(file.text.len() + added);
    let mut copied = 0;
    for &(position, chunk) in placed {
        push_original(&mut out, file, copied, position);
        let mut old_at = position;
        let mut new_lines = chunk.new_lines.iter();
        for edit in &chunk.script {
            match edit {
                LineEdit::Context => {
                    push_original(&mut out, file, old_at, old_at + 1);
                    old_at += 1;
                    new_lines.next();
                }
                LineEdit::Remove => old_at += 1,
                LineEdit::Add => {
                    start_line(&mut out, file.eol);
                    out.push_str(new_lines.next().map_or("", String::as_str));
                    out.push_str(file.eol);
                }
            }
        }
        copied = old_at;
    }
    push_original(&mut out, file, copied, file.len());

    let final_newline = placed
        .iter()
        .rev()
        .find_map(|(_, chunk)| chunk.final_newline)
        .unwrap_or(file.text.is_empty() || file.text.ends_with('\n'));
    if final_newline {
        start_line(&mut out, file.eol);
    } else if out.ends_with('\n') {
        out.pop();
        if out.ends_with('\r') {
            out.pop();
        }
    }
    out
}

/// Copies the original lines `start..end`, endings included.
fn push_original(out: &mut String, file: &FileLines<'_>, start: usize, end: usize) {
    if start < end {
        start_line(out, file.eol);
        out.push_str(file.span(start, end));
    }
}

/// Ends the text so far with a line ending, if it has text without one (the file's
/// last line when it had no final newline and something now follows it).
fn start_line(out: &mut String, eol: &str) {
    if !out.is_empty() && !out.ends_with('\n') {
        out.push_str(eol);
    }
}
