//! Code mode's TypeScript stripping and static preview on arbitrary text:
//! nothing may panic; what prepares keeps every line's length in
//! characters, reads back as the same JavaScript, and places its call sites
//! and gaps inside the text; what does not prepare says where.

#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "../../crates/airlock-script/tests/common/mod.rs"]
mod common;

fuzz_target!(|data: &[u8]| {
    if let Ok(source) = std::str::from_utf8(data) {
        let _ = common::holds(source);
    }
});
