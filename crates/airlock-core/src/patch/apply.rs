//! Locating chunks in a file's text and applying them.
//!
//! Each pass compares lines through a key (the line itself, without trailing
//! whitespace, trimmed, or trimmed with whitespace runs and punctuation normalised).
//! A pass's index (the hash of every file line's key, chained by hash) is built the
//! first time the pass is needed and then serves every chunk, so a search costs the
//! occurrences of the chunk's rarest line rather than a scan of the file.

use super::{Chunk, LineEdit, PatchError, excerpt};
use crate::edit::ascii_punctuation;

/// Applies `chunks` to `original`, the current text of `path` (named in errors).
///
/// Each chunk is located after the previous one (see the module documentation of
/// [`crate::patch`] for the passes); context lines keep the file's own text, removed
/// lines go and added lines come in with the file's line ending (CRLF when its
/// first line ends so). The file keeps or lacks its final newline as before unless a
/// chunk says otherwise ([`Chunk::final_newline`]).
pub fn apply_chunks(path: &str, original: &str, chunks: &[Chunk]) -> Result<String, PatchError> {
    let file = FileLines::new(original);
    let mut searcher = Searcher {
        file: &file,
        indexes: [None, None, None, None],
    };
    let mut positions = Vec::with_capacity(chunks.len());
    let mut cursor = 0;
    // How far the chunks with line hints were found from their hints so far.
    let mut drift: isize = 0;
    for chunk in chunks {
        check_script(path, chunk)?;
        let position = searcher.locate(path, chunk, cursor, drift)?;
        if let Some(hint) = chunk.line_hint {
            drift = position as isize - hint_index(chunk, hint) as isize;
        }
        cursor = position + chunk.old_lines.len();
        positions.push(position);
    }
    Ok(render(&file, chunks, &positions))
}

/// A file's text cut into lines, by byte offsets.
struct FileLines<'a> {
    text: &'a str,
    lines: Vec<FileLine>,
    /// The line ending for inserted lines.
    eol: &'static str,
}

struct FileLine {
    start: usize,
    /// Where the line's text ends: before `\n` or `\r\n`.
    content_end: usize,
    /// After the line ending (equal to `content_end` for a last line without one).
    end: usize,
}

impl<'a> FileLines<'a> {
    fn new(text: &'a str) -> FileLines<'a> {
        let mut lines = Vec::with_capacity(text.len() / 32 + 1);
        let mut start = 0;
        for piece in text.split_inclusive('\n') {
            let content = match piece.strip_suffix('\n') {
                Some(line) => line.strip_suffix('\r').unwrap_or(line),
                None => piece,
            };
            lines.push(FileLine {
                start,
                content_end: start + content.len(),
                end: start + piece.len(),
            });
            start += piece.len();
        }
        let eol = match lines.first() {
            Some(line) if line.end - line.content_end == 2 => "\r\n",
            _ => "\n",
        };
        FileLines { text, lines, eol }
    }

    fn len(&self) -> usize {
        self.lines.len()
    }

    fn content(&self, index: usize) -> &'a str {
        let line = &self.lines[index];
        &self.text[line.start..line.content_end]
    }
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

