//! One run of a script in QuickJS-ng: a fresh runtime, a compile context
//! with `Eval` and a run context without it, the prelude, then the script,
//! driven synchronously: microtasks run until none is left, then the engine
//! waits for the parent to settle a call.
//!
//! The same code runs in the worker process (`worker`) and, for tests, on a
//! thread of the parent (`Isolation::InProcess`); a [`Link`] carries the
//! messages either way.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use rquickjs::context::intrinsic;
use rquickjs::{Context, Ctx, Function, Object, Promise, Runtime, Value, promise::PromiseState};

use crate::protocol::{EngineLimits, FailCode, Failure, Settled, Start, ToEngine, ToParent};
use crate::raw;

/// The script's file name in positions and stacks.
pub const SCRIPT_FILE: &str = "codemode.js";
const PRELUDE_FILE: &str = "airlock-prelude.js";
const PRELUDE: &str = include_str!("prelude.js");
/// What a script with a top-level `return` is wrapped in, on a line of its
/// own before the script.
const WRAP_OPEN: &str = "(async function () {";
// The script always starts on line 2 of what QuickJS compiles: QuickJS
// counts the columns of line 1 from 0 and of every other line from 1, so
// on line 2 and after every position is true (1-based bytes); a script's
// line is QuickJS's minus one.
const WRAP_CLOSE: &str = "\n})()";

/// The engine's side of the channel to the parent.
pub trait Link {
    fn send(&mut self, message: &ToParent) -> io::Result<()>;
    /// Blocks for the parent's next message; `None` once the parent has
    /// gone.
    fn recv(&mut self) -> io::Result<Option<ToEngine>>;
    /// A flag the parent sets to end the run from outside, where it cannot
    /// kill the engine (the in-process mode).
    fn abort(&self) -> Option<Arc<AtomicBool>> {
        None
    }
}

/// What the host functions and the interrupt handler share.
struct Shared {
    limits: EngineLimits,
    stop: RefCell<Option<Failure>>,
    memory_exceeded: Rc<Cell<bool>>,
    abort: Option<Arc<AtomicBool>>,
    cpu_start_ns: u64,
    next_seq: Cell<u32>,
    calls: Cell<u32>,
    in_flight: RefCell<Vec<u32>>,
    queued: RefCell<VecDeque<ToParent>>,
    outbox: RefCell<Vec<ToParent>>,
    console_bytes: Cell<u64>,
    logs_truncated: Cell<bool>,
    first_tool: RefCell<Option<String>>,
}

impl Shared {
    fn halt(&self, code: FailCode, message: impl Into<String>) {
        let mut stop = self.stop.borrow_mut();
        if stop.is_none() {
            *stop = Some(Failure::new(code, message));
        }
    }

    /// Polled by QuickJS every few thousand instructions (and by the
    /// regex engine); `true` throws an uncatchable `interrupted`.
    fn interrupted(&self) -> bool {
        if self.stop.borrow().is_some() {
            return true;
        }
        if self.memory_exceeded.get() {
            self.halt(
                FailCode::ScriptMemory,
                format!(
                    "the script reached its memory limit ({} bytes)",
                    self.limits.memory_bytes
                ),
            );
            return true;
        }
        if self
            .abort
            .as_ref()
            .is_some_and(|flag| flag.load(Ordering::Relaxed))
        {
            self.halt(FailCode::ScriptTimeout, "the script ran out of wall time");
            return true;
        }
        let used_ms = thread_cpu_ns().saturating_sub(self.cpu_start_ns) / 1_000_000;
        if used_ms > self.limits.cpu_ms {
            self.halt(
                FailCode::ScriptTimeout,
                format!(
                    "the script used more than {} ms of CPU time",
                    self.limits.cpu_ms
                ),
            );
            return true;
        }
        false
    }

    /// Moves queued calls into flight while there is room.
    fn release(&self) {
        let mut queued = self.queued.borrow_mut();
        let mut in_flight = self.in_flight.borrow_mut();
        while in_flight.len() < self.limits.max_in_flight as usize {
            let Some(call) = queued.pop_front() else {
                break;
            };
            if let ToParent::Call { seq, .. } = &call {
                in_flight.push(*seq);
            }
            self.outbox.borrow_mut().push(call);
        }
    }

    fn outstanding(&self) -> Option<String> {
        if self.in_flight.borrow().is_empty() && self.queued.borrow().is_empty() {
            None
        } else {
            Some(self.first_tool.borrow().clone().unwrap_or_default())
        }
    }
}

fn thread_cpu_ns() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    (now.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(now.tv_nsec as u64)
}

