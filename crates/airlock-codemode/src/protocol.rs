//! What the parent and the engine (a worker process, or a thread in tests)
//! say to each other: one JSON object per line.
//!
//! The parent trusts nothing the engine says: a message that does not parse,
//! a line over the bound, a call over the limits or a reply to nothing ends
//! the run (`Failure` with `script_error`), and the worker is killed.

use serde::{Deserialize, Serialize};

/// The limits one run is held to (DESIGN §5.2), as the engine sees them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EngineLimits {
    /// CPU time of the script, milliseconds.
    pub cpu_ms: u64,
    /// Bytes the engine may allocate.
    pub memory_bytes: u64,
    /// Bytes of native stack the script's calls may use.
    pub stack_bytes: u64,
    /// Bytes of the result's JSON.
    pub max_result_bytes: u64,
    /// Bytes of console output kept; beyond, lines are dropped and the run
    /// says so (`logs_truncated`).
    pub max_console_bytes: u64,
    /// Tool calls one run may make.
    pub max_calls: u32,
    /// Tool calls under way at once; more wait in the engine's queue.
    pub max_in_flight: u32,
}

/// The start of a run: the script (already checked and stripped to plain
/// JavaScript) and what it may name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Start {
    pub code: String,
    /// The names `codemode.<name>` offers.
    pub tools: Vec<String>,
    pub limits: EngineLimits,
    /// Seeds `Math.random`.
    pub seed: u64,
    /// What `Date.now()` and `new Date()` say, milliseconds since the epoch.
    pub now_ms: u64,
}

/// How the parent settled one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Settled {
    /// The call's result: `payload` is its JSON.
    Ok,
    /// The policy refused it: `payload` is `{tool, code, reason}`, thrown
    /// as a `ToolCallDeniedError`.
    Denied,
    /// The tool failed: `payload` is `{tool, code, message}`, thrown as a
    /// `ToolCallError`.
    Failed,
}

/// Parent -> engine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum ToEngine {
    Start(Start),
    Settle {
        seq: u32,
        kind: Settled,
        payload: String,
    },
}

/// Why a run ended without a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailCode {
    /// CPU or wall time ran out.
    ScriptTimeout,
    /// The memory limit was reached.
    ScriptMemory,
    /// Another limit: calls, stack, result or source size.
    ScriptLimit,
    /// The script threw, or left a call unawaited, or waits forever.
    ScriptError,
    /// The script does not parse.
    ParseError,
    /// The worker could not confine itself.
    SandboxUnavailable,
}

impl FailCode {
    pub fn as_str(self) -> &'static str {
        match self {
            FailCode::ScriptTimeout => "script_timeout",
            FailCode::ScriptMemory => "script_memory",
            FailCode::ScriptLimit => "script_limit",
            FailCode::ScriptError => "script_error",
            FailCode::ParseError => "parse_error",
            FailCode::SandboxUnavailable => "sandbox_unavailable",
        }
    }
}

/// A run's failure, with the script's line and column where known
/// (1-based; the column counts characters).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failure {
    pub code: FailCode,
    pub message: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<u32>,
}

impl Failure {
    pub fn new(code: FailCode, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
            line: None,
            column: None,
        }
    }
}

/// Engine -> parent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
pub enum ToParent {
    /// `codemode.<tool>(args)`: `args` is the guest's `JSON.stringify`
    /// output, passed on as it is.
    Call {
        seq: u32,
        tool: String,
        args: String,
    },
    Console {
        level: String,
        text: String,
    },
    /// The script's value as JSON (`null` for `undefined`).
    Done {
        result: String,
        logs_truncated: bool,
    },
    Failed {
        #[serde(flatten)]
        failure: Failure,
        logs_truncated: bool,
    },
}