    fn hash(self, line: &str) -> u64 {
        match self {
            Pass::Exact => hash_bytes(line.as_bytes()),
            Pass::TrimEnd => hash_bytes(line.trim_end().as_bytes()),
            Pass::Trim => hash_bytes(line.trim().as_bytes()),
            Pass::Punctuation => hash_chars(normalized(line)),
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
    let mut hash = (bytes.len() as u64).wrapping_mul(HASH_MULTIPLIER);
    let mut words = bytes.chunks_exact(8);
    for word in &mut words {
        let mut buffer = [0; 8];
        buffer.copy_from_slice(word);
        hash = (hash.rotate_left(23) ^ u64::from_le_bytes(buffer)).wrapping_mul(HASH_MULTIPLIER);
    }
    let rest = words.remainder();
    if !rest.is_empty() {
        let mut buffer = [0; 8];
        buffer[..rest.len()].copy_from_slice(rest);
        hash = (hash.rotate_left(23) ^ u64::from_le_bytes(buffer)).wrapping_mul(HASH_MULTIPLIER);
    }
    mix(hash)
}

fn hash_chars(chars: impl Iterator<Item = char>) -> u64 {
    let mut hash = HASH_MULTIPLIER;
    for c in chars {
        hash = (hash.rotate_left(23) ^ u64::from(c)).wrapping_mul(HASH_MULTIPLIER);
    }
    mix(hash)
}

fn mix(hash: u64) -> u64 {
    let hash = (hash ^ (hash >> 31)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    hash ^ (hash >> 29)
}

const NO_LINE: usize = usize::MAX;

/// The file's lines chained by the hash of their key under one pass.
struct LineIndex {
    hashes: Vec<u64>,
    /// The first line of each bucket's chain; chains run in ascending line order.
    heads: Vec<usize>,
    next: Vec<usize>,
}

impl LineIndex {
    fn new(file: &FileLines<'_>, pass: Pass) -> LineIndex {
        let hashes: Vec<u64> = (0..file.len())
            .map(|index| pass.hash(file.content(index)))
            .collect();
        let mut heads = vec![NO_LINE; (hashes.len() * 2).next_power_of_two().max(16)];
        let mut next = vec![NO_LINE; hashes.len()];
        let mask = heads.len() - 1;
        for (index, hash) in hashes.iter().enumerate().rev() {
            let bucket = &mut heads[*hash as usize & mask];
            next[index] = *bucket;
            *bucket = index;
        }
        LineIndex {
            hashes,
            heads,
            next,
        }
    }

    /// The lines whose key hashes to `hash`, ascending, from line `from` on.
    fn lines(&self, hash: u64, from: usize) -> impl Iterator<Item = usize> + '_ {
        let mut at = self.heads[hash as usize & (self.heads.len() - 1)];
        std::iter::from_fn(move || {
            while at != NO_LINE {
                let line = at;
                at = self.next[line];
                if line >= from && self.hashes[line] == hash {
                    return Some(line);
                }
            }
            None
        })
    }
}

struct Searcher<'f, 'a> {
    file: &'f FileLines<'a>,
    indexes: [Option<LineIndex>; 4],
}

impl Searcher<'_, '_> {
    /// The line at which the chunk's old lines start (or its new lines go).
    fn locate(
        &mut self,
        path: &str,
        chunk: &Chunk,
        cursor: usize,
        drift: isize,
    ) -> Result<usize, PatchError> {
        let old = &chunk.old_lines;
        let total = self.file.len();
        if let Some(hint) = chunk.line_hint {
            // The line numbers say where: trust them when the lines are there.
            let hinted = hint_index(chunk, hint).checked_add_signed(drift);
            if let Some(at) = hinted
                && at >= cursor
                && at + old.len() <= total
                && self.matches_at(Pass::Exact, old, at)
            {
                return Ok(at);
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
            if old.is_empty() {
                return Ok(from);
            }
        }
        if chunk.end_of_file {
            if let Some(at) = total.checked_sub(old.len())
                && at >= from
                && PASSES.iter().any(|pass| self.matches_at(*pass, old, at))
            {
                return Ok(at);
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
            // Nothing to find and no anchor: V4A appends such a chunk.
            return Ok(total);
        }
        for pass in PASSES {
            match self.find(pass, old, from)[..] {
                [] => continue,
                [at] => return Ok(at),
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

    fn find_anchor(&mut self, path: &str, anchor: &str, cursor: usize) -> Result<usize, PatchError> {
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
        at + old.len() <= self.file.len()
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
        let index = self.indexes[pass as usize].get_or_insert_with(|| LineIndex::new(file, pass));
        let hashes: Vec<u64> = old.iter().map(|line| pass.hash(line)).collect();
        // Walk the chain of the rarest line; counting stops early past a cap, since
        // beyond it the choice hardly matters and long chains are costly to count.
        const COUNT_CAP: usize = 64;
        let mut key = 0;
        let mut key_count = usize::MAX;
        for (offset, hash) in hashes.iter().enumerate() {
            let count = index
                .lines(*hash, from + offset)
                .take(COUNT_CAP.min(key_count))
                .count();
            if count < key_count {
                key = offset;
                key_count = count;
                if count == 0 {
                    return Vec::new();
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
fn render(file: &FileLines<'_>, chunks: &[Chunk], positions: &[usize]) -> String {
    let added: usize = chunks
        .iter()
        .flat_map(|chunk| &chunk.new_lines)
        .map(|line| line.len() + file.eol.len())
        .sum();
    let mut out = String::with_capacity(file.text.len() + added);
    let mut copied = 0;
    for (chunk, &position) in chunks.iter().zip(positions) {
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

    let final_newline = chunks
        .iter()
        .rev()
        .find_map(|chunk| chunk.final_newline)
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
        out.push_str(&file.text[file.lines[start].start..file.lines[end - 1].end]);
    }
}

/// Ends the text so far with a line ending, if it has text without one (the file's
/// last line when it had no final newline and something now follows it).
fn start_line(out: &mut String, eol: &str) {
    if !out.is_empty() && !out.ends_with('\n') {
        out.push_str(eol);
    }
}
