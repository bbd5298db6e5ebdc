"""A fake OpenAI-compatible provider on 127.0.0.1 for record-through tests; never a real one."""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import math
import socket
import ssl
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _Server(ThreadingHTTPServer):
    request_queue_size = 512  # the default backlog of 5 refuses connections in a burst of 300


class FakeUpstream:
    """Answers POST /v1/chat/completions, /v1/responses and /v1/messages (over TLS given a server
    context); `mode` is ok, error (echoes the key back), invalid, redirect (307 to itself), "hang up"
    (answers, then closes the connection without saying so), "stream error" (a stream ends in the
    API's error event instead of its last events), "cut short" (a stream stops before its last
    events, the connection closed as if all was said) or "down" (every call a 503). Through a proxy,
    `calls` shows the absolute URL it was asked for."""

    def __init__(self, delay: float = 0.0, tls: ssl.SSLContext | None = None):
        self.delay = delay
        self.mode = "ok"
        self.chunk_delay = 0.0  # > 0: a stream goes out chunk by chunk (chunked encoding), this far apart
        self.sent_at: list[float] = []  # time.monotonic() as each streamed chunk went out
        self.headers: dict[str, str] = {}  # response headers sent with every answer
        self.calls: list[dict[str, Any]] = []
        self.answered: list[bytes] = []  # the body of each answer, as sent
        self.numbered = False  # True: a chat answer ends with " #N", N its call's number (1 for the first)
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                # The mode this call came in under: a test may change it as soon as the answer is out.
                hang_up = fake.mode == "hang up"
                with fake._lock:
                    fake.calls.append(
                        {
                            "path": self.path,
                            "headers": dict(self.headers),
                            "body": body,
                            "peer": self.client_address,
                        }
                    )
                    if fake.numbered:  # the answer tells one call from the next
                        *before, last = body["messages"]
                        numbered = {**last, "content": f"{last['content']} #{len(fake.calls)}"}
                        body = {**body, "messages": [*before, numbered]}
                if fake.delay:
                    time.sleep(fake.delay)
                respond = fake.respond_responses if self.path.endswith("/responses") else fake.respond
                credential = self.headers.get("Authorization", "")
                if self.path.endswith("/messages"):
                    respond, credential = fake.respond_messages, self.headers.get("x-api-key", "")
                if self.path.endswith("/embeddings"):
                    respond = fake.respond_embeddings
                if ":" in self.path.rsplit("/", 1)[-1]:  # the Gemini API: /models/{model}:{method}
                    respond = functools.partial(fake.respond_gemini, path=self.path)
                    credential = self.headers.get("x-goog-api-key", "")
                if fake.mode == "rich":
                    respond = fake.respond_rich
                if fake.mode == "down":  # every API's call fails, as when the provider is down
                    respond = fake.respond_down
                status, content_type, data = respond(body, credential)
                fake.answered.append(data)
                if fake.chunk_delay and content_type == "text/event-stream":
                    self.send_response(status)
                    for name, value in fake.headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Transfer-Encoding", "chunked")
                    self.end_headers()
                    for event in data.split(b"\n\n")[:-1]:
                        piece = event + b"\n\n"
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                        self.wfile.flush()
                        fake.sent_at.append(time.monotonic())
                        time.sleep(fake.chunk_delay)
                    self.wfile.write(b"0\r\n\r\n")
                    return
                self.send_response(status)
                if status == 307:
                    self.send_header("Location", fake.url + "/chat/completions")
                for name, value in fake.headers.items():
                    self.send_header(name, value)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                if hang_up:  # as a provider closing an idle keep-alive connection would
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
        events = [*(f"data: {json.dumps(c)}\n\n" for c in chunks), "data: [DONE]\n\n"]
        # OpenAI's error mid-stream is a data line holding an error object; no [DONE] follows it.
        error = {"error": {"message": "overloaded", "type": "server_error", "param": None, "code": None}}
        return 200, "text/event-stream", self._ending(events, 3, f"data: {json.dumps(error)}\n\n")

    def respond_down(self, body: dict[str, Any], credential: str) -> tuple[int, str, bytes]:
        return 503, "application/json", json.dumps({"error": {"message": "The service is down."}}).encode()

    def _ending(self, events: list[str], last: int, error: str) -> bytes:
        """A stream's events as sent in this mode: whole, its `last` events cut off, or those replaced
        by `error` (the API's error event)."""
        if self.mode == "cut short":
            events = events[:-last]
        elif self.mode == "stream error":
            events = [*events[:-last], error]
        return "".join(events).encode()

    def respond_rich(self, body: dict[str, Any], authorization: str) -> tuple[int, str, bytes]:
        """A chat completion with every field OpenAI sends today, n choices, logprobs, and fields semula
        does not know (`message.reasoning_content`, `usage.cost`, a top-level `provider_trace`)."""
        n = body.get("n") or 1
        created, snapshot = 1764440000, body["model"] + "-2024-07-18"
        logprobs = {"content": [{"token": "Hi", "logprob": -0.01, "bytes": [72, 105], "top_logprobs": []}]}

        def message(i: int) -> dict[str, Any]:
            return {
                "role": "assistant",
                "content": f"Hi, choice {i}",
                "refusal": None,
                "annotations": [],
                "reasoning_content": f"thinking {i}",
            }

        usage = {
            "prompt_tokens": 11,
            "completion_tokens": 5,
            "total_tokens": 16,
            "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0},
            "cost": 0.00042,
        }
        if not body.get("stream"):
            completion = {
                "id": "chatcmpl-rich",
                "object": "chat.completion",
                "created": created,
                "model": snapshot,
                "choices": [
                    {
                        "index": i,
                        "message": message(i),
                        "logprobs": logprobs if body.get("logprobs") else None,
                        "finish_reason": "stop",
                    }
                    for i in range(n)
                ],
                "usage": usage,
                "service_tier": "default",
                "system_fingerprint": "fp_rich01",
                "provider_trace": {"region": "eu", "kept": True},
            }
            return 200, "application/json", json.dumps(completion).encode()
        base = {
            "id": "chatcmpl-richstream",
            "object": "chat.completion.chunk",
            "created": created,
            "model": snapshot,
        }
        base |= {"service_tier": "default", "system_fingerprint": "fp_rich01"}
        words = ["Once", " upon", " a", " time", "."]
        chunks = [
            {
                **base,
                "choices": [
                    {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
                ],
            }
        ]
        chunks += [
            {**base, "choices": [{"index": 0, "delta": {"content": w}, "finish_reason": None}]} for w in words
        ]
        chunks.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        if (body.get("stream_options") or {}).get("include_usage"):
            chunks = [{**c, "usage": None} for c in chunks] + [{**base, "choices": [], "usage": usage}]
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
        sent = [
            f"event: {e['type']}\ndata: {json.dumps({**e, 'sequence_number': n})}\n\n"
            for n, e in enumerate(events)
        ]
        error = {"type": "error", "code": "server_error", "message": "overloaded", "param": None}
        return 200, "text/event-stream", self._ending(sent, 1, f"event: error\ndata: {json.dumps(error)}\n\n")

    def respond_gemini(self, body: dict[str, Any], key: str, path: str) -> tuple[int, str, bytes]:
        """The Gemini API's :generateContent (JSON), :streamGenerateContent?alt=sse (data: chunks with
        CRLF) and :batchEmbedContents, the path telling which; a fixed model version."""
        if self.mode == "error":
            error = {
                "error": {"code": 400, "message": f"API key not valid: {key}", "status": "INVALID_ARGUMENT"}
            }
            return 400, "application/json", json.dumps(error).encode()
        if ":batchEmbedContents" in path:
            embeddings = [{"values": [0.25, -0.5, float(i)]} for i in range(len(body["requests"]))]
            return 200, "application/json", json.dumps({"embeddings": embeddings}).encode()
        text = f"upstream says: {body['contents'][-1]['parts'][0]['text']}"
        usage = {"promptTokenCount": 12, "candidatesTokenCount": 6, "totalTokenCount": 18}
        base = {"modelVersion": "gemini-2.5-flash-001", "responseId": "upstream-id"}
        if ":streamGenerateContent" not in path:
            candidate = {"content": {"parts": [{"text": text}], "role": "model"}, "finishReason": "STOP"}
            answer = {**base, "candidates": [candidate], "usageMetadata": usage, "providerExtra": 1}
            return 200, "application/json", json.dumps(answer).encode()
        chunks = [
            {**base, "candidates": [{"content": {"parts": [{"text": text[:9]}], "role": "model"}}]},
            {
                **base,
                "candidates": [
                    {"content": {"parts": [{"text": text[9:]}], "role": "model"}, "finishReason": "STOP"}
                ],
                "usageMetadata": usage,
            },
        ]
        sent = [f"data: {json.dumps(c)}\r\n\r\n" for c in chunks]
        error = {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}
        return 200, "text/event-stream", self._ending(sent, 1, f"data: {json.dumps(error)}\r\n\r\n")

    def respond_embeddings(self, body: dict[str, Any], authorization: str) -> tuple[int, str, bytes]:
        """POST /v1/embeddings: bag-of-words vectors (texts that share words are close), as floats or
        base64 float32 as asked, written out by hand (not with semula's own code)."""
        items = body["input"]
        items = [items] if isinstance(items, str) or isinstance(items[0], int) else items
        size = body.get("dimensions") or 1536
        data = []
        for index, item in enumerate(items):
            words = item.lower().split() if isinstance(item, str) else [str(t) for t in item]
            vector = [0.0] * size
            for word in words:
                digest = hashlib.sha256(word.strip(".,?!").encode()).digest()
                for k in range(8):  # each word lights up 8 positions, with a sign
                    position = int.from_bytes(digest[3 * k : 3 * k + 3], "little") % size
                    vector[position] += 1.0 if digest[24 + k] & 1 else -1.0
            norm = math.sqrt(sum(x * x for x in vector)) or 1.0
            vector = [x / norm for x in vector]
            embedding: Any = vector
            if body.get("encoding_format") == "base64":
                embedding = base64.b64encode(struct.pack(f"<{size}f", *vector)).decode()
            data.append({"object": "embedding", "index": index, "embedding": embedding})
        tokens = sum(len(str(item).split()) for item in items)
        response = {
            "object": "list",
            "data": data,
            "model": body["model"],
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }
        return 200, "application/json", json.dumps(response).encode()

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
        sent = [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events]
        # The API's error event mid-stream, as when it is overloaded.
        error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
        return 200, "text/event-stream", self._ending(sent, 2, f"event: error\ndata: {json.dumps(error)}\n\n")

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
