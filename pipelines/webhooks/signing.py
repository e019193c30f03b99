"""The webhook signature: lowercase hex HMAC-SHA256 of the raw request body, keyed by the secret.

The body is signed as received, byte for byte: never re-serialise JSON before checking.
"""

from __future__ import annotations

import hashlib
import hmac

HEADER = "X-T49-Webhook-Signature"


def sign(body: bytes, secret: str | bytes) -> str:
    """The signature the sender puts in ``X-T49-Webhook-Signature``."""
    key = secret.encode() if isinstance(secret, str) else secret
    return hmac.new(key, body, hashlib.sha256).hexdigest()


def verify(body: bytes, secret: str | bytes, signature: str | None) -> bool:
    """True when ``signature`` matches; the comparison runs in constant time.

    A missing or non-ASCII header is simply a mismatch. Hex case is ignored (the sender uses
    lowercase; an uppercase copy of the same digest is the same signature).
    """
    if not signature:
        return False
    try:
        given = signature.strip().lower().encode("ascii")
    except UnicodeEncodeError:
        return False
    return hmac.compare_digest(sign(body, secret).encode("ascii"), given)
