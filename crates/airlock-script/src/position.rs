//! Byte offsets as the lines and columns a person reads: 1-based, lines
//! split at `\n` (as the engine counts them), columns in characters.

use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Position {
    pub line: u32,
    pub column: u32,
}

impl From<Position> for crate::ParseError {
    fn from(position: Position) -> crate::ParseError {
        crate::ParseError {
            message: String::new(),
            line: position.line,
            column: position.column,
        }
    }
}

/// Where each line of a text starts.
pub(crate) struct Lines<'a> {
    text: &'a str,
    starts: Vec<usize>,
}

impl<'a> Lines<'a> {
    pub(crate) fn new(text: &'a str) -> Lines<'a> {
        let mut starts = vec![0];
        starts.extend(memchr_newlines(text));
        Lines { text, starts }
    }

    /// The position of byte `offset` (clamped to the text, and back to the
    /// start of the character it falls in).
    pub(crate) fn at(&self, offset: u32) -> Position {
        let mut offset = (offset as usize).min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let index = self.starts.partition_point(|start| *start <= offset) - 1;
        let start = self.starts[index];
        Position {
            line: u32::try_from(index + 1).unwrap_or(u32::MAX),
            column: u32::try_from(self.text[start..offset].chars().count() + 1).unwrap_or(u32::MAX),
        }
    }
}

impl Lines<'_> {
    /// The byte offset of `position` (clamped to its line).
    pub(crate) fn offset_of(&self, position: Position) -> usize {
        let Some(start) = self.starts.get(position.line.saturating_sub(1) as usize) else {
            return self.text.len();
        };
        let line = &self.text[*start..];
        let line = line.split('\n').next().unwrap_or_default();
        let within = line
            .char_indices()
            .nth(position.column.saturating_sub(1) as usize)
            .map_or(line.len(), |(at, _)| at);
        start + within
    }
}

fn memchr_newlines(text: &str) -> impl Iterator<Item = usize> + '_ {
    text.bytes()
        .enumerate()
        .filter(|(_, byte)| *byte == b'\n')
        .map(|(at, _)| at + 1)
}
