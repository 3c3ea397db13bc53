"""The divergence diff names what a fix changed, in the words of the fix."""

from __future__ import annotations

from wt_otel.replay.cassette import request_key
from wt_otel.replay.request_diff import request_diff

TOOL = {"type": "function", "function": {"name": "client_lookup", "parameters": {"type": "object"}}}
OTHER = {"type": "function", "name": "send_email", "parameters": {"type": "object"}}  # Responses-API shape
BASE = [{"role": "system", "content": "You are the CRM assistant."}, {"role": "user", "content": "Email of Bluewing?"}]


def diff(old: list[dict], new: list[dict], old_tools=None, new_tools=None, model: str = "m") -> list[str]:
    return request_diff(request_key("m", old, old_tools), request_key(model, new, new_tools))


def test_system_prompt_change_is_a_line_diff():
    new = [{"role": "system", "content": "You are the CRM assistant.\nAlways give the phone."}, BASE[1]]
    assert diff(BASE, new) == ["system prompt changed:", "    + Always give the phone."]
    reworded = [{"role": "system", "content": "You are a pirate."}, BASE[1]]
    assert diff(BASE, reworded) == ["system prompt changed:", "    - You are the CRM assistant.",
                                    "    + You are a pirate."]


def test_message_n_and_tool_calls():
    old = BASE + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "client_lookup", "arguments": '{"query":"Bluewing"}'}}]}]
    new = BASE + [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "client_lookup", "arguments": '{"query":"Blue"}'}}]}]
    lines = diff(old, new)
    assert lines[0] == "message 2 (assistant) changed:"
    assert any('- tool call client_lookup({"query":"Bluewing"})' in line for line in lines)
    assert any('+ tool call client_lookup({"query":"Blue"})' in line for line in lines)


def test_tool_list_added_removed_and_changed_across_api_shapes():
    changed = {"type": "function", "function": {"name": "client_lookup", "parameters": {"type": "string"}}}
    assert diff(BASE, BASE, [TOOL], [changed, OTHER]) == [
        "tool list changed: + send_email; ~ client_lookup (description or parameters)"]
    flat = {"type": "function", "name": "client_lookup", "parameters": {"type": "object"}, "strict": True}
    assert request_key("m", BASE, [TOOL]) == request_key("m", BASE, [flat]), "one tool, whichever API declared it"


def test_extra_and_missing_messages_and_model():
    more = BASE + [{"role": "user", "content": "And its phone?"}]
    assert diff(BASE, more) == ["1 message(s) more than recorded, from message 2:", "    + user: And its phone?"]
    assert diff(more, BASE)[0] == "1 recorded message(s) missing, from message 2:"
    assert diff(BASE, BASE, model="gpt-5") == ["model changed: 'm' -> 'gpt-5'"]


def test_a_long_diff_is_cut_and_says_so():
    old = [{"role": "user", "content": "\n".join(f"line {i}" for i in range(100))}]
    lines = diff(old, [{"role": "user", "content": "other"}])
    assert len(lines) == 41 and lines[-1].startswith("... ") and lines[-1].endswith("more line(s)")


def test_a_change_at_the_end_of_a_long_prompt_stays_visible():
    """Lines are clipped to MAX_LINE around the first difference, not from the start (an appended
    sentence on a 160-character prompt would otherwise print as two identical clipped lines)."""
    from wt_otel.replay.request_diff import MAX_LINE, _text_diff

    old = "You are an operations assistant. " * 6
    new = old + "Quote phone numbers exactly."
    removed, added = _text_diff([old], [new])
    assert added.endswith("Quote phone numbers exactly.") and added.startswith("    + ...")
    assert removed.startswith("    - ...") and len(added) <= MAX_LINE + 6
    short_removed, short_added = _text_diff(["Be brief."], ["Be kind."])
    assert (short_removed, short_added) == ("    - Be brief.", "    + Be kind.")
