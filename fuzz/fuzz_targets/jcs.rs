//! The RFC 8785 canonicaliser, both halves: the audit verifier's reader on arbitrary
//! bytes, and the writer (`airlock_core::canonical` over a `serde_json::Value`) on
//! whatever serde_json reads from them. Nothing may panic, the reader's output is
//! JSON and its own canonical form, and for every line serde_json writes the two
//! halves agree byte for byte (else a record would not verify).

#![no_main]

use airlock_audit::canonical_record_text;
use airlock_core::canonical::to_canonical_string;
use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    if let Ok(canonical) = canonical_record_text(data) {
        let again = canonical_record_text(&canonical).expect("canonical text reads back");
        assert_eq!(again, canonical, "canonical text is its own canonical form");
        serde_json::from_slice::<Value>(&canonical).expect("canonical text is JSON");
    }
    if let Ok(Value::Object(mut record)) = serde_json::from_slice::<Value>(data) {
        let line = serde_json::to_vec(&record).expect("serde_json writes what it read");
        record.remove("event_hash");
        let written = to_canonical_string(&Value::Object(record));
        let read = canonical_record_text(&line).expect("the reader reads what serde_json wrote");
        assert_eq!(
            String::from_utf8_lossy(&read),
            written,
            "reader and writer disagree"
        );
    }
});
