//! The fast lane of a stdio session: a `tools/call` of an upstream's tool
//! that the policy lets through at once is answered from the line it came
//! on, without rmcp's typed request, its per-request service task and its
//! typed response (with `perf`, about a third of the CPU a proxied call
//! cost). The decision, the forwarding, the audit record and the result
//! are the ones the usual way makes ([`Session::call`]'s `forward_now`):
//! only the framing is skipped.
//!
//! A call takes the lane only when nothing about it needs rmcp: a session
//! initialized on a protocol before 2026-07-28 (whose requests carry no
//! protocol fields of their own), params of `name`, `arguments` and `_meta`
//! only, a `_meta` of airlock's own keys only (no progress token), an
//! upstream tool, and a decision that needs no human. Everything else, a
//! call that would ask or be denied included, goes the usual way, which
//! decides it again and says why.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rmcp::model::{NumberOrString, ProtocolVersion};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::server::Session;

/// `_meta` keys a laned call may carry (read by `Session::call_of`).
const OWN_META: [&str; 2] = ["context_id", "airlock/requester"];

/// The fast lane of one stdio session.
pub(crate) struct Lane {
    session: Session,
    /// The laned calls in flight, by their JSON-RPC id: cancelled by the
    /// client's `notifications/cancelled`.
    flying: Mutex<HashMap<NumberOrString, CancellationToken>>,
}

/// The line to write back to the client; none for a call the client
/// cancelled (as rmcp drops the response to a cancelled request).
pub(crate) type Answer = std::pin::Pin<Box<dyn Future<Output = Option<Vec<u8>>> + Send>>;

impl Lane {
    pub(crate) fn new(session: Session) -> Arc<Lane> {
        Arc::new(Lane {
            session,
            flying: Mutex::new(HashMap::new()),
        })
    }

    /// Takes `message` if it can: the answer to write once it is ready.
    /// `None` leaves the message to rmcp. A client's cancellation of a laned
    /// call cancels it here (and is passed on to rmcp too, which knows
    /// nothing of the call and ignores it).
    pub(crate) fn take(self: &Arc<Self>, message: &Value) -> Option<Answer> {
        let method = message.get("method")?.as_str()?;
        if method == "notifications/cancelled" {
            let id = message.get("params")?.get("requestId")?;
            let id = serde_json::from_value::<NumberOrString>(id.clone()).ok()?;
            if let Some(token) = self.flying.lock().ok()?.get(&id) {
                token.cancel();
            }
            return None;
        }
        if method != "tools/call" {
            return None;
        }
        let id = match message.get("id")? {
            Value::String(id) => NumberOrString::String(id.as_str().into()),
            Value::Number(number) => NumberOrString::Number(number.as_i64()?),
            _ => return None,
        };
        let params = message.get("params")?.as_object()?;
        if params
            .keys()
            .any(|key| !matches!(key.as_str(), "name" | "arguments" | "_meta"))
        {
            return None;
        }
        let empty = Map::new();
        let meta = match params.get("_meta") {
            None => &empty,
            Some(Value::Object(meta)) => meta,
            Some(_) => return None,
        };
        if meta.keys().any(|key| !OWN_META.contains(&key.as_str())) {
            return None;
        }
        let name = params.get("name")?.as_str()?;
        let args = match params.get("arguments") {
            None => Value::Object(Map::new()),
            Some(Value::Object(args)) => Value::Object(args.clone()),
            Some(_) => return None,
        };
        let peer = self.session.initialized_peer()?;
        let info = peer.peer_info()?;
        if info.protocol_version >= ProtocolVersion::V_2026_07_28 {
            return None;
        }
        // A second call under the id of one in flight is rmcp's to answer.
        if self.flying.lock().ok()?.contains_key(&id) {
            return None;
        }
        let (call, now) = self.session.forward_at_once(name, args, meta, &id, &info)?;
        let cancelled = CancellationToken::new();
        let key = id.clone();
        self.flying
            .lock()
            .ok()?
            .insert(key.clone(), cancelled.clone());
        let lane = self.clone();
        Some(Box::pin(async move {
            let result = lane
                .session
                .forwarded(&call, now, peer, id.clone(), cancelled.clone())
                .await;
            if let Ok(mut flying) = lane.flying.lock() {
                flying.remove(&key);
            }
            if cancelled.is_cancelled() {
                return None;
            }
            let mut result = rmcp::model::ServerResult::CallToolResult(result);
            // What rmcp does to a result for a peer before 2026-07-28.
            result.strip_result_type_for_legacy_peer();
            result.strip_non_object_output_for_legacy_peer();
            let response = json!({"jsonrpc": "2.0", "id": id, "result": result});
            let mut line = serde_json::to_vec(&response).unwrap_or_default();
            line.push(b'\n');
            Some(line)
        }))
    }
}
