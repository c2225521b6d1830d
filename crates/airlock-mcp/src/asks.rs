//! An upstream server's requests to the client whose call it is serving:
//! `sampling/createMessage` (it spends the client's model, so it goes
//! through the policy and may wait for a human), `elicitation/create` and
//! `roots/list` (passed as they are). A client that did not declare the
//! capability gets its server the error it would have got.
#![expect(
    deprecated,
    reason = "sampling and roots are deprecated by SEP-2577 but still part of 2025-11-25"
)]

use std::sync::Arc;

use airlock_broker::{ClientAsk, ForwardError, Mode};
use airlock_core::envelope::Status;
use airlock_core::{Principal, ToolCall, UpstreamCall};
use rmcp::ErrorData;
use rmcp::model::{
    ClientResult, CreateMessageRequest, CreateMessageRequestParams, CreateMessageResult,
    ElicitRequest, ElicitRequestParams, ElicitResult, ErrorCode, ListRootsRequest, ListRootsResult,
    ServerRequest,
};
use serde_json::{Value, json};

use crate::caller::Caller;
use crate::hub::Hub;

/// What a client without the capability answers (the method is not one
/// it serves).
fn not_offered(what: &str) -> ErrorData {
    ErrorData::new(
        ErrorCode::METHOD_NOT_FOUND,
        format!("the client does not support {what}"),
        None,
    )
}

/// Sends `request` to the caller's client, on the stream of the client's
/// own request where there is one.
async fn put(caller: &Caller, mut request: ServerRequest) -> Result<ClientResult, ErrorData> {
    if let Some(id) = &caller.request {
        use rmcp::model::GetExtensions as _;
        request
            .extensions_mut()
            .insert(rmcp::service::OriginatingRequestId(id.clone()));
    }
    match caller.client.peer.send_request(request).await {
        Ok(result) => Ok(result),
        // The client's own refusal reaches the server as it was.
        Err(rmcp::service::ServiceError::McpError(error)) => Err(error),
        Err(error) => Err(ErrorData::internal_error(
            format!("the client did not answer: {error}"),
            None,
        )),
    }
}

/// `elicitation/create`: to the client as it came.
pub(crate) async fn elicit(
    caller: Caller,
    params: ElicitRequestParams,
) -> Result<ElicitResult, ErrorData> {
    let capabilities = caller.client.capabilities().unwrap_or_default();
    if capabilities.elicitation.is_none() {
        return Err(not_offered("elicitation"));
    }
    match put(
        &caller,
        ServerRequest::ElicitRequest(ElicitRequest::new(params)),
    )
    .await?
    {
        ClientResult::ElicitResult(result) => Ok(result),
        _ => Err(ErrorData::internal_error(
            "the client answered elicitation/create with something else",
            None,
        )),
    }
}

/// `roots/list` (DESIGN §5.3): a client's roots are hints, never grants.
/// A call in a session is answered with the session's roots; any other
/// with the calling client's roots inside the `workspace` (a root above
/// it becomes the workspace; one beside it, or not a file, is left out).
pub(crate) async fn roots(
    caller: Caller,
    workspace: Option<std::path::PathBuf>,
) -> Result<ListRootsResult, ErrorData> {
    if let Some(roots) = &caller.session_roots {
        return Ok(roots_result(roots.iter().map(|root| (root.clone(), None))));
    }
    let capabilities = caller.client.capabilities().unwrap_or_default();
    if capabilities.roots.is_none() {
        return Err(not_offered("roots"));
    }
    let asked = match put(
        &caller,
        ServerRequest::ListRootsRequest(ListRootsRequest::default()),
    )
    .await?
    {
        ClientResult::ListRootsResult(result) => result,
        _ => {
            return Err(ErrorData::internal_error(
                "the client answered roots/list with something else",
                None,
            ));
        }
    };
    let Some(workspace) = workspace else {
        return Ok(roots_result(std::iter::empty()));
    };
    let mut kept = Vec::new();
    for root in asked.roots {
        let Some(path) = root
            .uri
            .strip_prefix("file://")
            .and_then(percent_decoded)
            .map(std::path::PathBuf::from)
            .filter(|path| path.is_absolute())
        else {
            continue;
        };
        let path = normalized(&path);
        let placed = if path.starts_with(&workspace) {
            path
        } else if workspace.starts_with(&path) {
            workspace.clone()
        } else {
            continue;
        };
        if !kept
            .iter()
            .any(|(known, _): &(std::path::PathBuf, Option<String>)| *known == placed)
        {
            kept.push((placed, root.name.clone()));
        }
    }
    Ok(roots_result(kept.into_iter()))
}

/// `path` with `.` and `..` taken out lexically (`..` at `/` stays there).
fn normalized(path: &std::path::Path) -> std::path::PathBuf {
    let mut out = std::path::PathBuf::from("/");
    for part in path.components() {
        match part {
            std::path::Component::Normal(name) => out.push(name),
            std::path::Component::ParentDir => {
                out.pop();
            }
            _ => {}
        }
    }
    out
}

