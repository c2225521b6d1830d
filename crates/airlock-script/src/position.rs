//! Byte offsets as the lines and columns a person reads: 1-based, lines
//! split at `\n` (as the engine counts them), columns in characters.

use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Position {
    pub line: u32,
    pub column: u32,
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

fn memchr_newlines(text: &str) -> impl Iterator<Item = usize> + '_ {
    text.bytes()
        .enumerate()
        .filter(|(_, byte)| *byte == b'\n')
        .map(|(at, _)| at + 1)
}
