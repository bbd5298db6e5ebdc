"""Embedding vectors: float32 base64 as the Embeddings API encodes them, and synthetic vectors (pure, no I/O).

A vector is stored as base64 of little-endian float32, exactly as the API sends it for
`encoding_format: "base64"`: compact in entries and bundles, and the same numbers the SDK decodes.
Synthetic vectors are a pure function of (model, dimensions, text): a seed of SHA-256, SHAKE-256
as the stream of bits, approximately normal deviates from integer sums, normalised. Only integer
arithmetic, division and square roots are involved, all exact in IEEE 754, so the same text gives
the same bytes on every machine (docs/decisions/0035-embeddings.md).
"""

from __future__ import annotations

import base64
import hashlib
import math
import struct
from collections.abc import Sequence

# Each deviate is a sum of this many 16-bit uniforms, centred: close enough to normal for directions
# spread evenly over the sphere, and exact arithmetic.
_TERMS = 4
_CENTRE = _TERMS * 65535 / 2


def encode(vector: Sequence[float]) -> str:
    """A vector as base64 of little-endian float32 (what the API sends for encoding_format base64)."""
    return base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")


def decode(text: str) -> list[float]:
    """The floats of a base64 float32 vector (each the float32 value, as the SDK decodes them)."""
    raw = base64.b64decode(text, validate=True)
    if len(raw) % 4:
        raise ValueError("base64 of float32 is a multiple of 4 bytes")
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


def length(text: str) -> int:
    """How many numbers a base64 float32 vector holds, without decoding it."""
    padding = text.count("=", len(text) - 2)
    return (len(text) * 3 // 4 - padding) // 4


def synthetic(model: str, text: str, dimensions: int) -> list[float]:
    """A deterministic unit vector for (model, text, dimensions); different texts, different vectors."""
    seed = hashlib.sha256(f"semula-synthetic\0{model}\0{dimensions}\0{text}".encode("utf-8", "surrogatepass"))
    raw = hashlib.shake_256(seed.digest()).digest(2 * _TERMS * dimensions)
    uniforms = struct.unpack(f"<{_TERMS * dimensions}H", raw)
    deviates = [sum(uniforms[i : i + _TERMS]) - _CENTRE for i in range(0, len(uniforms), _TERMS)]
    norm = math.sqrt(math.fsum(x * x for x in deviates)) or 1.0
    return [x / norm for x in deviates]
