//! The Merkle tree, checkpoints and proofs (DESIGN §8.1), checked against
//! the RFC's published vectors, against an implementation of RFC 9162 §2.1
//! written here from the RFC's definitions (recursive, over the leaves, no
//! stored hashes), and against logs that were tampered with.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use airlock_audit::merkle::{self, Hash, LeafHashes, ProofError};
use airlock_audit::note::{Checkpoint, Note, NoteError, SigningKey, Verifier};
use airlock_audit::{
    AuditError, AuditLog, CheckError, Checkpointer, ConsistencyProof, FileLeaves, InclusionProof,
    MerkleIndex, check_log, consistency_text, inclusion_text,
};
use proptest::prelude::*;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// RFC 9162 §2.1, as the RFC writes it.
mod rfc {
    use super::*;

    pub fn leaf(entry: &[u8]) -> Hash {
        let mut h = Sha256::new();
        h.update([0]);
        h.update(entry);
        h.finalize().into()
    }

    fn node(l: &Hash, r: &Hash) -> Hash {
        let mut h = Sha256::new();
        h.update([1]);
        h.update(l);
        h.update(r);
        h.finalize().into()
    }

    /// The largest power of two smaller than n.
    fn k(n: usize) -> usize {
        let mut k = 1;
        while k * 2 < n {
            k *= 2;
        }
        k
    }

    /// MTH(D[n]) over leaf hashes.
    pub fn mth(d: &[Hash]) -> Hash {
        match d.len() {
            0 => Sha256::digest([]).into(),
            1 => d[0],
            n => node(&mth(&d[..k(n)]), &mth(&d[k(n)..])),
        }
    }

    /// PATH(m, D[n]).
    pub fn path(m: usize, d: &[Hash]) -> Vec<Hash> {
        let n = d.len();
        if n == 1 {
            return vec![];
        }
        let k = k(n);
        if m < k {
            let mut p = path(m, &d[..k]);
            p.push(mth(&d[k..]));
            p
        } else {
            let mut p = path(m - k, &d[k..]);
            p.push(mth(&d[..k]));
            p
        }
    }

    /// PROOF(m, D[n]).
    pub fn proof(m: usize, d: &[Hash]) -> Vec<Hash> {
        if m == 0 || m == d.len() {
            return vec![];
        }
        subproof(m, d, true)
    }

    fn subproof(m: usize, d: &[Hash], b: bool) -> Vec<Hash> {
        let n = d.len();
        if m == n {
            return if b { vec![] } else { vec![mth(d)] };
        }
        let k = k(n);
        if m <= k {
            let mut p = subproof(m, &d[..k], b);
            p.push(mth(&d[k..]));
            p
        } else {
            let mut p = subproof(m - k, &d[k..], false);
            p.push(mth(&d[..k]));
            p
        }
    }

    /// Inclusion checked by recomputing: the path must rebuild the root.
    /// Walks the tree from the root down the leaf's side.
    pub fn root_from_path(leaf: Hash, m: usize, n: usize, path: &[Hash]) -> Option<Hash> {
        fn go(leaf: Hash, m: usize, n: usize, path: &[Hash]) -> Option<Hash> {
            if n == 1 {
                return path.is_empty().then_some(leaf);
            }
            let (last, rest) = path.split_last()?;
            let k = k(n);
            if m < k {
                Some(node(&go(leaf, m, k, rest)?, last))
            } else {
                Some(node(last, &go(leaf, m - k, n - k, rest)?))
            }
        }
        if m >= n {
            return None;
        }
        go(leaf, m, n, path)
    }
}

fn unhex(text: &str) -> Vec<u8> {
    hex::decode(text).unwrap()
}

fn hash(text: &str) -> Hash {
    unhex(text).try_into().unwrap()
}

fn fixture(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/rfc6962")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn hashes(list: &Value) -> Vec<Hash> {
    list.as_array()
        .unwrap()
        .iter()
        .map(|h| hash(h.as_str().unwrap()))
        .collect()
}