/// A `file://` path with its `%XX` escapes decoded; `None` when it is not
/// UTF-8 once decoded or holds a NUL.
fn percent_decoded(path: &str) -> Option<String> {
    let bytes = path.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] == b'%' {
            if at + 2 >= bytes.len() {
                return None;
            }
            let hex = std::str::from_utf8(&bytes[at + 1..at + 3]).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            at += 3;
        } else {
            out.push(bytes[at]);
            at += 1;
        }
    }
    let text = String::from_utf8(out).ok()?;
    (!text.contains('\0')).then_some(text)
}

/// A path as a `file://` URI's path: bytes other than unreserved ones
/// and `/` as `%XX`.
fn percent_encoded(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for byte in path.bytes() {
        if byte.is_ascii_alphanumeric() || b"/-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

fn roots_result(
    roots: impl Iterator<Item = (std::path::PathBuf, Option<String>)>,
) -> ListRootsResult {
    let roots: Vec<Value> = roots
        .map(|(path, name)| {
            let mut root =
                json!({"uri": format!("file://{}", percent_encoded(&path.to_string_lossy()))});
            if let Some(name) = name {
                root["name"] = json!(name);
            }
            root
        })
        .collect();
    serde_json::from_value(json!({"roots": roots})).unwrap_or_default()
}

/// `sampling/createMessage` from `upstream`: decided by the policy as
/// `sampling:<upstream>` (medium risk: a human approves unless a rule or a
/// grant says otherwise), then put to the client. A client that can be
/// asked with a form is asked to approve (`elicitation/create`), as for
/// its own calls; its other channels can decide too. A refusal is the
/// error a user's refusal is (code -1), the envelope in its data.
pub(crate) async fn sample(
    upstream: &str,
    hub: &Arc<Hub>,
    caller: Caller,
    params: CreateMessageRequestParams,
) -> Result<CreateMessageResult, ErrorData> {
    let capabilities = caller.client.capabilities().unwrap_or_default();
    if capabilities.sampling.is_none() {
        return Err(not_offered("sampling"));
    }
    let Some(broker) = hub.broker() else {
        return Err(ErrorData::internal_error("airlock is not ready", None));
    };
    let args = serde_json::to_value(&params)
        .map_err(|error| ErrorData::internal_error(error.to_string(), None))?;
    let tool = airlock_core::call::sampling_tool(upstream);
    let origin = broker.policy().origin_of(&tool, None);
    let agent = caller
        .client
        .peer
        .peer_info()
        .map(|info| info.client_info.name.clone());
    let mut call = ToolCall::new(tool, args, origin, broker.now_ms());
    call.principal = Principal {
        user: None,
        agent,
        token: None,
        admin: false,
    };
    call.session = Some(caller.client.session.clone());
    let ask = if crate::server::elicits(&capabilities) {
        ClientAsk::Elicit
    } else {
        ClientAsk::Unable
    };
    let companion = Arc::new(crate::server::Companion::for_request(
        broker.clone(),
        caller.client.peer.clone(),
        caller.request.clone(),
        caller.cancelled.clone(),
        ask == ClientAsk::Elicit,
    ));
    let started = companion.clone();
    let envelope = tokio::task::spawn_blocking(move || {
        crate::caller::with_caller(caller, || {
            broker.submit(&call, &Mode::Client(ask), &|approval| {
                started.start(approval.id.clone());
            })
        })
    })
    .await;
    companion.stop();
    let envelope = envelope.map_err(|error| ErrorData::internal_error(error.to_string(), None))?;
    if envelope.status == Status::Allowed
        && let Some(data) = &envelope.data
        && let Ok(result) = serde_json::from_value::<CreateMessageResult>(data.clone())
    {
        return Ok(result);
    }
    if let Some(error) = crate::result::passed_jsonrpc_error(&envelope) {
        return Err(error);
    }
    let sentence = crate::result::sentence(&envelope);
    Err(ErrorData::new(
        ErrorCode(-1),
        sentence,
        Some(json!({"airlock/envelope": envelope})),
    ))
}

/// Carries an approved sampling request to the client (the forwarder's
/// half of [`sample`]).
pub(crate) async fn put_sampling(
    upstream: &str,
    call: &UpstreamCall,
    caller: Option<Caller>,
) -> Result<Value, ForwardError> {
    let Some(caller) = caller else {
        return Err(ForwardError::NotConnected);
    };
    let params: CreateMessageRequestParams =
        serde_json::from_value(call.args.clone()).map_err(|error| ForwardError::Failed {
            upstream: upstream.to_owned(),
            message: error.to_string(),
        })?;
    let request = ServerRequest::CreateMessageRequest(CreateMessageRequest::new(params));
    match put(&caller, request).await {
        Ok(ClientResult::CreateMessageResult(result)) => {
            serde_json::to_value(result).map_err(|error| ForwardError::Failed {
                upstream: upstream.to_owned(),
                message: error.to_string(),
            })
        }
        Ok(_) => Err(ForwardError::Failed {
            upstream: upstream.to_owned(),
            message: "the client answered sampling/createMessage with something else".to_owned(),
        }),
        Err(error) => Err(ForwardError::Refused {
            upstream: upstream.to_owned(),
            code: error.code.0,
            message: error.message.to_string(),
            data: error.data,
        }),
    }
}
