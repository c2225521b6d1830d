//! The RFC 9162 §2.1 Merkle tree over the chain's records: leaf and node
//! hashes, tree heads, inclusion and consistency proofs and their checks.
//!
//! Pure functions over hashes. A proof is made from a [`Hashes`] reader that
//! can give the hash of any aligned perfect subtree (the stored hashes of
//! [`crate::MerkleIndex`], or a slice of leaf hashes in tests); every other
//! subtree hash is computed from those, so a proof costs O(log² n) reads.
//!
//! Leaf `i` is the record with `seq` `i + 1`; its entry is the record's
//! stored line without the `\n`.

use sha2::{Digest, Sha256};

/// A SHA-256 hash: a leaf, a node or a tree head.
pub type Hash = [u8; 32];

/// `SHA-256(0x00 ‖ entry)`.
pub fn leaf_hash(entry: &[u8]) -> Hash {
    let mut hasher = Sha256::new();
    hasher.update([0u8]);
    hasher.update(entry);
    hasher.finalize().into()
}

/// `SHA-256(0x01 ‖ left ‖ right)`.
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut hasher = Sha256::new();
    hasher.update([1u8]);
    hasher.update(left);
    hasher.update(right);
    hasher.finalize().into()
}

/// The head of the empty tree: `SHA-256()` of nothing.
pub fn empty_root() -> Hash {
    Sha256::digest([]).into()
}

/// The largest power of two smaller than `n` (`n >= 2`).
fn split(n: u64) -> u64 {
    debug_assert!(n >= 2);
    1u64 << (63 - (n - 1).leading_zeros())
}

/// Where the hashes of a tree come from: the hash of the aligned perfect
/// subtree at `level` and `index` (leaves `index·2^level ..
/// (index+1)·2^level`).
pub trait Hashes {
    fn subtree(&mut self, level: u32, index: u64) -> Result<Hash, crate::AuditError>;
}

/// The hash of the leaves `start..end` (`end > start`) as RFC 9162's MTH
/// computes it. `start` must be a multiple of the largest power of two not
/// above `end - start`, as every range the RFC's recursions visit is.
pub fn range_hash(
    hashes: &mut dyn Hashes,
    start: u64,
    end: u64,
) -> Result<Hash, crate::AuditError> {
    let width = end - start;
    if width.is_power_of_two() && start.is_multiple_of(width) {
        return hashes.subtree(width.trailing_zeros(), start / width);
    }
    let k = split(width);
    let left = range_hash(hashes, start, start + k)?;
    let right = range_hash(hashes, start + k, end)?;
    Ok(node_hash(&left, &right))
}

/// The tree head of the first `size` leaves.
pub fn tree_hash(hashes: &mut dyn Hashes, size: u64) -> Result<Hash, crate::AuditError> {
    if size == 0 {
        return Ok(empty_root());
    }
    range_hash(hashes, 0, size)
}

/// RFC 9162 §2.1.3.1 PATH(index, D[size]): the inclusion proof of leaf
/// `index` in the tree of `size` leaves, from the leaf's sibling up.
pub fn inclusion_proof(
    hashes: &mut dyn Hashes,
    index: u64,
    size: u64,
) -> Result<Vec<Hash>, crate::AuditError> {
    if index >= size {
        return Err(crate::AuditError::OutOfRange { index, size });
    }
    let mut path = Vec::new();
    path_of(hashes, index, 0, size, &mut path)?;
    Ok(path)
}

/// PATH(m, D[start..end]), appended to `path` leaf-side first.
fn path_of(
    hashes: &mut dyn Hashes,
    m: u64,
    start: u64,
    end: u64,
    path: &mut Vec<Hash>,
) -> Result<(), crate::AuditError> {
    let n = end - start;
    if n == 1 {
        return Ok(());
    }
    let k = split(n);
    if m < k {
        path_of(hashes, m, start, start + k, path)?;
        path.push(range_hash(hashes, start + k, end)?);
    } else {
        path_of(hashes, m - k, start + k, end, path)?;
        path.push(range_hash(hashes, start, start + k)?);
    }
    Ok(())
}

