//! RFC 8785 against its authors' published test data (cyberphone/json-canonicalization):
//! the input/output pairs, and the ES6 number sequence checked by its published SHA-256.
//!
//! The data lives outside the repository, in `../shared/peer-data/jcs` beside the clone
//! (or wherever `AIRLOCK_PEER_DATA` points). Where it is missing the tests say so on
//! standard error and check nothing; `AIRLOCK_PEER_DATA_REQUIRED=1` makes that a failure.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::fs;
use std::path::PathBuf;

use airlock_core::canonical::to_canonical_string;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// The `jcs` directory of the peer data, if it is there.
fn peer_data() -> Option<PathBuf> {
    let base = match std::env::var_os("AIRLOCK_PEER_DATA") {
        Some(dir) => PathBuf::from(dir),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/peer-data"),
    };
    let dir = base.join("jcs");
    if dir.join("input").is_dir() {
        return Some(dir);
    }
    assert!(
        std::env::var_os("AIRLOCK_PEER_DATA_REQUIRED").is_none(),
        "no RFC 8785 peer data at {}",
        dir.display()
    );
    eprintln!(
        "no RFC 8785 peer data at {}: nothing checked",
        dir.display()
    );
    None
}

#[test]
fn every_published_input_gives_the_published_output() {
    let Some(dir) = peer_data() else { return };
    let mut names: Vec<_> = fs::read_dir(dir.join("input"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name())
        .collect();
    names.sort();
    assert!(names.len() >= 6, "{names:?}");
    for name in names {
        let input = fs::read_to_string(dir.join("input").join(&name)).unwrap();
        let expected = fs::read(dir.join("output").join(&name)).unwrap();
        let value: Value = serde_json::from_str(&input).unwrap();
        let canonical = to_canonical_string(&value);
        assert_eq!(
            canonical,
            String::from_utf8(expected.clone()).unwrap(),
            "{name:?}"
        );
        // outhex holds the same bytes in hex.
        let hex_name = PathBuf::from(&name).with_extension("txt");
        let hex: String = fs::read_to_string(dir.join("outhex").join(hex_name))
            .unwrap()
            .split_whitespace()
            .collect();
        assert_eq!(hex::encode(canonical.as_bytes()), hex, "{name:?}");
    }
}

/// The deterministic sequence of the ES6 number test file: the static bit patterns,
/// 2000 serial subnormal-to-normal values, then doubles taken four at a time from a
/// SHA-256 chain over 32 bytes (zeros at first), skipping zeros, NaNs and infinities.
struct Es6Numbers {
    statics: Vec<u64>,
    index: usize,
    block: [u8; 32],
    pending: VecDeque<f64>,
}

impl Iterator for Es6Numbers {
    type Item = f64;

    fn next(&mut self) -> Option<f64> {
        let index = self.index;
        self.index += 1;
        if let Some(&bits) = self.statics.get(index) {
            return Some(f64::from_bits(bits));
        }
        let serial = index - self.statics.len();
        if serial < 2000 {
            return Some(f64::from_bits(0x0010_0000_0000_0000 + serial as u64));
        }
        loop {
            if self.pending.is_empty() {
                self.block = Sha256::digest(self.block).into();
                for chunk in self.block.chunks_exact(8) {
                    let bytes: [u8; 8] = chunk.try_into().unwrap();
                    self.pending.push_back(f64::from_le_bytes(bytes));
                }
            }
            let value = self.pending.pop_front().unwrap();
            if value != 0.0 && value.is_finite() {
                return Some(value);
            }
        }
    }
}

#[test]
fn the_es6_number_sequence_hashes_to_the_published_checksums() {
    let Some(dir) = peer_data() else { return };
    let statics: Vec<u64> = fs::read_to_string(dir.join("es6-static-u64.txt"))
        .unwrap()
        .split_whitespace()
        .map(|hex| u64::from_str_radix(hex, 16).unwrap())
        .collect();
    assert_eq!(statics.len(), 168);
    let numbers = Es6Numbers {
        statics,
        index: 0,
        block: [0; 32],
        pending: VecDeque::new(),
    };
    // From the test data's README: the SHA-256 of the first N lines "hex,expected\n".
    let checkpoints = [
        (
            1000,
            "be18b62b6f69cdab33a7e0dae0d9cfa869fda80ddc712221570f9f40a5878687",
        ),
        (
            10_000,
            "b9f7a8e75ef22a835685a52ccba7f7d6bdc99e34b010992cbc5864cd12be6892",
        ),
        (
            100_000,
            "22776e6d4b49fa294a0d0f349268e5c28808fe7e0cb2bcbe28f63894e494d4c7",
        ),
    ];
    let mut hasher = Sha256::new();
    let mut checked = Vec::new();
    for (count, value) in numbers.enumerate().take(100_000) {
        let line = format!(
            "{:x},{}\n",
            value.to_bits(),
            to_canonical_string(&json!(value))
        );
        hasher.update(line.as_bytes());
        if let Some((lines, _)) = checkpoints.iter().find(|(lines, _)| *lines == count + 1) {
            checked.push((*lines, hex::encode(hasher.clone().finalize())));
        }
    }
    let expected: Vec<(usize, String)> = checkpoints
        .iter()
        .map(|(lines, hash)| (*lines, (*hash).to_owned()))
        .collect();
    assert_eq!(checked, expected);
}
