"""Sealing of secrets at rest: AES-256-GCM under a key derived from the server's secret key.

A secret that the server must later use in clear (a webhook's signing secret, a git provider's
token) is stored *sealed*. The sealed text is::

    "v1." + base64url_without_padding(nonce || ciphertext || tag)

* ``nonce``: 12 random bytes (``os.urandom``), fresh for every ``seal``, so sealing the same
  secret twice gives two different texts;
* ``ciphertext || tag``: AES-256-GCM of the UTF-8 plaintext, with its 16-byte tag;
* the associated data is the caller's ``aad`` (UTF-8), typically the id of the row that holds
  the secret: it is authenticated but not stored, so a sealed value copied into another row (or
  another column, if the caller puts the column name in ``aad``) does not open.

The AES key is derived with HKDF-SHA256 (no salt, info ``b"runplane seal v1"``) from the key
material of ``RUNPLANE_SECRET_KEY`` (``settings.secret_key_bytes()``; generated into the data
directory when unset). The derivation keeps the sealing key separate from any other use of
the same secret key, and the ``v1.`` prefix leaves room to change the format (or rotate to a
differently derived key) later without guessing.

``Sealer.open`` raises ``SealError`` for anything that is not a value this key sealed for this
``aad``: an unknown version, bad base64, a truncated value, or a failed authentication (tampered,
wrong ``aad``, wrong key). Messages never include the plaintext, the key or the sealed input.
"""

from __future__ import annotations

import base64
import os
import re

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

VERSION_PREFIX = "v1."
MIN_KEY_MATERIAL_BYTES = 32
NONCE_BYTES = 12
TAG_BYTES = 16
_KEY_BYTES = 32
_HKDF_INFO = b"runplane seal v1"
_BASE64URL = re.compile(r"[A-Za-z0-9_-]*")


class SealError(Exception):
    """A sealed value cannot be opened; the message says why, without revealing any secret."""


class Sealer:
    """Seals and opens secrets with a key derived from the server's secret key material."""

    __slots__ = ("_aead",)

    def __init__(self, key_material: bytes) -> None:
        if len(key_material) < MIN_KEY_MATERIAL_BYTES:
            raise ValueError(f"key material must be at least {MIN_KEY_MATERIAL_BYTES} bytes")
        key = HKDF(algorithm=hashes.SHA256(), length=_KEY_BYTES, salt=None, info=_HKDF_INFO).derive(
            key_material
        )
        self._aead = AESGCM(key)

    def __repr__(self) -> str:
        return "Sealer(<key hidden>)"

    def seal(self, plaintext: str, *, aad: str) -> str:
        """Seal ``plaintext`` for ``aad``; the result is ASCII text safe to store anywhere."""
        nonce = os.urandom(NONCE_BYTES)
        sealed = self._aead.encrypt(nonce, plaintext.encode("utf-8"), aad.encode("utf-8"))
        return VERSION_PREFIX + _b64encode(nonce + sealed)

    def open(self, sealed: str, *, aad: str) -> str:
        """The plaintext of ``sealed``, which must have been sealed by this key for ``aad``."""
        if not sealed.startswith(VERSION_PREFIX):
            raise SealError(f"sealed value has an unknown version (expected {VERSION_PREFIX!r})")
        payload = _b64decode(sealed[len(VERSION_PREFIX) :])
        if len(payload) < NONCE_BYTES + TAG_BYTES:
            raise SealError("sealed value is too short (truncated?)")
        nonce, body = payload[:NONCE_BYTES], payload[NONCE_BYTES:]
        try:
            plaintext = self._aead.decrypt(nonce, body, aad.encode("utf-8"))
        except InvalidTag:
            raise SealError(
                "sealed value does not open: it was tampered with, sealed for another"
                " row (aad), or sealed with another secret key"
            ) from None
        try:
            return plaintext.decode("utf-8")
        except UnicodeDecodeError:  # authenticated, so only if something else sealed bytes
            raise SealError("sealed value does not hold UTF-8 text") from None


def _b64encode(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _b64decode(text: str) -> bytes:
    # Strict: the urlsafe alphabet only, no padding, and the canonical encoding (the standard
    # decoder silently skips foreign characters and ignores stray trailing bits).
    if not _BASE64URL.fullmatch(text) or len(text) % 4 == 1:
        raise SealError("sealed value is not valid base64url")
    data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    if _b64encode(data) != text:
        raise SealError("sealed value is not valid base64url")
    return data
