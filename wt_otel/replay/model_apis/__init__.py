"""The model APIs a cassette answers, each a small translator around the provider-agnostic replay.

A cassette's canonical layer (`request_context.messages` in the chat shape,
`response_timeline` frames) does not depend on the provider that recorded it,
so any API can be served from any cassette: each module here turns its API's
request into the canonical chat request (`to_chat`) that `CassetteReplay`
matches, and renders the recorded call back in its own wire shape, JSON or SSE.
The server only routes (`API_ROUTES`); `serve_api` is the glue.

    /chat/completions   OpenAI Chat Completions (`openai_chat`)
    /responses          OpenAI Responses API (`openai_responses`; the OpenAI Agents SDK's default)
    /messages           Anthropic Messages (`anthropic_messages`)
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any, Protocol

from wt_otel.contracts.cassette import CassetteCall
from wt_otel.replay.model_apis import anthropic_messages, openai_chat, openai_responses

# (delay ms, event name or None, payload dict or raw data string)
StreamEvent = tuple[float, str | None, dict[str, Any] | str]


class ModelApi(Protocol):
    """One wire API over the canonical replay layer (a module satisfies it)."""

    NAME: str

    def to_chat(self, body: dict[str, Any]) -> dict[str, Any]:
        """The canonical chat request (model, messages, tools, stream); ValueError when malformed."""

    def render(self, call: CassetteCall, ids: str, created: int) -> dict[str, Any]:
        """The whole recorded answer as this API's JSON body."""

    def stream(self, call: CassetteCall, ids: str, created: int, body: dict[str, Any],
               error: dict[str, Any] | None) -> Iterator[StreamEvent]:
        """The recorded answer as this API's SSE events (ending with `error` when the call failed)."""

    def error_body(self, status: int, error: dict[str, Any]) -> dict[str, Any]:
        """An HTTP error body in this API's shape (the OpenAI-style `error` object as input)."""


API_ROUTES: dict[str, ModelApi] = {
    "/chat/completions": openai_chat,
    "/responses": openai_responses,
    "/messages": anthropic_messages,
}


def _send_json(handler: Any, status: int, payload: dict[str, Any], retry: bool = True) -> None:
    data = json.dumps(payload).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    if not retry:
        handler.send_header("x-should-retry", "false")
    handler.end_headers()
    handler.wfile.write(data)


def _send_stream(handler: Any, events: Iterator[StreamEvent], pace: bool) -> None:
    """SSE over chunked transfer encoding, with `event:` lines where the API names its events."""
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.send_header("Cache-Control", "no-cache")
    handler.send_header("Transfer-Encoding", "chunked")
    handler.end_headers()
    try:
        for delay_ms, name, payload in events:
            if pace and delay_ms > 0:
                time.sleep(delay_ms / 1000)
            text = payload if isinstance(payload, str) else json.dumps(payload)
            data = ((f"event: {name}\n" if name else "") + f"data: {text}\n\n").encode()
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            handler.wfile.flush()
        handler.wfile.write(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):  # the client hung up: its business
        handler.close_connection = True


def serve_api(owner: Any, handler: Any, api: ModelApi, raw: bytes) -> None:
    """Answer one request of `api` from `owner` (a CassetteServer): translate, match, render."""
    try:
        try:
            body = json.loads(raw or b"{}")
        except RecursionError:
            raise ValueError("JSON nested too deeply") from None
        if not isinstance(body, dict):
            raise ValueError("the body must be a JSON object")
        chat = api.to_chat(body)
        reply = owner.replay.answer(chat)
    except (TypeError, ValueError, KeyError, AttributeError, RecursionError) as exc:
        # hostile or unknown shapes are the request's fault, said as such, never a traceback
        message = (f"invalid request body: {exc}" if isinstance(exc, ValueError) else
                   f"invalid request body: cannot match it against the cassette ({type(exc).__name__}: {exc})")
        _send_json(handler, 400, api.error_body(400, {"message": message, "type": "invalid_request_error",
                                                      "param": None, "code": "invalid_request"}), retry=False)
        return
    if owner.on_call and reply.entry:
        owner.on_call({**reply.entry, "api": api.NAME})
    call = reply.call
    if call is None or reply.status != 200:
        if call is not None and owner.pace:  # a recorded failure takes as long as it took
            time.sleep(_duration_ms(call) / 1000)
        _send_json(handler, reply.status, api.error_body(reply.status, reply.error or {}), retry=False)
        return
    ids = f"wt{owner.replay.run[:8]}{reply.recorded_index:04d}"
    created = int(time.time())
    if chat.get("stream"):
        _send_stream(handler, api.stream(call, ids, created, body, reply.error), owner.pace)
        return
    if owner.pace:  # a JSON answer arrives when the recorded call ended
        time.sleep(_duration_ms(call) / 1000)
    _send_json(handler, 200, api.render(call, ids, created))


def _duration_ms(call: CassetteCall) -> float:
    metrics = call.network_metrics
    return metrics.total_duration_ms if metrics and metrics.total_duration_ms else sum(
        f.delta_ms for f in call.response_timeline)


__all__ = ["API_ROUTES", "ModelApi", "StreamEvent", "serve_api"]