#[test]
fn the_tree_gives_the_published_reference_roots_and_proofs() {
    let vectors = fixture("vectors.json");
    let leaves: Vec<Hash> = vectors["leaves_hex"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| merkle::leaf_hash(&unhex(l.as_str().unwrap())))
        .collect();
    assert_eq!(
        hex::encode(merkle::tree_hash(&mut LeafHashes(&leaves), 0).unwrap()),
        vectors["empty_root"].as_str().unwrap()
    );
    let roots = hashes(&vectors["roots"]);
    for size in 1..=8u64 {
        let root = merkle::tree_hash(&mut LeafHashes(&leaves), size).unwrap();
        assert_eq!(root, roots[size as usize - 1], "size {size}");
        assert_eq!(root, rfc::mth(&leaves[..size as usize]));
    }
    for case in vectors["inclusion"].as_array().unwrap() {
        let (index, size) = (
            case["index"].as_u64().unwrap(),
            case["size"].as_u64().unwrap(),
        );
        let path = merkle::inclusion_proof(&mut LeafHashes(&leaves), index, size).unwrap();
        assert_eq!(path, hashes(&case["path"]), "{case}");
        merkle::verify_inclusion(
            &leaves[index as usize],
            index,
            size,
            &path,
            &roots[size as usize - 1],
        )
        .unwrap();
    }
    for case in vectors["consistency"].as_array().unwrap() {
        let (old, new) = (case["old"].as_u64().unwrap(), case["new"].as_u64().unwrap());
        let proof = merkle::consistency_proof(&mut LeafHashes(&leaves), old, new).unwrap();
        assert_eq!(proof, hashes(&case["path"]), "{case}");
        merkle::verify_consistency(
            old,
            new,
            &roots[old as usize - 1],
            &roots[new as usize - 1],
            &proof,
        )
        .unwrap();
    }
}

/// A log file of `count` records appended through [`AuditLog`].
fn log_with(dir: &Path, count: usize) -> std::path::PathBuf {
    let path = dir.join("audit.jsonl");
    let (log, _) = AuditLog::open(&path, None, None).unwrap();
    for n in 0..count {
        let record = json!({"event": "read_file", "path": format!("src/{n}.rs")});
        log.append(record.as_object().cloned().unwrap()).unwrap();
    }
    path
}

fn lines_of(path: &Path) -> Vec<Vec<u8>> {
    std::fs::read(path)
        .unwrap()
        .split(|b| *b == b'\n')
        .filter(|line| !line.is_empty())
        .map(<[u8]>::to_vec)
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Proofs made from the stored hashes of a real log equal the RFC's
    /// recursive definitions, and the RFC's checks accept them.
    #[test]
    fn proofs_from_the_index_are_the_rfcs(count in 1usize..300, picks in prop::collection::vec((any::<u64>(), any::<u64>()), 6)) {
        let dir = tempfile::tempdir().unwrap();
        let path = log_with(dir.path(), count);
        let index = MerkleIndex::open(&dir.path().join("audit.merkle")).unwrap();
        // Caught up in two steps, as records arrive.
        let half = (count / 2) as u64;
        prop_assert_eq!(index.catch_up(&mut FileLeaves { path: path.clone() }, half).unwrap(), half);
        prop_assert_eq!(index.catch_up(&mut FileLeaves { path: path.clone() }, u64::MAX).unwrap(), count as u64);
        let leaves: Vec<Hash> = lines_of(&path).iter().map(|l| rfc::leaf(l)).collect();
        prop_assert_eq!(leaves.len(), count);
        for (a, b) in picks {
            let size = 1 + b % count as u64;
            let leaf = a % size;
            let old = a % (size + 1);
            index.read(|hashes, covered| {
                assert_eq!(covered, count as u64);
                let root = merkle::tree_hash(hashes, size)?;
                assert_eq!(root, rfc::mth(&leaves[..size as usize]));
                let path = merkle::inclusion_proof(hashes, leaf, size)?;
                assert_eq!(path, rfc::path(leaf as usize, &leaves[..size as usize]));
                assert_eq!(rfc::root_from_path(leaves[leaf as usize], leaf as usize, size as usize, &path), Some(root));
                merkle::verify_inclusion(&leaves[leaf as usize], leaf, size, &path, &root).unwrap();
                let proof = merkle::consistency_proof(hashes, old, size)?;
                assert_eq!(proof, rfc::proof(old as usize, &leaves[..size as usize]));
                let old_root = rfc::mth(&leaves[..old as usize]);
                merkle::verify_consistency(old, size, &old_root, &root, &proof).unwrap();
                Ok(())
            }).unwrap();
        }
    }

    /// The checks refuse every changed proof: a wrong leaf, index, size or
    /// root, a hash changed, dropped or added.
    #[test]
    fn changed_proofs_are_refused(count in 2usize..200, a in any::<u64>(), b in any::<u64>(), flip in any::<(usize, u8)>()) {
        let leaves: Vec<Hash> = (0..count).map(|n| rfc::leaf(format!("record {n}").as_bytes())).collect();
        let size = 2 + b % (count as u64 - 1);
        let leaf = a % size;
        let root = rfc::mth(&leaves[..size as usize]);
        let path = rfc::path(leaf as usize, &leaves[..size as usize]);
        let leaf_hash = leaves[leaf as usize];
        let other = leaves[((leaf + 1) % size) as usize];
        let stranger = rfc::leaf(b"not a record of this log");
        prop_assert!(merkle::verify_inclusion(&other, leaf, size, &path, &root).is_err());
        prop_assert!(merkle::verify_inclusion(&leaf_hash, (leaf + 1) % size, size, &path, &root).is_err());
        prop_assert!(merkle::verify_inclusion(&leaf_hash, leaf, size, &path, &stranger).is_err());
        prop_assert!(merkle::verify_inclusion(&leaf_hash, size, size, &path, &root).is_err());
        if !path.is_empty() {
            let mut changed = path.clone();
            let at = flip.0 % changed.len();
            changed[at][flip.1 as usize % 32] ^= 1;
            prop_assert!(merkle::verify_inclusion(&leaf_hash, leaf, size, &changed, &root).is_err());
            prop_assert!(merkle::verify_inclusion(&leaf_hash, leaf, size, &path[1..], &root).is_err());
        }
        let mut longer = path.clone();
        longer.push(other);
        prop_assert!(merkle::verify_inclusion(&leaf_hash, leaf, size, &longer, &root).is_err());

        let old = 1 + a % (size - 1);
        let old_root = rfc::mth(&leaves[..old as usize]);
        let proof = rfc::proof(old as usize, &leaves[..size as usize]);
        merkle::verify_consistency(old, size, &old_root, &root, &proof).unwrap();
        prop_assert!(merkle::verify_consistency(old, size, &stranger, &root, &proof).is_err());
        prop_assert!(merkle::verify_consistency(old, size, &old_root, &stranger, &proof).is_err());
        prop_assert!(merkle::verify_consistency(size, old, &root, &old_root, &proof).is_err());
        let mut changed = proof.clone();
        let at = flip.0 % changed.len();
        changed[at][flip.1 as usize % 32] ^= 1;
        prop_assert!(merkle::verify_consistency(old, size, &old_root, &root, &changed).is_err());
        prop_assert!(merkle::verify_consistency(old, size, &old_root, &root, &proof[1..]).is_err());
    }
}

