//! Code mode's TypeScript stripping and static preview on arbitrary text:
//! nothing may panic; what prepares keeps every line's length in
//! characters, reads back as the same JavaScript, and places its call sites
//! and gaps inside the text; what does not prepare says where.

#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(source) = std::str::from_utf8(data) else {
        return;
    };
    let lines: Vec<usize> = source.split('\n').map(|line| line.chars().count()).collect();
    let inside = |line: u32, column: u32| {
        line >= 1
            && column >= 1
            && lines
                .get(line as usize - 1)
                .is_some_and(|length| column as usize <= length + 1)
    };
    match airlock_script::prepare(source) {
        Ok(prepared) => {
            let after: Vec<usize> = prepared
                .code
                .split('\n')
                .map(|line| line.chars().count())
                .collect();
            assert_eq!(lines, after, "blanking keeps every line's length");
            let again = airlock_script::prepare(&prepared.code)
                .expect("blanked TypeScript reads back as JavaScript");
            assert_eq!(again.language, airlock_script::Language::JavaScript);
            assert_eq!(again.code, prepared.code, "JavaScript passes as written");
            for call in &prepared.preview.calls {
                assert!(inside(call.line, call.column), "a call site inside the text");
            }
            for gap in &prepared.preview.gaps {
                assert!(inside(gap.line, gap.column), "a gap inside the text");
            }
        }
        Err(error) => {
            assert!(inside(error.line, error.column), "an error inside the text: {error}");
        }
    }
});
