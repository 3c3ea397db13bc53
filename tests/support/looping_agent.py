"""A Contract C agent with the classic loop bug, run as its own process: it calls the model (the real
`openai` client) until the model stops asking for tools, and a model that always asks keeps it going.

    python tests/support/looping_agent.py MODEL_BASE_URL [--pause-after N] [--pause-s S]

Prints its URL on the first line of stdout. `--pause-after N`: after N model calls, sleep S seconds
before the next one (a run that is still under way when the test kills the recorder).
"""

from __future__ import annotations

import argparse
import json
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import openai

TOOLS = [{"type": "function", "function": {"name": "client_lookup", "description": "Look up a client.",
                                           "parameters": {"type": "object",
                                                          "properties": {"query": {"type": "string"}}}}}]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model_url")
    parser.add_argument("--pause-after", type=int, default=0)
    parser.add_argument("--pause-s", type=float, default=0.0)
    args = parser.parse_args()
    client = openai.OpenAI(base_url=args.model_url, api_key="sk-live")

    def turn(text: str) -> dict[str, Any]:
        messages: list[dict[str, Any]] = [{"role": "user", "content": text}]
        calls = 0
        try:
            while True:  # the bug: no cap on the number of model calls
                if args.pause_after and calls == args.pause_after:
                    time.sleep(args.pause_s)
                message = client.chat.completions.create(model="openai/gpt-4o-mini", messages=messages,
                                                         tools=TOOLS).choices[0].message
                calls += 1
                if not message.tool_calls:
                    return {"wt_inject": 1, "reply": message.content or "", "tool_calls": []}
                messages.append({"role": "assistant", "content": message.content, "tool_calls": [
                    {"id": c.id, "type": "function",
                     "function": {"name": c.function.name, "arguments": c.function.arguments}}
                    for c in message.tool_calls]})
                messages += [{"role": "tool", "tool_call_id": c.id, "content": "not found, try again"}
                             for c in message.tool_calls]
        except openai.APIError as exc:
            return {"wt_inject": 1, "reply": "", "tool_calls": [], "error": f"model failed after {calls} calls: {exc}"}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a: Any) -> None:
            pass

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            if self.path == "/wt/inject":
                answer = turn(body["text"])
            elif self.path == "/wt/reset":
                answer = {"wt_inject": 1}
            else:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            raw = json.dumps(answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(f"http://127.0.0.1:{server.server_address[1]}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
