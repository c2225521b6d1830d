//! Signed one-time approve/deny links (DESIGN §7), sent with webhooks.
//!
//! A link is `/hitl/link/{id}/{decision}?exp=…&sig=…`: `sig` is an
//! HMAC-SHA256, under a key kept in the state dir, over the approval id, the
//! decision and the expiry (the approval's). Opening it (`GET`) shows the
//! approval and a confirmation form and changes nothing, so a mail scanner
//! or a link preview that fetches it decides nothing. Confirming (`POST`)
//! spends the link (once, across processes) and decides with channel
//! `link`. The link is the credential, so it needs no bearer token; for
//! the same reason it is offered only for approvals any approver may decide:
//! not where the risk names its approvers, nor where only the requesting
//! user may decide (spec 001).

use std::fmt::Write as _;
use std::sync::Arc;

use airlock_broker::Runtime;
use airlock_broker::{Approval, DecideRequest, approval_view};
use airlock_core::{Channel, ErrorCode};
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hmac::{Hmac, KeyInit, Mac};
use serde::Deserialize;
use serde_json::Value;
use sha2::Sha256;

/// The key's file in the state dir.
const KEY_NAME: &str = "link-key";

/// Makes and checks signed links.
#[derive(Clone)]
pub(crate) struct Links {
    /// Keyed, before any input.
    keyed: Hmac<Sha256>,
    /// `http://host:port`, what links start with.
    base: Arc<str>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Decision {
    Approve,
    Deny,
}

impl Decision {
    fn parse(text: &str) -> Option<Decision> {
        match text {
            "approve" => Some(Decision::Approve),
            "deny" => Some(Decision::Deny),
            _ => None,
        }
    }

    fn as_str(self) -> &'static str {
        match self {
            Decision::Approve => "approve",
            Decision::Deny => "deny",
        }
    }
}

impl Links {
    /// Links of the workspace of `runtime`, starting with `base`.
    pub(crate) fn new(runtime: &Runtime, base: String) -> Result<Links, String> {
        let key = runtime
            .broker()
            .state_secret(KEY_NAME)
            .map_err(|error| error.to_string())?;
        let keyed = <Hmac<Sha256> as KeyInit>::new_from_slice(&key)
            .map_err(|error| format!("link key: {error}"))?;
        Ok(Links {
            keyed,
            base: base.into(),
        })
    }

    fn mac(&self, id: &str, decision: Decision, expires_ms: u64) -> Hmac<Sha256> {
        let mut mac = self.keyed.clone();
        mac.update(format!("airlock-link\n{id}\n{}\n{expires_ms}", decision.as_str()).as_bytes());
        mac
    }

    /// `{"approve": url, "deny": url}` for `approval` (a view), or `None`
    /// when links are not offered for it.
    /// `offered`: whether the broker lets links decide it
    /// (`Broker::open_to_any_approver`).
    pub(crate) fn for_view(&self, view: &Value, offered: bool) -> Option<Value> {
        let id = view.get("id")?.as_str()?;
        let expires_ms = view.get("expires_ms")?.as_u64()?;
        if !offered {
            return None;
        }
        let url = |decision: Decision| {
            let sig = hex::encode(self.mac(id, decision, expires_ms).finalize().into_bytes());
            format!(
                "{}/hitl/link/{id}/{}?exp={expires_ms}&sig={sig}",
                self.base,
                decision.as_str()
            )
        };
        Some(serde_json::json!({
            "approve": url(Decision::Approve),
            "deny": url(Decision::Deny),
        }))
    }

    fn verify(&self, id: &str, decision: Decision, expires_ms: u64, sig: &str) -> bool {
        let Ok(sig) = hex::decode(sig) else {
            return false;
        };
        // Constant time.
        self.mac(id, decision, expires_ms)
            .verify_slice(&sig)
            .is_ok()
    }
}

#[derive(Clone)]
struct LinkState {
    runtime: Arc<Runtime>,
    links: Links,
}

pub(crate) fn routes(runtime: Arc<Runtime>, links: Links) -> Router {
    Router::new()
        .route("/hitl/link/{id}/{decision}", get(open).post(confirm))
        .with_state(LinkState { runtime, links })
}

#[derive(Deserialize)]
struct LinkParams {
    exp: Option<String>,
    sig: Option<String>,
}

#[derive(Deserialize)]
struct ConfirmForm {
    #[serde(default)]
    reason: Option<String>,
}

/// A checked link: the approval it decides and how.
struct Checked {
    approval: Approval,
    decision: Decision,
    expires_ms: u64,
    sig: String,
}

