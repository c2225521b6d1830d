//! The unified diff a human approves, fast on large files with scattered
//! changes.
//!
//! Lines are compared whole (terminator included). The common beginning and
//! end are set aside first, byte-wise; a small middle goes to Myers (the
//! `similar` crate). A large middle is walked on both sides at once: where
//! they differ, the nearest place where three lines agree again ends the
//! difference, and only that stretch goes to Myers. A stretch where that
//! fails is split at anchors, lines that occur exactly once on each side in
//! their longest chain that keeps both sides in order (as patience diff
//! does), with Myers in the gaps. So a 1 MB file with a hundred scattered
//! edits costs a few linear passes instead of Myers' `O(N·D)` over the whole
//! file. Every result is a correct diff; only its choice among equally valid
//! alignments may differ from Myers' on large inputs.
//!
//! The output is the classic format: `--- a/p` / `+++ b/p` headers, hunks
//! with three lines of context, `@@ -l,n +l,n @@` ranges (`-l` alone when
//! `n` is 1, `-l,0` naming the line before an empty range), and `\ No newline
//! at end of file` after a last line without one. The same function renders
//! a plan and checks it again at apply time, so the two always agree.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::hash::{BuildHasherDefault, Hasher};

use similar::{Algorithm, DiffOp};

/// Middles with at most this many lines on the shorter side go straight to
/// Myers.
const SMALL: usize = 256;

/// Context lines around each change.
const CONTEXT: usize = 3;

/// The unified diff from `old` (`from`) to `new` (`to`); only the headers when
/// nothing changes. Headers are written as given (`a/p`, `/dev/null`).
pub(crate) fn unified(from: &str, to: &str, old: &str, new: &str) -> String {
    let window = Window::of(old, new);
    let old_lines = lines(&old[window.old.clone()]);
    let new_lines = lines(&new[window.new.clone()]);
    let ops = window.ops(&old_lines, &new_lines);
    let mut out = format!("--- {from}\n+++ {to}\n");
    for group in similar::group_diff_ops(ops, CONTEXT) {
        let (Some(first), Some(last)) = (group.first(), group.last()) else {
            continue;
        };
        let _ = writeln!(
            out,
            "@@ -{} +{} @@",
            Range(first.old_range().start, last.old_range().end),
            Range(first.new_range().start, last.new_range().end)
        );
        for op in &group {
            let op = shift_back(*op, window.first_line, window.first_line);
            for (tag, lines) in [
                (' ', op_lines(&op, &old_lines, &new_lines, Side::Equal)),
                ('-', op_lines(&op, &old_lines, &new_lines, Side::Old)),
                ('+', op_lines(&op, &old_lines, &new_lines, Side::New)),
            ] {
                for line in lines {
                    out.push(tag);
                    out.push_str(line);
                    if !line.ends_with('\n') {
                        out.push_str("\n\\ No newline at end of file\n");
                    }
                }
            }
        }
    }
    out
}

/// The part of both texts a diff needs to look at line by line: everything
/// but the common beginning and end (found byte-wise), widened to whole lines
/// and by the context shown around changes.
struct Window {
    /// Byte ranges of the window in `old` and `new`.
    old: std::ops::Range<usize>,
    new: std::ops::Range<usize>,
    /// The line number (0-based, the same on both sides) the window starts at.
    first_line: usize,
    /// Lines after the window (the same on both sides).
    lines_after: usize,
}

impl Window {
    fn of(old: &str, new: &str) -> Window {
        let (a, b) = (old.as_bytes(), new.as_bytes());
        let prefix = common_prefix(a, b);
        let suffix = common_suffix(&a[prefix..], &b[prefix..]);
        // Back to the start of the line holding the first difference, then
        // `CONTEXT` lines more.
        let mut start = line_start(a, prefix);
        for _ in 0..CONTEXT {
            if start == 0 {
                break;
            }
            start = line_start(a, start - 1);
        }
        // The byte before the common end differs, so the window ends after
        // the first `\n` inside the common end (a line boundary on both
        // sides), or at the end; then `CONTEXT` lines more.
        let mut end = a.len() - suffix;
        if suffix > 0 {
            end = next_line(a, end);
        }
        for _ in 0..CONTEXT {
            if end >= a.len() {
                break;
            }
            end = next_line(a, end);
        }
        let keep = a.len() - end;
        let after = &a[end..];
        Window {
            old: start..end,
            new: start..b.len() - keep,
            first_line: memchr::memchr_iter(b'\n', &a[..start]).count(),
            lines_after: memchr::memchr_iter(b'\n', after).count()
                + usize::from(!after.is_empty() && !after.ends_with(b"\n")),
        }
    }

