//! Blobs: tool output too large to return inline (DESIGN §5).
//!
//! Every tool that can return a lot of text (read_file, grep, glob, list_dir)
//! hands its output to one helper, which applies the call's `output_mode` and
//! `max_inline_bytes`:
//!
//! - output up to `max_inline_bytes` is returned inline;
//! - larger output under `require_inline` is `inline_required_too_large`;
//! - larger output under `auto` is stored as a blob, and the call returns a
//!   [`BlobRef`] (`{blob_ref: "sha256:…", size_bytes, preview}`) instead.
//!
//! Blobs are content-addressed files `<blob dir>/sha256/<64 hex>` in the state
//! dir, which the agent's own paths can never reach (the policy protects it);
//! airlock itself writes them with ordinary file calls, atomically (a temporary
//! file, synced, then renamed), and never rewrites one that exists.
//! [`read_blob`] reads one back, for the MCP resource `airlock://blob/sha256/…`.
//!
//! A sandbox without a blob dir ([`Sandbox::with_blob_dir`] was not called)
//! has nowhere to put a blob: large output under `auto` is then returned
//! inline, as if it were small, rather than failing the call.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::FsError;
use crate::hash::sha256_hex;
use crate::sandbox::Sandbox;

/// Where a tool's large output goes: `auto` stores it as a blob when it is
/// over `max_inline_bytes`; `require_inline` makes that an error instead.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum OutputMode {
    #[default]
    Auto,
    RequireInline,
}

/// Where a large output went: returned in place of the inline text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlobRef {
    /// `sha256:<64 lowercase hex>` of the whole output.
    pub blob_ref: String,
    pub size_bytes: u64,
    /// The beginning of the output (about [`PREVIEW_BYTES`]), cut at a line end
    /// when one is near, never inside a character.
    pub preview: String,
}

/// How many bytes of a blob its preview shows, at most.
pub const PREVIEW_BYTES: usize = 1024;

/// Reads the blob `blob_ref` (`sha256:<64 lowercase hex>`) from the blob dir
/// `dir`. A malformed reference, a missing blob and a blob whose content no
/// longer has its hash are all `not_found`.
pub fn read_blob(dir: &Path, blob_ref: &str) -> Result<Vec<u8>, FsError> {
    let not_found = || FsError::NotFound {
        path: blob_ref.to_owned(),
    };
    let hex = blob_hex(blob_ref).ok_or_else(not_found)?;
    let content = match fs::read(blob_path(dir, hex)) {
        Ok(content) => content,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Err(not_found()),
        Err(error) => return Err(FsError::io(format!("cannot read blob {blob_ref}"), error)),
    };
    // A blob is only ever written whole, under its hash; anything else there
    // was put by someone else and is not what the reference names.
    if sha256_hex(&content) != blob_ref {
        return Err(not_found());
    }
    Ok(content)
}

/// Stores `text` in the blob dir `dir` (creating it) and returns its
/// reference. Storing the same text twice writes it once.
pub fn store_blob(dir: &Path, text: &str) -> Result<BlobRef, FsError> {
    let blob_ref = sha256_hex(text);
    let hex = blob_hex(&blob_ref).ok_or_else(|| {
        FsError::io(
            "cannot store a blob",
            io::Error::other("the content hash is not sha256:<64 hex>"),
        )
    })?;
    let path = blob_path(dir, hex);
    if !path.exists() {
        write_atomically(&path, text.as_bytes())
            .map_err(|error| FsError::io(format!("cannot store blob {blob_ref}"), error))?;
    }
    Ok(BlobRef {
        blob_ref,
        size_bytes: text.len() as u64,
        preview: preview(text),
    })
}

/// A tool's text output after `output_mode` was applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Output {
    Inline(String),
    Blob(BlobRef),
}

impl Output {
    /// The two optional fields of a tool's `data`: the inline text or the blob.
    pub(crate) fn into_fields(self) -> (Option<String>, Option<BlobRef>) {
        match self {
            Output::Inline(text) => (Some(text), None),
            Output::Blob(blob) => (None, Some(blob)),
        }
    }
}

