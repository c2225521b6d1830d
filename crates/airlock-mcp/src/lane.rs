//! The fast lane of a session: a `tools/call` of an upstream's tool that
//! the policy lets through at once is answered from the message it came in,
//! without rmcp's typed request, its per-request service task and its typed
//! response (with `perf`, about a third of the CPU a proxied call cost over
//! stdio). Over streamable HTTP it also skips rmcp's session worker and the
//! SSE stream of the POST: the answer is the POST's `application/json` body
//! (`crate::http`). The decision, the forwarding, the audit record and the
//! result are the ones the usual way makes ([`Session::call`]'s
//! `forward_now`): only the framing is skipped.
//!
//! A call takes the lane only when nothing about it needs rmcp: a session
//! initialized on a protocol before 2026-07-28 (whose requests carry no
//! protocol fields of their own), params of `name`, `arguments` and `_meta`
//! only, a `_meta` of airlock's own keys only (no progress token), an
//! upstream tool, and a decision that needs no human. Everything else, a
//! call that would ask or be denied included, goes the usual way, which
//! decides it again and says why.
//!
//! Over HTTP, an upstream's request to the client during a call
//! (`sampling/createMessage`, `elicitation/create`, `roots/list`) rides the
//! stream of the client's POST when rmcp answers it; a laned POST has none,
//! so such a request goes on the session's standalone GET stream. A call
//! takes the lane only while the client has that stream open.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rmcp::model::{NumberOrString, ProtocolVersion};
use serde_json::{Map, Value, json};
use tokio_util::sync::CancellationToken;

use crate::server::Session;

/// `_meta` keys a laned call may carry (read by `Session::call_of`).
const OWN_META: [&str; 2] = ["context_id", "airlock/requester"];

/// The fast lane of one session.
pub(crate) struct Lane {
    session: Session,
    /// The laned calls in flight, by their JSON-RPC id: cancelled by the
    /// client's `notifications/cancelled`.
    flying: Mutex<HashMap<NumberOrString, CancellationToken>>,
    /// HTTP: whether the client holds the session's standalone GET stream
    /// open (the one rmcp sends to; a second GET while it lives gets only
    /// keep-alives).
    listening: Arc<AtomicBool>,
    /// HTTP: when a request of the session last went to rmcp. rmcp ends a
    /// session it has not seen for a while, so the lane lets one through
    /// now and then.
    seen_by_rmcp: Mutex<Instant>,
}

/// How long the lane answers a session's calls before it lets one go to
/// rmcp, well within rmcp's idle limit (300 s).
const RMCP_SEES_EVERY: Duration = Duration::from_secs(60);

/// The line to write back to the client; none for a call the client
/// cancelled (as rmcp drops the response to a cancelled request).
pub(crate) type Answer = std::pin::Pin<Box<dyn Future<Output = Option<Vec<u8>>> + Send>>;

impl Lane {
    pub(crate) fn new(session: Session) -> Arc<Lane> {
        Lane::with_listener(session, Arc::default())
    }

    fn with_listener(session: Session, listening: Arc<AtomicBool>) -> Arc<Lane> {
        Arc::new(Lane {
            session,
            flying: Mutex::new(HashMap::new()),
            listening,
            seen_by_rmcp: Mutex::new(Instant::now()),
        })
    }

    /// HTTP: a request of the session went to rmcp.
    pub(crate) fn seen_by_rmcp(&self) {
        if let Ok(mut seen) = self.seen_by_rmcp.lock() {
            *seen = Instant::now();
        }
    }

    /// The session's binding conflicts with the path and token of a
    /// request that came with `parts` (see `Session::binding_conflicts`).
    pub(crate) fn conflicts(&self, parts: &http::request::Parts) -> bool {
        self.session.binding_conflicts(parts)
    }

    /// The protocol version the session's client negotiated.
    pub(crate) fn protocol(&self) -> Option<ProtocolVersion> {
        Some(
            self.session
                .initialized_peer()?
                .peer_info()?
                .protocol_version
                .clone(),
        )
    }

