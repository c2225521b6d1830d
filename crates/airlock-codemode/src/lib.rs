//! Code mode (spec 004's eval, DESIGN §5.2): a short JavaScript program
//! that calls tools as `codemode.<tool>(args)`, run in QuickJS-ng inside a
//! confined worker process, each call carried out by the parent through the
//! broker.
//!
//! - `engine`: one run in QuickJS (a fresh runtime, the prelude, the job
//!   loop, the limits);
//! - `raw`: the only unsafe code (bytecode between contexts, the counting
//!   allocator);
//! - `worker`: the worker process and its confinement;
//! - `driver`: the parent's side (start, calls in flight, the wall clock);
//! - `protocol`: the messages between them;
//! - `tool`: `codemode_eval` as the broker runs it (arguments, audit,
//!   each call through the broker, the envelope);
//! - `schema`: call arguments checked against the tool's schema;
//! - `preview`: the script's static preview checked against the run's
//!   tools, schemas and policy.

pub mod driver;
pub mod dts;
pub mod engine;
mod preview;
pub mod protocol;
mod raw;
mod resume;
pub mod schema;
mod tool;
pub mod worker;

pub use driver::{End, Host, HumanClock, Isolation, Outcome, Reply, Waiting};
pub use protocol::{EngineLimits, FailCode, Failure, Settled, Start};
pub use tool::{CodeTool, METHOD, strip_fences};
