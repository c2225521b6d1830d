#![allow(clippy::unwrap_used, clippy::expect_used)]

//! The blob store: content-addressed, written once, read back only by a
//! well-formed reference to content that still has its hash.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use airlock_fs::{BlobRef, PREVIEW_BYTES, read_blob, sha256_hex, store_blob};
use pretty_assertions::assert_eq;

/// Every file under `dir`, root-relative, sorted.
fn files(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(next) = pending.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                pending.push(path);
            } else {
                let relative = path.strip_prefix(dir).unwrap();
                found.push(relative.display().to_string());
            }
        }
    }
    found.sort();
    found
}

#[test]
fn a_stored_blob_reads_back_and_is_written_once() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path().join("state/blobs");
    let text = "src/a.rs:1:fn a() {}\nsrc/b.rs:2:fn b() {}";
    let hash = sha256_hex(text);
    let hex = hash.strip_prefix("sha256:").unwrap();

    let stored = store_blob(&dir, text).unwrap();
    assert_eq!(
        stored,
        BlobRef {
            blob_ref: hash.clone(),
            size_bytes: text.len() as u64,
            preview: text.to_owned(),
        }
    );
    assert_eq!(read_blob(&dir, &hash).unwrap(), text.as_bytes());
    assert_eq!(files(&dir), vec![format!("sha256/{hex}")]);
    let mode = std::fs::metadata(dir.join("sha256").join(hex))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    // The same content again: the same reference, no second file, no
    // temporary file left behind.
    assert_eq!(store_blob(&dir, text).unwrap(), stored);
    assert_eq!(files(&dir), vec![format!("sha256/{hex}")]);

    let other = store_blob(&dir, "").unwrap();
    assert_eq!(other.blob_ref, sha256_hex(""));
    assert_eq!(read_blob(&dir, &other.blob_ref).unwrap(), b"");
    assert_eq!(files(&dir).len(), 2);
}

#[test]
fn only_a_well_formed_reference_to_intact_content_is_found() {
    let temp = tempfile::tempdir().unwrap();
    let dir = temp.path();
    let stored = store_blob(dir, "hello\n").unwrap();
    let hex = stored.blob_ref.strip_prefix("sha256:").unwrap().to_owned();
    let code = |blob_ref: &str| match read_blob(dir, blob_ref) {
        Ok(content) => format!("ok {}", String::from_utf8(content).unwrap().trim_end()),
        Err(error) => error.code().to_string(),
    };
    let cases = [
        stored.blob_ref.clone(),
        hex.clone(),
        format!("sha256:{}", hex.to_uppercase()),
        format!("sha256:{}", &hex[..63]),
        format!("sha256:{hex}/"),
        format!("sha256:../sha256/{}", &hex[10..]),
        format!("sha512:{hex}"),
        sha256_hex("never stored"),
        String::new(),
    ];
    let actual: Vec<(String, String)> = cases
        .iter()
        .map(|blob_ref| (blob_ref.clone(), code(blob_ref)))
        .collect();
    let mut expected: Vec<(String, String)> = cases
        .iter()
        .map(|blob_ref| (blob_ref.clone(), "not_found".to_owned()))
        .collect();
    expected[0].1 = "ok hello".to_owned();
    assert_eq!(actual, expected);

    // Content that no longer has its hash is not the blob it names.
    std::fs::write(dir.join("sha256").join(&hex), "tampered\n").unwrap();
    assert_eq!(code(&stored.blob_ref), "not_found");
}

#[test]
fn the_preview_is_the_beginning_cut_at_a_line_end_or_a_character_boundary() {
    let temp = tempfile::tempdir().unwrap();
    let lines: String = (0..500).map(|n| format!("src/file{n:03}.rs\n")).collect();
    let preview = store_blob(temp.path(), &lines).unwrap().preview;
    // Whole lines only, as many as fit.
    let line = "src/file000.rs\n".len();
    assert_eq!(preview, lines[..(PREVIEW_BYTES / line) * line]);

    let one_line = "é".repeat(2000);
    let preview = store_blob(temp.path(), &one_line).unwrap().preview;
    assert_eq!(preview, "é".repeat(PREVIEW_BYTES / 2));
    let odd = format!("x{one_line}");
    let preview = store_blob(temp.path(), &odd).unwrap().preview;
    assert_eq!(preview, format!("x{}", "é".repeat(PREVIEW_BYTES / 2 - 1)));
}
