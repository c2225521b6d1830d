//! What the integration tests share.

use std::path::Path;

/// Moves the clock of every airlock process that reads `file` (their
/// `AIRLOCK_TEST_CLOCK`) `ms` forward: the file holds the offset from the
/// system's clock, in milliseconds.
pub fn advance_clock(file: &Path, ms: u64) {
    let now: u64 = std::fs::read_to_string(file)
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(0);
    if let Some(parent) = file.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(file, (now + ms).to_string()).unwrap();
}
