//! apply_patch's parser on arbitrary text, in every format, and the chunk applier
//! on whatever it parsed: nothing may panic, and what parses is well-formed.

#![no_main]

use airlock_core::patch::{PatchFormat, PatchOp, apply_chunks, parse};
use libfuzzer_sys::fuzz_target;

/// Texts every parsed update is applied to: repeated and blank lines, typographic
/// punctuation, CRLF, and no final newline.
const SAMPLES: [&str; 4] = [
    "fn main() {\n    let x = 1;\n\n    let x = 1;\n    println!(\u{201C}hi\u{201D});\n}\n",
    "a\r\nb\r\na\r\n",
    "a\nb\n  a\t\nlast",
    "",
];

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    for format in [PatchFormat::Auto, PatchFormat::V4a, PatchFormat::Unified] {
        let Ok(patch) = parse(&text, format) else {
            continue;
        };
        assert_ne!(
            patch.format,
            PatchFormat::Auto,
            "parse reports the detected format"
        );
        assert!(
            !patch.ops.is_empty(),
            "a parsed patch changes at least one file"
        );
        for op in &patch.ops {
            assert!(!op.path().is_empty(), "every operation names a path");
            if let PatchOp::Update { path, chunks, .. } = op {
                for sample in SAMPLES {
                    let _ = apply_chunks(path, sample, chunks);
                }
            }
        }
    }
});