/// RFC 9162 §2.1.4.1 PROOF(old, D[new]): the consistency proof that the
/// tree of `new` leaves extends the tree of its first `old` leaves.
pub fn consistency_proof(
    hashes: &mut dyn Hashes,
    old: u64,
    new: u64,
) -> Result<Vec<Hash>, crate::AuditError> {
    if old > new {
        return Err(crate::AuditError::OutOfRange {
            index: old,
            size: new,
        });
    }
    let mut proof = Vec::new();
    if old == 0 || old == new {
        return Ok(proof);
    }
    subproof(hashes, old, 0, new, true, &mut proof)?;
    Ok(proof)
}

/// SUBPROOF(m, D[start..end], whole).
fn subproof(
    hashes: &mut dyn Hashes,
    m: u64,
    start: u64,
    end: u64,
    whole: bool,
    proof: &mut Vec<Hash>,
) -> Result<(), crate::AuditError> {
    let n = end - start;
    if m == n {
        if !whole {
            proof.push(range_hash(hashes, start, end)?);
        }
        return Ok(());
    }
    let k = split(n);
    if m <= k {
        subproof(hashes, m, start, start + k, whole, proof)?;
        proof.push(range_hash(hashes, start + k, end)?);
    } else {
        subproof(hashes, m - k, start + k, end, false, proof)?;
        proof.push(range_hash(hashes, start, start + k)?);
    }
    Ok(())
}

/// Why a proof does not hold.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProofError {
    #[error("leaf index {index} is not in a tree of {size} leaves")]
    OutOfRange { index: u64, size: u64 },
    #[error("the proof has the wrong number of hashes ({found}) for these tree sizes")]
    WrongLength { found: usize },
    #[error("the proof leads to another root hash")]
    RootMismatch,
    #[error("the old tree of {old} leaves is larger than the new one of {new}")]
    Shrunk { old: u64, new: u64 },
    #[error("trees of the same size {size} have different root hashes")]
    Forked { size: u64 },
}