    /// The ops over the whole texts, from the lines inside the window.
    fn ops(&self, old: &[&str], new: &[&str]) -> Vec<DiffOp> {
        let mut ops = Ops::default();
        ops.equal(0, 0, self.first_line);
        for op in line_ops(old, new) {
            ops.push(shift(op, self.first_line, self.first_line));
        }
        ops.equal(
            self.first_line + old.len(),
            self.first_line + new.len(),
            self.lines_after,
        );
        ops.0
    }
}

/// Bytes `a` and `b` share at the start, compared a block at a time.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    const BLOCK: usize = 256;
    let len = a.len().min(b.len());
    let mut at = 0;
    while at + BLOCK <= len && a[at..at + BLOCK] == b[at..at + BLOCK] {
        at += BLOCK;
    }
    at + a[at..len]
        .iter()
        .zip(&b[at..len])
        .take_while(|(x, y)| x == y)
        .count()
}

/// Bytes `a` and `b` share at the end.
fn common_suffix(a: &[u8], b: &[u8]) -> usize {
    const BLOCK: usize = 256;
    let len = a.len().min(b.len());
    let (a, b) = (&a[a.len() - len..], &b[b.len() - len..]);
    let mut at = 0;
    while at + BLOCK <= len && a[len - at - BLOCK..len - at] == b[len - at - BLOCK..len - at] {
        at += BLOCK;
    }
    at + a[..len - at]
        .iter()
        .rev()
        .zip(b[..len - at].iter().rev())
        .take_while(|(x, y)| x == y)
        .count()
}

/// The start of the line holding byte `at` (or of the last line, at the end).
fn line_start(text: &[u8], at: usize) -> usize {
    memchr::memrchr(b'\n', &text[..at.min(text.len())]).map_or(0, |i| i + 1)
}

/// Where the line after the one holding byte `at` starts (or the end).
fn next_line(text: &[u8], at: usize) -> usize {
    memchr::memchr(b'\n', &text[at..]).map_or(text.len(), |i| at + i + 1)
}

/// The lines of `text`, each with its `\n` (the last one may lack it).
fn lines(text: &str) -> Vec<&str> {
    let mut out = Vec::with_capacity(text.len() / 32 + 1);
    let mut start = 0;
    for end in memchr::memchr_iter(b'\n', text.as_bytes()) {
        // `\n` is ASCII, so `end + 1` is a character boundary.
        out.push(&text[start..=end]);
        start = end + 1;
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Equal,
    Old,
    New,
}

/// The lines an op shows with one tag: context, removed or added.
fn op_lines<'b, 'a>(
    op: &DiffOp,
    old: &'b [&'a str],
    new: &'b [&'a str],
    side: Side,
) -> &'b [&'a str] {
    let (range, lines) = match (op, side) {
        (DiffOp::Equal { .. }, Side::Equal) => (op.old_range(), old),
        (DiffOp::Delete { .. } | DiffOp::Replace { .. }, Side::Old) => (op.old_range(), old),
        (DiffOp::Insert { .. } | DiffOp::Replace { .. }, Side::New) => (op.new_range(), new),
        _ => return &[],
    };
    lines.get(range).unwrap_or(&[])
}

/// A hunk range as unified diffs write it.
struct Range(usize, usize);

impl std::fmt::Display for Range {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let len = self.1.saturating_sub(self.0);
        match len {
            1 => write!(f, "{}", self.0 + 1),
            0 => write!(f, "{},0", self.0),
            _ => write!(f, "{},{len}", self.0 + 1),
        }
    }
}