/// Touches what the engine initialises lazily through system calls the
/// worker's seccomp filter refuses: the thread CPU clock and the C
/// library's time zone.
pub fn warm_up() {
    let _ = thread_cpu_ns();
    if let Ok(runtime) = Runtime::new()
        && let Ok(context) = Context::custom::<(intrinsic::Eval, intrinsic::Date)>(&runtime)
    {
        context.with(|ctx| {
            let _ = ctx.eval::<Value, _>("new Date(0).getHours()");
        });
    }
}

/// Runs `start` to its end and sends the last message (`Done` or `Failed`).
/// Errors are the link's.
pub fn run(start: &Start, link: &mut dyn Link) -> io::Result<()> {
    let memory_exceeded = Rc::new(Cell::new(false));
    let shared = Rc::new(Shared {
        limits: start.limits,
        stop: RefCell::new(None),
        memory_exceeded: memory_exceeded.clone(),
        abort: link.abort(),
        cpu_start_ns: thread_cpu_ns(),
        next_seq: Cell::new(1),
        calls: Cell::new(0),
        in_flight: RefCell::new(Vec::new()),
        queued: RefCell::new(VecDeque::new()),
        outbox: RefCell::new(Vec::new()),
        console_bytes: Cell::new(0),
        logs_truncated: Cell::new(false),
        first_tool: RefCell::new(None),
    });
    let last = match Engine::new(start, shared.clone(), memory_exceeded) {
        Ok(engine) => engine.drive(start, link)?,
        Err(failure) => failure,
    };
    let logs_truncated = shared.logs_truncated.get();
    link.send(&match last {
        Ended::Done(result) => ToParent::Done {
            result,
            logs_truncated,
        },
        Ended::Failed(failure) => ToParent::Failed {
            failure,
            logs_truncated,
        },
    })
}

enum Ended {
    Done(String),
    Failed(Failure),
}

impl From<Failure> for Ended {
    fn from(failure: Failure) -> Ended {
        Ended::Failed(failure)
    }
}

struct Engine {
    // Field order is drop order: the contexts before their runtime.
    run: Context,
    compiler: Context,
    shared: Rc<Shared>,
    _runtime: Runtime,
}

impl Engine {
    fn new(start: &Start, shared: Rc<Shared>, exceeded: Rc<Cell<bool>>) -> Result<Engine, Ended> {
        let broken = |what: &str| {
            Failure::new(
                FailCode::ScriptError,
                format!("the engine could not start: {what}"),
            )
        };
        let runtime = Runtime::new_with_alloc(raw::Counted {
            used: Rc::new(Cell::new(0)),
            exceeded,
            limit: usize::try_from(start.limits.memory_bytes).unwrap_or(usize::MAX),
        })
        .map_err(|_| broken("runtime"))?;
        runtime.set_max_stack_size(usize::try_from(start.limits.stack_bytes).unwrap_or(1 << 20));
        let polled = shared.clone();
        runtime.set_interrupt_handler(Some(Box::new(move || polled.interrupted())));
        // Compiles only; nothing runs here.
        let compiler = Context::custom::<(intrinsic::Eval, intrinsic::RegExpCompiler)>(&runtime)
            .map_err(|_| broken("compile context"))?;
        // ECMAScript's intrinsics, without Eval, Performance, WeakRef or
        // DOMException.
        let run = Context::custom::<(
            intrinsic::Date,
            intrinsic::RegExp,
            intrinsic::Json,
            intrinsic::MapSet,
            intrinsic::Proxy,
            intrinsic::Promise,
            intrinsic::TypedArrays,
        )>(&runtime)
        .map_err(|_| broken("run context"))?;
        Ok(Engine {
            run,
            compiler,
            shared,
            _runtime: runtime,
        })
    }

    fn drive(self, start: &Start, link: &mut dyn Link) -> io::Result<Ended> {
        if start.code.contains('\0') {
            return Ok(
                Failure::new(FailCode::ParseError, "the script contains a NUL character").into(),
            );
        }
        let prelude = match self.compiler.with(|ctx| {
            raw::compile(
                &ctx,
                PRELUDE,
                PRELUDE_FILE,
                rquickjs::qjs::JS_EVAL_TYPE_GLOBAL,
            )
            .map_err(|_| describe(&ctx, &ctx.catch(), ""))
        }) {
            Ok(bytes) => bytes,
            Err(failure) => return Ok(failure.into()),
        };
        let script = match self.compile_script(&start.code) {
            Ok(script) => script,
            Err(failure) => return Ok(failure.into()),
        };
        let shared = self.shared.clone();
        self.run.with(|ctx| {
            let mut session = match Session::begin(&ctx, shared.clone(), start, &prelude, &script) {
                Ok(session) => session,
                Err(failure) => return Ok(failure.into()),
            };
            session.drive(&ctx, link)
        })
    }

