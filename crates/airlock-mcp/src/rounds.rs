//! Asking a 2026-07-28 client: the call returns an `InputRequiredResult` whose
//! `requestState` is sealed (HMAC-SHA256, key in the state dir), bound to a
//! digest of the call and the principal, expiring with the approval; the
//! client's retry carries the human's answer and the state, which is accepted
//! once.

use std::time::Duration;

use airlock_broker::BrokerError;
use airlock_core::envelope::{Envelope, Status};
use airlock_core::{ErrorCode, ToolCall};
use rmcp::ErrorData;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, ElicitationAction, InputRequiredResult, SealOptions,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::McpFace;
use crate::ask::{decide_request, decision_form, decision_message};
use crate::result::to_result;

/// The key of the one input request airlock makes.
const APPROVAL_KEY: &str = "airlock_approval";

/// What the sealed state holds (signed, not secret).
#[derive(Debug, Serialize, Deserialize)]
struct State {
    hitl_id: String,
    nonce: String,
    expires_ms: u64,
}

/// The call and who makes it, as the seal binds them.
fn call_digest(call: &ToolCall) -> Vec<u8> {
    let args = airlock_core::canonical::to_canonical_string(&call.args);
    let text = format!(
        "airlock-rounds-v1\u{0}{}\u{0}{}\u{0}{}\u{0}{}\u{0}{}",
        call.tool,
        args,
        call.principal.user.as_deref().unwrap_or(""),
        call.profile.as_deref().unwrap_or(""),
        call.context_id.as_deref().unwrap_or("")
    );
    airlock_core::canonical::sha256_hex(text.as_bytes()).into_bytes()
}

/// Turns a `hitl_required` envelope into an `InputRequiredResult` asking the
/// client's human, where the client may decide it; otherwise the envelope.
pub(crate) async fn input_required(
    face: &McpFace,
    call: &ToolCall,
    envelope: &Envelope,
) -> Result<CallToolResponse, ErrorData> {
    let complete = || Ok(CallToolResponse::Complete(to_result(envelope)));
    let Some(hitl) = &envelope.hitl else {
        return complete();
    };
    let broker = face.broker();
    let id = hitl.hitl_id.clone();
    let form = match tokio::task::spawn_blocking(move || broker.ask_form(&id)).await {
        Ok(Ok(form)) => form,
        _ => return complete(),
    };
    if !form.client_may_decide {
        return complete();
    }
    ask(face, call, &form, decision_message(&form))
}

/// An `InputRequiredResult` asking the human about `form`'s approval, with a
/// fresh sealed state bound to this call.
fn ask(
    face: &McpFace,
    call: &ToolCall,
    form: &airlock_broker::AskForm,
    message: String,
) -> Result<CallToolResponse, ErrorData> {
    let now = face.broker().now_ms();
    let state = State {
        hitl_id: form.hitl_id.clone(),
        nonce: uuid::Uuid::new_v4().to_string(),
        expires_ms: form.expires_ms,
    };
    let digest = call_digest(call);
    let ttl = Duration::from_millis(form.expires_ms.saturating_sub(now).max(1));
    let sealed = face
        .codec
        .seal_json_with(
            &state,
            &SealOptions::new().associated_data(&digest).ttl(ttl),
        )
        .map_err(|error| ErrorData::internal_error(error.to_string(), None))?;
    let result: InputRequiredResult = serde_json::from_value(json!({
        "resultType": "input_required",
        "inputRequests": {
            APPROVAL_KEY: {
                "method": "elicitation/create",
                "params": {
                    "mode": "form",
                    "message": message,
                    "requestedSchema": decision_form(form),
                },
            },
        },
        "requestState": sealed,
    }))
    .map_err(|error| ErrorData::internal_error(error.to_string(), None))?;
    Ok(CallToolResponse::InputRequired(result))
}

/// The retry of a call with the human's answer.
pub(crate) async fn resume(
    face: &McpFace,
    call: &ToolCall,
    request: &CallToolRequestParams,
) -> Result<CallToolResponse, ErrorData> {
    let refuse = |message: &str| {
        let envelope = Envelope::failure(
            Status::Error,
            "hitl.decide",
            &call.tool,
            None,
            ErrorCode::InvalidInput,
            message,
        );
        Ok(CallToolResponse::Complete(to_result(&envelope)))
    };
    let Some(sealed) = request.request_state.as_deref() else {
        return refuse("no requestState");
    };
    let digest = call_digest(call);
    let state: State = match face.codec.open_json_with(sealed, &digest) {
        Ok(state) => state,
        Err(_) => {
            return refuse(
                "requestState is not valid for this call: forged, altered, expired, \
                 or made for another call or principal",
            );
        }
    };
    let broker = face.broker();
    let id = state.hitl_id.clone();
    let form = match tokio::task::spawn_blocking(move || broker.ask_form(&id)).await {
        Ok(Ok(form)) => form,
        _ => return refuse("the proposal is gone"),
    };
    // Asked under a configuration that let the client decide; the one in
    // force now may not (`approval_mode: defer`), and it is the one that
    // counts, as it is for an elicitation.
    if !form.client_may_decide {
        return refuse("this proposal is no longer decided in the MCP client");
    }
    let broker = face.broker();
    let nonce = state.nonce.clone();
    let expires = state.expires_ms;
    let spent = tokio::task::spawn_blocking(move || broker.spend_token(&nonce, expires)).await;
    if !matches!(spent, Ok(Ok(true))) {
        return refuse("requestState was already used");
    }
    let answer = request
        .input_responses
        .as_ref()
        .and_then(|responses| responses.get(APPROVAL_KEY))
        .cloned()
        .unwrap_or(Value::Null);
    let action: ElicitationAction = answer
        .get("action")
        .cloned()
        .and_then(|action| serde_json::from_value(action).ok())
        .unwrap_or(ElicitationAction::Cancel);
    let content = answer.get("content").cloned();
    let Some(decide) = decide_request(
        &action,
        content.as_ref(),
        &form,
        call.principal.user.clone(),
    ) else {
        // Approved without the reason this risk requires: nothing is
        // decided, and the human is asked again (with a fresh state; the
        // one presented is spent).
        let message = format!(
            "A reason is required to approve this call.\n\n{}",
            decision_message(&form)
        );
        return ask(face, call, &form, message);
    };
    let broker = face.broker();
    let id = state.hitl_id.clone();
    let envelope = tokio::task::spawn_blocking(move || match broker.decide(&id, &decide) {
        Ok(envelope) => envelope,
        // Someone decided first (or it expired): its outcome is the answer.
        Err(BrokerError::Store(_)) => broker.wait(&id),
        Err(error) => {
            let mut envelope = Envelope::failure(
                Status::Error,
                "hitl.decide",
                &form.tool,
                None,
                error.code(),
                error.to_string(),
            );
            envelope.hitl = None;
            envelope
        }
    })
    .await
    .map_err(|error| ErrorData::internal_error(error.to_string(), None))?;
    Ok(CallToolResponse::Complete(to_result(&envelope)))
}
