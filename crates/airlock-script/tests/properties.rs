//! What must hold of `prepare` on any text (the fuzz target
//! `script_prepare` checks the same on generated input): it never panics;
//! what prepares keeps every line's length in characters and reads back as
//! the same JavaScript; call sites, gaps and errors point inside the text.
//! The inputs here are the ones that once broke it, and generated mixes of
//! TypeScript fragments.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use proptest::prelude::*;

mod common;

fn holds(source: &str) {
    let _ = common::holds(source);
}

#[test]
fn inputs_that_once_broke_it() {
    for source in [
        "\u{1}",
        "<!--",
        "\\;<T<<2",
        "",
        "\n",
        "\r\n",
        "a\u{2028}b",
        "let x: number\u{1}",
    ] {
        holds(source);
    }
}

/// Deep nesting, as long as a test can afford: parsed or refused, never a
/// crash (oxc recurses once a level, so the parse runs on a stack sized
/// from the text's length).
#[test]
fn deep_nesting_never_crashes() {
    const LEVELS: usize = 16 << 10;
    let cases = [
        format!("{}1{}", "(".repeat(LEVELS), ")".repeat(LEVELS)),
        format!("{}{}", "[".repeat(LEVELS), "]".repeat(LEVELS)),
        format!(
            "codemode.read_file({}1{})",
            "[".repeat(LEVELS),
            "]".repeat(LEVELS)
        ),
        format!("{}1{}", "({a:".repeat(LEVELS / 4), "})".repeat(LEVELS / 4)),
        format!("{}1", "if(1)".repeat(LEVELS / 4)),
        format!("{}x", "!".repeat(LEVELS)),
        format!("{}1", "a=>".repeat(LEVELS / 3)),
        format!("{}{}", "`${".repeat(LEVELS / 3), "}`".repeat(LEVELS / 3)),
        format!(
            "let x: {}number{};",
            "A<".repeat(LEVELS / 2),
            ">".repeat(LEVELS / 2)
        ),
        format!(
            "{}{}",
            "function f(){".repeat(LEVELS / 13),
            "}".repeat(LEVELS / 13)
        ),
        "(".repeat(LEVELS),
    ];
    for source in &cases {
        holds(source);
    }
}

const FRAGMENTS: &[&str] = &[
    "let a: number = 1;",
    "const f = (x?: string): void => {};",
    "interface I { a: 1 }",
    "type T = string | number",
    "class C<T> implements I { private x!: T; constructor() {} }",
    "abstract class D { abstract m(): void; declare y: number }",
    "declare const z: number;",
    "function g(this: Window, a: number): number;",
    "function g(a: any) { return a }",
    "x as unknown as T",
    "<T>y",
    "y!",
    "f<T>(1)",
    "codemode.read_file({ path: 'a' })",
    "codemode['write_file']({ path: 'b', content: c })",
    "const t = codemode;",
    "await codemode.exec(...args)",
    "enum E { A }",
    "\n",
    "\r\n",
    "\u{2028}",
    "/* c */",
    "// c\n",
    "é",
    "😀",
    "{",
    "}",
    "(",
    ")",
    ";",
    ":",
    "?",
    "!",
    "<",
    ">",
    "=>",
    "return 1",
    "await 1",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn any_mix_of_fragments(parts in proptest::collection::vec(0..FRAGMENTS.len(), 0..12)) {
        let source: String = parts.iter().map(|index| FRAGMENTS[*index]).collect::<Vec<_>>().join(" ");
        holds(&source);
    }

    #[test]
    fn any_text(source in "\\PC{0,80}") {
        holds(&source);
    }
}
