//! The shell tool's decisions (DESIGN §5.1): a command line is parsed into
//! the simple commands it would run ([`parse`]), each is decided by
//! `exec.rules` and a curated read-only list, and the strictest decision
//! across them wins ([`ExecPolicy`]).

pub mod parse;
mod rules;

pub use rules::{Because, ExampleMismatch, ExecPolicy, RuleSource, Segment, Verdict};
