//! The V4A format: `*** Begin Patch`, then `*** Add File:`, `*** Delete File:` and
//! `*** Update File:` sections, then `*** End Patch`.
//!
//! Tolerances beyond the strict grammar, each because agents write it that way:
//! markers may carry surrounding whitespace; a completely empty line inside a chunk
//! is an empty context line (editors and models drop the lone space), except that
//! empty lines directly before a marker or an `@@` separate rather than belong; an
//! `@@` header written as a unified range (`@@ -12,7 +12,8 @@`) gives a line hint
//! instead of an anchor that no line would match.

use super::unified::hunk_header;
use super::{Chunk, Line, LineEdit, PatchError, PatchOp, end_line_number, excerpt, parse_error};

/// The operations of a V4A patch, each with the number of its line.
pub(super) fn parse(
    lines: &[Line<'_>],
    total_lines: usize,
) -> Result<Vec<(usize, PatchOp)>, PatchError> {
    let Some(mut at) = lines.iter().position(|line| !line.is_blank()) else {
        return Err(parse_error(
            end_line_number(lines, total_lines),
            "the patch is empty",
        ));
    };
    if !matches!(marker(lines[at].text), Some(Marker::BeginPatch)) {
        return Err(parse_error(
            lines[at].number,
            format!(
                "expected `*** Begin Patch`, found `{}`",
                excerpt(lines[at].text.trim())
            ),
        ));
    }
    at += 1;
    let mut ops = Vec::new();
    loop {
        let Some(line) = lines.get(at) else {
            return Err(parse_error(
                end_line_number(lines, total_lines),
                "the patch ends without `*** End Patch`",
            ));
        };
        match marker(line.text) {
            Some(Marker::EndPatch) => {
                if let Some(extra) = lines[at + 1..].iter().find(|line| !line.is_blank()) {
                    return Err(parse_error(
                        extra.number,
                        format!(
                            "unexpected text after `*** End Patch`: `{}`",
                            excerpt(extra.text)
                        ),
                    ));
                }
                return Ok(ops);
            }
            Some(Marker::AddFile(path)) => {
                let path = check_path(line, path, "*** Add File:")?;
                let (content, next) = added_content(lines, at + 1, path)?;
                ops.push((
                    line.number,
                    PatchOp::Add {
                        path: path.to_owned(),
                        content,
                    },
                ));
                at = next;
            }
            Some(Marker::DeleteFile(path)) => {
                let path = check_path(line, path, "*** Delete File:")?;
                at += 1;
                while let Some(next) = lines.get(at)
                    && !ends_section(next.text)
                {
                    if !next.is_blank() {
                        return Err(parse_error(
                            next.number,
                            format!(
                                "`*** Delete File: {path}` takes no lines, found `{}`",
                                excerpt(next.text)
                            ),
                        ));
                    }
                    at += 1;
                }
                ops.push((
                    line.number,
                    PatchOp::Delete {
                        path: path.to_owned(),
                    },
                ));
            }
            Some(Marker::UpdateFile(path)) => {
                let path = check_path(line, path, "*** Update File:")?;
                at += 1;
                let mut move_to = None;
                if let Some(next) = lines.get(at)
                    && let Some(Marker::MoveTo(to)) = marker(next.text)
                {
                    move_to = Some(check_path(next, to, "*** Move to:")?.to_owned());
                    at += 1;
                }
                let (chunks, next) = chunks(lines, at, path)?;
                if chunks.is_empty() && move_to.is_none() {
                    return Err(parse_error(
                        line.number,
                        format!("`*** Update File: {path}` has no chunks"),
                    ));
                }
                ops.push((
                    line.number,
                    PatchOp::Update {
                        path: path.to_owned(),
                        move_to,
                        chunks,
                    },
                ));
                at = next;
            }
            Some(Marker::MoveTo(_)) => {
                return Err(parse_error(
                    line.number,
                    "`*** Move to:` must directly follow an `*** Update File:` line",
                ));
            }
            Some(Marker::EndOfFile) => {
                return Err(parse_error(
                    line.number,
                    "`*** End of File` must end a chunk of an `*** Update File:` section",
                ));
            }
            Some(Marker::BeginPatch) => {
                return Err(parse_error(
                    line.number,
                    "`*** Begin Patch` inside the patch (the previous one has no `*** End Patch`)",
                ));
            }
            Some(Marker::Unknown) => {
                return Err(parse_error(
                    line.number,
                    format!(
                        "unknown marker `{}`; expected `*** Add File:`, `*** Delete File:`, `*** Update File:`, `*** Move to:`, `*** End of File` or `*** End Patch`",
                        excerpt(line.text.trim())
                    ),
                ));
            }
            None if line.is_blank() => at += 1,
            None => {
                return Err(parse_error(
                    line.number,
                    format!(
                        "expected `*** Add File:`, `*** Delete File:`, `*** Update File:` or `*** End Patch`, found `{}`",
                        excerpt(line.text)
                    ),
                ));
            }
        }
    }
}

/// A line of the form `*** …`, trimmed.
enum Marker<'a> {
    BeginPatch,
    EndPatch,
    EndOfFile,
    AddFile(&'a str),
    DeleteFile(&'a str),
    UpdateFile(&'a str),
    MoveTo(&'a str),
    Unknown,
}

fn marker(text: &str) -> Option<Marker<'_>> {
    let text = text.trim();
    if !text.starts_with("***") {
        return None;
    }
    let with_path = |prefix: &str| text.strip_prefix(prefix).map(str::trim);
    Some(match text {
        "*** Begin Patch" => Marker::BeginPatch,
        "*** End Patch" => Marker::EndPatch,
        "*** End of File" => Marker::EndOfFile,
        _ => {
            if let Some(path) = with_path("*** Add File:") {
                Marker::AddFile(path)
            } else if let Some(path) = with_path("*** Delete File:") {
                Marker::DeleteFile(path)
            } else if let Some(path) = with_path("*** Update File:") {
                Marker::UpdateFile(path)
            } else if let Some(path) = with_path("*** Move to:") {
                Marker::MoveTo(path)
            } else {
                Marker::Unknown
            }
        }
    })
}

/// Whether a line ends the lines of a section: a known marker, or an unknown one
/// that is not indented (an indented one is a context line such as ` *** note`).
fn ends_section(text: &str) -> bool {
    match marker(text) {
        None => false,
        Some(Marker::Unknown) => text.starts_with("***"),
        Some(_) => true,
    }
}

fn check_path<'a>(line: &Line<'_>, path: &'a str, marker: &str) -> Result<&'a str, PatchError> {
    if path.is_empty() {
        return Err(parse_error(
            line.number,
            format!("the path after `{marker}` is empty"),
        ));
    }
    Ok(path)
}

/// The content of an added file: its `+` lines, each ending with a newline.
fn added_content(
    lines: &[Line<'_>],
    mut at: usize,
    path: &str,
) -> Result<(String, usize), PatchError> {
    let mut content = String::new();
    let mut blank_lines = 0;
    while let Some(line) = lines.get(at)
        && !ends_section(line.text)
    {
        if line.is_blank() {
            blank_lines += 1;
        } else if let Some(text) = line.text.strip_prefix('+') {
            for _ in 0..blank_lines {
                content.push('\n');
            }
            blank_lines = 0;
            content.push_str(text);
            content.push('\n');
        } else {
            return Err(parse_error(
                line.number,
                format!(
                    "every line of the added file `{path}` must start with `+`, found `{}`",
                    excerpt(line.text)
                ),
            ));
        }
        at += 1;
    }
    Ok((content, at))
}

/// The chunks of an `*** Update File:` section, and the index of the line after them.
fn chunks(
    lines: &[Line<'_>],
    mut at: usize,
    path: &str,
) -> Result<(Vec<Chunk>, usize), PatchError> {
    let mut chunks = Vec::new();
    // The chunk being read, with the number of its first line.
    let mut current: Option<(usize, Chunk)> = None;
    let mut empty_lines = 0;
    while let Some(line) = lines.get(at) {
        let text = line.text;
        if ends_section(text) {
            if matches!(marker(text), Some(Marker::EndOfFile)) {
                let Some((_, chunk)) = current.as_mut() else {
                    return Err(parse_error(
                        line.number,
                        "`*** End of File` must end a chunk, but no chunk precedes it",
                    ));
                };
                chunk.end_of_file = true;
                at += 1;
            }
            break;
        }
        if let Some(header) = text.strip_prefix("@@") {
            finish(current.take(), &mut chunks)?;
            empty_lines = 0;
            current = Some((line.number, chunk_header(text, header)));
        } else if text.is_empty() {
            empty_lines += 1;
        } else {
            let edit = match text.as_bytes()[0] {
                b' ' => LineEdit::Context,
                b'-' => LineEdit::Remove,
                b'+' => LineEdit::Add,
                _ => {
                    return Err(parse_error(
                        line.number,
                        format!(
                            "a line in a chunk of `{path}` must start with ` ` (context), `-` (removed) or `+` (added), found `{}`",
                            excerpt(text)
                        ),
                    ));
                }
            };
            let (_, chunk) = current.get_or_insert_with(|| (line.number, Chunk::default()));
            for _ in 0..empty_lines {
                chunk.push(LineEdit::Context, "");
            }
            empty_lines = 0;
            chunk.push(edit, &text[1..]);
        }
        at += 1;
    }
    finish(current, &mut chunks)?;
    Ok((chunks, at))
}

fn chunk_header(line: &str, after_at_signs: &str) -> Chunk {
    if let Some(header) = hunk_header(line) {
        return Chunk {
            line_hint: Some(header.old_start),
            ..Chunk::default()
        };
    }
    let anchor = after_at_signs.trim();
    Chunk {
        anchor: (!anchor.is_empty()).then(|| anchor.to_owned()),
        ..Chunk::default()
    }
}

fn finish(chunk: Option<(usize, Chunk)>, chunks: &mut Vec<Chunk>) -> Result<(), PatchError> {
    let Some((line, mut chunk)) = chunk else {
        return Ok(());
    };
    if chunk.script.is_empty() {
        return Err(parse_error(line, "the chunk has no lines"));
    }
    // Codex's apply_patch leaves every file it updates ending with a line ending (the
    // file's own), even when the last line had none and no chunk touches it.
    chunk.final_newline = Some(true);
    chunks.push(chunk);
    Ok(())
}
