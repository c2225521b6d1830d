#!/usr/bin/env python3
"""Interactive MCP client driver for airlock's real-client tests.

Built on the real Python `mcp` SDK (pinned in requirements.txt). A test spawns

    $AIRLOCK_TOOLS/venv/bin/python tests/mcp/client.py [options] --stdio -- CMD ARGS...
    $AIRLOCK_TOOLS/venv/bin/python tests/mcp/client.py [options] --http URL [--header 'K: V']...

writes one JSON command per line on stdin and reads exactly one JSON response
line per command on stdout (in command order, flushed). Logs go to stderr.
The session stays connected between commands. See tests/mcp/README.md for the
command reference.
"""

from __future__ import annotations

import argparse
import contextvars
import copy
import json
import logging
import os
import sys
import time
import traceback
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc
import mcp_types as types
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS
from pydantic import BaseModel

from mcp import Client, StdioServerParameters
from mcp.client.session import ClientRequestContext, ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

log = logging.getLogger("airlock-mcp-client")

# Protocol versions whose elicitation capability is a bare `{}` (form/url sub-capabilities came in 2025-11-25).
_PRE_FORM_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18")

# --------------------------------------------------------------------------- output

# Responses go to a private dup of the original stdout; fd 1 is then pointed at
# stderr so nothing else (library prints, warnings) can corrupt the protocol.
_OUT = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1)
os.dup2(2, 1)
sys.stdout = sys.stderr


def emit(obj: dict[str, Any]) -> None:
    _OUT.write(json.dumps(obj, separators=(",", ":"), default=str) + "\n")
    _OUT.flush()


def dump(model: Any) -> Any:
    """Pydantic model (or list/dict of them) -> plain JSON-able data, wire names, no None fields."""
    if model is None:
        return None
    if isinstance(model, BaseModel):
        return model.model_dump(by_alias=True, mode="json", exclude_none=True)
    if isinstance(model, list):
        return [dump(m) for m in model]
    if isinstance(model, dict):
        return {k: dump(v) for k, v in model.items()}
    return model


def error_text(exc: BaseException) -> str:
    # Unwrap single-exception groups (anyio task groups) to the real cause.
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


def error_response(exc: BaseException) -> dict[str, Any]:
    inner = exc
    while isinstance(inner, BaseExceptionGroup) and len(inner.exceptions) == 1:
        inner = inner.exceptions[0]
    resp: dict[str, Any] = {"ok": False, "error": error_text(exc)}
    if isinstance(inner, MCPError):
        resp["code"] = inner.code
        if inner.data is not None:
            resp["data"] = inner.data
    return resp


# --------------------------------------------------------------------------- per-call recording


@dataclass
class CallRecord:
    """What one tools/call observed while it was in flight."""

    elicitations: list[dict[str, Any]] = field(default_factory=list)
    progress: list[dict[str, Any]] = field(default_factory=list)
    wire: list[dict[str, Any]] | None = None  # raw request/result pairs (raw_rounds / wire)


# The call whose task is running (set inside the call's own task). Used to
# attribute MRTR input requests (dispatched in the caller's task) and raw wire
# traffic exactly. Legacy server->client elicitation requests arrive on the
# receive loop instead, so they are attributed to every call in flight.
_current_call: contextvars.ContextVar[CallRecord | None] = contextvars.ContextVar("current_call", default=None)


