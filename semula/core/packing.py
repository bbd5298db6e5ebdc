"""Kept answers packed small (pure, no I/O): deflate with a preset dictionary of what the answers of
every API semula speaks share, their members' names and framing.

A kept replay hit (semula/service/hits.py) holds its answer as the bytes it was sent as. Deflate alone
saves little on a short answer: it can only refer back to what it has already seen of that answer, and
a 1.2 KB completion spends a fifth of its bytes on names (`"finish_reason":`, `"completion_tokens":`)
met once each. The dictionary is what every answer could refer back to: with it a typical completion
packs to ~45% of its size (its prose to about half, its JSON to almost nothing), a stream's chunks to
a tenth. Unpacking costs ~4 µs for a 1.2 KB completion and ~30 µs at MAX_SIZE. The dictionary holds
no answer's content, only the APIs' own vocabulary, so answers that share more than that (the
benchmark's, which differ by a number) gain nothing extra from it.
"""

from __future__ import annotations

import zlib

MIN_SIZE = 256  # shorter answers are kept as they are
# Longer ones too: packing 16 KiB takes ~0.5 ms of the worker's event loop once, and every reply ~30 µs
# to unpack, where a long answer (an embeddings vector) costs its first sight milliseconds anyway.
MAX_SIZE = 16 * 1024
SAVES = 0.8  # an answer is kept packed only when that takes at most this share of its size
LEVEL = 6
# How much memory deflate's state takes (zlib's memLevel, 1-9). At 9 a pack of a 1.2 KB completion
# took 30-60 µs, most of it setting up that state, which a replay hit's second sight pays once; at 7
# it took 15 µs and packed every sample answer (completions, a stream's chunks, 8 KB of prose) to
# the same number of bytes (bench/RESULTS.md, session 14).
MEM_LEVEL = 7
_WBITS = -15  # raw deflate: no header or checksum (the bytes never leave the process)

# Most common last: deflate reaches nearer matches with shorter codes.
DICTIONARY = b"".join(
    (
        b'{"object":"list","data":[{"object":"embedding","index":0,"embedding":[0.0,-0.0',
        b'],"model":"text-embedding-3-small","usage":{"prompt_tokens":,"total_tokens":}}',
        b'{"id":"msg_01","type":"message","role":"assistant","model":"claude-',
        b'"content":[{"type":"text","text":"},{"type":"tool_use","id":"toolu_01","name":"","input":{}}],',
        b'"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":,"output_tokens":,',
        b'"cache_creation_input_tokens":0,"cache_read_input_tokens":0}}',
        b"event: message_start\ndata: ",
        b'event: content_block_delta\ndata: {"type":"content_block_delta","index":0,"delta":{"type":',
        b'"text_delta","text":"',
        b'event: message_stop\ndata: {"type":"message_stop"}\n\n',
        b'{"id":"resp_","object":"response","created_at":,"status":"completed","error":null,',
        b'"incomplete_details":null,"instructions":null,"model":"","output":[{"type":"function_call",',
        b'"id":"fc_","call_id":"call_","name":"","arguments":"{\\"',
        b'{"type":"message","id":"msg_","status":"completed","role":"assistant","content":[{"type":',
        b'"output_text","text":"","annotations":[]}]}],"parallel_tool_calls":true,',
        b'"previous_response_id":null,"reasoning":{"effort":null,"summary":null},"store":true,',
        b'"temperature":1.0,"text":{"format":{"type":"text"}},"tool_choice":"auto","tools":[],',
        b'"top_p":1.0,"truncation":"disabled","usage":{"input_tokens":,"input_tokens_details":',
        b'{"cached_tokens":0},"output_tokens":,"output_tokens_details":{"reasoning_tokens":0},',
        b'"total_tokens":},"user":null,"metadata":{}}',
        b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",',
        b'"sequence_number":,"item_id":"msg_","output_index":0,"content_index":0,"delta":"',
        b'data: {"id":"chatcmpl-","object":"chat.completion.chunk","created":,"model":"gpt-4o-mini",',
        b'"system_fingerprint":"fp_","choices":[{"index":0,"delta":{"role":"assistant","content":"',
        b'"},"logprobs":null,"finish_reason":null}]}\n\ndata: [DONE]\n\n',
        b'"tool_calls":[{"index":0,"id":"call_","type":"function","function":{"name":"","arguments":"{\\"',
        b'"prompt_tokens_details":{"cached_tokens":0,"audio_tokens":0},"completion_tokens_details":',
        b'{"reasoning_tokens":0,"audio_tokens":0,"accepted_prediction_tokens":0,',
        b'"rejected_prediction_tokens":0}},"service_tier":"default","system_fingerprint":"fp_"}',
        b'{"id":"chatcmpl-","object":"chat.completion","created":,"model":"gpt-4o-mini","choices":',
        b'[{"index":0,"message":{"role":"assistant","content":"The ","refusal":null,"annotations":[]},',
        b'"logprobs":null,"finish_reason":"stop"}],"usage":{"prompt_tokens":,"completion_tokens":,',
        b'"total_tokens":}',
    )
)


def pack(data: bytes) -> bytes | None:
    """`data` deflated against DICTIONARY, or None when that would not save enough to be worth it."""
    if not MIN_SIZE <= len(data) <= MAX_SIZE:
        return None
    packer = zlib.compressobj(LEVEL, zlib.DEFLATED, _WBITS, MEM_LEVEL, zlib.Z_DEFAULT_STRATEGY, DICTIONARY)
    packed = packer.compress(data) + packer.flush()
    return packed if len(packed) <= len(data) * SAVES else None


def unpack(packed: bytes) -> bytes:
    """The bytes pack() was given."""
    unpacker = zlib.decompressobj(_WBITS, DICTIONARY)
    return unpacker.decompress(packed) + unpacker.flush()