/// RFC 9162 §2.1.3.2: checks that `leaf` is leaf `index` of the tree of
/// `size` leaves whose head is `root`, given its inclusion `path`.
pub fn verify_inclusion(
    leaf: &Hash,
    index: u64,
    size: u64,
    path: &[Hash],
    root: &Hash,
) -> Result<(), ProofError> {
    if index >= size {
        return Err(ProofError::OutOfRange { index, size });
    }
    let mut fn_ = index;
    let mut sn = size - 1;
    let mut r = *leaf;
    for p in path {
        if sn == 0 {
            return Err(ProofError::WrongLength { found: path.len() });
        }
        if fn_ & 1 == 1 || fn_ == sn {
            r = node_hash(p, &r);
            if fn_ & 1 == 0 {
                while fn_ & 1 == 0 && fn_ != 0 {
                    fn_ >>= 1;
                    sn >>= 1;
                }
            }
        } else {
            r = node_hash(&r, p);
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    if sn != 0 {
        return Err(ProofError::WrongLength { found: path.len() });
    }
    if &r == root {
        Ok(())
    } else {
        Err(ProofError::RootMismatch)
    }
}

/// RFC 9162 §2.1.4.2: checks that the tree of `new` leaves with head
/// `new_root` extends the tree of `old` leaves with head `old_root`.
pub fn verify_consistency(
    old: u64,
    new: u64,
    old_root: &Hash,
    new_root: &Hash,
    proof: &[Hash],
) -> Result<(), ProofError> {
    if old > new {
        return Err(ProofError::Shrunk { old, new });
    }
    if old == new {
        if !proof.is_empty() {
            return Err(ProofError::WrongLength { found: proof.len() });
        }
        return if old_root == new_root {
            Ok(())
        } else {
            Err(ProofError::Forked { size: old })
        };
    }
    if old == 0 {
        // Every tree extends the empty one; there is nothing to prove.
        return if proof.is_empty() {
            Ok(())
        } else {
            Err(ProofError::WrongLength { found: proof.len() })
        };
    }
    let mut path: Vec<Hash> = Vec::with_capacity(proof.len() + 1);
    if old.is_power_of_two() {
        path.push(*old_root);
    }
    path.extend_from_slice(proof);
    let Some((first, rest)) = path.split_first() else {
        return Err(ProofError::WrongLength { found: 0 });
    };
    let mut fn_ = old - 1;
    let mut sn = new - 1;
    while fn_ & 1 == 1 {
        fn_ >>= 1;
        sn >>= 1;
    }
    let mut fr = *first;
    let mut sr = *first;
    for c in rest {
        if sn == 0 {
            return Err(ProofError::WrongLength { found: proof.len() });
        }
        if fn_ & 1 == 1 || fn_ == sn {
            fr = node_hash(c, &fr);
            sr = node_hash(c, &sr);
            if fn_ & 1 == 0 {
                while fn_ & 1 == 0 && fn_ != 0 {
                    fn_ >>= 1;
                    sn >>= 1;
                }
            }
        } else {
            sr = node_hash(&sr, c);
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    if sn != 0 {
        return Err(ProofError::WrongLength { found: proof.len() });
    }
    if &fr == old_root && &sr == new_root {
        Ok(())
    } else {
        Err(ProofError::RootMismatch)
    }
}

/// Hashes from a slice of leaf hashes: every subtree computed from its
/// leaves. For checks and small trees; [`crate::MerkleIndex`] stores them.
pub struct LeafHashes<'a>(pub &'a [Hash]);

impl Hashes for LeafHashes<'_> {
    fn subtree(&mut self, level: u32, index: u64) -> Result<Hash, crate::AuditError> {
        let width = 1u64 << level;
        let start = index * width;
        let end = start + width;
        if end > self.0.len() as u64 {
            return Err(crate::AuditError::OutOfRange {
                index: end - 1,
                size: self.0.len() as u64,
            });
        }
        Ok(fold(&self.0[start as usize..end as usize]))
    }
}

/// The hash of a perfect subtree from its leaves.
fn fold(leaves: &[Hash]) -> Hash {
    if leaves.len() == 1 {
        return leaves[0];
    }
    let half = leaves.len() / 2;
    node_hash(&fold(&leaves[..half]), &fold(&leaves[half..]))
}

/// The right edge of a growing tree: the heads of its perfect subtrees,
/// largest (leftmost) first, one per bit set in its size. Enough to add a
/// leaf and to compute the tree head, in O(log n) space.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Frontier {
    size: u64,
    /// `(level, hash)`, levels strictly decreasing.
    peaks: Vec<(u32, Hash)>,
}

impl Frontier {
    /// The frontier of the tree of `size` leaves, read from `hashes`.
    pub fn of(hashes: &mut dyn Hashes, size: u64) -> Result<Frontier, crate::AuditError> {
        let mut peaks = Vec::new();
        let mut start = 0u64;
        for level in (0..64u32).rev() {
            if size & (1u64 << level) != 0 {
                peaks.push((level, hashes.subtree(level, start >> level)?));
                start += 1u64 << level;
            }
        }
        Ok(Frontier { size, peaks })
    }

    pub fn size(&self) -> u64 {
        self.size
    }

    /// Adds a leaf; calls `completed` with each perfect subtree it
    /// completes above the leaf level (`level`, `index`, hash), lowest
    /// first, in the order an index stores them.
    pub fn push(&mut self, leaf: Hash, completed: &mut dyn FnMut(u32, u64, &Hash)) {
        let mut level = 0u32;
        let mut hash = leaf;
        let position = self.size;
        while let Some(&(peak_level, peak)) = self.peaks.last() {
            if peak_level != level {
                break;
            }
            self.peaks.pop();
            hash = node_hash(&peak, &hash);
            level += 1;
            completed(level, position >> level, &hash);
        }
        self.peaks.push((level, hash));
        self.size += 1;
    }

    /// The tree head.
    pub fn root(&self) -> Hash {
        let mut peaks = self.peaks.iter().rev();
        let Some((_, last)) = peaks.next() else {
            return empty_root();
        };
        let mut root = *last;
        for (_, peak) in peaks {
            root = node_hash(peak, &root);
        }
        root
    }
}
