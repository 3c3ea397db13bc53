"""One live LLM call turned into a cassette call while it streams through the recording proxy."""

from __future__ import annotations

import json
from typing import Any

from wt_otel.contracts.cassette import split_model
from wt_otel.replay.cassette import http_status

MAX_RAW_CHUNKS = 10_000  # raw_payload.stream_chunks beyond this are dropped (and said so): memory stays bounded


def wire_arguments(raw: Any) -> str:
    """Arguments in the cassette's wire shape (a JSON object string); non-objects wrapped, never dropped."""
    if isinstance(raw, dict):
        return json.dumps(raw)
    if raw in (None, ""):
        return "{}"
    try:
        decoded = json.loads(raw)
    except (TypeError, ValueError):
        decoded = None
    return raw if isinstance(decoded, dict) else json.dumps({"_raw_arguments": raw})


class CallRecording:
    """Frames coalesced by `tick_ms` (the spec's record_tick_ms): whatever arrives within one tick of
    a frame's start joins it; the first frame's delta_ms is the time to the first chunk (ttfb)."""

    def __init__(self, chat: dict[str, Any], provider: str, tick_ms: float, stream: bool) -> None:
        self.chat, self.provider, self.tick_ms, self.stream = chat, provider, tick_ms, stream
        self.frames: list[dict[str, Any]] = []
        self._frame_at = 0.0  # ms (since the request) when the current frame started
        self.ttfb_ms: float | None = None
        self.finish_reason: str | None = None
        self.usage: dict[str, int] = {}
        self.error: tuple[str, str] | None = None
        self.raw_sync: dict[str, Any] | None = None
        self.raw_chunks: list[dict[str, Any]] = []
        self.raw_dropped = 0

    def chunk_seen(self, t_ms: float, raw: dict[str, Any] | None = None) -> None:
        if self.ttfb_ms is None:
            self.ttfb_ms = t_ms
        if raw is not None:
            if len(self.raw_chunks) < MAX_RAW_CHUNKS:
                self.raw_chunks.append(raw)
            else:
                self.raw_dropped += 1

    def _frame(self, t_ms: float) -> dict[str, Any]:
        if not self.frames or (self.stream and t_ms - self._frame_at >= self.tick_ms):
            delta = t_ms - self._frame_at if self.frames else (self.ttfb_ms or t_ms)
            self.frames.append({"delta_ms": round(max(delta, 0.0), 3) if self.stream else 0.0, "chunk": "",
                                "tool_calls": []})
            self._frame_at = t_ms
        return self.frames[-1]

    def text(self, t_ms: float, chunk: str) -> None:
        if chunk:
            self._frame(t_ms)["chunk"] += chunk

    def tool_call(self, t_ms: float, call_id: str, name: str, arguments: Any) -> None:
        self._frame(t_ms)["tool_calls"].append({"id": call_id or f"call_{len(self.frames)}", "type": "function",
                                                "function": {"name": name, "arguments": wire_arguments(arguments)}})

    def failed(self, status: int, body: Any) -> None:
        error = body.get("error") if isinstance(body, dict) else None
        kind = error.get("type") if isinstance(error, dict) else None
        message = error.get("message") if isinstance(error, dict) else None
        name = kind if isinstance(kind, str) and http_status(kind)[0] == status else str(status)
        self.error = (name, str(message or body)[:2000])

    def result(self, total_ms: float) -> dict[str, Any]:
        if self.frames or not self.error:
            last = self._frame(total_ms) if not self.frames else self.frames[-1]
            earlier = [c for f in self.frames[:-1] for c in f["tool_calls"]]
            if earlier:  # §2.2: the terminal frame carries every tool call, in call order
                last["tool_calls"] = earlier + last["tool_calls"]
                for frame in self.frames[:-1]:
                    frame["tool_calls"] = []
            has_calls = any(f["tool_calls"] for f in self.frames)
            last["finish_reason"] = "tool_calls" if has_calls else (self.finish_reason or "stop")
        prompt, completion = self.usage.get("prompt_tokens", 0), self.usage.get("completion_tokens", 0)
        model = self.chat.get("model")
        model, provider = split_model(model if isinstance(model, str) else None, self.provider)
        call: dict[str, Any] = {
            "request_context": {"model": model, "provider": provider,
                                "messages": self.chat.get("messages") or [],
                                "parameters": {"stream": self.stream}},
            "network_metrics": {"ttfb_ms": round(self.ttfb_ms if self.stream and self.ttfb_ms is not None
                                                 else total_ms, 3),
                                "total_duration_ms": round(total_ms, 3)},
            "response_timeline": self.frames,
            "exception_boundary": ({"occurred": True, "error_type": self.error[0], "message": self.error[1]}
                                   if self.error else {"occurred": False}),
            "usage": {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
        }
        if self.chat.get("tools"):
            call["request_context"]["tools"] = self.chat["tools"]
        raw: dict[str, Any] = {}
        if self.raw_sync is not None:
            raw["sync_response"] = self.raw_sync
        if self.raw_chunks:
            raw["stream_chunks"] = self.raw_chunks
        if raw:
            call["raw_payload"] = raw
        if self.raw_dropped:
            call["raw_chunks_dropped"] = self.raw_dropped
        return call
