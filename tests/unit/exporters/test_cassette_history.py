"""`ChatHistory` reuses the previous call's converted history and writes what `chat_messages` writes.

Why: agents resend the whole conversation per turn; converting it again for every call made a cassette
quadratic in its history. Reuse must never change a byte, so a message is reused only when its JSON
(type-strict) is the same.
"""

from __future__ import annotations

from typing import Any

from wt_otel.exporters.cassette import ChatHistory, chat_messages


def _user(text: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"type": "text", "content": text}]}


def _call(i: int, args: Any) -> dict[str, Any]:
    return {"role": "assistant", "parts": [{"type": "tool_call", "id": f"c{i}", "name": "f", "arguments": args}]}


def _result(i: int, response: Any) -> dict[str, Any]:
    return {"role": "tool", "parts": [{"type": "tool_call_response", "id": f"c{i}", "response": response}]}


def test_growing_history_is_converted_as_from_scratch() -> None:
    history = ChatHistory()
    system = [{"type": "text", "content": "be brief"}]
    messages: list[dict[str, Any]] = [_user("hi")]
    for i in range(6):
        copy = [{**m, "parts": [dict(p) for p in m["parts"]]} for m in messages]  # equal, not the same objects
        assert history.chat_messages(system, copy) == chat_messages(system, copy)
        messages += [_call(i, {"q": i}), _result(i, {"a": i})]


def test_a_changed_or_shorter_history_is_not_reused_wrongly() -> None:
    history = ChatHistory()
    first = [_user("hi"), _call(1, {"n": 1}), _result(1, 1.0)]
    assert history.chat_messages([], first) == chat_messages([], first)
    # equal as Python values (1 == True == 1.0), different as JSON: converted again, not reused
    changed = [_user("hi"), _call(1, {"n": True}), _result(1, 1), _user("more")]
    got = history.chat_messages([], changed)
    assert got == chat_messages([], changed)
    assert got[1]["tool_calls"][0]["function"]["arguments"] == '{"n":true}' and got[2]["content"] == "1"
    shorter = changed[:1]
    assert history.chat_messages([], shorter) == chat_messages([], shorter)
    odd = [_user("hi"), _call(2, {1: "non-str key"})]  # orjson refuses it: never reused, still converted
    assert history.chat_messages([], odd) == chat_messages([], odd)
    assert history.chat_messages([], odd) == chat_messages([], odd)
