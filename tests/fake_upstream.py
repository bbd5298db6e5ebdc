"""A fake OpenAI-compatible provider on 127.0.0.1 for record-through tests; never a real one."""

from __future__ import annotations

import json
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _Server(ThreadingHTTPServer):
    request_queue_size = 512  # the default backlog of 5 refuses connections in a burst of 300


class FakeUpstream:
    """Answers POST /v1/chat/completions, /v1/responses and /v1/messages (over TLS given a server
    context); `mode` is ok, error (echoes the key back), invalid, redirect (307 to itself) or "hang up"
    (answers, then closes the connection without saying so). Through a proxy, `calls` shows the
    absolute URL it was asked for."""

    def __init__(self, delay: float = 0.0, tls: ssl.SSLContext | None = None):
        self.delay = delay
        self.mode = "ok"
        self.calls: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with fake._lock:
                    fake.calls.append(
                        {
                            "path": self.path,
                            "headers": dict(self.headers),
                            "body": body,
                            "peer": self.client_address,
                        }
                    )
                if fake.delay:
                    time.sleep(fake.delay)
                if self.path.endswith("/messages"):
                    status, content_type, data = fake.respond_messages(
                        body, self.headers.get("x-api-key", "")
                    )
                else:
                    respond = fake.respond_responses if self.path.endswith("/responses") else fake.respond
                    status, content_type, data = respond(body, self.headers.get("Authorization", ""))
                self.send_response(status)
                if status == 307:
                    self.send_header("Location", fake.url + "/chat/completions")
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                if fake.mode == "hang up":  # as a provider closing an idle keep-alive connection would
                    self.wfile.flush()
                    self.request.shutdown(socket.SHUT_WR)  # the FIN follows the answer at once
                    self.close_connection = True

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        if tls is not None:
            self.server.socket = tls.wrap_socket(self.server.socket, server_side=True)
        scheme = "https" if tls is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}/v1"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def respond(self, body: dict[str, Any], authorization: str) -> tuple[int, str, bytes]:
        if self.mode == "error":
            error = {
                "error": {"message": f"Incorrect API key provided: {authorization[7:]}", "code": "bad_key"}
            }
            return 401, "application/json", json.dumps(error).encode()
        if self.mode == "redirect":
            return 307, "application/json", b"{}"
        text = f"upstream says: {body['messages'][-1]['content']}"
        message: dict[str, Any] = {"role": "assistant", "content": text}
        finish = "stop"
        if self.mode == "invalid":
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "no_such_tool", "arguments": "{}"},
                    }
                ],
            }
            finish = "tool_calls"
        usage = {"prompt_tokens": 20, "completion_tokens": 10, "total_tokens": 30}
        base = {"id": "chatcmpl-upstream", "created": 1, "model": body["model"]}
        if not body.get("stream"):
            completion = {
                **base,
                "object": "chat.completion",
                "usage": usage,
                "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
            }
            return 200, "application/json", json.dumps(completion).encode()
        chunk = {**base, "object": "chat.completion.chunk"}
        chunks = [
            {
                **chunk,
                "choices": [
                    {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
                ],
            },
            {**chunk, "choices": [{"index": 0, "delta": {"content": text[:8]}, "finish_reason": None}]},
            {**chunk, "choices": [{"index": 0, "delta": {"content": text[8:]}, "finish_reason": None}]},
            {**chunk, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
        ]
        if (body.get("stream_options") or {}).get("include_usage"):
            chunks.append({**chunk, "choices": [], "usage": usage})
        data = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        return 200, "text/event-stream", data.encode()

    def respond_responses(self, body: dict[str, Any], authorization: str) -> tuple[int, str, bytes]:
        """POST /v1/responses as the API answers it, written out by hand (not with semula's own code)."""
        if self.mode == "error":
            error = {
                "error": {"message": f"Incorrect API key provided: {authorization[7:]}", "code": "bad_key"}
            }
            return 401, "application/json", json.dumps(error).encode()
        items = body["input"]
        text = f"upstream says: {items if isinstance(items, str) else items[-1].get('content')}"
        part = {"type": "output_text", "text": text, "annotations": [], "logprobs": []}
        message = {
            "id": "msg_up1",
            "type": "message",
            "status": "completed",
            "role": "assistant",
            "content": [part],
        }
        response = {
            "id": f"resp_upstream{len(self.calls)}",
            "object": "response",
            "created_at": 1,
            "status": "completed",
            "model": body["model"] + "-2025-04-14",
            "output": [message],
            "usage": {"input_tokens": 12, "output_tokens": 6, "total_tokens": 18},
            "service_tier": "default",
            "provider_extra": {"kept": True},
        }
        if not body.get("stream"):
            return 200, "application/json", json.dumps(response).encode()
        opening = {**response, "status": "in_progress", "output": [], "usage": None}
        events = [
            {"type": "response.created", "response": opening},
            {"type": "response.in_progress", "response": opening},
            {"type": "response.output_item.added", "output_index": 0, "item": {**message, "content": []}},
            {
                "type": "response.content_part.added",
                "item_id": "msg_up1",
                "output_index": 0,
                "content_index": 0,
                "part": {**part, "text": ""},
            },
            {
                "type": "response.output_text.delta",
                "item_id": "msg_up1",
                "output_index": 0,
                "content_index": 0,
                "delta": text[:8],
                "logprobs": [],
            },
            {
                "type": "response.output_text.delta",
                "item_id": "msg_up1",
                "output_index": 0,
                "content_index": 0,
                "delta": text[8:],
                "logprobs": [],
            },
            {
                "type": "response.output_text.done",
                "item_id": "msg_up1",
                "output_index": 0,
                "content_index": 0,
                "text": text,
                "logprobs": [],
            },
            {
                "type": "response.content_part.done",
                "item_id": "msg_up1",
                "output_index": 0,
                "content_index": 0,
                "part": part,
            },
            {"type": "response.output_item.done", "output_index": 0, "item": message},
            {"type": "response.completed", "response": response},
        ]
        data = "".join(
            f"event: {e['type']}\ndata: {json.dumps({**e, 'sequence_number': n})}\n\n"
            for n, e in enumerate(events)
        )
        return 200, "text/event-stream", data.encode()

    def respond_messages(self, body: dict[str, Any], api_key: str) -> tuple[int, str, bytes]:
        """POST /v1/messages as Anthropic answers it, written out by hand (not with semula's own code)."""
        if self.mode == "error":
            error = {
                "type": "error",
                "error": {"type": "authentication_error", "message": f"bad key {api_key}"},
            }
            return 401, "application/json", json.dumps(error).encode()
        last = body["messages"][-1]["content"]
        text = f"upstream says: {last if isinstance(last, str) else last[-1].get('text')}"
        usage = {
            "input_tokens": 14,
            "output_tokens": 7,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }
        message = {
            "id": f"msg_upstream{len(self.calls)}",
            "type": "message",
            "role": "assistant",
            "model": body["model"] + "-20250929",
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": usage,
            "provider_extra": {"kept": True},
        }
        if not body.get("stream"):
            return 200, "application/json", json.dumps(message).encode()
        events = [
            {
                "type": "message_start",
                "message": {
                    **message,
                    "content": [],
                    "stop_reason": None,
                    "usage": {**usage, "output_tokens": 1},
                },
            },
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            {"type": "ping"},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text[:8]}},
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text[8:]}},
            {"type": "content_block_stop", "index": 0},
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 7},
            },
            {"type": "message_stop"},
        ]
        data = "".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events)
        return 200, "text/event-stream", data.encode()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
