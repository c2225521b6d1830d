//! `read_file` (spec 000, DESIGN §5): a line range or a byte window of one file,
//! capped in bytes, with the hash of the whole file.
//!
//! Lines are `\n`-terminated (the terminator belongs to its line; a last line
//! without one still counts). The file is streamed once: every byte is hashed
//! for `base_hash`, and only the selected bytes (at most `max_bytes`) are kept.
//!
//! - Line mode (no `offset_bytes`): lines `start_line..=end_line`. When they do
//!   not fit in `max_bytes`, the content stops after the last whole line that
//!   fits; if not even the first line fits, it is cut inside that line (in
//!   `utf8` mode at a character boundary).
//! - Byte mode (`offset_bytes` given; `start_line`/`end_line` are ignored):
//!   up to `max_bytes` bytes from the offset. In `utf8` mode a character split
//!   by the cap is left out; an offset inside a character is `invalid_utf8`.
//!
//! `returned_range` names the lines the content touches: the line of its first
//! byte and the line of its last byte; empty content gives `end_line =
//! start_line - 1`. `truncated` says that the file goes on after the content
//! (the line range, the default 200 lines included, or the byte cap stopped
//! it), and then `next_start_line` and `next_offset_bytes` say where to go on
//! (the line and byte after the content); `total_lines` is always given.
//!
//! `encoding: bytes` returns the bytes as standard base64 (with padding), which
//! is what JSON-carrying protocols (MCP included) use for binary content.
//!
//! `output_mode`: content longer than `max_inline_bytes` (after base64, in
//! `bytes` mode) is an error under `require_inline`; under `auto` it is stored
//! as a blob and `data` carries `blob` instead of `content` (see the `blob`
//! module, which also says what happens without a blob dir).

use std::io::{self, Read};

use serde::{Deserialize, Serialize};

use crate::blob::{BlobRef, OutputMode, shape_output};
use crate::error::FsError;
use crate::hash::ContentHasher;
use crate::sandbox::{Access, Sandbox};

/// Arguments of `read_file`, as the tool call carries them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadParams {
    pub path: String,
    /// First line, 1-based; default 1.
    #[serde(default)]
    pub start_line: Option<u64>,
    /// Last line, inclusive; default `start_line + 199`.
    #[serde(default)]
    pub end_line: Option<u64>,
    /// Read a byte window from here instead of a line range.
    #[serde(default)]
    pub offset_bytes: Option<u64>,
    /// Default `max_read_bytes_default`, never above `max_read_bytes_hard`.
    #[serde(default)]
    pub max_bytes: Option<u64>,
    #[serde(default)]
    pub encoding: Encoding,
    #[serde(default)]
    pub output_mode: OutputMode,
}

impl ReadParams {
    /// Parses the JSON arguments of a call; a bad argument is `invalid_input`.
    pub fn from_args(args: &serde_json::Value) -> Result<ReadParams, FsError> {
        ReadParams::deserialize(args).map_err(|error| FsError::InvalidInput {
            message: error.to_string(),
        })
    }
}

#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Encoding {
    /// The content as text; bytes that are not UTF-8 are `invalid_utf8`.
    #[default]
    Utf8,
    /// The content as standard base64.
    Bytes,
}

/// The `data` of a successful `read_file`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadData {
    /// The requested path, normalized, root-relative.
    pub path: String,
    /// The selected text (base64 in `bytes` mode); absent when it went to a
    /// blob.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Where the content went when it was too large to return inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blob: Option<BlobRef>,
    pub returned_range: LineRange,
    /// Hash of the whole file, whatever part was returned.
    pub base_hash: String,
    /// The file goes on after the content.
    pub truncated: bool,
    /// Lines in the whole file (a last line without `\n` counts).
    pub total_lines: u64,
    /// When truncated: the line after the content (the same line when the cap
    /// cut one), to continue with `start_line`.
    pub next_start_line: Option<u64>,
    /// When truncated: the byte after the content, to continue with
    /// `offset_bytes`.
    pub next_offset_bytes: Option<u64>,
    pub size_bytes: u64,
    /// The cap that applied, after clamping.
    pub max_bytes: u64,
    pub encoding: Encoding,
}