#[test]
fn proofs_of_sizes_past_the_tree_are_errors_not_panics() {
    let leaves: Vec<Hash> = (0..5).map(|n| rfc::leaf(&[n])).collect();
    assert!(matches!(
        merkle::inclusion_proof(&mut LeafHashes(&leaves), 5, 5),
        Err(AuditError::OutOfRange { .. })
    ));
    assert!(merkle::inclusion_proof(&mut LeafHashes(&leaves), 0, 6).is_err());
    assert!(merkle::consistency_proof(&mut LeafHashes(&leaves), 6, 5).is_err());
    assert_eq!(
        merkle::verify_consistency(3, 2, &leaves[0], &leaves[1], &[]),
        Err(ProofError::Shrunk { old: 3, new: 2 })
    );
}

#[test]
fn the_published_signed_note_verifies_and_a_changed_one_does_not() {
    let vector = fixture("signed-note.json");
    let verifier: Verifier = vector["verifier"].as_str().unwrap().parse().unwrap();
    assert_eq!(verifier.to_string(), vector["verifier"].as_str().unwrap());
    let note = Note::parse(vector["note"].as_str().unwrap()).unwrap();
    assert_eq!(
        note.verify(&verifier).unwrap(),
        vector["text"].as_str().unwrap()
    );
    let changed = vector["note"]
        .as_str()
        .unwrap()
        .replace("example message", "example massage");
    assert!(matches!(
        Note::parse(&changed).unwrap().verify(&verifier),
        Err(NoteError::BadSignature { .. })
    ));
    // A key id that does not belong to the key is refused as a verifier.
    let wrong_id = vector["verifier"]
        .as_str()
        .unwrap()
        .replace("530d903a", "530d903b");
    assert!(wrong_id.parse::<Verifier>().is_err());
}