    /// Whether the session is gone (its transport closed).
    fn closed(&self) -> bool {
        self.session
            .initialized_peer()
            .is_none_or(|peer| peer.is_transport_closed())
    }

    /// Takes `message` (over HTTP, a POST's body with the request's
    /// `parts`) if it can: the answer to write once it is ready. `None`
    /// leaves the message to rmcp. A client's cancellation of a laned call
    /// cancels it here (and is passed on to rmcp too, which knows nothing
    /// of the call and ignores it).
    pub(crate) fn take(
        self: &Arc<Self>,
        message: &Value,
        parts: Option<&http::request::Parts>,
    ) -> Option<Answer> {
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
        if self.session.is_http()
            && (!self.listening.load(Ordering::SeqCst)
                || self
                    .seen_by_rmcp
                    .lock()
                    .map_or(true, |seen| seen.elapsed() >= RMCP_SEES_EVERY))
        {
            return None;
        }
        // Over HTTP: the same path and token the session was bound to.
        let binding = self.session.bound_as(parts)?;
        // A second call under the id of one in flight is rmcp's to answer.
        if self.flying.lock().ok()?.contains_key(&id) {
            return None;
        }
        let (call, now) = self
            .session
            .forward_at_once(name, args, meta, &id, &info, binding)?;
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

/// The standalone GET stream of an HTTP session, marked open while this
/// is held (the stream's body was not yet dropped).
pub(crate) struct Listening(Arc<AtomicBool>);

impl Drop for Listening {
    fn drop(&mut self) {
        self.0.store(false, Ordering::SeqCst);
    }
}

/// One HTTP session as the lane knows it.
struct Entry {
    /// Once the session is initialized.
    lane: Option<Arc<Lane>>,
    /// Whether its standalone GET stream is open (known before the lane:
    /// a client may open it before its `initialized` was handled).
    listening: Arc<AtomicBool>,
}

impl Entry {
    fn ended(&self) -> bool {
        match &self.lane {
            Some(lane) => lane.closed(),
            None => !self.listening.load(Ordering::SeqCst),
        }
    }
}

/// The lanes of the HTTP sessions, by their `Mcp-Session-Id`.
#[derive(Default)]
pub(crate) struct HttpLanes(Mutex<HashMap<String, Entry>>);

impl HttpLanes {
    /// The session `id` is initialized: its requests may take the lane. A
    /// second `initialized` changes nothing. Sessions that ended are
    /// forgotten here.
    pub(crate) fn open(&self, id: &str, session: Session) {
        if let Ok(mut entries) = self.0.lock() {
            entries.retain(|_, entry| !entry.ended());
            let entry = entries.entry(id.to_owned()).or_insert_with(|| Entry {
                lane: None,
                listening: Arc::default(),
            });
            if entry.lane.is_none() {
                entry.lane = Some(Lane::with_listener(session, entry.listening.clone()));
            }
        }
    }

    /// The lane of session `id`, if it is open.
    pub(crate) fn get(&self, id: &str) -> Option<Arc<Lane>> {
        let entries = self.0.lock().ok()?;
        entries
            .get(id)?
            .lane
            .as_ref()
            .filter(|lane| !lane.closed())
            .cloned()
    }

    /// rmcp opened session `id`'s standalone GET stream: the guard marks it
    /// open until dropped. `None` when one is open already (rmcp sends to
    /// the first; this one only gets keep-alives).
    pub(crate) fn listen(&self, id: &str) -> Option<Listening> {
        let mut entries = self.0.lock().ok()?;
        let entry = entries.entry(id.to_owned()).or_insert_with(|| Entry {
            lane: None,
            listening: Arc::default(),
        });
        (!entry.listening.swap(true, Ordering::SeqCst)).then(|| Listening(entry.listening.clone()))
    }

    /// The session `id` was deleted by its client.
    pub(crate) fn close(&self, id: &str) {
        if let Ok(mut entries) = self.0.lock() {
            entries.remove(id);
        }
    }
}