/// Checks a link's signature and expiry and loads its approval, or answers
/// with the page that says why not.
async fn check(
    state: &LinkState,
    id: String,
    decision: &str,
    params: Result<Query<LinkParams>, axum::extract::rejection::QueryRejection>,
) -> Result<Checked, Response> {
    let bad = || {
        page(
            StatusCode::FORBIDDEN,
            ErrorCode::Forbidden,
            "Invalid link",
            "This link is not valid: it is incomplete or its signature does not match.",
        )
    };
    let Ok(Query(params)) = params else {
        return Err(bad());
    };
    let (Some(decision), Some(expires_ms), Some(sig)) = (
        Decision::parse(decision),
        params.exp.and_then(|exp| exp.parse::<u64>().ok()),
        params.sig,
    ) else {
        return Err(bad());
    };
    if !state.links.verify(&id, decision, expires_ms, &sig) {
        return Err(bad());
    }
    if state.runtime.broker().now_ms() >= expires_ms {
        return Err(page(
            StatusCode::CONFLICT,
            ErrorCode::Expired,
            "Link expired",
            "This approval has expired; nothing was decided.",
        ));
    }
    let broker = state.runtime.broker();
    let found = tokio::task::spawn_blocking(move || broker.approval(&id)).await;
    let approval = match found {
        Ok(Ok(approval)) => approval,
        Ok(Err(error)) if error.code() == ErrorCode::NotFound => {
            return Err(page(
                StatusCode::NOT_FOUND,
                ErrorCode::NotFound,
                "Unknown approval",
                "There is no such approval in this workspace.",
            ));
        }
        Ok(Err(error)) => {
            return Err(page(
                StatusCode::INTERNAL_SERVER_ERROR,
                error.code(),
                "Error",
                &error.to_string(),
            ));
        }
        Err(error) => {
            return Err(page(
                StatusCode::INTERNAL_SERVER_ERROR,
                ErrorCode::IoError,
                "Error",
                &error.to_string(),
            ));
        }
    };
    if !state.runtime.broker().open_to_any_approver(&approval) {
        return Err(page(
            StatusCode::FORBIDDEN,
            ErrorCode::Forbidden,
            "Not by link",
            "This approval must be decided by a named approver, in the web UI or the API.",
        ));
    }
    if approval.status.as_str() != "pending" {
        return Err(page(
            StatusCode::CONFLICT,
            ErrorCode::AlreadyDecided,
            "Already decided",
            &format!("This approval is already {}.", approval.status.as_str()),
        ));
    }
    Ok(Checked {
        approval,
        decision,
        expires_ms,
        sig,
    })
}

/// `GET`: the approval and a form to confirm. Changes nothing.
async fn open(
    State(state): State<LinkState>,
    Path((id, decision)): Path<(String, String)>,
    params: Result<Query<LinkParams>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let checked = match check(&state, id, &decision, params).await {
        Ok(checked) => checked,
        Err(refused) => return refused,
    };
    let approval = &checked.approval;
    let view = approval_view(approval);
    let require_reason = view["decision"]["require_reason"].as_bool() == Some(true)
        && checked.decision == Decision::Approve;
    let verb = match checked.decision {
        Decision::Approve => "Approve",
        Decision::Deny => "Deny",
    };
    let mut body = String::new();
    let _ = write!(
        body,
        "<p class=\"meta\"><b>{}</b> <span class=\"risk\">{} risk</span><br>{}<br>requested by {} · session {} · id {}</p>",
        escape(&approval.tool),
        approval.risk,
        escape(&approval.summary),
        escape(
            &[approval.agent.as_deref(), approval.user.as_deref()]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
                .join(" for ")
        ),
        escape(approval.session.as_deref().unwrap_or("none")),
        escape(&approval.id),
    );
    if !approval.diff.is_empty() {
        body.push_str("<pre class=\"diff\">");
        for line in approval.diff.lines() {
            let class = match airlock_core::display::DiffLine::of(line) {
                airlock_core::display::DiffLine::File => "file",
                airlock_core::display::DiffLine::Add => "add",
                airlock_core::display::DiffLine::Remove => "del",
                airlock_core::display::DiffLine::Hunk => "hunk",
                airlock_core::display::DiffLine::Context => "ctx",
            };
            let _ = writeln!(body, "<span class=\"{class}\">{}</span>", escape(line));
        }
        body.push_str("</pre>");
    }
    let _ = write!(
        body,
        "<form method=\"post\" action=\"/hitl/link/{}/{}?exp={}&amp;sig={}\">\
         <label>Reason{} <input name=\"reason\" autocomplete=\"off\"{}></label>\
         <button type=\"submit\" class=\"{}\">{verb}</button></form>",
        escape(&approval.id),
        checked.decision.as_str(),
        checked.expires_ms,
        escape(&checked.sig),
        if require_reason {
            " (required)"
        } else {
            " (optional)"
        },
        if require_reason { " required" } else { "" },
        checked.decision.as_str(),
    );
    html(StatusCode::OK, &format!("{verb} this call?"), &body)
}