#[test]
fn a_key_file_signs_checkpoints_anyone_with_its_verifier_key_can_check() {
    let dir = tempfile::tempdir().unwrap();
    let key_path = dir.path().join("audit.key");
    let key = SigningKey::load_or_create(&key_path, "example.org/airlock/test").unwrap();
    let mode = std::os::unix::fs::PermissionsExt::mode(
        &std::fs::metadata(&key_path).unwrap().permissions(),
    );
    assert_eq!(mode & 0o777, 0o600);
    let text = std::fs::read_to_string(&key_path).unwrap();
    assert!(
        text.starts_with("PRIVATE+KEY+example.org/airlock/test+"),
        "{text}"
    );
    // Loading it again gives the same key, whatever name is asked for.
    let again = SigningKey::load_or_create(&key_path, "other").unwrap();
    assert_eq!(again.verifier(), key.verifier());
    let verifier: Verifier = key.verifier().to_string().parse().unwrap();
    let checkpoint = Checkpoint {
        origin: "example.org/airlock/test".into(),
        size: 12,
        root: rfc::leaf(b"x"),
    };
    let note = key.sign(&checkpoint.body());
    assert_eq!(Checkpoint::open(&note, &verifier).unwrap(), checkpoint);
    // Another key's verifier, or a changed size, is refused.
    let other =
        SigningKey::load_or_create(&dir.path().join("other.key"), "example.org/airlock/test")
            .unwrap();
    assert!(matches!(
        Checkpoint::open(&note, &other.verifier()),
        Err(NoteError::NotSigned { .. })
    ));
    let forged = note.replacen("\n12\n", "\n13\n", 1);
    assert!(Checkpoint::open(&forged, &verifier).is_err());
    // A damaged key file is an error, never a new key.
    std::fs::write(&key_path, "PRIVATE+KEY+x+00000000+AAAA\n").unwrap();
    assert!(SigningKey::load_or_create(&key_path, "x").is_err());
}

fn checkpointer(dir: &Path) -> Checkpointer {
    let index = MerkleIndex::open(&dir.join("audit.merkle")).unwrap();
    let key = SigningKey::load_or_create(&dir.join("audit.key"), "example.org/log").unwrap();
    Checkpointer::new(index, key, "example.org/log").unwrap()
}

#[test]
fn a_record_and_its_proof_verify_offline_and_a_log_that_grew_stays_consistent() {
    let dir = tempfile::tempdir().unwrap();
    let path = log_with(dir.path(), 37);
    let signer = checkpointer(dir.path());
    let verifier = signer.key().verifier();
    let mut source = FileLeaves { path: path.clone() };
    let first = signer.sign(&mut source, None, None).unwrap();
    assert_eq!(first.checkpoint.size, 37);
    let lines = lines_of(&path);
    let proof = signer.inclusion(&mut source, 20, 37).unwrap();
    let text = inclusion_text(&lines[20], 20, &proof, &first.note);
    let parsed = InclusionProof::parse(&text).unwrap();
    assert_eq!(
        parsed.check(None, Some(&first.note), &verifier).unwrap(),
        first.checkpoint
    );
    // Another record's line does not pass for this one.
    assert!(matches!(
        parsed.check(Some(&lines[21]), None, &verifier),
        Err(CheckError::Proof(ProofError::RootMismatch))
    ));

    // More records, a new checkpoint, and the proof that it extends the old.
    {
        let (log, _) = AuditLog::open(&path, None, None).unwrap();
        for _ in 0..30 {
            log.append(json!({"event": "tool_call"}).as_object().cloned().unwrap())
                .unwrap();
        }
    }
    let second = signer
        .sign(&mut source, None, Some(&first.checkpoint))
        .unwrap();
    assert_eq!(second.checkpoint.size, 67);
    let (path_hashes, old_root) = signer.consistency(&mut source, 37, 67).unwrap();
    assert_eq!(old_root, first.checkpoint.root);
    let text = consistency_text(37, &old_root, &path_hashes, &second.note);
    let parsed = ConsistencyProof::parse(&text).unwrap();
    assert_eq!(
        parsed.check(&first.note, &verifier).unwrap(),
        second.checkpoint
    );
    // The whole log checks against both checkpoints.
    assert_eq!(
        check_log(&mut source, &first.note, &verifier).unwrap().1,
        30
    );
    assert_eq!(
        check_log(&mut source, &second.note, &verifier).unwrap().1,
        0
    );
}

/// Rewrites the log file by changing its lines.
fn rewrite(path: &Path, change: impl FnOnce(&mut Vec<Vec<u8>>)) {
    let mut lines = lines_of(path);
    change(&mut lines);
    let mut text = Vec::new();
    for line in lines {
        text.extend_from_slice(&line);
        text.push(b'\n');
    }
    std::fs::write(path, text).unwrap();
}

