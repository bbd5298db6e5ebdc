"""The benchmark's WebSocket client (bench/websocket.py) frames and reads as the server's protocol does."""

from __future__ import annotations

from websockets.protocol import State
from websockets.server import ServerProtocol

from bench import websocket as client
from semula.web import websocket


def test_a_masked_frame_is_one_text_message_to_the_servers_protocol():
    for size in (5, 125, 126, 65535, 65536):
        payload = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
        protocol = ServerProtocol(state=State.OPEN, max_size=None)
        protocol.receive_data(client.masked_frame(payload))
        [frame] = protocol.events_received()
        assert frame.fin and frame.data == payload


def test_a_reply_ends_at_the_completed_event_or_an_error_whatever_the_reads():
    events = [b'{"type":"response.created"}', b'{"type":"x","d":"' + b"y" * 70000 + b'"}']
    completed = b'{"type":"response.completed","response":{}}'
    data = bytearray(websocket.frames([*events, completed]))
    for cut in (1, 3, 200, len(data) - 1):  # read in two pieces: the walk resumes where it stopped
        at, done = client.reply_end(data[:cut], 0)
        assert done is None
        assert client.reply_end(data, at) == (len(data), True)
    failed = bytearray(websocket.frames([events[0], b'{"type":"error","status":424}']))
    assert client.reply_end(failed, 0) == (len(failed), False)
    assert (
        client.reply_text(bytes(websocket.frames([b'{"type":"response.output_text.delta","delta":"hi"}'])))
        == "hi"
    )
