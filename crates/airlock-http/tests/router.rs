//! The approval API through the router itself (no socket): every status
//! code with its reason, for each way a request can be wrong. The same API
//! over a real socket, end to end, is in `airlock-cli/tests/http_api.rs`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use airlock_http::{Auth, Listening, router};
use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tower::ServiceExt as _;

const AGENT: &str = "router-agent";
const APPROVER: &str = "router-approver";
const ADMIN: &str = "router-admin";

struct App {
    router: Router,
    dir: tempfile::TempDir,
    _runtime: Arc<airlock_broker::Runtime>,
}

/// Stands in for the MCP face at `/mcp`: answers with who the HTTP face
/// said the caller is, and the path it was asked on.
async fn stand_in_mcp(
    request: Request<Body>,
) -> Result<axum::http::Response<Body>, std::convert::Infallible> {
    let principal = request
        .extensions()
        .get::<airlock_core::HttpPrincipal>()
        .cloned();
    let body = json!({
        "path": request.uri().path(),
        "user": principal.as_ref().and_then(|p| p.user.clone()),
        "token": principal.as_ref().map(|p| p.token_name.clone()),
        "admin": principal.as_ref().map(|p| p.admin),
    });
    Ok(axum::http::Response::builder()
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap())
}

async fn app(extra: &str) -> App {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    std::fs::write(root.join("a.txt"), "hello\n").unwrap();
    let sha = |token: &str| hex::encode(Sha256::digest(token.as_bytes()));
    let yaml = format!(
        "auth:\n  tokens:\n    \
         - {{name: agent, sha256: \"{}\", roles: [agent], user: u1}}\n    \
         - {{name: phone, sha256: \"{}\", roles: [approver], user: u1}}\n    \
         - {{name: root, sha256: \"{}\", roles: [admin]}}\n\
         security:\n  hitl:\n    approval_mode: defer\n{extra}",
        sha(AGENT),
        sha(APPROVER),
        sha(ADMIN)
    );
    let mut loaded = airlock_core::config::load(&yaml, "airlock.yaml").unwrap();
    let root_text = root.to_str().unwrap().to_owned();
    let config_path = format!("{root_text}/airlock.yaml");
    loaded.policy.bind_workspace(&root_text, Some(&config_path));
    let runtime = tokio::task::spawn_blocking(move || {
        airlock_broker::Runtime::start(
            airlock_broker::Workspace::new(root, loaded),
            airlock_broker::RuntimeOptions::default(),
            Arc::new(airlock_broker::NoUpstreams),
        )
    })
    .await
    .unwrap()
    .unwrap();
    let router = router(
        runtime.clone(),
        tower::service_fn(stand_in_mcp),
        Auth::new(runtime.clone(), None, true),
        Listening {
            bound: "127.0.0.1:7420".parse().unwrap(),
            public_url: Some("http://airlock.test".to_owned()),
        },
    )
    .unwrap();
    App {
        router,
        dir,
        _runtime: runtime,
    }
}

impl App {
    /// One request: the status and the JSON body (`Value::String` when not JSON).
    async fn send(
        &self,
        method: &str,
        path: &str,
        auth: Option<&str>,
        body: impl Into<Body>,
    ) -> (StatusCode, Value) {
        self.send_with(method, path, auth, body, &[]).await
    }

