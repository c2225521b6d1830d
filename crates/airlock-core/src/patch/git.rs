//! Unified hunks applied exactly as `git apply` applies them (without options), so
//! that every patch git accepts gives the same bytes here.
//!
//! git keeps the file as a list of lines with their endings and applies the hunks one
//! after another to it. A hunk's old lines must be there byte for byte, line endings
//! included, and not in lines an earlier hunk wrote. Precisely (git's
//! `match_fragment`): each line's hash of its non-whitespace bytes must agree, and
//! the hunk's old lines run together must equal the file's bytes from that line on.
//! So an old line cut short by `\ No newline at end of file` matches a file line that
//! only adds whitespace (its newline) after it, and git then replaces the whole line. The search starts at the hunk's
//! new start line (the earlier hunks have already moved the text) and goes out from
//! there, one line forward, then one back, and so on. A hunk whose old start is 0 or 1
//! must match at the top of the file, and one without trailing context at its end.
//! The matched lines are replaced by the hunk's new lines exactly as the patch has
//! them, so added lines keep the patch's own line endings.
//!
//! Where git would reject the patch, [`apply`] gives up (`None`), and the lenient
//! search of [`super::apply`] takes over. So does it past [`WORK_BUDGET`] line
//! comparisons: git's search is quadratic on hostile input (a long file of one
//! repeated line and a hunk that almost matches it everywhere), and a patch is
//! planned before any human has seen it.

use super::{Chunk, ExactHunk, LineEdit};

/// Comparisons (line hashes, or bytes) one patch may spend searching as git does,
/// before the lenient search, which works from an index, takes over.
const WORK_BUDGET: u64 = 50_000_000;

/// One line of the text being patched, with its ending.
struct ImageLine<'a> {
    text: &'a str,
    hash: u32,
    /// Written by an earlier hunk: later hunks may not match it.
    patched: bool,
}

impl<'a> ImageLine<'a> {
    fn new(text: &'a str, patched: bool) -> Self {
        ImageLine {
            text,
            hash: line_hash(text),
            patched,
        }
    }
}

/// git's `hash_line`: over the bytes that are not space, tab, CR or LF, kept in 24
/// bits as git's line table keeps it.
fn line_hash(text: &str) -> u32 {
    text.bytes()
        .filter(|byte| !matches!(byte, b' ' | b'\t' | b'\n' | b'\r'))
        .fold(0u32, |hash, byte| {
            hash.wrapping_mul(3).wrapping_add(u32::from(byte))
        })
        & 0x00ff_ffff
}

/// The text `git apply` makes of `original` with `chunks`, or `None` where it would
/// refuse (or a chunk is not an exact unified hunk).
pub(super) fn apply(original: &str, chunks: &[Chunk]) -> Option<String> {
    let mut image: Vec<ImageLine<'_>> = original
        .split_inclusive('\n')
        .map(|text| ImageLine::new(text, false))
        .collect();
    let mut budget = WORK_BUDGET;
    for chunk in chunks {
        let exact = chunk.exact.as_ref()?;
        let at = find(&image, chunk, exact, &mut budget)?;
        let new = exact.new.iter().map(|text| ImageLine::new(text, true));
        image.splice(at..at + exact.old.len(), new);
    }
    let mut out = String::with_capacity(original.len());
    for line in &image {
        out.push_str(line.text);
    }
    Some(out)
}

/// Where git puts the hunk: the line at which its old lines start.
fn find(
    image: &[ImageLine<'_>],
    chunk: &Chunk,
    exact: &ExactHunk,
    budget: &mut u64,
) -> Option<usize> {
    let trailing = chunk
        .script
        .iter()
        .rev()
        .take_while(|edit| **edit == LineEdit::Context)
        .count();
    let match_beginning = chunk.line_hint.is_some_and(|start| start <= 1);
    let match_end = trailing == 0;
    let total = image.len();
    let old_len = exact.old.len();
    let start = if match_beginning {
        0
    } else if match_end {
        // Past the end (more old lines than the file has) is clamped like any other.
        total.checked_sub(old_len).unwrap_or(total)
    } else {
        exact.new_start.saturating_sub(1)
    }
    .min(total);
    // Hashed once; each position then costs at most its old lines compared.
    let old_hashes: Vec<u32> = exact.old.iter().map(|old| line_hash(old)).collect();
    let old_bytes: u64 = exact.old.iter().map(|old| old.len() as u64).sum();
    let mut matches_at = |at: usize| -> Option<bool> {
        let fits = at.checked_add(old_len).is_some_and(|end| end <= total)
            && (!match_end || at + old_len == total)
            && (!match_beginning || at == 0);
        if !fits {
            return Some(false);
        }
        let mut compared = 0u64;
        let hashes_agree = old_hashes
            .iter()
            .zip(&image[at..at + old_len])
            .all(|(hash, line)| {
                compared += 1;
                !line.patched && line.hash == *hash
            });
        let found = hashes_agree && same_bytes(&exact.old, &image[at..], match_end);
        if hashes_agree {
            compared += old_bytes;
        }
        *budget = budget.checked_sub(compared)?;
        Some(found)
    };
    // start, start + 1, start - 1, start + 2, start - 2, … within 0..=total.
    let (mut backwards, mut forwards) = (start, start);
    if matches_at(start)? {
        return Some(start);
    }
    while backwards > 0 || forwards < total {
        if forwards < total {
            forwards += 1;
            if matches_at(forwards)? {
                return Some(forwards);
            }
        }
        if backwards > 0 {
            backwards -= 1;
            if matches_at(backwards)? {
                return Some(backwards);
            }
        }
    }
    None
}

/// Whether the old lines run together are the bytes of `image` from its start (all of
/// them when `to_the_end`), as git's `memcmp` of the two buffers decides.
fn same_bytes(old: &[String], image: &[ImageLine<'_>], to_the_end: bool) -> bool {
    let mut wanted = old.iter().flat_map(|line| line.bytes());
    let mut lines = image.iter();
    let mut rest: &[u8] = &[];
    loop {
        let Some(byte) = wanted.next() else {
            return !to_the_end || (rest.is_empty() && lines.next().is_none());
        };
        while rest.is_empty() {
            match lines.next() {
                Some(line) => rest = line.text.as_bytes(),
                None => return false,
            }
        }
        if rest[0] != byte {
            return false;
        }
        rest = &rest[1..];
    }
}