#[test]
fn a_tampered_truncated_or_reordered_log_is_caught_with_only_a_checkpoint_and_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = log_with(dir.path(), 50);
    let signer = checkpointer(dir.path());
    let signed = signer
        .sign(&mut FileLeaves { path: path.clone() }, None, None)
        .unwrap();
    let verifier = signer.key().verifier();
    let original = std::fs::read(&path).unwrap();
    let copy = dir.path().join("copy.jsonl");
    let check = |change: &dyn Fn(&mut Vec<Vec<u8>>)| {
        std::fs::write(&copy, &original).unwrap();
        rewrite(&copy, |lines| change(lines));
        check_log(
            &mut FileLeaves { path: copy.clone() },
            &signed.note,
            &verifier,
        )
    };
    assert_eq!(check(&|_| {}).unwrap().1, 0);
    // One byte of one record changed (its seq kept).
    let tampered = check(&|lines| {
        let line = &mut lines[17];
        let at = line.len() - 5;
        line[at] ^= 1;
    });
    assert!(
        matches!(tampered, Err(CheckError::Rewritten { size: 50 })),
        "{tampered:?}"
    );
    // The last ten records cut off.
    let truncated = check(&|lines| lines.truncate(40));
    assert!(
        matches!(
            truncated,
            Err(CheckError::Truncated {
                records: 40,
                size: 50
            })
        ),
        "{truncated:?}"
    );
    // Two records swapped, their seqs renumbered so the file looks in order.
    let reordered = check(&|lines| {
        lines.swap(10, 11);
        for (n, line) in lines.iter_mut().enumerate() {
            let text = String::from_utf8(line.clone()).unwrap();
            let rest = text.split_once(',').unwrap().1;
            *line = format!("{{\"seq\":{},{rest}", n + 1).into_bytes();
        }
    });
    assert!(
        matches!(reordered, Err(CheckError::Rewritten { .. })),
        "{reordered:?}"
    );
    // Swapped without renumbering: the seqs give it away.
    let swapped = check(&|lines| lines.swap(3, 4));
    assert!(matches!(swapped, Err(CheckError::Log(_))), "{swapped:?}");
}

#[test]
fn a_checkpoint_inconsistent_with_one_signed_before_is_never_signed() {
    let dir = tempfile::tempdir().unwrap();
    let path = log_with(dir.path(), 20);
    let signer = checkpointer(dir.path());
    let mut source = FileLeaves { path: path.clone() };
    let first = signer.sign(&mut source, None, None).unwrap();
    // Someone rewrites a covered record and deletes the index so it is
    // rebuilt from the rewritten log.
    rewrite(&path, |lines| {
        let text = String::from_utf8(lines[5].clone()).unwrap();
        lines[5] = text.replace("src/5.rs", "src/X.rs").into_bytes();
    });
    std::fs::remove_file(dir.path().join("audit.merkle")).unwrap();
    let signer = checkpointer(dir.path());
    let refused = signer.sign(&mut source, None, Some(&first.checkpoint));
    assert!(
        matches!(refused, Err(AuditError::CheckpointConflict { size: 20 })),
        "{refused:?}"
    );
    // A smaller tree than one signed before is refused too.
    let refused = signer.sign(&mut source, Some(10), Some(&first.checkpoint));
    assert!(
        matches!(refused, Err(AuditError::CheckpointConflict { .. })),
        "{refused:?}"
    );
}

#[test]
fn a_damaged_index_is_rebuilt_and_a_log_cut_short_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let path = log_with(dir.path(), 30);
    let signer = checkpointer(dir.path());
    let mut source = FileLeaves { path: path.clone() };
    let first = signer.sign(&mut source, None, None).unwrap();
    // Garbage appended to the index (a crash mid-write): it starts again and
    // gives the same tree.
    let index_path = dir.path().join("audit.merkle");
    let mut bytes = std::fs::read(&index_path).unwrap();
    bytes.extend_from_slice(&[7u8; 45]);
    std::fs::write(&index_path, bytes).unwrap();
    let again = signer
        .sign(&mut source, None, Some(&first.checkpoint))
        .unwrap();
    assert_eq!(again.checkpoint, first.checkpoint);
    // The log cut short under the index.
    rewrite(&path, |lines| lines.truncate(25));
    let cut = signer.sign(&mut source, None, Some(&first.checkpoint));
    assert!(
        matches!(
            cut,
            Err(AuditError::IndexAhead { .. } | AuditError::CheckpointConflict { .. })
        ),
        "{cut:?}"
    );
}

/// Regression: processes starting together each saw a key file another had
/// created but not yet written ("not an audit key file"). Now every one of
/// them gets the one key.
#[test]
fn many_starting_at_once_all_get_the_one_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("audit.key");
    let keys: Vec<String> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..16)
            .map(|_| {
                let path = path.clone();
                scope.spawn(move || {
                    SigningKey::load_or_create(&path, "example.org/race")
                        .unwrap()
                        .verifier()
                        .to_string()
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(keys.iter().all(|key| key == &keys[0]), "{keys:?}");
    // No temporary file is left beside it.
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["audit.key"]);
}