    /// The script's bytecode, compiled as an async global script (top-level
    /// `await`, the last expression its value) or, when it has a top-level
    /// `return`, as the body of an async function.
    fn compile_script(&self, code: &str) -> Result<Compiled, Failure> {
        use rquickjs::qjs::{JS_EVAL_FLAG_ASYNC, JS_EVAL_FLAG_STRICT, JS_EVAL_TYPE_GLOBAL};
        self.compiler.with(|ctx| {
            let flags = JS_EVAL_TYPE_GLOBAL | JS_EVAL_FLAG_STRICT | JS_EVAL_FLAG_ASYNC;
            let first = match raw::compile(&ctx, &format!("\n{code}"), SCRIPT_FILE, flags) {
                Ok(bytes) => {
                    return Ok(Compiled {
                        bytecode: bytes,
                        wrapped: false,
                    });
                }
                Err(_) => describe(&ctx, &ctx.catch(), code),
            };
            if !first.message.contains("return not in a function") {
                return Err(with_code(first, FailCode::ParseError));
            }
            let wrapped = format!("{WRAP_OPEN}\n{code}{WRAP_CLOSE}");
            match raw::compile(
                &ctx,
                &wrapped,
                SCRIPT_FILE,
                JS_EVAL_TYPE_GLOBAL | JS_EVAL_FLAG_STRICT,
            ) {
                Ok(bytes) => Ok(Compiled {
                    bytecode: bytes,
                    wrapped: true,
                }),
                Err(_) => Err(with_code(
                    describe(&ctx, &ctx.catch(), code),
                    FailCode::ParseError,
                )),
            }
        })
    }
}

struct Compiled {
    bytecode: Vec<u8>,
    wrapped: bool,
}

fn with_code(mut failure: Failure, code: FailCode) -> Failure {
    failure.code = code;
    // QuickJS throws a catchable RangeError at the stack limit; left
    // uncaught, it is the stack limit that ended the run.
    if code == FailCode::ScriptError
        && failure
            .message
            .starts_with("RangeError: Maximum call stack size exceeded")
    {
        failure.code = FailCode::ScriptLimit;
    }
    failure
}

/// A run under way, inside the run context.
struct Session<'js> {
    shared: Rc<Shared>,
    settle: Function<'js>,
    result: Promise<'js>,
    source: String,
    wrapped: bool,
}

