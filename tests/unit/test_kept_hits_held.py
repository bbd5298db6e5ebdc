"""A kept hit is held as one bytes object (semula.service.hits._encode): what goes in comes out."""

import string
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from semula.dialects import Request
from semula.service import hits

SHARED = hits.Shared(
    {"id": "prj_1", "name": "shop"}, "wsp_default", None, Request("gpt-4o", False), (), ("ident",), 1024, 7
)
HEX = "0123456789abcdef"
texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=300)
stamp_values = st.one_of(st.text(max_size=60), st.integers(-(2**63), 2**63 - 1), st.none(), st.booleans())


@settings(deadline=None)
@given(
    version=st.integers(-(2**63), 2**63 - 1),
    number=st.integers(0, 2**64 - 1),  # a Shared's number is never reused
    data=st.binary(max_size=2000),
    packed=st.booleans(),
    stamps=st.dictionaries(st.sampled_from(["id", "created", "created_at"]), stamp_values),
    fingerprint=st.one_of(
        st.builds(
            lambda v, h: f"{v}:{h}",
            st.text(string.ascii_letters + string.digits, max_size=8),
            st.text(HEX, min_size=64, max_size=64),
        ),
        texts,
    ),
    entry_id=texts,
    digest=st.one_of(st.none(), st.binary(min_size=32, max_size=32)),
)
def test_a_kept_hit_comes_back_as_it_went_in(
    version, number, data, packed, stamps, fingerprint, entry_id, digest
):
    held = hits._encode(version, number, data, packed, stamps, fingerprint, entry_id, digest)
    assert hits._HEAD.unpack_from(held)[:2] == (version, number)
    kept = hits._decode(held, SHARED)
    got = (kept.version, kept.data, kept.packed, kept.stamps, kept.fingerprint, kept.entry_id, kept.digest)
    assert got == (version, data, packed, stamps, fingerprint, entry_id, digest)
    assert kept.shared is SHARED


def test_a_fingerprint_is_held_as_its_digest_not_its_hex_digits():
    fingerprint = "v1:" + "ab" * 32
    short = hits._encode(1, 0, b"{}", False, {}, fingerprint, "ent_1", None)
    long = hits._encode(1, 0, b"{}", False, {}, fingerprint.upper(), "ent_1", None)  # not as hex() writes it
    assert (
        len(long) - len(short) == 64 + 1 - 32
        and hits._decode(long, SHARED).fingerprint == fingerprint.upper()
    )


def test_a_hit_with_a_text_past_64_kib_is_refused_not_cut():
    with pytest.raises(struct.error):
        hits._encode(1, 0, b"{}", False, {}, "v1:x", "e" * 70_000, None)