class Driver:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.client: Client | None = None
        self.connect_error: str | None = None
        self.elicit_answer: dict[str, Any] = {"action": "decline"}
        self.sampled: list[Any] = []
        self.roots: list[str] = list(args.root)
        self.elicit_delay: float = 0.0
        self.elicit_seq = 0
        self.elicitation_log: list[dict[str, Any]] = []
        self.in_flight: set[int] = set()
        self.records: dict[int, CallRecord] = {}
        self.tools_changed_count = 0
        self.tools_changed_seen = 0
        self.tools_changed_event: anyio.Event | None = None
        # Set at every notification received.
        self.notification_event: anyio.Event | None = None
        # Progress notifications seen by every call, and an event set at each.
        self.progress_count = 0
        self.progress_event: anyio.Event | None = None
        self.notifications: list[dict[str, Any]] = []
        self.async_calls: dict[str, dict[str, Any]] = {}
        self.tg: anyio.abc.TaskGroup | None = None
        self.listen_scope: anyio.CancelScope | None = None  # anyio objects are made inside run()

    # ---------------------------------------------------------------- SDK callbacks

    async def on_sample(self, ctx: ClientRequestContext, params: types.CreateMessageRequestParams) -> Any:
        # --sampling TEXT: every sampling request is answered with TEXT, and recorded.
        self.sampled.append(dump(params))
        return types.CreateMessageResult(
            role="assistant",
            content=types.TextContent(type="text", text=self.args.sampling),
            model="airlock-test-model",
            stop_reason="endTurn",
        )

    async def on_list_roots(self, ctx: ClientRequestContext) -> Any:
        # --root URI (repeatable): the roots, changed with the set_roots op.
        return types.ListRootsResult(roots=[types.Root(uri=uri) for uri in self.roots])

    async def on_elicit(self, ctx: ClientRequestContext, params: types.ElicitRequestParams) -> Any:
        entry: dict[str, Any] = {"mode": getattr(params, "mode", "form"), "message": params.message}
        if isinstance(params, types.ElicitRequestURLParams):
            entry["url"] = params.url
            entry["elicitationId"] = params.elicitation_id
        else:
            entry["requestedSchema"] = params.requested_schema
        entry["receivedAt"] = time.time()
        self.elicit_seq += 1
        entry["seq"] = self.elicit_seq
        self.elicitation_log.append(entry)
        own = _current_call.get()
        targets = [own] if own is not None else [self.records[i] for i in sorted(self.in_flight)]
        for rec in targets:
            rec.elicitations.append(entry)
        log.info("elicitation request: %s", json.dumps(entry, default=str))
        if self.args.elicitation == "none":
            entry["answer"] = None
            return types.ErrorData(code=types.INVALID_REQUEST, message="Elicitation not supported")
        if self.elicit_delay > 0:
            await anyio.sleep(self.elicit_delay)
        answer = copy.deepcopy(self.elicit_answer)
        entry["answer"] = answer
        return types.ElicitResult(action=answer["action"], content=answer.get("content"))

    async def on_message(self, message: Any) -> None:
        if isinstance(message, Exception):
            log.warning("transport exception: %s", error_text(message))
            self.notifications.append({"method": None, "error": error_text(message)})
            return
        data = dump(message)
        self.notifications.append(data if isinstance(data, dict) else {"raw": data})
        if self.notification_event is not None:
            self.notification_event.set()
        if isinstance(message, types.ToolListChangedNotification):
            self.tools_changed_count += 1
            if self.tools_changed_event is not None:
                self.tools_changed_event.set()

    # ---------------------------------------------------------------- connect

    def _patch_session(self, session: ClientSession) -> None:
        """Make the SDK session declare exactly the capabilities/version the options ask for."""
        mode = self.args.elicitation
        orig_build = session._build_capabilities  # pyright: ignore[reportPrivateUsage]

        def build_capabilities(version: str) -> types.ClientCapabilities:
            caps = orig_build(version)
            if mode == "none":
                caps.elicitation = None
            elif mode == "form" and version in _PRE_FORM_VERSIONS:
                # Before 2025-11-25 the capability had no sub-fields; `{}` means form.
                caps.elicitation = types.ElicitationCapability()
            elif mode == "form":
                caps.elicitation = types.ElicitationCapability(form=types.FormElicitationCapability())
            elif mode == "url":
                caps.elicitation = types.ElicitationCapability(url=types.UrlElicitationCapability())
            else:  # form+url: the SDK's own default when an elicitation callback is set
                caps.elicitation = types.ElicitationCapability(
                    form=types.FormElicitationCapability(), url=types.UrlElicitationCapability()
                )
            return caps

        session._build_capabilities = build_capabilities  # type: ignore[method-assign]

        version = self.args.protocol
        if version in HANDSHAKE_PROTOCOL_VERSIONS:
            # ClientSession.initialize() always offers LATEST_HANDSHAKE_VERSION; offer ours instead.
            async def initialize() -> types.InitializeResult:
                result = await session.send_request(
                    types.InitializeRequest(
                        params=types.InitializeRequestParams(
                            protocol_version=version,
                            capabilities=build_capabilities(version),
                            client_info=session._client_info,  # pyright: ignore[reportPrivateUsage]
                        )
                    ),
                    types.InitializeResult,
                )
                if result.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS:
                    raise RuntimeError(f"Unsupported protocol version from the server: {result.protocol_version}")
                session.adopt(result)
                await session.send_notification(types.InitializedNotification())
                return result

            session.initialize = initialize  # type: ignore[method-assign]

        # Record raw requests/results for calls that asked for it (raw_rounds / wire).
        dispatcher = session._dispatcher  # pyright: ignore[reportPrivateUsage]
        orig_send = dispatcher.send_raw_request

        async def send_raw_request(method: str, params: Any, opts: Any = None, **kw: Any) -> dict[str, Any]:
            rec = _current_call.get()
            if rec is None or rec.wire is None:
                return await orig_send(method, params, opts, **kw)
            entry: dict[str, Any] = {
                "method": method,
                "params": json.loads(json.dumps(params, default=str)),
                "headers": dict((opts or {}).get("headers") or {}),
            }
            rec.wire.append(entry)
            try:
                raw = await orig_send(method, params, opts, **kw)
            except MCPError as e:
                entry["error"] = dump(e.error)
                raise
            entry["result"] = json.loads(json.dumps(raw, default=str))
            return raw

        dispatcher.send_raw_request = send_raw_request  # type: ignore[method-assign]

    def _make_client(self, transport: Any) -> Client:
        driver = self
        version = self.args.protocol
        if version == "auto":
            mode = "auto"
        elif version in MODERN_PROTOCOL_VERSIONS:
            mode = version
        elif version in HANDSHAKE_PROTOCOL_VERSIONS:
            mode = "legacy"
        else:
            raise SystemExit(
                f"--protocol must be auto or one of {list(HANDSHAKE_PROTOCOL_VERSIONS + MODERN_PROTOCOL_VERSIONS)}"
            )

        class DriverClient(Client):
            async def _build_session(self, exit_stack: AsyncExitStack) -> ClientSession:
                session = await super()._build_session(exit_stack)
                driver._patch_session(session)
                return session

        return DriverClient(
            transport,
            mode=mode,
            elicitation_callback=self.on_elicit,
            sampling_callback=self.on_sample if self.args.sampling is not None else None,
            list_roots_callback=self.on_list_roots if self.args.root else None,
            message_handler=self.on_message,
            client_info=types.Implementation(name="airlock-test-client", version="0.1.0"),
            cache=None,  # every list/read must reach the server
            read_timeout_seconds=self.args.connect_timeout,  # reset to None once connected
            input_required_max_rounds=self.args.max_rounds,
        )

    async def connect(self, stack: AsyncExitStack) -> None:
        a = self.args
        if a.stdio:
            cmd = a.command
            transport: Any = StdioServerParameters(command=cmd[0], args=cmd[1:], env=dict(os.environ))
        else:
            headers: dict[str, str] = {}
            for h in a.header:
                k, sep, v = h.partition(":")
                if not sep:
                    raise SystemExit(f"--header must look like 'Name: value', got {h!r}")
                headers[k.strip()] = v.strip()
            http = await stack.enter_async_context(create_mcp_http_client(headers=headers))
            transport = streamable_http_client(a.http, http_client=http)
        client = self._make_client(transport)
        # No cancel scope may wrap entering the client (its task groups outlive this call),
        # so the connect timeout is the session read timeout during the handshake only.
        await stack.enter_async_context(client)
        client.session._session_read_timeout_seconds = None  # pyright: ignore[reportPrivateUsage]
        self.client = client
        log.info(
            "connected: protocol=%s server=%s",
            client.protocol_version,
            dump(client.server_info),
        )
        if a.listen:
            assert self.tg is not None
            ready = anyio.Event()
            self.tg.start_soon(self._listen_task, ready)
            await ready.wait()

    async def _listen_task(self, ready: anyio.Event) -> None:
        """Hold a subscriptions/listen stream open (2026-07-28); its events also reach on_message."""
        assert self.client is not None
        assert self.listen_scope is not None
        with self.listen_scope:
            try:
                async with self.client.listen(
                    tools_list_changed=True, prompts_list_changed=True, resources_list_changed=True
                ) as sub:
                    log.info("subscriptions/listen acknowledged: %s", dump(sub.honored))
                    ready.set()
                    async for event in sub:
                        log.info("listen event: %r", event)
                log.info("subscriptions/listen stream ended")
            except Exception as e:  # noqa: BLE001 - reported, the session stays usable
                log.warning("subscriptions/listen failed: %s", error_text(e))
            finally:
                ready.set()

    # ---------------------------------------------------------------- commands

    def _client(self) -> Client:
        if self.client is None:
            raise RuntimeError(f"not connected: {self.connect_error}")
        return self.client

    async def op_info(self, cmd: dict[str, Any]) -> dict[str, Any]:
        c = self._client()
        return {
            "ok": True,
            "protocolVersion": c.protocol_version,
            "serverInfo": dump(c.server_info),
            "capabilities": dump(c.server_capabilities),
            "instructions": c.instructions,
        }

    async def op_list_tools(self, cmd: dict[str, Any]) -> dict[str, Any]:
        c = self._client()
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            page = await c.list_tools(cursor=cursor)
            for t in page.tools:
                tools.append(
                    {
                        "name": t.name,
                        "title": t.title,
                        "description": t.description,
                        "inputSchema": t.input_schema,
                        "annotations": dump(t.annotations),
                        "outputSchema": t.output_schema,
                        "execution": dump(t.execution),
                        "_meta": t.meta,
                    }
                )
            cursor = page.next_cursor
            if not cursor:
                break
        return {"ok": True, "tools": tools}

    async def _call(self, cmd: dict[str, Any]) -> dict[str, Any]:
        c = self._client()
        name = cmd["tool"]
        args = cmd.get("args")
        timeout = cmd.get("timeout")
        raw_rounds = bool(cmd.get("raw_rounds"))
        rec = CallRecord(wire=[] if (raw_rounds or cmd.get("wire")) else None)
        _current_call.set(rec)
        key = id(rec)
        self.records[key] = rec
        self.in_flight.add(key)

        progress_cb = None
        if cmd.get("progress"):

            async def progress_cb(progress: float, total: float | None, message: str | None) -> None:
                rec.progress.append({"progress": progress, "total": total, "message": message})
                self.progress_count += 1
                if self.progress_event is not None:
                    self.progress_event.set()

        rounds: list[dict[str, Any]] | None = [] if raw_rounds else None
        try:
            if rounds is not None:
                result = await self._call_raw_rounds(name, args, timeout, progress_cb, rec, rounds)
            else:
                result = await c.call_tool(name, args, read_timeout_seconds=timeout, progress_callback=progress_cb)
        except Exception as e:  # noqa: BLE001 - report what the call observed along with the error
            resp = error_response(e)
            resp.update(elicitations=rec.elicitations, progress=rec.progress)
            if rounds is not None:
                resp["rounds"] = rounds
            if rec.wire is not None and cmd.get("wire"):
                resp["wire"] = rec.wire
            return resp
        finally:
            self.in_flight.discard(key)
            self.records.pop(key, None)
        resp: dict[str, Any] = {
            "ok": True,
            "isError": bool(result.is_error),
            "structuredContent": result.structured_content,
            "content": dump(list(result.content)),
            "_meta": result.meta,
            "elicitations": rec.elicitations,
            "progress": rec.progress,
        }
        if rounds is not None:
            resp["rounds"] = rounds
        if rec.wire is not None and cmd.get("wire"):
            resp["wire"] = rec.wire
        return resp

    async def _call_raw_rounds(
        self, name: str, args: Any, timeout: Any, progress_cb: Any, rec: CallRecord, rounds: list[dict[str, Any]]
    ) -> types.CallToolResult:
        """Drive the SEP-2322 input_required loop by hand, appending every round (as sent/received) to rounds."""
        session = self._client().session
        responses: types.InputResponses | None = None
        state: str | None = None
        for n in range(1, self.args.max_rounds + 2):
            assert rec.wire is not None
            mark = len(rec.wire)
            rnd: dict[str, Any] = {"round": n}
            rounds.append(rnd)
            try:
                result = await session.call_tool(
                    name,
                    args,
                    read_timeout_seconds=timeout,
                    progress_callback=progress_cb,
                    input_responses=responses,
                    request_state=state,
                    allow_input_required=True,
                )
            finally:
                # The wire record holds the params exactly as sent (with the SDK's _meta) and the
                # raw result (or JSON-RPC error), even when the SDK then rejected the result.
                sent = next((w for w in rec.wire[mark:] if w["method"] == "tools/call"), None)
                if sent is not None:
                    rnd.update(request=sent["params"], headers=sent["headers"])
                    rnd.update({k: sent[k] for k in ("result", "error") if k in sent})
            if not isinstance(result, types.InputRequiredResult):
                assert isinstance(result, types.CallToolResult)
                return result
            # Fulfil the embedded requests through the same callbacks the SDK driver uses.
            responses = {}
            for k, req in (result.input_requests or {}).items():
                ctx = ClientRequestContext(session=session, request_id=k, meta=req.params.meta if req.params else None)
                answer = await session.dispatch_input_request(ctx, req)
                if isinstance(answer, types.ErrorData):
                    rnd["inputError"] = dump(answer)
                    raise MCPError.from_error_data(answer)
                responses[k] = answer
            rnd["inputResponses"] = dump(responses)
            if not responses:
                responses = None
                await anyio.sleep(0.05)
            state = result.request_state
        raise RuntimeError(f"server returned input_required for more than {self.args.max_rounds} rounds")

    async def _call_once(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """Send exactly one tools/call, with the given requestState/inputResponses, and return its raw result."""
        session = self._client().session
        rec = CallRecord(wire=[])
        _current_call.set(rec)
        responses: types.InputResponses | None = None
        if cmd.get("input_responses") is not None:
            responses = {k: types.ElicitResult.model_validate(v) for k, v in cmd["input_responses"].items()}
        try:
            await session.call_tool(
                cmd["tool"],
                cmd.get("args"),
                read_timeout_seconds=cmd.get("timeout"),
                input_responses=responses,
                request_state=cmd.get("request_state"),
                allow_input_required=True,
            )
        except MCPError:
            pass  # the raw JSON-RPC error is in the wire record
        sent = [w for w in rec.wire if w["method"] == "tools/call"]
        if len(sent) != 1:
            raise RuntimeError(f"expected exactly one tools/call on the wire, saw {len(sent)}")
        resp: dict[str, Any] = {"ok": True, "request": sent[0]["params"]}
        resp.update({k: sent[0][k] for k in ("result", "error") if k in sent[0]})
        return resp

    async def op_call_once(self, cmd: dict[str, Any]) -> dict[str, Any]:
        return await _in_new_context(self._call_once, cmd)

    async def _set_level(self, cmd: dict[str, Any]) -> dict[str, Any]:
        rec = CallRecord(wire=[])
        _current_call.set(rec)
        await self._client().session.set_logging_level(cmd["level"])
        sent = [w for w in rec.wire if w["method"] == "logging/setLevel"]
        return {"ok": True, "result": sent[0].get("result") if sent else None}

    async def op_set_level(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """logging/setLevel; the raw result as received."""
        return await _in_new_context(self._set_level, cmd)

    async def op_complete(self, cmd: dict[str, Any]) -> dict[str, Any]:
        ref_data = cmd["ref"]
        ref: types.ResourceTemplateReference | types.PromptReference
        if ref_data.get("type") == "ref/prompt":
            ref = types.PromptReference.model_validate(ref_data)
        else:
            ref = types.ResourceTemplateReference.model_validate(ref_data)
        result = await self._client().session.complete(ref, cmd["argument"], cmd.get("context"))
        return {"ok": True, "completion": dump(result.completion)}

    async def op_call(self, cmd: dict[str, Any]) -> dict[str, Any]:
        # Run in a fresh context so _current_call does not leak between commands.
        return await _in_new_context(self._call, cmd)

    async def op_call_async(self, cmd: dict[str, Any]) -> dict[str, Any]:
        cid = str(cmd["id"])
        if cid in self.async_calls and not self.async_calls[cid]["done"].is_set():
            raise ValueError(f"call {cid!r} is still running")
        slot: dict[str, Any] = {"done": anyio.Event(), "result": None, "scope": anyio.CancelScope()}
        self.async_calls[cid] = slot

        async def runner() -> None:
            with slot["scope"]:
                try:
                    slot["result"] = await _in_new_context(self._call, cmd)
                except Exception as e:  # noqa: BLE001
                    slot["result"] = error_response(e)
            if slot["result"] is None:
                slot["result"] = {"ok": False, "error": "Cancelled: the call was cancelled by the driver"}
            slot["done"].set()

        assert self.tg is not None
        self.tg.start_soon(runner)
        return {"ok": True, "started": cid}

    async def op_await(self, cmd: dict[str, Any]) -> dict[str, Any]:
        cid = str(cmd["id"])
        slot = self.async_calls.get(cid)
        if slot is None:
            raise KeyError(f"no call_async with id {cid!r}")
        with anyio.move_on_after(cmd.get("timeout", 60)):
            await slot["done"].wait()
        if not slot["done"].is_set():
            raise TimeoutError(f"call {cid!r} still running")
        self.async_calls.pop(cid, None)
        return slot["result"]

    async def op_cancel(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """Cancel a call_async call; the SDK sends notifications/cancelled for the in-flight request."""
        cid = str(cmd["id"])
        slot = self.async_calls.get(cid)
        if slot is None:
            raise KeyError(f"no call_async with id {cid!r}")
        slot["scope"].cancel()
        return {"ok": True, "cancelled": cid}

    async def op_set_elicit(self, cmd: dict[str, Any]) -> dict[str, Any]:
        answer = cmd.get("answer") or {"action": "decline"}
        if answer.get("action") not in ("accept", "decline", "cancel"):
            raise ValueError("answer.action must be accept, decline or cancel")
        self.elicit_answer = answer
        self.elicit_delay = float(cmd.get("delay", 0) or 0)
        return {"ok": True}

    async def op_read_resource(self, cmd: dict[str, Any]) -> dict[str, Any]:
        result = await self._client().read_resource(cmd["uri"])
        return {"ok": True, "contents": dump(list(result.contents)), "_meta": result.meta}

    async def op_list_resources(self, cmd: dict[str, Any]) -> dict[str, Any]:
        c = self._client()
        resources: list[Any] = []
        cursor: str | None = None
        while True:
            page = await c.list_resources(cursor=cursor)
            resources.extend(dump(list(page.resources)))
            cursor = page.next_cursor
            if not cursor:
                break
        return {"ok": True, "resources": resources}

    async def op_list_resource_pages(self, cmd: dict[str, Any]) -> dict[str, Any]:
        # Every page's URIs, page by page (pagination as the server gives it).
        c = self._client()
        pages: list[list[str]] = []
        cursor: str | None = None
        while True:
            page = await c.list_resources(cursor=cursor)
            pages.append([str(r.uri) for r in page.resources])
            cursor = page.next_cursor
            if not cursor:
                break
        return {"ok": True, "pages": pages}

    async def op_list_templates(self, cmd: dict[str, Any]) -> dict[str, Any]:
        c = self._client()
        templates: list[Any] = []
        cursor: str | None = None
        while True:
            page = await c.list_resource_templates(cursor=cursor)
            templates.extend(dump(list(page.resource_templates)))
            cursor = page.next_cursor
            if not cursor:
                break
        return {"ok": True, "templates": templates}

    async def op_subscribe(self, cmd: dict[str, Any]) -> dict[str, Any]:
        await self._client().subscribe_resource(cmd["uri"])
        return {"ok": True}

    async def op_unsubscribe(self, cmd: dict[str, Any]) -> dict[str, Any]:
        await self._client().unsubscribe_resource(cmd["uri"])
        return {"ok": True}

    async def op_list_prompts(self, cmd: dict[str, Any]) -> dict[str, Any]:
        c = self._client()
        prompts: list[Any] = []
        cursor: str | None = None
        while True:
            page = await c.list_prompts(cursor=cursor)
            prompts.extend(dump(list(page.prompts)))
            cursor = page.next_cursor
            if not cursor:
                break
        return {"ok": True, "prompts": prompts}

    async def op_get_prompt(self, cmd: dict[str, Any]) -> dict[str, Any]:
        result = await self._client().get_prompt(cmd["name"], cmd.get("arguments"))
        return {"ok": True, "description": result.description, "messages": dump(list(result.messages))}

    async def op_sampled(self, cmd: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "sampled": self.sampled}

    async def op_set_roots(self, cmd: dict[str, Any]) -> dict[str, Any]:
        self.roots = list(cmd.get("roots") or [])
        await self._client().session.send_roots_list_changed()
        return {"ok": True}

    async def op_ping(self, cmd: dict[str, Any]) -> dict[str, Any]:
        await self._client().session.send_ping()
        return {"ok": True}

    async def op_wait_tools_changed(self, cmd: dict[str, Any]) -> dict[str, Any]:
        if self.tools_changed_count == self.tools_changed_seen:
            self.tools_changed_event = anyio.Event()
            with anyio.move_on_after(cmd.get("timeout", 10)):
                await self.tools_changed_event.wait()
        changed = self.tools_changed_count > self.tools_changed_seen
        self.tools_changed_seen = self.tools_changed_count
        return {"ok": True, "changed": changed}

    async def op_wait_progress(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """Wait until `count` progress notifications have come (over all calls)."""
        wanted = int(cmd.get("count", 1))
        with anyio.move_on_after(cmd.get("timeout", 30)):
            while self.progress_count < wanted:
                self.progress_event = anyio.Event()
                await self.progress_event.wait()
        if self.progress_count < wanted:
            raise TimeoutError(f"{self.progress_count} progress notifications, {wanted} awaited")
        return {"ok": True, "progress": self.progress_count}

    async def op_wait_notification(self, cmd: dict[str, Any]) -> dict[str, Any]:
        """Wait until a notification whose method is `method` is among those not yet taken."""
        method = cmd["method"]
        with anyio.move_on_after(cmd.get("timeout", 30)):
            while not any(n.get("method") == method for n in self.notifications):
                self.notification_event = anyio.Event()
                await self.notification_event.wait()
        found = any(n.get("method") == method for n in self.notifications)
        if not found:
            raise TimeoutError(f"no {method} notification came")
        return {"ok": True}

    async def op_notifications(self, cmd: dict[str, Any]) -> dict[str, Any]:
        out = list(self.notifications)
        if cmd.get("clear", True):
            self.notifications.clear()
        return {"ok": True, "notifications": out}

    async def op_elicitations(self, cmd: dict[str, Any]) -> dict[str, Any]:
        out = list(self.elicitation_log)
        if cmd.get("clear", True):
            self.elicitation_log.clear()
        return {"ok": True, "elicitations": out}

    OPS = {
        "info": op_info,
        "list_tools": op_list_tools,
        "call": op_call,
        "call_once": op_call_once,
        "call_async": op_call_async,
        "await": op_await,
        "cancel": op_cancel,
        "set_elicit": op_set_elicit,
        "set_level": op_set_level,
        "complete": op_complete,
        "read_resource": op_read_resource,
        "list_resources": op_list_resources,
        "list_prompts": op_list_prompts,
        "list_resource_pages": op_list_resource_pages,
        "list_templates": op_list_templates,
        "subscribe": op_subscribe,
        "unsubscribe": op_unsubscribe,
        "sampled": op_sampled,
        "set_roots": op_set_roots,
        "get_prompt": op_get_prompt,
        "ping": op_ping,
        "wait_tools_changed": op_wait_tools_changed,
        "notifications": op_notifications,
        "wait_progress": op_wait_progress,
        "wait_notification": op_wait_notification,
        "elicitations": op_elicitations,
    }

    # ---------------------------------------------------------------- main loop

    async def run(self) -> int:
        self.listen_scope = anyio.CancelScope()
        self.tools_changed_event = anyio.Event()
        async with anyio.create_task_group() as tg:
            self.tg = tg
            async with AsyncExitStack() as stack:
                try:
                    await self.connect(stack)
                except Exception as e:  # noqa: BLE001 - reported per command
                    self.connect_error = error_text(e)
                    log.error("connect failed: %s", self.connect_error)
                    log.debug("%s", traceback.format_exc())
                stdin = anyio.wrap_file(sys.stdin)
                explicit_close = False
                while True:
                    line = await stdin.readline()
                    if not line:
                        log.info("stdin closed; exiting")
                        break
                    line = line.strip()
                    if not line:
                        continue
                    try:
                        cmd = json.loads(line)
                        if not isinstance(cmd, dict):
                            raise ValueError("a command must be a JSON object")
                        op = cmd.get("op")
                        if op == "close":
                            explicit_close = True
                            break
                        handler = self.OPS.get(op)  # type: ignore[arg-type]
                        if handler is None:
                            raise ValueError(f"unknown op {op!r}")
                        if self.client is None and op not in ("set_elicit",):
                            raise ConnectionError(f"not connected: {self.connect_error}")
                        resp = await handler(self, cmd)
                    except Exception as e:  # noqa: BLE001 - reported, keep running
                        log.debug("command failed: %s", traceback.format_exc())
                        resp = error_response(e)
                    emit(resp)
                # close: cancel background work, then leave the session/transport. (No new
                # cancel scope may wrap stack.aclose(): the client's task groups were entered
                # outside it.)
                for slot in self.async_calls.values():
                    slot["scope"].cancel()
                if self.listen_scope is not None:
                    self.listen_scope.cancel()
                await stack.aclose()
            tg.cancel_scope.cancel()
        if explicit_close:
            emit({"ok": True, "closed": True})
        return 0


async def _in_new_context(fn: Any, *args: Any) -> Any:
    """Await fn(*args) in its own task, so contextvar changes (the call record) stay local to it."""
    box: dict[str, Any] = {}

    async def run() -> None:
        try:
            box["r"] = await fn(*args)
        except Exception as e:  # noqa: BLE001 - re-raised below, outside the task group
            box["e"] = e

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
    if "e" in box:
        raise box["e"]
    return box["r"]


def parse_args(argv: list[str]) -> argparse.Namespace:
    command: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, command = argv[:i], argv[i + 1 :]
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    g = p.add_mutually_exclusive_group(required=True)
    g.add_argument("--stdio", action="store_true", help="start the server given after -- over stdio")
    g.add_argument("--http", metavar="URL", help="connect over streamable HTTP")
    p.add_argument("--header", action="append", default=[], help="extra HTTP header 'Name: value' (repeatable)")
    p.add_argument(
        "--elicitation",
        choices=["none", "form", "url", "form+url"],
        default="form",
        help="elicitation capability to declare (default form); none declares nothing and refuses requests",
    )
    p.add_argument(
        "--protocol",
        default="2025-11-25",
        help="protocol version: a handshake version (initialize offers exactly it), 2026-07-28 "
        "(stateless, no handshake), or auto (server/discover probe, fall back to initialize)",
    )
    p.add_argument("--sampling", metavar="TEXT", help="declare sampling; answer every request with TEXT")
    p.add_argument("--root", action="append", default=[], help="declare roots; this URI is one (repeatable)")
    p.add_argument("--listen", action="store_true", help="2026-07-28: open subscriptions/listen for list changes")
    p.add_argument("--max-rounds", type=int, default=10, help="cap on input_required rounds per call")
    p.add_argument("--connect-timeout", type=float, default=30.0)
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging to stderr")
    a = p.parse_args(argv)
    a.command = command
    if a.stdio and not command:
        p.error("--stdio needs the server command after --")
    if a.http and command:
        p.error("a command after -- only makes sense with --stdio")
    return a


def main() -> int:
    args = parse_args(sys.argv[1:])
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="client.py %(levelname)s %(name)s: %(message)s",
    )
    if not args.verbose:
        logging.getLogger("httpx2").setLevel(logging.WARNING)
        logging.getLogger("httpcore2").setLevel(logging.WARNING)
    return anyio.run(Driver(args).run)


if __name__ == "__main__":
    sys.exit(main())
