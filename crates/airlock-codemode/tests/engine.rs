//! The engine in-process, with a host that answers calls itself.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use airlock_codemode::{
    End, EngineLimits, FailCode, Host, HumanClock, Isolation, Reply, Settled, Start,
};

struct Echo;

impl Host for Echo {
    fn call(&self, _seq: u32, tool: &str, args: &str, _human: &HumanClock) -> Reply {
        match tool {
            "echo" => Reply::Settle {
                kind: Settled::Ok,
                payload: args.to_owned(),
            },
            "deny" => Reply::Settle {
                kind: Settled::Denied,
                payload: r#"{"tool":"deny","code":"policy_denied","reason":"denied","message":"denylist"}"#.to_owned(),
            },
            _ => Reply::End {
                status: "denied".to_owned(),
                message: "a human said no".to_owned(),
            },
        }
    }
}

fn limits() -> EngineLimits {
    EngineLimits {
        cpu_ms: 2000,
        memory_bytes: 32 << 20,
        stack_bytes: 1 << 20,
        max_result_bytes: 1 << 20,
        max_console_bytes: 1 << 10,
        max_calls: 20,
        max_in_flight: 4,
    }
}

fn run(code: &str) -> airlock_codemode::Outcome {
    let start = Start {
        code: code.to_owned(),
        tools: vec!["echo".to_owned(), "deny".to_owned(), "human".to_owned()],
        limits: limits(),
        seed: 42,
        now_ms: 1_700_000_000_000,
    };
    airlock_codemode::driver::run(&Isolation::InProcess, start, Duration::from_secs(10), &Echo)
}

fn done(code: &str) -> String {
    match run(code).end {
        End::Done(json) => json,
        other => panic!("{code}: {other:?}"),
    }
}

fn failed(code: &str) -> (FailCode, String) {
    match run(code).end {
        End::Failed(failure) => (failure.code, failure.message),
        other => panic!("{code}: {other:?}"),
    }
}

#[test]
fn values_calls_and_errors() {
    assert_eq!(done("1 + 1"), "2");
    assert_eq!(done("const a = await codemode.echo({x: 1}); a.x + 1"), "2");
    assert_eq!(done("return (await codemode.echo([1,2])).length"), "2");
    assert_eq!(
        done("await Promise.all([1,2,3,4,5,6].map(i => codemode.echo({i})))"),
        r#"[{"i":1},{"i":2},{"i":3},{"i":4},{"i":5},{"i":6}]"#
    );
    assert_eq!(
        done(
            "try { await codemode.deny({}) } catch (e) { [e instanceof ToolCallDeniedError, e.code, e.tool] }"
        ),
        r#"[true,"policy_denied","deny"]"#
    );
    assert!(matches!(
        run("await codemode.human({})").end,
        End::Stopped { .. }
    ));
    assert_eq!(done("Date.now()"), "1700000000000");
    assert_eq!(done("Math.random() === Math.random()"), "false");
    let (code, message) = failed("throw new TypeError('boom')");
    assert_eq!(
        (code, message.as_str()),
        (FailCode::ScriptError, "TypeError: boom")
    );
    let (code, _) = failed("let x = ;");
    assert_eq!(code, FailCode::ParseError);
    assert_eq!(failed("codemode.echo({}); 1").0, FailCode::ScriptError);
    assert_eq!(
        failed("await new Promise(() => {})").0,
        FailCode::ScriptError
    );
    assert_eq!(
        failed("Function('return 1')()").1,
        "TypeError: code mode: making code from a string is not allowed"
    );
    assert_eq!(
        failed("(async function(){}).constructor('return 1')").0,
        FailCode::ScriptError
    );
}

#[test]
fn limits_end_runs_with_their_codes() {
    assert_eq!(failed("for (;;) {}").0, FailCode::ScriptTimeout);
    assert_eq!(
        failed("for (;;) { try { for(;;){} } catch (e) {} }").0,
        FailCode::ScriptTimeout
    );
    assert_eq!(
        failed("let a = []; for (;;) a.push('x'.repeat(1000) + a.length)").0,
        FailCode::ScriptMemory
    );
    assert_eq!(
        failed(
            "let a = []; try { for (;;) a.push(new Array(1e5).fill(1)) } catch (e) { a = null }; 1"
        )
        .0,
        FailCode::ScriptMemory
    );
    assert_eq!(
        failed("/(a+)+$/.test('a'.repeat(40) + 'b')").0,
        FailCode::ScriptTimeout
    );
    assert_eq!(
        failed("for (let i = 0; i < 100; i++) await codemode.echo({i})").0,
        FailCode::ScriptLimit
    );
    assert_eq!(failed("for (;;) await null").0, FailCode::ScriptTimeout);
    let out = run("for (let i = 0; i < 300; i++) console.log('line', i); 1");
    assert!(out.logs_truncated);
    assert_eq!(out.end, End::Done("1".to_owned()));
}