impl<'js> Session<'js> {
    fn begin(
        ctx: &Ctx<'js>,
        shared: Rc<Shared>,
        start: &Start,
        prelude: &[u8],
        script: &Compiled,
    ) -> Result<Session<'js>, Failure> {
        let fail = |ctx: &Ctx<'js>| describe(ctx, &ctx.catch(), "");
        let install: Function = raw::run_compiled(ctx, prelude)
            .and_then(|value| value.get())
            .map_err(|_| fail(ctx))?;
        let host = Object::new(ctx.clone()).map_err(|_| fail(ctx))?;
        let calls = shared.clone();
        let call = Function::new(ctx.clone(), move |tool: String, args: String| -> i32 {
            call_tool(&calls, tool, args)
        })
        .map_err(|_| fail(ctx))?;
        let logs = shared.clone();
        let log = Function::new(ctx.clone(), move |level: String, text: String| {
            console(&logs, level, text);
        })
        .map_err(|_| fail(ctx))?;
        let set = |key: &str, value: Value<'js>| host.set(key, value).map_err(|_| fail(ctx));
        set("call", call.into_value())?;
        set("log", log.into_value())?;
        set(
            "tools",
            rquickjs::IntoJs::into_js(start.tools.clone(), ctx).map_err(|_| fail(ctx))?,
        )?;
        // Both numbers stay below 2^53, exact in a double.
        set(
            "seed",
            Value::new_float(ctx.clone(), (start.seed & ((1 << 53) - 1)) as f64),
        )?;
        set(
            "now",
            Value::new_float(ctx.clone(), (start.now_ms & ((1 << 53) - 1)) as f64),
        )?;
        let settle: Function = install.call((host,)).map_err(|_| fail(ctx))?;
        let source = start.code.clone();
        let result = match raw::run_compiled(ctx, &script.bytecode) {
            Ok(value) => value,
            Err(_) => {
                let thrown = ctx.catch();
                return Err(shared.stop.borrow().clone().unwrap_or_else(|| {
                    with_code(describe(ctx, &thrown, &source), FailCode::ScriptError)
                }));
            }
        };
        let Some(result) = result.into_promise() else {
            return Err(Failure::new(
                FailCode::ScriptError,
                "the script did not compile to an async body",
            ));
        };
        Ok(Session {
            shared,
            settle,
            result,
            source,
            wrapped: script.wrapped,
        })
    }

    fn drive(&mut self, ctx: &Ctx<'js>, link: &mut dyn Link) -> io::Result<Ended> {
        loop {
            while self.shared.stop.borrow().is_none() && ctx.execute_pending_job() {}
            if let Some(failure) = self.stopped() {
                return Ok(failure.into());
            }
            self.shared.release();
            for message in self.shared.outbox.borrow_mut().drain(..) {
                link.send(&message)?;
            }
            match self.result.state() {
                PromiseState::Resolved => {
                    if let Some(tool) = self.shared.outstanding() {
                        return Ok(Failure::new(
                            FailCode::ScriptError,
                            format!(
                                "the script ended with a call still under way (codemode.{tool}); await every call"
                            ),
                        )
                        .into());
                    }
                    return Ok(self.finish(ctx));
                }
                PromiseState::Rejected => {
                    let thrown = match self.result.result::<Value>() {
                        Some(Err(_)) => ctx.catch(),
                        Some(Ok(value)) => value,
                        None => Value::new_undefined(ctx.clone()),
                    };
                    if let Some(failure) = self.stopped() {
                        return Ok(failure.into());
                    }
                    return Ok(with_code(
                        describe(ctx, &thrown, &self.source),
                        FailCode::ScriptError,
                    )
                    .into());
                }
                PromiseState::Pending => {}
            }
            if self.shared.outstanding().is_none() {
                return Ok(Failure::new(
                    FailCode::ScriptError,
                    "the script waits for a promise that nothing will settle",
                )
                .into());
            }
            let Some(message) = link.recv()? else {
                return Ok(Failure::new(FailCode::ScriptTimeout, "the run was ended").into());
            };
            let ToEngine::Settle { seq, kind, payload } = message else {
                return Ok(
                    Failure::new(FailCode::ScriptError, "the parent sent a second start").into(),
                );
            };
            {
                let mut in_flight = self.shared.in_flight.borrow_mut();
                let Some(at) = in_flight.iter().position(|s| *s == seq) else {
                    return Ok(Failure::new(
                        FailCode::ScriptError,
                        format!("the parent settled call {seq}, which is not under way"),
                    )
                    .into());
                };
                in_flight.remove(at);
            }
            let kind = match kind {
                Settled::Ok => "ok",
                Settled::Denied => "denied",
                Settled::Failed => "failed",
            };
            if self.settle.call::<_, ()>((seq, kind, payload)).is_err() {
                let thrown = ctx.catch();
                if let Some(failure) = self.stopped() {
                    return Ok(failure.into());
                }
                return Ok(
                    with_code(describe(ctx, &thrown, &self.source), FailCode::ScriptError).into(),
                );
            }
        }
    }

    fn stopped(&self) -> Option<Failure> {
        if let Some(failure) = self.shared.stop.borrow().clone() {
            return Some(failure);
        }
        if self.shared.memory_exceeded.get() {
            return Some(Failure::new(
                FailCode::ScriptMemory,
                format!(
                    "the script reached its memory limit ({} bytes)",
                    self.shared.limits.memory_bytes
                ),
            ));
        }
        None
    }

    /// The script's value as JSON, within the result limit.
    fn finish(&self, ctx: &Ctx<'js>) -> Ended {
        let value = match self.result.result::<Value>() {
            Some(Ok(value)) => value,
            _ => Value::new_undefined(ctx.clone()),
        };
        // An async global script settles to `{value}`; a wrapped one to the
        // function's return value.
        let value = if self.wrapped {
            value
        } else {
            value
                .as_object()
                .and_then(|object| object.get::<_, Value>("value").ok())
                .unwrap_or_else(|| Value::new_undefined(ctx.clone()))
        };
        let json = match ctx.json_stringify(value) {
            Ok(Some(text)) => text.to_string().unwrap_or_else(|_| "null".to_owned()),
            Ok(None) => "null".to_owned(),
            Err(_) => {
                let thrown = ctx.catch();
                if let Some(failure) = self.stopped() {
                    return failure.into();
                }
                let mut failure =
                    with_code(describe(ctx, &thrown, &self.source), FailCode::ScriptError);
                failure.message = format!("the script's value is not JSON: {}", failure.message);
                return failure.into();
            }
        };
        if let Some(failure) = self.stopped() {
            return failure.into();
        }
        if json.len() as u64 > self.shared.limits.max_result_bytes {
            return Failure::new(
                FailCode::ScriptLimit,
                format!(
                    "the script's value is {} bytes of JSON, over the limit of {}",
                    json.len(),
                    self.shared.limits.max_result_bytes
                ),
            )
            .into();
        }
        Ended::Done(json)
    }
}