/// `POST`: spends the link and decides.
async fn confirm(
    State(state): State<LinkState>,
    Path((id, decision)): Path<(String, String)>,
    params: Result<Query<LinkParams>, axum::extract::rejection::QueryRejection>,
    form: Result<axum::Form<ConfirmForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    let checked = match check(&state, id, &decision, params).await {
        Ok(checked) => checked,
        Err(refused) => return refused,
    };
    let form = match form {
        Ok(axum::Form(form)) => form,
        // A form that cannot be read decides nothing.
        Err(rejection) => {
            return page(
                rejection.status(),
                if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    ErrorCode::TooLarge
                } else {
                    ErrorCode::InvalidInput
                },
                "Not decided",
                &rejection.body_text(),
            );
        }
    };
    let reason = form
        .reason
        .map(|reason| reason.trim().to_owned())
        .filter(|reason| !reason.is_empty());
    let approve = checked.decision == Decision::Approve;
    let view = approval_view(&checked.approval);
    if approve && view["decision"]["require_reason"].as_bool() == Some(true) && reason.is_none() {
        // Not spent: the approver can go back and give one.
        return page(
            StatusCode::BAD_REQUEST,
            ErrorCode::InvalidInput,
            "A reason is required",
            &format!(
                "Approving a {} risk call requires a reason; nothing was decided.",
                checked.approval.risk
            ),
        );
    }
    let broker = state.runtime.broker();
    let id = checked.approval.id.clone();
    // One spelling per link: hex in either case verifies the same.
    let token = format!("link:{}", checked.sig.to_ascii_lowercase());
    let expires_ms = checked.expires_ms;
    let decided = tokio::task::spawn_blocking(move || {
        if !broker.spend_token(&token, expires_ms)? {
            return Ok(None);
        }
        broker
            .decide(
                &id,
                &DecideRequest {
                    approve,
                    reason,
                    always: None,
                    authority: airlock_broker::Authority::Link,
                    user: "link".to_owned(),
                    channel: Channel::Link,
                    content: None,
                },
            )
            .map(Some)
    })
    .await;
    match decided {
        Ok(Ok(Some(envelope))) => {
            let (title, text) = if approve {
                match envelope.status {
                    airlock_core::envelope::Status::Allowed => {
                        ("Approved", "Approved; the change was applied.".to_owned())
                    }
                    _ => (
                        "Approved, not applied",
                        format!(
                            "Approved, but it could not be applied: {}",
                            envelope
                                .error
                                .as_ref()
                                .map_or("unknown error", |error| error.message.as_str())
                        ),
                    ),
                }
            } else {
                ("Denied", "Denied; nothing was changed.".to_owned())
            };
            html(StatusCode::OK, title, &format!("<p>{}</p>", escape(&text)))
        }
        Ok(Ok(None)) => page(
            StatusCode::CONFLICT,
            ErrorCode::AlreadyDecided,
            "Link already used",
            "This link was already used.",
        ),
        Ok(Err(error)) => page(
            crate::api::status_for(error.code()),
            error.code(),
            "Not decided",
            &error.to_string(),
        ),
        Err(error) => page(
            StatusCode::INTERNAL_SERVER_ERROR,
            ErrorCode::IoError,
            "Error",
            &error.to_string(),
        ),
    }
}

/// A page with a title and a message; the error code in a header for
/// programs.
fn page(status: StatusCode, code: ErrorCode, title: &str, message: &str) -> Response {
    let mut response = html(status, title, &format!("<p>{}</p>", escape(message)));
    if let Ok(value) = HeaderValue::from_str(code.as_str()) {
        response.headers_mut().insert("x-airlock-error", value);
    }
    response
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:0 auto;max-width:48rem;padding:1rem;color:#1d2330}\
pre.diff{font-size:.8rem;border:1px solid #d9dde5;border-radius:6px;overflow-x:auto;padding:.3rem 0}\
pre.diff span{display:block;padding:0 .5rem;white-space:pre}.add{background:#e6f7ea;color:#11602a}\
.del{background:#fdeaea;color:#9b1c1c}.hunk{color:#2456c7}.risk{text-transform:uppercase;font-size:.75rem}\
form{display:flex;flex-direction:column;gap:.6rem}input{font:inherit;padding:.4rem;width:100%;box-sizing:border-box}\
button{font:inherit;padding:.6rem 1rem;border:0;border-radius:6px;color:#fff}\
button.approve{background:#1f7a3a}button.deny{background:#b42318}";

fn html(status: StatusCode, title: &str, body: &str) -> Response {
    let document = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta name=\"referrer\" content=\"no-referrer\"><title>{title} · airlock</title>\
         <style>{STYLE}</style></head><body><h1>{title}</h1>{body}</body></html>",
        title = escape(title),
    );
    let mut response = (status, document).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
        ),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// Text for an HTML page: control characters and bidi overrides as visible
/// escapes (`airlock_core::display`), then the HTML metacharacters escaped.
pub(crate) fn escape(text: &str) -> String {
    let text = airlock_core::display::safe_text(text);
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}
