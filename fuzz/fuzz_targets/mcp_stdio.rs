//! The MCP stdio reader (`airlock_core::jsonrpc`): any bytes, cut into any
//! chunks, are framed into lines no longer than the limit, the framer never
//! holds more than one line of it, and every line is a message or answered
//! with -32700 or -32600 (never a panic, never another code).
#![no_main]

use airlock_core::jsonrpc::{Frame, LineFramer, check_message, is_blank};
use libfuzzer_sys::fuzz_target;

const MAX: usize = 64;

fuzz_target!(|data: &[u8]| {
    // The first byte picks the chunk size, the rest is the stream.
    let Some((&size, stream)) = data.split_first() else {
        return;
    };
    let size = usize::from(size).max(1);
    let mut framer = LineFramer::new(MAX);
    let mut frames = Vec::new();
    for chunk in stream.chunks(size) {
        framer.push(chunk, &mut frames);
        assert!(framer.buffered() <= MAX);
    }
    framer.finish(&mut frames);
    let newlines = stream.iter().filter(|&&b| b == b'\n').count();
    assert!(frames.len() == newlines || frames.len() == newlines + 1);
    for frame in frames {
        let Frame::Line(line) = frame else {
            continue;
        };
        assert!(line.len() <= MAX);
        if is_blank(&line) {
            continue;
        }
        match check_message(&line) {
            Ok(value) => assert!(value.is_object()),
            Err(rejection) => {
                assert!(rejection.code == -32700 || rejection.code == -32600);
                let response: serde_json::Value =
                    serde_json::from_str(&rejection.response()).expect("the answer is JSON");
                assert_eq!(response["jsonrpc"], "2.0");
            }
        }
    }
});
