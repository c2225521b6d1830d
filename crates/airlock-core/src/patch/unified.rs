//! Unified diffs as `diff -u` and `git diff` write them: `---`/`+++` headers, `@@`
//! hunks, optionally `diff --git` sections with their extended header lines.

use super::{
    Chunk, ExactHunk, Line, LineEdit, PatchError, PatchOp, end_line_number, excerpt, parse_error,
};

/// The numbers of a hunk header `@@ -old_start,old_len +new_start,new_len @@`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct HunkHeader {
    pub(super) old_start: usize,
    pub(super) old_len: usize,
    pub(super) new_start: usize,
    pub(super) new_len: usize,
}

/// Reads a hunk header line; a missing length is 1, and any text after the closing
/// `@@` (the section heading) is ignored.
pub(super) fn hunk_header(line: &str) -> Option<HunkHeader> {
    let rest = line.strip_prefix("@@")?.trim_start().strip_prefix('-')?;
    let (old, rest) = rest.split_once(' ')?;
    let rest = rest.trim_start().strip_prefix('+')?;
    let (new, rest) = rest.split_once(' ')?;
    rest.trim_start().strip_prefix("@@")?;
    let (old_start, old_len) = range(old)?;
    let (new_start, new_len) = range(new)?;
    Some(HunkHeader {
        old_start,
        old_len,
        new_start,
        new_len,
    })
}

