//! apply_patch's parser and chunk applier, pure.
//!
//! [`parse`] reads a V4A patch (`*** Begin Patch` … `*** End Patch`, the format
//! OpenAI's apply_patch tool uses) or a unified diff (`---`/`+++`/`@@`, as `diff -u`
//! and `git diff` write it) into a [`Patch`]: a list of [`PatchOp`]s, each adding,
//! deleting or updating one file. [`apply_chunks`] applies an update's [`Chunk`]s to
//! the file's current text. Reading and writing the files is the caller's business.
//!
//! A unified diff that `git apply` accepts gives exactly git's bytes: its hunks are
//! applied as git applies them (byte-exact lines, line endings included, placed
//! nearest their new line numbers; added lines keep the patch's own line endings),
//! and an added file is the hunk's bytes as they are. Only where git would refuse
//! does the lenient search below take over.
//!
//! Otherwise chunks apply in order, each after the previous one. A unified hunk goes
//! where its line numbers say (shifted as far as the hunks before it were found from
//! theirs) when its old lines are exactly there. Otherwise its lines are searched
//! for: after its anchor line if it has one (V4A `@@ fn main() {`), only at the end
//! of the file if it is marked `*** End of File`. The search is lenient but never
//! guesses: exactly first, then ignoring trailing whitespace, then ignoring
//! surrounding whitespace, then also ignoring whitespace runs and punctuation style
//! (curly quotes, dashes); the first of these passes that finds the lines decides,
//! and lines it finds in more than one place are [`PatchError::Ambiguous`]. A
//! unified hunk without old lines goes at its line number.
//!
//! V4A follows Codex's `apply_patch` byte for byte where it applies: a chunk without
//! old lines goes at the end of the file (after checking its anchor), an updated
//! file always ends with a line ending (its first line's), and added lines take the
//! file's line ending while context lines keep their own.
//!
//! ```
//! use airlock_core::patch::{PatchFormat, PatchOp, apply_chunks, parse};
//!
//! let patch = parse(
//!     "*** Begin Patch\n*** Update File: src/lib.rs\n@@ fn main() {\n-    old();\n+    new();\n*** End Patch\n",
//!     PatchFormat::Auto,
//! )?;
//! assert_eq!(patch.format, PatchFormat::V4a);
//! let PatchOp::Update { path, chunks, .. } = &patch.ops[0] else { unreachable!() };
//! let after = apply_chunks(path, "fn main() {\n    old();\n}\n", chunks)?;
//! assert_eq!(after, "fn main() {\n    new();\n}\n");
//! # Ok::<(), airlock_core::patch::PatchError>(())
//! ```

mod apply;
mod git;
mod unified;
mod v4a;

#[cfg(test)]
mod tests;

use std::collections::HashMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::ErrorCode;

pub use apply::apply_chunks;

/// The `patch_format` parameter of apply_patch, and the format [`parse`] detected.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PatchFormat {
    /// V4A when the text starts with `*** Begin Patch`, unified when it starts with
    /// `---` or `diff --git`.
    #[default]
    Auto,
    V4a,
    Unified,
}

/// A parsed patch: the format it was written in and its file operations, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Patch {
    /// [`PatchFormat::V4a`] or [`PatchFormat::Unified`], never `Auto`.
    pub format: PatchFormat,
    /// At least one; no two name the same path (as `path` or `move_to`).
    pub ops: Vec<PatchOp>,
}

/// One file operation of a patch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatchOp {
    /// Create `path` with `content`.
    Add { path: String, content: String },
    /// Delete `path`.
    Delete { path: String },
    /// Apply `chunks` to `path` (see [`apply_chunks`]), then move it to `move_to`.
    /// A pure rename has no chunks.
    Update {
        path: String,
        move_to: Option<String>,
        chunks: Vec<Chunk>,
    },
}

impl PatchOp {
    /// The path the operation reads or creates.
    pub fn path(&self) -> &str {
        match self {
            PatchOp::Add { path, .. } | PatchOp::Delete { path } | PatchOp::Update { path, .. } => {
                path
            }
        }
    }
}

/// What one line of a chunk does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LineEdit {
    /// A line kept from the file: the next line of both `old_lines` and `new_lines`.
    Context,
    /// A removed line: the next line of `old_lines`.
    Remove,
    /// An added line: the next line of `new_lines`.
    Add,
}