/// The diff ops turning `old` into `new`, with absolute indices and adjacent
/// equal runs merged.
fn line_ops(old: &[&str], new: &[&str]) -> Vec<DiffOp> {
    let prefix = old.iter().zip(new).take_while(|(a, b)| a == b).count();
    let suffix = old[prefix..]
        .iter()
        .rev()
        .zip(new[prefix..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let mut ops = Ops::default();
    ops.equal(0, 0, prefix);
    middle(
        &old[prefix..old.len() - suffix],
        &new[prefix..new.len() - suffix],
        prefix,
        prefix,
        &mut ops,
    );
    ops.equal(old.len() - suffix, new.len() - suffix, suffix);
    ops.0
}

fn middle(old: &[&str], new: &[&str], old_base: usize, new_base: usize, ops: &mut Ops) {
    if old.len().min(new.len()) <= SMALL {
        return myers(old, new, old_base, new_base, ops);
    }
    // Sparse changes: walk both sides while they agree; at a difference,
    // find the nearest place where `RUN` lines agree again and diff only the
    // stretch in between.
    let (mut i, mut j) = (0, 0);
    while i < old.len() && j < new.len() {
        if old[i] == new[j] {
            ops.equal(old_base + i, new_base + j, 1);
            (i, j) = (i + 1, j + 1);
            continue;
        }
        match resync(old, new, i, j) {
            Some((next_i, next_j)) => {
                myers(
                    &old[i..next_i],
                    &new[j..next_j],
                    old_base + i,
                    new_base + j,
                    ops,
                );
                (i, j) = (next_i, next_j);
            }
            None => {
                return anchored(&old[i..], &new[j..], old_base + i, new_base + j, ops);
            }
        }
    }
    myers(&old[i..], &new[j..], old_base + i, new_base + j, ops);
}

/// Lines that must agree for the walk to take up again after a difference.
const RUN: usize = 3;
/// How far (lines on both sides together) the walk looks for that.
const RESYNC_LIMIT: usize = 512;

/// The nearest `(i', j')` past a difference at `(i, j)` where `RUN` lines
/// agree, nearest by `i' + j'`, then by `i'`.
fn resync(old: &[&str], new: &[&str], i: usize, j: usize) -> Option<(usize, usize)> {
    for distance in 1..=RESYNC_LIMIT {
        for skip_old in 0..=distance {
            let (a, b) = (i + skip_old, j + distance - skip_old);
            if a + RUN <= old.len() && b + RUN <= new.len() && old[a..a + RUN] == new[b..b + RUN] {
                return Some((a, b));
            }
        }
    }
    None
}

/// A large stretch without sparse structure: split at anchors, lines unique
/// on both sides in their longest increasing chain, and diff the gaps.
fn anchored(old: &[&str], new: &[&str], old_base: usize, new_base: usize, ops: &mut Ops) {
    if old.len().min(new.len()) <= SMALL {
        return myers(old, new, old_base, new_base, ops);
    }
    let anchors = anchors(old, new);
    if anchors.is_empty() {
        return myers(old, new, old_base, new_base, ops);
    }
    let (mut at_old, mut at_new) = (0, 0);
    for (anchor_old, anchor_new) in anchors {
        gap(
            &old[at_old..anchor_old],
            &new[at_new..anchor_new],
            old_base + at_old,
            new_base + at_new,
            ops,
        );
        ops.equal(old_base + anchor_old, new_base + anchor_new, 1);
        (at_old, at_new) = (anchor_old + 1, anchor_new + 1);
    }
    gap(
        &old[at_old..],
        &new[at_new..],
        old_base + at_old,
        new_base + at_new,
        ops,
    );
}

/// A stretch between two anchors: its own common ends, then Myers.
fn gap(old: &[&str], new: &[&str], old_base: usize, new_base: usize, ops: &mut Ops) {
    let prefix = old.iter().zip(new).take_while(|(a, b)| a == b).count();
    let suffix = old[prefix..]
        .iter()
        .rev()
        .zip(new[prefix..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    ops.equal(old_base, new_base, prefix);
    myers(
        &old[prefix..old.len() - suffix],
        &new[prefix..new.len() - suffix],
        old_base + prefix,
        new_base + prefix,
        ops,
    );
    ops.equal(
        old_base + old.len() - suffix,
        new_base + new.len() - suffix,
        suffix,
    );
}

fn myers(old: &[&str], new: &[&str], old_base: usize, new_base: usize, ops: &mut Ops) {
    if old.is_empty() && new.is_empty() {
        return;
    }
    for op in similar::capture_diff_slices(Algorithm::Myers, old, new) {
        ops.push(shift(op, old_base, new_base));
    }
}

/// Lines unique on both sides, as `(old index, new index)`, the longest chain
/// increasing on both.
fn anchors(old: &[&str], new: &[&str]) -> Vec<(usize, usize)> {
    #[derive(Clone, Copy)]
    struct Seen {
        in_old: u32,
        in_new: u32,
        at_old: usize,
        at_new: usize,
    }
    let mut seen: HashMap<&str, Seen, BuildHasherDefault<LineHasher>> =
        HashMap::with_capacity_and_hasher(old.len(), BuildHasherDefault::default());
    for (index, line) in old.iter().enumerate() {
        let entry = seen.entry(line).or_insert(Seen {
            in_old: 0,
            in_new: 0,
            at_old: index,
            at_new: 0,
        });
        entry.in_old = entry.in_old.saturating_add(1);
    }
    for (index, line) in new.iter().enumerate() {
        if let Some(entry) = seen.get_mut(line) {
            entry.in_new = entry.in_new.saturating_add(1);
            entry.at_new = index;
        }
    }
    let mut pairs: Vec<(usize, usize)> = seen
        .values()
        .filter(|seen| seen.in_old == 1 && seen.in_new == 1)
        .map(|seen| (seen.at_old, seen.at_new))
        .collect();
    pairs.sort_unstable();
    longest_increasing(&pairs)
}

/// The longest subsequence of `pairs` (sorted by old index) whose new indices
/// increase (patience sorting).
fn longest_increasing(pairs: &[(usize, usize)]) -> Vec<(usize, usize)> {
    // tails[k]: index in `pairs` of the smallest tail of a chain of length k+1.
    let mut tails: Vec<usize> = Vec::new();
    let mut previous: Vec<Option<usize>> = vec![None; pairs.len()];
    for (index, &(_, new)) in pairs.iter().enumerate() {
        let at = tails.partition_point(|&tail| pairs[tail].1 < new);
        if at > 0 {
            previous[index] = Some(tails[at - 1]);
        }
        if at == tails.len() {
            tails.push(index);
        } else {
            tails[at] = index;
        }
    }
    let mut chain = Vec::with_capacity(tails.len());
    let mut next = tails.last().copied();
    while let Some(index) = next {
        chain.push(pairs[index]);
        next = previous[index];
    }
    chain.reverse();
    chain
}

/// `op` with its line indices moved by `old_base`/`new_base`.
fn shift(op: DiffOp, old_base: usize, new_base: usize) -> DiffOp {
    rebase(op, |i| i + old_base, |i| i + new_base)
}

/// `op` with absolute line indices made the window's.
fn shift_back(op: DiffOp, old_base: usize, new_base: usize) -> DiffOp {
    rebase(
        op,
        |i| i.saturating_sub(old_base),
        |i| i.saturating_sub(new_base),
    )
}

/// `op` with `old` and `new` applied to its indices (lengths stay).
fn rebase(op: DiffOp, old: impl Fn(usize) -> usize, new: impl Fn(usize) -> usize) -> DiffOp {
    match op {
        DiffOp::Equal {
            old_index,
            new_index,
            len,
        } => DiffOp::Equal {
            old_index: old(old_index),
            new_index: new(new_index),
            len,
        },
        DiffOp::Delete {
            old_index,
            old_len,
            new_index,
        } => DiffOp::Delete {
            old_index: old(old_index),
            old_len,
            new_index: new(new_index),
        },
        DiffOp::Insert {
            old_index,
            new_index,
            new_len,
        } => DiffOp::Insert {
            old_index: old(old_index),
            new_index: new(new_index),
            new_len,
        },
        DiffOp::Replace {
            old_index,
            old_len,
            new_index,
            new_len,
        } => DiffOp::Replace {
            old_index: old(old_index),
            old_len,
            new_index: new(new_index),
            new_len,
        },
    }
}

/// Diff ops under construction; adjacent equal runs are merged, so hunks are
/// split where long equal stretches are.
#[derive(Default)]
struct Ops(Vec<DiffOp>);

impl Ops {
    fn equal(&mut self, old_index: usize, new_index: usize, len: usize) {
        if len > 0 {
            self.push(DiffOp::Equal {
                old_index,
                new_index,
                len,
            });
        }
    }

    fn push(&mut self, op: DiffOp) {
        if let (
            Some(DiffOp::Equal {
                old_index,
                new_index,
                len,
            }),
            DiffOp::Equal {
                old_index: next_old,
                new_index: next_new,
                len: more,
            },
        ) = (self.0.last_mut(), op)
            && *old_index + *len == next_old
            && *new_index + *len == next_new
        {
            *len += more;
            return;
        }
        self.0.push(op);
    }
}

/// A fast, non-cryptographic hasher for line text (the map only finds
/// anchors; a collision costs time, never correctness, since keys compare
/// whole).
#[derive(Default)]
struct LineHasher(u64);

impl Hasher for LineHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        const K: u64 = 0x517c_c1b7_2722_0a95;
        let mut hash = self.0;
        let mut chunks = bytes.chunks_exact(8);
        for chunk in &mut chunks {
            let mut word = [0u8; 8];
            word.copy_from_slice(chunk);
            hash = (hash.rotate_left(5) ^ u64::from_le_bytes(word)).wrapping_mul(K);
        }
        for &byte in chunks.remainder() {
            hash = (hash.rotate_left(5) ^ u64::from(byte)).wrapping_mul(K);
        }
        self.0 = hash;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference(old: &str, new: &str) -> String {
        let diff = similar::TextDiff::from_lines(old, new)
            .unified_diff()
            .context_radius(3)
            .header("a", "b")
            .to_string();
        if diff.is_empty() {
            "--- a\n+++ b\n".to_owned()
        } else {
            diff
        }
    }

    #[test]
    fn small_inputs_render_exactly_as_similar_does() {
        let cases = [
            ("", ""),
            ("", "a\n"),
            ("a\n", ""),
            ("a\nb\nc\n", "a\nB\nc\n"),
            ("a\nb", "a\nb\n"),
            ("a\nb\n", "a\nc"),
            ("x", "y"),
            (
                "1\n2\n3\n4\n5\n6\n7\n8\n9\n10\n11\n12\n",
                "1\n2\nX\n4\n5\n6\n7\n8\n9\n10\nY\n12\n",
            ),
        ];
        for (old, new) in cases {
            assert_eq!(
                unified("a", "b", old, new),
                reference(old, new),
                "{old:?} -> {new:?}"
            );
        }
    }

    #[test]
    fn a_large_file_with_scattered_changes_diffs_to_what_applies() {
        let old: String = (0..5_000).map(|i| format!("line {i}\n")).collect();
        let mut lines: Vec<String> = old.lines().map(|l| format!("{l}\n")).collect();
        for at in (100..5_000).step_by(400) {
            lines[at] = format!("changed {at}\n");
            lines.insert(at + 1, "inserted\n".to_owned());
        }
        let new: String = lines.concat();
        let diff = unified("a/f", "b/f", &old, &new);
        // Every change shows as one small hunk.
        assert_eq!(diff.matches("@@ -").count(), 13);
        assert_eq!(diff.matches("\n+inserted\n").count(), 13);
        assert!(diff.len() < 13 * 200, "{} bytes", diff.len());
    }

    fn applies(old: &str, new: &str) {
        let diff = unified("a/f", "b/f", old, new);
        if old == new {
            assert_eq!(diff, "--- a/f\n+++ b/f\n");
            return;
        }
        let patch = airlock_core::patch::parse(&diff, airlock_core::patch::PatchFormat::Unified)
            .unwrap_or_else(|error| panic!("{error:?}\n{diff}"));
        let airlock_core::patch::PatchOp::Update { chunks, .. } = &patch.ops[0] else {
            panic!("{diff}");
        };
        let applied = airlock_core::patch::apply_chunks("f", old, chunks)
            .unwrap_or_else(|error| panic!("{error:?}\n{diff}"));
        assert_eq!(applied, new, "{diff}");
    }

    proptest::proptest! {
        #[test]
        fn every_diff_applies_back(
            old in proptest::collection::vec("[abc]{0,2}\n", 0..400),
            edits in proptest::collection::vec((0usize..400, "[abcd]{0,2}\n", 0u8..3), 0..12),
            final_newline: bool,
        ) {
            let mut new = old.clone();
            for (at, line, kind) in edits {
                let at = at % (new.len() + 1);
                match kind {
                    0 => new.insert(at, line),
                    1 if at < new.len() => { new.remove(at); }
                    _ if at < new.len() => new[at] = line,
                    _ => new.push(line),
                }
            }
            let old: String = old.concat();
            let mut new: String = new.concat();
            if !final_newline && new.ends_with('\n') {
                new.pop();
            }
            applies(&old, &new);
        }
    }
}
