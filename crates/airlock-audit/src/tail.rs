//! Reading the end of a log file backwards: the last complete line and a torn tail.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

const CHUNK: u64 = 64 * 1024;

/// The end of a log file as found on disk.
#[derive(Debug)]
pub(crate) struct TailState {
    /// Length of the file up to and including its last `\n`.
    pub(crate) complete_len: u64,
    /// The last complete line (without its `\n`), if there is one.
    pub(crate) last_line: Option<Vec<u8>>,
}

/// Finds the last complete line of the first `len` bytes of `file`. Bytes after the
/// last `\n` (a torn line) are `len - complete_len`.
pub(crate) fn inspect_tail(file: &File, len: u64) -> io::Result<TailState> {
    let Some(last_newline) = last_newline_before(file, len)? else {
        return Ok(TailState {
            complete_len: 0,
            last_line: None,
        });
    };
    let line_start = last_newline_before(file, last_newline)?.map_or(0, |newline| newline + 1);
    let line = read_range(file, line_start, last_newline)?;
    Ok(TailState {
        complete_len: last_newline + 1,
        last_line: Some(line),
    })
}

/// The offset of the last `\n` before `end`.
pub(crate) fn last_newline_before(file: &File, end: u64) -> io::Result<Option<u64>> {
    let mut chunk_end = end;
    let mut buffer = vec![0u8; CHUNK as usize];
    while chunk_end > 0 {
        let chunk_start = chunk_end.saturating_sub(CHUNK);
        let slice = &mut buffer[..(chunk_end - chunk_start) as usize];
        file.read_exact_at(slice, chunk_start)?;
        if let Some(index) = slice.iter().rposition(|&byte| byte == b'\n') {
            return Ok(Some(chunk_start + index as u64));
        }
        chunk_end = chunk_start;
    }
    Ok(None)
}

/// How many `\n` the first `end` bytes of `file` hold (the line number of a
/// line starting at `end`, less one).
pub(crate) fn lines_before(file: &File, end: u64) -> io::Result<u64> {
    let mut lines = 0;
    let mut start = 0;
    let mut buffer = vec![0u8; CHUNK as usize];
    while start < end {
        let size = (end - start).min(CHUNK) as usize;
        file.read_exact_at(&mut buffer[..size], start)?;
        lines += buffer[..size].iter().filter(|&&byte| byte == b'\n').count() as u64;
        start += size as u64;
    }
    Ok(lines)
}

/// Bytes `start..end` of `file`.
pub(crate) fn read_range(file: &File, start: u64, end: u64) -> io::Result<Vec<u8>> {
    let mut bytes = vec![0u8; end.saturating_sub(start) as usize];
    file.read_exact_at(&mut bytes, start)?;
    Ok(bytes)
}

/// The start offsets of the last `count` complete lines of the first `complete_len`
/// bytes of `file` (which must end with `\n`), oldest first.
pub(crate) fn last_line_starts(file: &File, complete_len: u64, count: usize) -> io::Result<u64> {
    if count == 0 || complete_len == 0 {
        return Ok(complete_len);
    }
    // The newline ending the last line does not start a line; each newline before it
    // does, for the line after it.
    let mut end = complete_len - 1;
    let mut found = 0;
    while let Some(newline) = last_newline_before(file, end)? {
        found += 1;
        if found == count {
            return Ok(newline + 1);
        }
        end = newline;
    }
    Ok(0)
}