/// One contiguous change to a file: the lines it expects and the lines it leaves.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Chunk {
    /// The text after `@@ ` in V4A: a line the chunk comes after.
    pub anchor: Option<String>,
    /// Context and removed lines, in order, without their prefix or line ending.
    pub old_lines: Vec<String>,
    /// Context and added lines, in order, without their prefix or line ending.
    pub new_lines: Vec<String>,
    /// The chunk's lines in order; it says which of `old_lines` are context (kept
    /// with the file's own text) and which are removed. [`Chunk::push`] keeps it
    /// consistent with the two line lists.
    pub script: Vec<LineEdit>,
    /// The old lines end the file (V4A `*** End of File`).
    pub end_of_file: bool,
    /// Unified diffs: the 1-based old start line of `@@ -l,n`. With no old lines it
    /// is the line after which the new lines go (0: before the first).
    pub line_hint: Option<usize>,
    /// Whether the file ends with a newline after this chunk, when the patch says so
    /// (a unified diff's `\ No newline at end of file`). `None` keeps the file's own.
    pub final_newline: Option<bool>,
    /// Unified diffs: the hunk byte for byte, for applying it exactly as `git apply`
    /// does before any leniency is tried.
    pub exact: Option<ExactHunk>,
}

/// A unified hunk's lines exactly as the patch has them, with their line endings:
/// `"\r\n"` or `"\n"`, or none where `\ No newline at end of file` follows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExactHunk {
    /// The 1-based new start line of `@@ -l,n +l,n @@`.
    pub new_start: usize,
    /// Context and removed lines, in order.
    pub old: Vec<String>,
    /// Context and added lines, in order.
    pub new: Vec<String>,
}

impl Chunk {
    /// Appends a line to the chunk, keeping `old_lines`, `new_lines` and `script` in
    /// step.
    pub fn push(&mut self, edit: LineEdit, line: impl Into<String>) {
        let line = line.into();
        match edit {
            LineEdit::Context => {
                self.old_lines.push(line.clone());
                self.new_lines.push(line);
            }
            LineEdit::Remove => self.old_lines.push(line),
            LineEdit::Add => self.new_lines.push(line),
        }
        self.script.push(edit);
    }

    /// The line that names the chunk in messages: its first old line, else its first
    /// new line, else its anchor.
    pub fn first_line(&self) -> &str {
        self.old_lines
            .first()
            .or(self.new_lines.first())
            .or(self.anchor.as_ref())
            .map_or("", String::as_str)
    }
}

/// Why a patch could not be parsed or applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// The text is not a well-formed patch; `line` is 1-based in the text given.
    #[error("line {line}: {message}")]
    Parse { line: usize, message: String },
    /// A chunk's lines are not in the file (after the previous chunk).
    #[error("`{path}`: {message}")]
    HunkRejected { path: String, message: String },
    /// A chunk's lines are in the file more than once.
    #[error("`{path}`: {message}")]
    Ambiguous { path: String, message: String },
}

impl PatchError {
    /// The envelope's error code for this error.
    pub fn code(&self) -> ErrorCode {
        match self {
            PatchError::Parse { .. } => ErrorCode::ParseError,
            PatchError::HunkRejected { .. } => ErrorCode::HunkRejected,
            PatchError::Ambiguous { .. } => ErrorCode::Ambiguous,
        }
    }
}

/// Parses a patch in `format` (or the one `Auto` detects).
///
/// The text may be wrapped in a shell heredoc (`apply_patch <<'EOF'` … `EOF`), as
/// agents trained on a shell tool tend to write it.
pub fn parse(text: &str, format: PatchFormat) -> Result<Patch, PatchError> {
    let all_lines = split_lines(text);
    let lines = unwrap_heredoc(&all_lines)?;
    let format = match format {
        PatchFormat::V4a | PatchFormat::Unified => format,
        PatchFormat::Auto => detect(lines, all_lines.len())?,
    };
    let ops = match format {
        PatchFormat::V4a => v4a::parse(lines, all_lines.len())?,
        PatchFormat::Unified | PatchFormat::Auto => unified::parse(lines, all_lines.len())?,
    };
    check_paths(&ops, lines, all_lines.len())?;
    Ok(Patch {
        format,
        ops: ops.into_iter().map(|(_, op)| op).collect(),
    })
}

/// A line of the patch text with its 1-based number, without `\n` or `\r\n`
/// (`text`) and with whatever ended it (`raw`).
#[derive(Debug, Clone, Copy)]
struct Line<'a> {
    number: usize,
    text: &'a str,
    raw: &'a str,
}

impl Line<'_> {
    fn is_blank(&self) -> bool {
        self.text.trim().is_empty()
    }
}