/// Applies `mode` and `max_inline_bytes` to a tool's output `text` (see the
/// module documentation).
pub(crate) fn shape_output(
    sandbox: &Sandbox,
    text: String,
    mode: OutputMode,
) -> Result<Output, FsError> {
    let limit = sandbox.config().max_inline_bytes;
    let size = text.len() as u64;
    if size <= limit {
        return Ok(Output::Inline(text));
    }
    match mode {
        OutputMode::RequireInline => Err(FsError::InlineRequiredTooLarge { size, limit }),
        OutputMode::Auto => match sandbox.blob_dir() {
            Some(dir) => store_blob(dir, &text).map(Output::Blob),
            None => Ok(Output::Inline(text)),
        },
    }
}

/// A tool's text output under `mode` and `max_inline_bytes`: the text
/// itself, or the blob it was stored as.
pub fn shape_text(
    sandbox: &Sandbox,
    text: String,
    mode: OutputMode,
) -> Result<(Option<String>, Option<BlobRef>), FsError> {
    shape_output(sandbox, text, mode).map(Output::into_fields)
}

/// The first [`PREVIEW_BYTES`] of `text` at most: cut after the last line end
/// in that window when it lies in its second half, else at the last character
/// boundary that fits.
fn preview(text: &str) -> String {
    if text.len() <= PREVIEW_BYTES {
        return text.to_owned();
    }
    let mut end = PREVIEW_BYTES;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let window = &text[..end];
    match window.rfind('\n') {
        Some(newline) if newline >= PREVIEW_BYTES / 2 => window[..=newline].to_owned(),
        _ => window.to_owned(),
    }
}

/// The 64 hex digits of a well-formed `sha256:<64 lowercase hex>` reference.
fn blob_hex(blob_ref: &str) -> Option<&str> {
    let hex = blob_ref.strip_prefix("sha256:")?;
    let well_formed = hex.len() == 64
        && hex
            .bytes()
            .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte));
    well_formed.then_some(hex)
}

fn blob_path(dir: &Path, hex: &str) -> PathBuf {
    dir.join("sha256").join(hex)
}

/// Writes `content` to a fresh temporary file next to `path`, syncs it and
/// renames it into place, so a reader sees the whole blob or none.
fn write_atomically(path: &Path, content: &[u8]) -> io::Result<()> {
    let directory = path
        .parent()
        .ok_or_else(|| io::Error::other("a blob path has no directory"))?;
    fs::create_dir_all(directory)?;
    let temporary = directory.join(format!(".tmp-{}", uuid::Uuid::new_v4().simple()));
    let result = write_then_rename(&temporary, path, content);
    if result.is_err() {
        // Best effort: a leftover temporary file is harmless, only untidy.
        let _ = fs::remove_file(&temporary);
    }
    result?;
    File::open(directory)?.sync_all()
}

fn write_then_rename(temporary: &Path, path: &Path, content: &[u8]) -> io::Result<()> {
    // Blobs hold workspace content: readable by airlock's user only.
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(temporary)?;
    file.write_all(content)?;
    file.sync_all()?;
    fs::rename(temporary, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preview_cuts_at_a_near_line_end_else_at_a_character_boundary() {
        let short = "a\nb\n";
        assert_eq!(preview(short), short);

        let lines: String = (0..200).map(|n| format!("line {n:03}\n")).collect();
        let cut = preview(&lines);
        assert!(cut.ends_with('\n') && cut.len() <= PREVIEW_BYTES && cut.len() > 1000);
        assert!(lines.starts_with(&cut));

        // No line end in the second half: cut at the byte limit, never inside
        // the two-byte `é`.
        let wide = format!("x{}", "é".repeat(1000));
        let cut = preview(&wide);
        assert_eq!(cut.len(), PREVIEW_BYTES - 1);
        assert!(wide.starts_with(&cut));
    }

    #[test]
    fn only_well_formed_references_name_a_blob() {
        let hex = "0123456789abcdef".repeat(4);
        assert_eq!(blob_hex(&format!("sha256:{hex}")), Some(hex.as_str()));
        for bad in [
            hex.clone(),
            format!("sha256:{}", hex.to_uppercase()),
            format!("sha256:{}", &hex[1..]),
            format!("sha256:{hex}0"),
            format!("sha256:../{}", &hex[3..]),
            format!("sha1:{hex}"),
        ] {
            assert_eq!(blob_hex(&bad), None, "{bad}");
        }
    }
}