/// Inclusive, 1-based line numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineRange {
    pub start_line: u64,
    pub end_line: u64,
}

/// Reads part of a file through the sandbox.
pub fn read_file(sandbox: &Sandbox, params: &ReadParams) -> Result<ReadData, FsError> {
    let config = sandbox.config();
    let max_bytes = params
        .max_bytes
        .unwrap_or(config.max_read_bytes_default)
        .min(config.max_read_bytes_hard);
    if max_bytes == 0 {
        return Err(FsError::InvalidInput {
            message: "max_bytes must be at least 1".to_owned(),
        });
    }
    let selection = match params.offset_bytes {
        Some(offset) => Selection::Bytes { offset },
        None => {
            let start = params.start_line.unwrap_or(1);
            if start == 0 {
                return Err(FsError::InvalidInput {
                    message: "start_line must be at least 1".to_owned(),
                });
            }
            let end = params.end_line.unwrap_or(start.saturating_add(199));
            if end < start {
                return Err(FsError::InvalidInput {
                    message: format!("end_line {end} is before start_line {start}"),
                });
            }
            Selection::Lines { start, end }
        }
    };
    let path = sandbox.resolve("path", &params.path, Access::Read)?;
    let cap = usize::try_from(max_bytes).unwrap_or(usize::MAX);
    let scanned = match path.staged() {
        // What a code-mode run staged, read as the file.
        Some(Some(staged)) => scan(staged.content.as_slice(), selection, cap),
        _ => {
            let (file, _) = path.open_for_read()?;
            scan(file, selection, cap)
        }
    };
    let scan = scanned
        .map_err(|error| FsError::io(format!("cannot read `{}`", path.requested()), error))?;

    let mut returned = scan.content;
    if params.encoding == Encoding::Utf8
        && let Err(error) = std::str::from_utf8(&returned)
    {
        // A character cut by the cap is left out; anything else that is not
        // UTF-8 is an error.
        if scan.truncated && error.error_len().is_none() {
            returned.truncate(error.valid_up_to());
        } else {
            return Err(FsError::InvalidUtf8 {
                path: sandbox.shown(path.requested()).into_owned(),
            });
        }
    }
    let end_line = match returned.split_last() {
        Some((_, init)) => scan.start_line + count_newlines(init),
        None => scan.start_line - 1,
    };
    let next_offset = scan.content_start + returned.len() as u64;
    let truncated = next_offset < scan.size;
    let next_start_line = scan.start_line + count_newlines(&returned);
    let content = match params.encoding {
        Encoding::Utf8 => String::from_utf8(returned).map_err(|_| FsError::InvalidUtf8 {
            path: sandbox.shown(path.requested()).into_owned(),
        })?,
        Encoding::Bytes => base64(&returned),
    };
    let (content, blob) = shape_output(sandbox, content, params.output_mode)?.into_fields();
    Ok(ReadData {
        path: sandbox.shown(path.requested()).into_owned(),
        content,
        blob,
        returned_range: LineRange {
            start_line: scan.start_line,
            end_line,
        },
        base_hash: scan.hash,
        truncated,
        total_lines: scan.total_lines,
        next_start_line: truncated.then_some(next_start_line),
        next_offset_bytes: truncated.then_some(next_offset),
        size_bytes: scan.size,
        max_bytes,
        encoding: params.encoding,
    })
}

#[derive(Debug, Clone, Copy)]
enum Selection {
    Lines { start: u64, end: u64 },
    Bytes { offset: u64 },
}