/// The operations of a unified diff, each with the number of its first line.
pub(super) fn parse(
    lines: &[Line<'_>],
    total_lines: usize,
) -> Result<Vec<(usize, PatchOp)>, PatchError> {
    let mut ops = Vec::new();
    let mut at = 0;
    loop {
        while lines.get(at).is_some_and(Line::is_blank) {
            at += 1;
        }
        let Some(line) = lines.get(at) else {
            break;
        };
        let (op, next) = file_section(lines, at, total_lines)?;
        ops.extend(op.map(|op| (line.number, op)));
        at = next;
    }
    Ok(ops)
}

fn range(text: &str) -> Option<(usize, usize)> {
    let number = |text: &str| {
        (!text.is_empty() && text.bytes().all(|byte| byte.is_ascii_digit()))
            .then(|| text.parse::<usize>().ok())
            .flatten()
    };
    match text.split_once(',') {
        Some((start, len)) => Some((number(start)?, number(len)?)),
        None => Some((number(text)?, 1)),
    }
}

/// What a `diff --git` section's extended header lines said.
#[derive(Default)]
struct GitHeader {
    /// The text after `diff --git `.
    paths: String,
    new_file: bool,
    deleted_file: bool,
    rename_from: Option<String>,
    rename_to: Option<String>,
}

/// One file's section: the operation (none for a mode change) and the index of the
/// line after the section.
fn file_section(
    lines: &[Line<'_>],
    mut at: usize,
    total_lines: usize,
) -> Result<(Option<PatchOp>, usize), PatchError> {
    let start = lines[at];
    let git = match start.text.strip_prefix("diff --git ") {
        Some(paths) => {
            at += 1;
            Some(git_header(lines, &mut at, paths)?)
        }
        None => None,
    };
    let Some(old_line) = lines.get(at).filter(|line| line.text.starts_with("--- ")) else {
        return match git {
            // A section without `---`/`+++` changes no content.
            Some(git) => Ok((git_only_op(&start, git)?, at)),
            None => Err(parse_error(
                lines.get(at).map_or(start.number, |line| line.number),
                format!(
                    "expected a file header (`---` or `diff --git`), found `{}`",
                    excerpt(lines.get(at).map_or("", |line| line.text))
                ),
            )),
        };
    };
    let old_path = file_path(old_line, &old_line.text[4..], "a/")?;
    at += 1;
    let Some(new_line) = lines.get(at).filter(|line| line.text.starts_with("+++ ")) else {
        return Err(parse_error(
            old_line.number + 1,
            "a `---` line must be followed by a `+++` line",
        ));
    };
    let new_path = file_path(new_line, &new_line.text[4..], "b/")?;
    at += 1;
    let mut hunks = Vec::new();
    while let Some(line) = lines.get(at)
        && line.text.starts_with("@@")
    {
        let (chunk, next) = hunk(lines, at, total_lines)?;
        hunks.push((line.number, chunk));
        at = next;
    }
    if hunks.is_empty() {
        return Err(parse_error(
            new_line.number,
            "the `---`/`+++` header is not followed by a hunk (`@@ -l,n +l,n @@`)",
        ));
    }
    if let Some(line) = lines.get(at)
        && !line.text.starts_with("--- ")
        && !line.text.starts_with("diff --git ")
        && matches!(line.text.as_bytes().first(), Some(b' ' | b'-' | b'+'))
    {
        return Err(parse_error(
            line.number,
            "this line follows a complete hunk: the hunk has more lines than its `@@` header says",
        ));
    }
    let op = match (old_path, new_path) {
        (None, None) => {
            return Err(parse_error(
                old_line.number,
                "both sides of the header are /dev/null",
            ));
        }
        (None, Some(path)) => PatchOp::Add {
            content: added_content(&hunks)?,
            path,
        },
        (Some(path), None) => {
            if let Some((line, _)) = hunks.iter().find(|(_, chunk)| !chunk.new_lines.is_empty()) {
                return Err(parse_error(
                    *line,
                    format!("the diff deletes `{path}` but this hunk keeps or adds lines"),
                ));
            }
            PatchOp::Delete { path }
        }
        (Some(_), Some(path)) => {
            let chunks = hunks.into_iter().map(|(_, chunk)| chunk).collect();
            match git.and_then(|git| git.rename_from.zip(git.rename_to)) {
                Some((from, to)) => PatchOp::Update {
                    path: from,
                    move_to: Some(to),
                    chunks,
                },
                None => PatchOp::Update {
                    path,
                    move_to: None,
                    chunks,
                },
            }
        }
    };
    Ok((Some(op), at))
}

fn git_header(lines: &[Line<'_>], at: &mut usize, paths: &str) -> Result<GitHeader, PatchError> {
    let mut header = GitHeader {
        paths: paths.to_owned(),
        ..GitHeader::default()
    };
    while let Some(line) = lines.get(*at) {
        let text = line.text;
        if text.starts_with("--- ") || text.starts_with("diff --git ") || line.is_blank() {
            break;
        }
        const IGNORED: [&str; 5] = [
            "index ",
            "old mode ",
            "new mode ",
            "similarity index ",
            "dissimilarity index ",
        ];
        if IGNORED.iter().any(|prefix| text.starts_with(prefix)) {
        } else if text.starts_with("new file mode ") {
            header.new_file = true;
        } else if text.starts_with("deleted file mode ") {
            header.deleted_file = true;
        } else if let Some(path) = text.strip_prefix("rename from ") {
            header.rename_from = Some(unquote_path(path));
        } else if let Some(path) = text.strip_prefix("rename to ") {
            header.rename_to = Some(unquote_path(path));
        } else if text.starts_with("copy from ") || text.starts_with("copy to ") {
            return Err(parse_error(
                line.number,
                "git copies (`copy from`/`copy to`) are not supported; add the file instead",
            ));
        } else if text.starts_with("Binary files ") || text == "GIT binary patch" {
            return Err(parse_error(line.number, "binary diffs are not supported"));
        } else {
            return Err(parse_error(
                line.number,
                format!(
                    "unexpected line in the header of a `diff --git` section: `{}`",
                    excerpt(text)
                ),
            ));
        }
        *at += 1;
    }
    Ok(header)
}

/// The operation of a `diff --git` section without hunks: an empty new file, a
/// deletion, a pure rename, or nothing (a mode change).
fn git_only_op(start: &Line<'_>, git: GitHeader) -> Result<Option<PatchOp>, PatchError> {
    if let (Some(from), Some(to)) = (&git.rename_from, &git.rename_to) {
        return Ok(Some(PatchOp::Update {
            path: from.clone(),
            move_to: Some(to.clone()),
            chunks: Vec::new(),
        }));
    }
    if !git.new_file && !git.deleted_file {
        return Ok(None);
    }
    let Some((old, new)) = git_paths(&git.paths) else {
        return Err(parse_error(
            start.number,
            format!(
                "cannot read the two paths of `diff --git {}`",
                excerpt(&git.paths)
            ),
        ));
    };
    Ok(Some(if git.new_file {
        PatchOp::Add {
            path: new,
            content: String::new(),
        }
    } else {
        PatchOp::Delete { path: old }
    }))
}

/// The paths of `a/x b/x` (quoted or not), without their prefixes.
fn git_paths(text: &str) -> Option<(String, String)> {
    if text.starts_with('"') {
        let (old, rest) = unquote(text)?;
        let new = rest.trim_start();
        let new = if new.starts_with('"') {
            unquote(new)?.0
        } else {
            new.to_owned()
        };
        return Some((strip(&old, "a/"), strip(&new, "b/")));
    }
    // Without quotes the split is ambiguous when paths contain ` b/`; the usual case
    // names one path twice, so try that first.
    if let Some(rest) = text.strip_prefix("a/")
        && rest.len() >= 3
        && rest.len() % 2 == 1
    {
        let half = (rest.len() - 3) / 2;
        if rest.is_char_boundary(half)
            && rest[half..].starts_with(" b/")
            && rest[..half] == rest[half + 3..]
        {
            return Some((rest[..half].to_owned(), rest[..half].to_owned()));
        }
    }
    let (old, new) = text.split_once(" b/")?;
    Some((strip(old, "a/"), new.to_owned()))
}

fn strip(path: &str, prefix: &str) -> String {
    path.strip_prefix(prefix).unwrap_or(path).to_owned()
}

/// The path of a `---`/`+++` line (`None` for /dev/null): up to a tab, unquoted,
/// without its `a/`/`b/` prefix.
fn file_path(line: &Line<'_>, text: &str, prefix: &str) -> Result<Option<String>, PatchError> {
    let path = if text.trim_start().starts_with('"') {
        unquote(text.trim_start()).map(|(path, _)| path)
    } else {
        None
    };
    let path = match path {
        Some(path) => path,
        None => text.split('\t').next().unwrap_or(text).trim().to_owned(),
    };
    if path == "/dev/null" {
        return Ok(None);
    }
    let path = strip(&path, prefix);
    if path.is_empty() {
        return Err(parse_error(line.number, "the path of the header is empty"));
    }
    Ok(Some(path))
}

fn unquote_path(text: &str) -> String {
    let text = text.trim();
    match unquote(text) {
        Some((path, _)) if text.starts_with('"') => path,
        _ => text.to_owned(),
    }
}

/// A C-style quoted string as git writes unusual paths, and the text after it.
fn unquote(text: &str) -> Option<(String, &str)> {
    let mut bytes = Vec::new();
    let mut chars = text.strip_prefix('"')?.char_indices();
    let body = &text[1..];
    while let Some((index, c)) = chars.next() {
        match c {
            '"' => {
                return Some((
                    String::from_utf8_lossy(&bytes).into_owned(),
                    &body[index + 1..],
                ));
            }
            '\\' => {
                let (_, escaped) = chars.next()?;
                let byte = match escaped {
                    'a' => 0x07,
                    'b' => 0x08,
                    't' => b'\t',
                    'n' => b'\n',
                    'v' => 0x0B,
                    'f' => 0x0C,
                    'r' => b'\r',
                    '0'..='7' => {
                        let mut value = escaped.to_digit(8)?;
                        for _ in 0..2 {
                            let (_, digit) = chars.next()?;
                            value = value * 8 + digit.to_digit(8)?;
                        }
                        u8::try_from(value).ok()?
                    }
                    other => {
                        let mut buffer = [0; 4];
                        bytes.extend_from_slice(other.encode_utf8(&mut buffer).as_bytes());
                        continue;
                    }
                };
                bytes.push(byte);
            }
            c => {
                let mut buffer = [0; 4];
                bytes.extend_from_slice(c.encode_utf8(&mut buffer).as_bytes());
            }
        }
    }
    None
}

/// One hunk as a chunk with its line hint, and the index of the line after it.
fn hunk(lines: &[Line<'_>], at: usize, total_lines: usize) -> Result<(Chunk, usize), PatchError> {
    let header_line = lines[at];
    let Some(header) = hunk_header(header_line.text) else {
        return Err(parse_error(
            header_line.number,
            format!(
                "malformed hunk header `{}`, expected `@@ -l,n +l,n @@`",
                excerpt(header_line.text)
            ),
        ));
    };
    if header.old_len == 0 && header.new_len == 0 {
        return Err(parse_error(header_line.number, "the hunk has no lines"));
    }
    let header_text = excerpt(header_line.text);
    let mut chunk = Chunk {
        line_hint: Some(header.old_start),
        ..Chunk::default()
    };
    let mut exact = ExactHunk {
        new_start: header.new_start,
        ..ExactHunk::default()
    };
    let (mut old_left, mut new_left) = (header.old_len, header.new_len);
    let (mut old_missing_newline, mut new_missing_newline) = (false, false);
    let mut last_edit = None;
    let mut at = at + 1;
    loop {
        let line = lines.get(at);
        // `\ No newline at end of file` follows the line it is about, which may be
        // the hunk's last.
        if let Some(line) = line
            && line.text.starts_with('\\')
        {
            match last_edit {
                None => {
                    return Err(parse_error(
                        line.number,
                        "a `\\ No newline at end of file` marker must follow a line of the hunk",
                    ));
                }
                Some(LineEdit::Context) => {
                    old_missing_newline = true;
                    new_missing_newline = true;
                    drop_newline(exact.old.last_mut());
                    drop_newline(exact.new.last_mut());
                }
                Some(LineEdit::Remove) => {
                    old_missing_newline = true;
                    drop_newline(exact.old.last_mut());
                }
                Some(LineEdit::Add) => {
                    new_missing_newline = true;
                    drop_newline(exact.new.last_mut());
                }
            }
            at += 1;
            continue;
        }
        if old_left == 0 && new_left == 0 {
            break;
        }
        let ends_early = |number: usize| {
            parse_error(
                number,
                format!(
                    "the hunk `{header_text}` ends early: {old_left} old and {new_left} new lines are missing"
                ),
            )
        };
        let Some(line) = line else {
            return Err(ends_early(end_line_number(lines, total_lines)));
        };
        let (edit, text) = match line.text.as_bytes().first() {
            // Some tools strip the space of an empty context line.
            None => (LineEdit::Context, ""),
            Some(b' ') => (LineEdit::Context, &line.text[1..]),
            Some(b'-') => (LineEdit::Remove, &line.text[1..]),
            Some(b'+') => (LineEdit::Add, &line.text[1..]),
            Some(_) => return Err(ends_early(line.number)),
        };
        let counted = match edit {
            LineEdit::Context => old_left > 0 && new_left > 0,
            LineEdit::Remove => old_left > 0,
            LineEdit::Add => new_left > 0,
        };
        if !counted {
            return Err(parse_error(
                line.number,
                format!(
                    "the hunk `{header_text}` has more {} lines than its header says",
                    match edit {
                        LineEdit::Context => "context",
                        LineEdit::Remove => "removed",
                        LineEdit::Add => "added",
                    }
                ),
            ));
        }
        if edit != LineEdit::Add {
            old_left -= 1;
        }
        if edit != LineEdit::Remove {
            new_left -= 1;
        }
        chunk.push(edit, text);
        // The line as the file has it: after the prefix (an empty context line has
        // none), with its ending; a patch cut short of its last newline still means one.
        let raw = if line.text.is_empty() {
            line.raw
        } else {
            &line.raw[1..]
        };
        let mut raw = raw.to_owned();
        if !raw.ends_with('\n') {
            raw.push('\n');
        }
        if edit != LineEdit::Add {
            exact.old.push(raw.clone());
        }
        if edit != LineEdit::Remove {
            exact.new.push(raw);
        }
        last_edit = Some(edit);
        at += 1;
    }
    chunk.exact = Some(exact);
    chunk.final_newline = if new_missing_newline {
        Some(false)
    } else if old_missing_newline {
        Some(true)
    } else {
        None
    };
    Ok((chunk, at))
}

/// The content of an added file from its hunks, which may only add lines: their
/// bytes as the patch has them, line endings included (as `git apply` writes them).
fn added_content(hunks: &[(usize, Chunk)]) -> Result<String, PatchError> {
    let mut content = String::new();
    for (line, chunk) in hunks {
        if !chunk.old_lines.is_empty() {
            return Err(parse_error(
                *line,
                "the diff creates the file (`--- /dev/null`) but this hunk expects old lines",
            ));
        }
        for text in chunk.exact.iter().flat_map(|exact| &exact.new) {
            content.push_str(text);
        }
    }
    Ok(content)
}

/// Drops the `\n` ending a hunk line that `\ No newline at end of file` follows (a
/// `\r` before it stays, as in `git apply`).
fn drop_newline(line: Option<&mut String>) {
    if let Some(line) = line
        && line.ends_with('\n')
    {
        line.pop();
    }
}
