//! Code mode's static side (DESIGN §5.2): what airlock learns from a
//! script's text before it runs.
//!
//! - [`prepare`] parses a script with oxc. JavaScript passes as written;
//!   TypeScript has its erasable type syntax blanked with spaces, so every
//!   line and column of what runs is where the author wrote it. TypeScript
//!   that makes code (`enum`, `namespace` with values, parameter
//!   properties, `import x =`, `export =`), decorators and module syntax are
//!   refused with their line and column.
//! - The same parse yields the [`Preview`]: the script's `codemode.X(…)`
//!   call sites, with the literal arguments it can read, and the places that
//!   make the list incomplete (an aliased or passed-on `codemode`, a
//!   computed name, spread arguments). The preview is for the human; the
//!   broker gates every call the script really makes, found or not.
//!
//! Nothing here runs the script, and nothing here trusts it: every input is
//! hostile text, and the only outputs are a string of the same shape and
//! data for display.

mod boundaries;
mod position;
mod preview;
mod strip;

use oxc_allocator::Allocator;
use oxc_parser::config::TokensParserConfig;
use oxc_parser::{ParseOptions, Parser, ParserReturn};
use oxc_span::SourceType;
use serde::Serialize;

pub use position::Position;
pub use preview::{CallSite, Gap, Preview, Reach};

/// The language a script was read as.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    JavaScript,
    TypeScript,
}

impl Language {
    pub fn as_str(self) -> &'static str {
        match self {
            Language::JavaScript => "javascript",
            Language::TypeScript => "typescript",
        }
    }
}

/// A script ready to run, and what its text shows.
#[derive(Clone, Debug)]
pub struct Prepared {
    /// The code to run: the script itself, or its TypeScript with the types
    /// blanked (the same lines, each with the same characters counted).
    pub code: String,
    pub language: Language,
    pub preview: Preview,
}

/// Why a script cannot run, and where (1-based line and column, columns in
/// characters).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ParseError {
    pub message: String,
    pub line: u32,
    pub column: u32,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}: {}", self.line, self.column, self.message)
    }
}

impl std::error::Error for ParseError {}

/// The stack a parse of a text starts with, besides [`STACK_PER_BYTE`].
const STACK_BASE: usize = 16 << 20;
/// The stack a parse may use for each byte of its text. oxc's parser (and
/// the walks over its tree) recurse once a level of nesting, with no limit
/// of their own: the deepest text found (`((((…` and `[[[[…`) takes about
/// 2 KiB a byte in a release build and 4 KiB in a debug one. The stack is
/// reserved, not used: a script touches what its nesting needs.
const STACK_PER_BYTE: usize = 6 << 10;

/// Parses `source` as JavaScript, else as TypeScript, and returns the code
/// to run with its preview; or the first reason it cannot run.
///
/// The parse runs on a thread of its own whose stack is sized from the
/// text's length, so that no nesting a text of that length can hold
/// overflows it (a stack overflow would abort the process).
pub fn prepare(source: &str) -> Result<Prepared, ParseError> {
    let failure = |message: &str| ParseError {
        message: message.to_owned(),
        line: 1,
        column: 1,
    };
    let stack = source
        .len()
        .checked_mul(STACK_PER_BYTE)
        .and_then(|size| size.checked_add(STACK_BASE))
        .ok_or_else(|| failure("the script is too large to parse"))?;
    std::thread::scope(|scope| {
        let parsing = std::thread::Builder::new()
            .name("airlock-script".to_owned())
            .stack_size(stack)
            .spawn_scoped(scope, || prepare_here(source))
            .map_err(|_| failure("the script is too large to parse (no stack for its parser)"))?;
        parsing
            .join()
            .unwrap_or_else(|_| Err(failure("the parser failed on this script")))
    })
}

fn prepare_here(source: &str) -> Result<Prepared, ParseError> {
    let lines = position::Lines::new(source);
    let allocator = Allocator::default();
    let script = parse(&allocator, source, SourceType::mjs());
    if !failed(&script) {
        // Plain JavaScript: nothing to blank, so no tokens are needed.
        return finish(source, &script, Language::JavaScript, &lines);
    }
    let allocator = Allocator::default();
    let typed = parse(&allocator, source, SourceType::ts().with_module(true));
    if failed(&typed) {
        return Err(first_error(&typed, &lines));
    }
    // Blanking needs the tokens (where a modifier or a `)` is); oxc keeps
    // them whole only for a parse that succeeds, so they are asked for now.
    let allocator = Allocator::default();
    let typed = Parser::new(&allocator, source, SourceType::ts().with_module(true))
        .with_options(options())
        .with_config(TokensParserConfig)
        .parse();
    if failed(&typed) {
        return Err(first_error(&typed, &lines));
    }
    let prepared = finish(source, &typed, Language::TypeScript, &lines)?;
    // What runs must be JavaScript: where oxc's TypeScript grammar let
    // through what its JavaScript grammar refuses, the refusal stands (at
    // the same place, as blanking moves nothing).
    let allocator = Allocator::default();
    let blanked = parse(&allocator, &prepared.code, SourceType::mjs());
    if failed(&blanked) {
        return Err(first_error(&blanked, &lines));
    }
    // And the same program: a line that ended with a blanked type may not
    // run on into the next one (`f as T` then `(g)()` on its own line is two
    // statements to TypeScript and one call once blanked). Every statement
    // and class member starts where it started.
    if let Some(position) =
        boundaries::first_difference(&lines, &typed.program, &blanked.program, &prepared.code)
    {
        return Err(ParseError {
            message: "blanking the types here would join this line to the one before it; end the statement before with `;`".to_owned(),
            ..ParseError::from(position)
        });
    }
    Ok(prepared)
}

fn failed(parsed: &ParserReturn<'_>) -> bool {
    parsed.diagnostics.has_errors() || parsed.panicked
}

fn options() -> ParseOptions {
    ParseOptions {
        allow_return_outside_function: true,
        ..ParseOptions::default()
    }
}

fn parse<'a>(
    allocator: &'a Allocator,
    source: &'a str,
    source_type: SourceType,
) -> ParserReturn<'a> {
    Parser::new(allocator, source, source_type)
        .with_options(options())
        .parse()
}

fn finish(
    source: &str,
    parsed: &ParserReturn<'_>,
    language: Language,
    lines: &position::Lines<'_>,
) -> Result<Prepared, ParseError> {
    let code = strip::blank(source, &parsed.program, &parsed.tokens)
        .map_err(|refusal| refusal.at(lines))?;
    let preview = preview::of(source, &parsed.program, lines);
    Ok(Prepared {
        code,
        language,
        preview,
    })
}

fn first_error(parsed: &ParserReturn<'_>, lines: &position::Lines<'_>) -> ParseError {
    let Some(first) = parsed.diagnostics.errors().next() else {
        return ParseError {
            message: "the script could not be parsed".to_owned(),
            line: 1,
            column: 1,
        };
    };
    let offset = first
        .labels
        .iter()
        .find(|label| label.primary())
        .or_else(|| first.labels.first())
        .map_or(0, |label| label.offset());
    let Position { line, column } = lines.at(offset);
    let mut message = first.message.to_string();
    if let Some(help) = &first.help {
        message.push_str(&format!(" ({help})"));
    }
    ParseError {
        message,
        line,
        column,
    }
}