struct Scan {
    content: Vec<u8>,
    /// Where the content starts in the file (its size when nothing was
    /// selected).
    content_start: u64,
    /// Line of the first selected byte (or where it would be).
    start_line: u64,
    /// The cap cut the selection.
    truncated: bool,
    size: u64,
    total_lines: u64,
    hash: String,
}

/// One pass over the file: hash everything, keep the selection up to `cap`.
fn scan(mut reader: impl Read, selection: Selection, cap: usize) -> io::Result<Scan> {
    let mut hasher = ContentHasher::new();
    let mut content = Vec::new();
    let mut overflow = false;
    let mut done = false;
    // Line number of the next byte.
    let mut line: u64 = 1;
    // Line mode: where the last whole line that fits ends in `content`.
    let mut whole_lines_end: Option<usize> = None;
    let mut start_line = match selection {
        Selection::Lines { start, .. } => Some(start),
        Selection::Bytes { .. } => None,
    };
    let mut buffer = vec![0u8; 64 * 1024];
    let mut content_start: Option<u64> = None;
    let mut newlines: u64 = 0;
    let mut last_byte = None;
    loop {
        let n = match reader.read(&mut buffer) {
            Ok(0) => break,
            Ok(n) => n,
            Err(error) if error.kind() == io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(error),
        };
        let chunk = &buffer[..n];
        let position = hasher.len();
        hasher.update(chunk);
        newlines += count_newlines(chunk);
        last_byte = chunk.last().copied();
        if done {
            continue;
        }
        match selection {
            Selection::Lines { start, end } => {
                let mut rest = chunk;
                while !rest.is_empty() {
                    let at = position + (chunk.len() - rest.len()) as u64;
                    let (segment, ends_line) = match rest.iter().position(|&b| b == b'\n') {
                        Some(i) => (&rest[..=i], true),
                        None => (rest, false),
                    };
                    rest = &rest[segment.len()..];
                    if line > end {
                        done = true;
                        break;
                    }
                    if line >= start {
                        content_start.get_or_insert(at);
                        let room = cap - content.len();
                        if segment.len() <= room {
                            content.extend_from_slice(segment);
                            if ends_line {
                                whole_lines_end = Some(content.len());
                            }
                        } else {
                            content.extend_from_slice(&segment[..room]);
                            overflow = true;
                            done = true;
                            break;
                        }
                    }
                    if ends_line {
                        line += 1;
                    }
                }
            }
            Selection::Bytes { offset } => {
                let skip = usize::try_from(offset.saturating_sub(position))
                    .unwrap_or(usize::MAX)
                    .min(chunk.len());
                line += count_newlines(&chunk[..skip]);
                if skip == chunk.len() {
                    continue;
                }
                start_line.get_or_insert(line);
                content_start.get_or_insert(position + skip as u64);
                let available = &chunk[skip..];
                let room = cap - content.len();
                if available.len() <= room {
                    content.extend_from_slice(available);
                } else {
                    content.extend_from_slice(&available[..room]);
                    overflow = true;
                    done = true;
                }
            }
        }
    }
    // The cap cut the lines: keep the whole lines that fit, if any did.
    if let Selection::Lines { .. } = selection
        && overflow
        && let Some(end) = whole_lines_end
    {
        content.truncate(end);
    }
    let size = hasher.len();
    Ok(Scan {
        content,
        content_start: content_start.unwrap_or(size),
        start_line: start_line.unwrap_or(line),
        truncated: overflow,
        size,
        total_lines: newlines + u64::from(last_byte.is_some_and(|byte| byte != b'\n')),
        hash: hasher.finish(),
    })
}

fn count_newlines(bytes: &[u8]) -> u64 {
    bytes.iter().filter(|&&b| b == b'\n').count() as u64
}

/// Standard base64 with padding (RFC 4648 §4).
fn base64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc_4648_vectors() {
        let cases = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (input, expected) in cases {
            assert_eq!(base64(input.as_bytes()), expected, "{input}");
        }
        assert_eq!(base64(&[0xff, 0xfe, 0x00]), "//4A");
    }
}