fn parse_error(line: usize, message: impl Into<String>) -> PatchError {
    PatchError::Parse {
        line,
        message: message.into(),
    }
}

/// `text` shortened for a message, on a character boundary.
fn excerpt(text: &str) -> String {
    const MAX_CHARS: usize = 80;
    match text.char_indices().nth(MAX_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

fn split_lines(text: &str) -> Vec<Line<'_>> {
    text.split_inclusive('\n')
        .enumerate()
        .map(|(index, raw)| {
            let line = raw.strip_suffix('\n').unwrap_or(raw);
            Line {
                number: index + 1,
                text: line.strip_suffix('\r').unwrap_or(line),
                raw,
            }
        })
        .collect()
}

/// The number to report for "the text ended too early".
fn end_line_number(lines: &[Line<'_>], total_lines: usize) -> usize {
    lines.last().map_or(total_lines.max(1), |line| line.number)
}

/// The lines inside a heredoc wrapper, or all of them when there is none.
fn unwrap_heredoc<'l, 'a>(lines: &'l [Line<'a>]) -> Result<&'l [Line<'a>], PatchError> {
    let Some(first) = lines.iter().position(|line| !line.is_blank()) else {
        return Ok(lines);
    };
    let Some(delimiter) = heredoc_delimiter(lines[first].text) else {
        return Ok(lines);
    };
    let last = lines.iter().rposition(|line| !line.is_blank());
    match last {
        Some(last) if last > first && lines[last].text.trim() == delimiter => {
            Ok(&lines[first + 1..last])
        }
        _ => Err(parse_error(
            lines[first].number,
            format!("the heredoc is not closed: the last line should be `{delimiter}`"),
        )),
    }
}

/// The delimiter word of a heredoc opening line such as `apply_patch <<'EOF'`.
fn heredoc_delimiter(line: &str) -> Option<&str> {
    let line = line.trim();
    if line.starts_with("***") || line.starts_with("---") || line.starts_with("diff ") {
        return None;
    }
    let (_, rest) = line.split_once("<<")?;
    let rest = rest.strip_prefix('-').unwrap_or(rest).trim_start();
    let (quote, rest) = match rest.chars().next()? {
        quote @ ('\'' | '"') => (Some(quote), &rest[1..]),
        _ => (None, rest),
    };
    let word_end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    let (word, rest) = rest.split_at(word_end);
    let rest = match quote {
        Some(quote) => rest.strip_prefix(quote)?,
        None => rest,
    };
    (!word.is_empty() && rest.trim().is_empty()).then_some(word)
}

fn detect(lines: &[Line<'_>], total_lines: usize) -> Result<PatchFormat, PatchError> {
    let Some(first) = lines.iter().find(|line| !line.is_blank()) else {
        return Err(parse_error(
            end_line_number(lines, total_lines),
            "the patch is empty",
        ));
    };
    let text = first.text.trim();
    if text == "*** Begin Patch" {
        Ok(PatchFormat::V4a)
    } else if text.starts_with("--- ") || text.starts_with("diff --git ") {
        Ok(PatchFormat::Unified)
    } else {
        Err(parse_error(
            first.number,
            format!(
                "neither a V4A patch (starting `*** Begin Patch`) nor a unified diff (starting `---` or `diff --git`) was recognised; found `{}`",
                excerpt(text)
            ),
        ))
    }
}

/// Rejects an empty patch, an empty path, and two operations on one path, which
/// could not be applied all or nothing in any order.
fn check_paths(
    ops: &[(usize, PatchOp)],
    lines: &[Line<'_>],
    total_lines: usize,
) -> Result<(), PatchError> {
    if ops.is_empty() {
        return Err(parse_error(
            end_line_number(lines, total_lines),
            "the patch changes no file",
        ));
    }
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for (line, op) in ops {
        let move_to = match op {
            // A move onto the same path is no move, not a second operation.
            PatchOp::Update { path, move_to, .. } => move_to.as_deref().filter(|to| to != path),
            PatchOp::Add { .. } | PatchOp::Delete { .. } => None,
        };
        for path in std::iter::once(op.path()).chain(move_to) {
            if path.is_empty() {
                return Err(parse_error(*line, "the operation names an empty path"));
            }
            if let Some(first) = seen.insert(path, *line) {
                return Err(parse_error(
                    *line,
                    format!(
                        "`{path}` is already changed by the operation on line {first}; a patch may touch each path once"
                    ),
                ));
            }
        }
    }
    Ok(())
}
