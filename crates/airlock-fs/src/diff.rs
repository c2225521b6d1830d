//! The unified diff a human approves, fast on large files with scattered
//! changes.
//!
//! Lines are compared whole (terminator included). The common prefix and
//! suffix are set aside first; a small middle goes to Myers (the `similar`
//! crate). A large middle is split at anchors, lines that occur exactly once
//! on each side, taking the longest chain of them that keeps both sides in
//! order (as patience diff does), and each gap between anchors goes to Myers.
//! So a 1 MB file with a hundred scattered edits costs a few linear passes
//! instead of Myers' `O(N·D)` over the whole file.
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
    let old_lines: Vec<&str> = old.split_inclusive('\n').collect();
    let new_lines: Vec<&str> = new.split_inclusive('\n').collect();
    let ops = line_ops(&old_lines, &new_lines);
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
            for (tag, lines) in [
                (' ', op_lines(op, &old_lines, &new_lines, Side::Equal)),
                ('-', op_lines(op, &old_lines, &new_lines, Side::Old)),
                ('+', op_lines(op, &old_lines, &new_lines, Side::New)),
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
    if old.is_empty() && new.is_empty() {
        return;
    }
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

fn shift(op: DiffOp, old_base: usize, new_base: usize) -> DiffOp {
    match op {
        DiffOp::Equal {
            old_index,
            new_index,
            len,
        } => DiffOp::Equal {
            old_index: old_index + old_base,
            new_index: new_index + new_base,
            len,
        },
        DiffOp::Delete {
            old_index,
            old_len,
            new_index,
        } => DiffOp::Delete {
            old_index: old_index + old_base,
            old_len,
            new_index: new_index + new_base,
        },
        DiffOp::Insert {
            old_index,
            new_index,
            new_len,
        } => DiffOp::Insert {
            old_index: old_index + old_base,
            new_index: new_index + new_base,
            new_len,
        },
        DiffOp::Replace {
            old_index,
            old_len,
            new_index,
            new_len,
        } => DiffOp::Replace {
            old_index: old_index + old_base,
            old_len,
            new_index: new_index + new_base,
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
}
