"""Sealing of secrets at rest (runplane/sealing.py): AES-256-GCM, fresh nonce, aad-bound."""

from __future__ import annotations

import base64

import pytest

from runplane.sealing import NONCE_BYTES, TAG_BYTES, Sealer, SealError

KEY = bytes(range(32))
OTHER_KEY = bytes(range(1, 33))
SECRET = "whsec_s3cr3t-value"


def _decode(sealed: str) -> bytes:
    body = sealed.removeprefix("v1.")
    return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))


def _encode(payload: bytes) -> str:
    return "v1." + base64.urlsafe_b64encode(payload).rstrip(b"=").decode("ascii")


def test_round_trip() -> None:
    sealer = Sealer(KEY)
    for plaintext in [SECRET, "", "ünïcødé ✓", "x" * 10_000]:
        sealed = sealer.seal(plaintext, aad="whk_1")
        assert sealed.startswith("v1.")
        assert sealed.isascii()
        assert "=" not in sealed
        assert len(_decode(sealed)) == NONCE_BYTES + len(plaintext.encode()) + TAG_BYTES
        assert sealer.open(sealed, aad="whk_1") == plaintext


def test_another_sealer_with_the_same_key_opens_it() -> None:
    sealed = Sealer(KEY).seal(SECRET, aad="whk_1")
    assert Sealer(KEY).open(sealed, aad="whk_1") == SECRET


def test_each_seal_uses_a_fresh_nonce() -> None:
    sealer = Sealer(KEY)
    first = sealer.seal(SECRET, aad="whk_1")
    second = sealer.seal(SECRET, aad="whk_1")
    assert first != second
    assert _decode(first)[:NONCE_BYTES] != _decode(second)[:NONCE_BYTES]
    assert sealer.open(first, aad="whk_1") == SECRET
    assert sealer.open(second, aad="whk_1") == SECRET


def test_wrong_aad_does_not_open() -> None:
    sealer = Sealer(KEY)
    sealed = sealer.seal(SECRET, aad="whk_1")
    for aad in ["whk_2", "", "whk_1 ", "WHK_1"]:
        with pytest.raises(SealError, match="does not open"):
            sealer.open(sealed, aad=aad)


def test_wrong_key_does_not_open() -> None:
    sealed = Sealer(KEY).seal(SECRET, aad="whk_1")
    with pytest.raises(SealError, match="does not open"):
        Sealer(OTHER_KEY).open(sealed, aad="whk_1")
    with pytest.raises(SealError, match="does not open"):
        Sealer(KEY + b"\x00").open(sealed, aad="whk_1")


def test_flipping_any_byte_fails() -> None:
    sealer = Sealer(KEY)
    payload = _decode(sealer.seal("abc", aad="whk_1"))
    assert len(payload) == NONCE_BYTES + 3 + TAG_BYTES
    for position in range(len(payload)):
        for flip in (0x01, 0x80, 0xFF):
            tampered = bytearray(payload)
            tampered[position] ^= flip
            with pytest.raises(SealError, match="does not open"):
                sealer.open(_encode(bytes(tampered)), aad="whk_1")
    assert sealer.open(_encode(payload), aad="whk_1") == "abc"


def test_truncated_values_fail() -> None:
    sealer = Sealer(KEY)
    payload = _decode(sealer.seal("abc", aad="whk_1"))
    for length in range(len(payload)):
        with pytest.raises(SealError):
            sealer.open(_encode(payload[:length]), aad="whk_1")
    with pytest.raises(SealError, match="too short"):
        sealer.open("v1.", aad="whk_1")
    with pytest.raises(SealError, match="too short"):
        sealer.open(_encode(payload[: NONCE_BYTES + TAG_BYTES - 1]), aad="whk_1")


@pytest.mark.parametrize(
    "sealed",
    [
        "v1.!!!!",
        "v1.abc=",
        "v1.a",
        "v1.ab+/",
        "v1. " + "A" * 40,
        "v1.AAAA\n",
        "v1." + "A" * 39 + "é",
        "v1.AB",  # non-canonical: stray trailing bits
    ],
)
def test_garbage_is_refused(sealed: str) -> None:
    with pytest.raises(SealError, match="base64"):
        Sealer(KEY).open(sealed, aad="whk_1")


@pytest.mark.parametrize("sealed", ["", "v2.AAAA", "V1.AAAA", "v1", SECRET, "v0." + "A" * 40])
def test_unknown_version_is_refused(sealed: str) -> None:
    with pytest.raises(SealError, match="unknown version"):
        Sealer(KEY).open(sealed, aad="whk_1")


def test_messages_do_not_reveal_the_input() -> None:
    sealer = Sealer(KEY)
    with pytest.raises(SealError) as info:
        sealer.open(SECRET, aad="whk_1")
    assert SECRET not in str(info.value)
    sealed = sealer.seal(SECRET, aad="whk_1")
    with pytest.raises(SealError) as info:
        sealer.open(sealed, aad="whk_2")
    assert SECRET not in str(info.value)
    assert sealed[3:] not in str(info.value)
    assert KEY.hex() not in repr(sealer)


def test_sealed_text_does_not_contain_the_plaintext() -> None:
    sealer = Sealer(KEY)
    sealed = sealer.seal(SECRET, aad="whk_1")
    assert SECRET not in sealed
    assert SECRET.encode() not in _decode(sealed)
    assert base64.urlsafe_b64encode(SECRET.encode()).decode().rstrip("=")[:8] not in sealed


def test_short_key_material_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 32 bytes"):
        Sealer(b"\x01" * 31)