fn call_tool(shared: &Shared, tool: String, args: String) -> i32 {
    if shared.stop.borrow().is_some() {
        return -1;
    }
    let count = shared.calls.get() + 1;
    if count > shared.limits.max_calls {
        shared.halt(
            FailCode::ScriptLimit,
            format!(
                "the script made more than {} tool calls",
                shared.limits.max_calls
            ),
        );
        return -1;
    }
    shared.calls.set(count);
    let seq = shared.next_seq.get();
    shared.next_seq.set(seq + 1);
    shared
        .first_tool
        .borrow_mut()
        .get_or_insert_with(|| tool.clone());
    shared
        .queued
        .borrow_mut()
        .push_back(ToParent::Call { seq, tool, args });
    shared.release();
    seq as i32
}

fn console(shared: &Shared, level: String, text: String) {
    let used = shared.console_bytes.get() + text.len() as u64;
    if used > shared.limits.max_console_bytes {
        shared.logs_truncated.set(true);
        return;
    }
    shared.console_bytes.set(used);
    shared
        .outbox
        .borrow_mut()
        .push(ToParent::Console { level, text });
}

/// A thrown value as a failure: `Name: message` and, when the stack names
/// the script, its line and column (characters, 1-based) in `code`.
fn describe<'js>(ctx: &Ctx<'js>, thrown: &Value<'js>, code: &str) -> Failure {
    let mut failure = Failure::new(FailCode::ScriptError, String::new());
    if let Some(object) = thrown.as_object() {
        let name: Option<String> = object.get("name").ok();
        let message: Option<String> = object.get("message").ok();
        failure.message = match (name, message) {
            (Some(name), Some(message)) if !message.is_empty() => format!("{name}: {message}"),
            (Some(name), _) => name,
            (None, Some(message)) => message,
            (None, None) => ctx
                .json_stringify(thrown.clone())
                .ok()
                .flatten()
                .and_then(|text| text.to_string().ok())
                .unwrap_or_else(|| "an object was thrown".to_owned()),
        };
        let stack: Option<String> = object.get("stack").ok();
        if let Some((line, byte_column)) = stack.as_deref().and_then(position_in)
            && line >= 2
        {
            failure.line = Some(line - 1);
            failure.column = Some(char_column(code, line - 1, byte_column));
        }
    } else if let Some(text) = thrown.as_string().and_then(|text| text.to_string().ok()) {
        failure.message = text;
    } else {
        failure.message = ctx
            .json_stringify(thrown.clone())
            .ok()
            .flatten()
            .and_then(|text| text.to_string().ok())
            .unwrap_or_else(|| "a value was thrown".to_owned());
    }
    if failure.message.is_empty() {
        failure.message = "the script failed".to_owned();
    }
    failure
}

/// The first `codemode.js:LINE:COLUMN` of a stack.
fn position_in(stack: &str) -> Option<(u32, u32)> {
    let marker = format!("{SCRIPT_FILE}:");
    let at = stack.find(&marker)? + marker.len();
    let rest = &stack[at..];
    let mut parts = rest.splitn(3, |c: char| !c.is_ascii_digit());
    let line = parts.next()?.parse().ok()?;
    let column = parts.next()?.parse().ok()?;
    Some((line, column))
}

/// QuickJS's column on `line` of `code` (bytes, 1-based) as characters,
/// 1-based.
fn char_column(code: &str, line: u32, byte_column: u32) -> u32 {
    let Some(text) = code.split('\n').nth(line.saturating_sub(1) as usize) else {
        return byte_column;
    };
    let mut end = (byte_column.saturating_sub(1) as usize).min(text.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].chars().count() as u32 + 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_are_read_from_the_stack() {
        assert_eq!(position_in("    at f (codemode.js:3:9)\n"), Some((3, 9)));
        assert_eq!(position_in("    at codemode.js:12:1\n"), Some((12, 1)));
        assert_eq!(position_in("    at airlock-prelude.js:1:1\n"), None);
    }

    #[test]
    fn columns_count_characters_and_drop_the_wrapper() {
        assert_eq!(char_column("é = x", 1, 4), 3);
        assert_eq!(char_column("a\n😀 x", 2, 6), 3);
        assert_eq!(char_column("x", 9, 4), 4);
    }
}