    /// [`App::send`] with headers: each replaces the default `host`
    /// (`127.0.0.1:7420`) or `content-type` (`application/json`), or is
    /// added; `None` leaves the header out.
    async fn send_with(
        &self,
        method: &str,
        path: &str,
        auth: Option<&str>,
        body: impl Into<Body>,
        headers: &[(&str, Option<&str>)],
    ) -> (StatusCode, Value) {
        let mut all: Vec<(&str, Option<&str>)> = vec![
            ("host", Some("127.0.0.1:7420")),
            ("content-type", Some("application/json")),
        ];
        for (name, value) in headers {
            all.retain(|(known, _)| known != name);
            all.push((name, *value));
        }
        let mut request = Request::builder().method(method).uri(path);
        for (name, value) in all {
            if let Some(value) = value {
                request = request.header(name, value);
            }
        }
        if let Some(auth) = auth {
            request = request.header("authorization", auth);
        }
        let response = self
            .router
            .clone()
            .oneshot(request.body(body.into()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap();
        let value = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        (status, value)
    }

    async fn call(&self, token: &str, body: Value) -> (StatusCode, Value) {
        self.send(
            "POST",
            "/v1/tools/call",
            Some(&format!("Bearer {token}")),
            body.to_string(),
        )
        .await
    }

    async fn propose(&self, path: &str) -> String {
        let (status, body) = self
            .call(
                AGENT,
                json!({"tool": "write_file", "arguments": {"path": path, "content": "x\n"}}),
            )
            .await;
        assert_eq!(status, StatusCode::ACCEPTED, "{body}");
        body["approval_id"].as_str().unwrap().to_owned()
    }
}

/// Headers a case sends beside the defaults (see [`App::send_with`]).
type Headers = [(&'static str, Option<&'static str>)];

/// One request that must be refused: what is sent and what comes back.
struct Case {
    what: &'static str,
    method: &'static str,
    path: String,
    auth: Option<String>,
    body: Vec<u8>,
    /// Headers beside the defaults (see [`App::send_with`]).
    headers: Vec<(&'static str, Option<&'static str>)>,
    status: u16,
    code: &'static str,
}

fn case(
    what: &'static str,
    method: &'static str,
    path: &str,
    token: Option<&str>,
    body: &[u8],
    status: u16,
    code: &'static str,
) -> Case {
    Case {
        what,
        method,
        path: path.to_owned(),
        auth: token.map(|token| format!("Bearer {token}")),
        body: body.to_vec(),
        headers: Vec::new(),
        status,
        code,
    }
}

impl Case {
    fn with(mut self, name: &'static str, value: Option<&'static str>) -> Case {
        self.headers.push((name, value));
        self
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_has_its_status_and_code_and_changes_nothing() {
    let app = app("").await;
    let pending = app.propose("b.txt").await;
    let decided = app.propose("c.txt").await;
    let (status, body) = app
        .send(
            "POST",
            &format!("/hitl/decide/{decided}"),
            Some(&format!("Bearer {ADMIN}")),
            r#"{"decision": "deny"}"#,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let decide_pending = format!("/hitl/decide/{pending}");
    let approve = br#"{"decision": "approve"}"#;
    let huge = format!(
        r#"{{"decision": "approve", "reason": "{}"}}"#,
        "x".repeat(1024 * 1024 + 1)
    );
    let mut cases = vec![
        case(
            "no token",
            "GET",
            "/hitl/pending",
            None,
            b"",
            401,
            "unauthorized",
        ),
        case(
            "unknown token",
            "GET",
            "/hitl/pending",
            Some("nope"),
            b"",
            401,
            "unauthorized",
        ),
        case(
            "an agent lists",
            "GET",
            "/hitl/pending",
            Some(AGENT),
            b"",
            403,
            "forbidden",
        ),
        case(
            "an agent decides",
            "POST",
            &decide_pending,
            Some(AGENT),
            approve,
            403,
            "forbidden",
        ),
        case(
            "an approver submits",
            "POST",
            "/v1/tools/call",
            Some(APPROVER),
            br#"{"tool": "read_file", "arguments": {"path": "a.txt"}}"#,
            403,
            "forbidden",
        ),
        case(
            "an approver reads the audit",
            "GET",
            "/audit",
            Some(APPROVER),
            b"",
            403,
            "forbidden",
        ),
        case(
            "an approver verifies the audit",
            "GET",
            "/audit/verify",
            Some(APPROVER),
            b"",
            403,
            "forbidden",
        ),
        case(
            "malformed JSON",
            "POST",
            "/v1/tools/call",
            Some(AGENT),
            b"{not json",
            400,
            "invalid_input",
        ),
        case(
            "an unknown field",
            "POST",
            "/v1/tools/call",
            Some(AGENT),
            br#"{"tool": "read_file", "argz": {}}"#,
            400,
            "invalid_input",
        ),
        case(
            "a tool's invalid input",
            "POST",
            "/v1/tools/call",
            Some(AGENT),
            br#"{"tool": "read_file", "arguments": {"path": 7}}"#,
            400,
            "invalid_input",
        ),
        case(
            "no decision",
            "POST",
            &decide_pending,
            Some(APPROVER),
            b"{}",
            400,
            "invalid_input",
        ),
        case(
            "a decision that is neither",
            "POST",
            &decide_pending,
            Some(APPROVER),
            br#"{"decision": "maybe"}"#,
            400,
            "invalid_input",
        ),
        case(
            "content with a denial",
            "POST",
            &decide_pending,
            Some(APPROVER),
            br#"{"decision": "deny", "content": "x"}"#,
            400,
            "invalid_input",
        ),
        case(
            "an always-allow for longer than 10 years",
            "POST",
            &decide_pending,
            Some(APPROVER),
            br#"{"decision": "approve", "always": {"scope": "persistent", "for_seconds": 18446744073709551615}}"#,
            400,
            "invalid_input",
        ),
        case(
            "a bad audit filter",
            "GET",
            "/audit?filter=nokey",
            Some(ADMIN),
            b"",
            400,
            "invalid_input",
        ),
        case(
            "a bad audit limit",
            "GET",
            "/audit?limit=-1",
            Some(ADMIN),
            b"",
            400,
            "invalid_input",
        ),
        case(
            "an unknown approval",
            "GET",
            "/hitl/pending/hitl-nope",
            Some(APPROVER),
            b"",
            404,
            "not_found",
        ),
        case(
            "deciding an unknown one",
            "POST",
            "/hitl/decide/hitl-nope",
            Some(APPROVER),
            approve,
            404,
            "not_found",
        ),
        case(
            "the result of an unknown one",
            "GET",
            "/hitl/result/hitl-nope",
            Some(AGENT),
            b"",
            404,
            "not_found",
        ),
        case(
            "deciding twice",
            "POST",
            &format!("/hitl/decide/{decided}"),
            Some(APPROVER),
            approve,
            409,
            "already_decided",
        ),
        case(
            "a body over 1 MiB",
            "POST",
            &decide_pending,
            Some(APPROVER),
            huge.as_bytes(),
            413,
            "too_large",
        ),
    ];
    // What a web page could send: a body without a preflight, a rebound
    // name, another origin.
    let call = br#"{"tool": "write_file", "arguments": {"path": "d.txt", "content": "x"}}"#;
    cases.extend([
        case(
            "a call as text/plain",
            "POST",
            "/v1/tools/call",
            Some(AGENT),
            call,
            415,
            "unsupported_media_type",
        )
        .with("content-type", Some("text/plain")),
        case(
            "a call as a form",
            "POST",
            "/v1/tools/call",
            Some(AGENT),
            call,
            415,
            "unsupported_media_type",
        )
        .with("content-type", Some("application/x-www-form-urlencoded")),
        case(
            "a call without a content type",
            "POST",
            "/v1/tools/call",
            Some(AGENT),
            call,
            415,
            "unsupported_media_type",
        )
        .with("content-type", None),
        case(
            "a decision as text/plain",
            "POST",
            &decide_pending,
            Some(APPROVER),
            approve,
            415,
            "unsupported_media_type",
        )
        .with("content-type", Some("text/plain;charset=UTF-8")),
        case(
            "a rebound host name",
            "POST",
            "/v1/tools/call",
            Some(AGENT),
            call,
            403,
            "forbidden",
        )
        .with("host", Some("attacker.example:7420")),
        case(
            "a rebound host name, reading",
            "GET",
            "/hitl/pending",
            Some(APPROVER),
            b"",
            403,
            "forbidden",
        )
        .with("host", Some("attacker.example")),
        case(
            "a rebound host name on the UI",
            "GET",
            "/",
            None,
            b"",
            403,
            "forbidden",
        )
        .with("host", Some("attacker.example")),
        case(
            "a rebound host name on MCP",
            "POST",
            "/mcp",
            Some(AGENT),
            b"{}",
            403,
            "forbidden",
        )
        .with("host", Some("attacker.example")),
        case(
            "no host",
            "GET",
            "/hitl/pending",
            Some(APPROVER),
            b"",
            400,
            "invalid_input",
        )
        .with("host", None),
        case(
            "another origin calls",
            "POST",
            "/v1/tools/call",
            Some(AGENT),
            call,
            403,
            "forbidden",
        )
        .with("origin", Some("https://attacker.example")),
        case(
            "another origin decides",
            "POST",
            &decide_pending,
            Some(APPROVER),
            approve,
            403,
            "forbidden",
        )
        .with("origin", Some("http://127.0.0.1:7421")),
        case(
            "an opaque origin decides",
            "POST",
            &decide_pending,
            Some(APPROVER),
            approve,
            403,
            "forbidden",
        )
        .with("origin", Some("null")),
        case(
            "another origin on MCP",
            "POST",
            "/mcp",
            Some(AGENT),
            b"{}",
            403,
            "forbidden",
        )
        .with("origin", Some("https://attacker.example")),
        case(
            "another origin on a link",
            "POST",
            &format!("/hitl/link/{pending}/approve?exp=1&sig=00"),
            None,
            b"",
            403,
            "forbidden",
        )
        .with("origin", Some("https://attacker.example")),
    ]);
    cases.push(Case {
        auth: Some(format!("Basic {ADMIN}")),
        ..case(
            "not a bearer token",
            "GET",
            "/hitl/pending",
            None,
            b"",
            401,
            "unauthorized",
        )
    });
    // The scheme is case-insensitive.
    let (status, body) = app
        .send(
            "GET",
            "/hitl/pending",
            Some(&format!("bearer {APPROVER}")),
            "",
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let mut failures = Vec::new();
    for case in &cases {
        let (status, body) = app
            .send_with(
                case.method,
                &case.path,
                case.auth.as_deref(),
                case.body.clone(),
                &case.headers,
            )
            .await;
        let code = body["error"]["code"].as_str().unwrap_or("?");
        let message = body["error"]["message"].as_str().unwrap_or("");
        if (status.as_u16(), code) != (case.status, case.code) || message.is_empty() {
            failures.push(format!(
                "{}: {} {} gave {status} {body}, wanted {} {}",
                case.what, case.method, case.path, case.status, case.code
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // None of it changed anything: the proposal is still pending, no file
    // was written.
    let (_, shown) = app
        .send(
            "GET",
            &format!("/hitl/pending/{pending}"),
            Some(&format!("Bearer {APPROVER}")),
            "",
        )
        .await;
    assert_eq!(shown["status"], "pending");
    assert!(!app.dir.path().join("b.txt").exists());
    assert!(!app.dir.path().join("c.txt").exists());
    // Another method on a JSON endpoint's path, or a POST where only GET is
    // served, is 405 whatever the content type.
    for (method, path) in [("POST", "/hitl/pending"), ("GET", "/v1/tools/call")] {
        let (status, _) = app
            .send_with(
                method,
                path,
                Some(&format!("Bearer {ADMIN}")),
                "",
                &[("content-type", Some("text/plain"))],
            )
            .await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {path}");
    }
    // The refused calls proposed nothing.
    let (_, listed) = app
        .send("GET", "/hitl/pending", Some(&format!("Bearer {ADMIN}")), "")
        .await;
    assert!(!listed.to_string().contains("d.txt"), "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listener_answers_its_own_names_and_origins_and_the_configured_ones() {
    let app = app("http:\n  allowed_hosts: [ci.internal, \"box.lan:9000\"]\n  allowed_origins: [\"https://app.example\"]\n").await;
    let approver = format!("Bearer {APPROVER}");
    // The listener's own names and origins, and the configured ones, pass;
    // near misses do not.
    let table: &[(&Headers, StatusCode)] = &[
        (&[("host", Some("localhost:7420"))], StatusCode::OK),
        (&[("host", Some("[::1]:7420"))], StatusCode::OK),
        (&[("host", Some("airlock.test"))], StatusCode::OK),
        (&[("host", Some("ci.internal"))], StatusCode::OK),
        (&[("host", Some("box.lan:9000"))], StatusCode::OK),
        (&[("origin", Some("http://127.0.0.1:7420"))], StatusCode::OK),
        (
            &[
                ("host", Some("localhost:7420")),
                ("origin", Some("http://localhost:7420")),
            ],
            StatusCode::OK,
        ),
        (&[("origin", Some("http://airlock.test"))], StatusCode::OK),
        (&[("origin", Some("https://app.example"))], StatusCode::OK),
        (&[("host", Some("box.lan:9001"))], StatusCode::FORBIDDEN),
        (
            &[("host", Some("ci.internal.attacker.example"))],
            StatusCode::FORBIDDEN,
        ),
        (
            &[("origin", Some("https://app.example:8443"))],
            StatusCode::FORBIDDEN,
        ),
    ];
    for (headers, expected) in table {
        let (status, body) = app
            .send_with("GET", "/hitl/pending", Some(&approver), "", headers)
            .await;
        assert_eq!(status, *expected, "{headers:?}: {body}");
    }
    // A same-origin call with a JSON body goes through.
    let (status, body) = app
        .send_with(
            "POST",
            "/v1/tools/call",
            Some(&format!("Bearer {AGENT}")),
            json!({"tool": "read_file", "arguments": {"path": "a.txt"}}).to_string(),
            &[
                ("origin", Some("http://127.0.0.1:7420")),
                ("content-type", Some("Application/JSON; charset=utf-8")),
            ],
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_pending_approvals_are_429_and_reads_still_pass() {
    let app = app("    max_pending: 2\n    max_pending_per_session: 2\n").await;
    app.propose("one.txt").await;
    app.propose("two.txt").await;
    let (status, body) = app
        .call(
            AGENT,
            json!({"tool": "write_file", "arguments": {"path": "three.txt", "content": "x"}}),
        )
        .await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{body}");
    assert_eq!(body["error"]["code"], "rate_limited");
    let (status, body) = app
        .call(
            AGENT,
            json!({"tool": "read_file", "arguments": {"path": "a.txt"}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["data"]["content"], "hello\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approved_through_the_router_the_result_follows() {
    let app = app("").await;
    let id = app.propose("d.txt").await;
    let result = format!("/hitl/result/{id}");
    let agent = format!("Bearer {AGENT}");
    let (status, body) = app.send("GET", &result, Some(&agent), "").await;
    assert_eq!(
        (status, &body["status"]),
        (StatusCode::ACCEPTED, &json!("pending"))
    );
    let (status, body) = app
        .send(
            "POST",
            &format!("/hitl/decide/{id}"),
            Some(&format!("Bearer {APPROVER}")),
            r#"{"decision": "approve", "reason": "fine"}"#,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (status, body) = app.send("GET", &result, Some(&agent), "").await;
    assert_eq!(
        (status, &body["status"]),
        (StatusCode::OK, &json!("allowed")),
        "{body}"
    );
    assert_eq!(
        std::fs::read_to_string(app.dir.path().join("d.txt")).unwrap(),
        "x\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn integers_beyond_2_53_in_a_call_are_audited_not_an_io_error() {
    let app = app("").await;
    let (status, body) = app
        .call(
            AGENT,
            json!({"tool": "read_file", "arguments": {"path": "a.txt", "start_line": 9007199254740993u64}}),
        )
        .await;
    assert_ne!(body["error"]["code"], "io_error", "{body}");
    assert!(
        status.is_success() || status.is_client_error(),
        "{status} {body}"
    );
    assert!(body["audit"]["event_hash"].is_string(), "unaudited: {body}");
    let (status, verify) = app
        .send("GET", "/audit/verify", Some(&format!("Bearer {ADMIN}")), "")
        .await;
    assert_eq!(
        (status, &verify["ok"]),
        (StatusCode::OK, &json!(true)),
        "{verify}"
    );
}

/// `/mcp` is whatever MCP service the router is given, reached only past
/// the token, the role and the profile checks, with the caller attached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_mcp_service_is_reached_only_past_the_checks_and_sees_the_caller() {
    let app = app("profiles:\n  readonly:\n    allowlist: [read_file]\n").await;
    let (status, body) = app.send("POST", "/mcp", Some(&bearer(AGENT)), "{}").await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        json!({"path": "/mcp", "user": "u1", "token": "agent", "admin": false})
    );
    let (status, body) = app
        .send("POST", "/mcp/readonly", Some(&bearer(ADMIN)), "{}")
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        json!({"path": "/mcp/readonly", "user": null, "token": "root", "admin": true})
    );
    for (path, token, status, code) in [
        ("/mcp", None, StatusCode::UNAUTHORIZED, "unauthorized"),
        ("/mcp", Some(APPROVER), StatusCode::FORBIDDEN, "forbidden"),
    ] {
        let auth = token.map(bearer);
        let (got, body) = app.send("POST", path, auth.as_deref(), "{}").await;
        assert_eq!(
            (got, body["error"]["code"].as_str()),
            (status, Some(code)),
            "{path}: {body}"
        );
    }
    let (status, body) = app
        .send("POST", "/mcp/nope", Some(&bearer(AGENT)), "{}")
        .await;
    assert_eq!(
        (status, body),
        (
            StatusCode::NOT_FOUND,
            json!("no profile named nope in the configuration\n")
        )
    );
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}
