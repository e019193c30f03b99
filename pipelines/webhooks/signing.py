"""The webhook signature: lowercase hex HMAC-SHA256 of the raw request body, keyed by the secret.

The body is signed as received, byte for byte: never re-serialise JSON before checking.
"""

from __future__ import annotations

import hashlib
import hmac
import re

HEADER = "X-T49-Webhook-Signature"

_HEX_DIGEST = re.compile(r"[0-9a-fA-F]{64}")


def check_secret(secret: str | bytes | None) -> bytes:
    """The secret as the HMAC key; ValueError (message meant for the user) when it is missing,
    empty or only whitespace, which would let anyone who guesses it sign deliveries."""
    if secret is None:
        raise ValueError("no webhook secret: pass --secret or set FREETIME_WEBHOOK_SECRET")
    key = secret.encode() if isinstance(secret, str) else secret
    if not key.strip():
        raise ValueError(
            "the webhook secret is empty or only whitespace: give the secret Terminal49 "
            "shows for the webhook (--secret or FREETIME_WEBHOOK_SECRET)"
        )
    return key


def sign(body: bytes, secret: str | bytes) -> str:
    """The signature the sender puts in ``X-T49-Webhook-Signature``."""
    key = secret.encode() if isinstance(secret, str) else secret
    return hmac.new(key, body, hashlib.sha256).hexdigest()


def well_formed(signature: str | None) -> bool:
    """True when ``signature`` could be a signature at all (64 hex digits, surrounding
    whitespace ignored); anything else can be refused before the body is read."""
    return signature is not None and _HEX_DIGEST.fullmatch(signature.strip()) is not None


def new_mac(secret: str | bytes) -> hmac.HMAC:
    """An HMAC to feed the body chunk by chunk as it arrives (then :func:`matches`)."""
    key = secret.encode() if isinstance(secret, str) else secret
    return hmac.new(key, digestmod=hashlib.sha256)


def matches(mac: hmac.HMAC, signature: str | None) -> bool:
    """True when ``signature`` is the hex digest of everything fed to ``mac`` (constant time)."""
    if signature is None or not well_formed(signature):
        return False
    given = signature.strip().lower().encode("ascii")
    return hmac.compare_digest(mac.hexdigest().encode("ascii"), given)


def verify(body: bytes, secret: str | bytes, signature: str | None) -> bool:
    """True when ``signature`` matches; the comparison runs in constant time.

    A missing, non-ASCII or otherwise not-hex header is simply a mismatch. Hex case is ignored
    (the sender uses lowercase; an uppercase copy of the same digest is the same signature).
    """
    mac = new_mac(secret)
    mac.update(body)
    return matches(mac, signature)
