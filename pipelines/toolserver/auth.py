"""Who may call the tool server: an API key (``Authorization: Token <key>``) and/or OAuth 2.1
bearer JWTs from one issuer, as the interface document's tool server.

* Key: ``FREETIME_MCP_TOKEN`` or the dlt secret ``mcp.token``; compared in constant time. A
  ``Bearer`` header never carries a key.
* OAuth (resource-server mode) when an issuer is set (``FREETIME_MCP_ISSUER`` or dlt config
  ``mcp.issuer``): ``/.well-known/oauth-protected-resource`` names the issuer; a call without
  credentials gets 401 with ``WWW-Authenticate: Bearer resource_metadata="..."``; a JWT is
  accepted when its signature verifies against the issuer's published keys (``jwks_uri`` from
  its metadata, or ``FREETIME_MCP_JWKS_URL``) and its issuer, audience (this server's URL)
  and expiry are right.
* Neither: no credentials; the server then binds only to loopback.
"""

from __future__ import annotations

import hmac
import json
import os
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import anyio.to_thread
import httpx
import jwt

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

METADATA_PATH = "/.well-known/oauth-protected-resource"
LOOPBACK = ("127.0.0.1", "localhost", "::1")


class AuthConfigError(ValueError):
    """The auth settings cannot work; the message says which and why."""


def _dlt(key: str, secret: bool) -> str | None:
    try:
        import dlt

        value: object = dlt.secrets.get(key) if secret else dlt.config.get(key)
    except Exception:  # absent or unreadable providers mean "not configured"
        return None
    return str(value) if value not in (None, "") else None


@dataclass(frozen=True)
class AuthSettings:
    """The key (never printed, see ``__repr__``) and the OAuth issuer, if any."""

    token: str | None = field(default=None, repr=False)
    issuer: str | None = None
    jwks_url: str | None = None
    #: This server's URL: the resource identifier and the audience tokens must carry.
    resource_url: str | None = None

    def __repr__(self) -> str:
        return (
            f"AuthSettings(token=<{'set' if self.token else 'missing'}>, "
            f"issuer={self.issuer!r}, resource_url={self.resource_url!r})"
        )

    @property
    def open(self) -> bool:
        """No credentials are asked for."""
        return not self.token and not self.issuer

    @classmethod
    def resolve(cls, resource_url: str, issuer: str | None = None) -> AuthSettings:
        """Each unset value from the environment, then dlt config/secrets."""
        token = os.environ.get("FREETIME_MCP_TOKEN") or _dlt("mcp.token", secret=True)
        issuer = issuer or os.environ.get("FREETIME_MCP_ISSUER") or _dlt("mcp.issuer", False)
        jwks = os.environ.get("FREETIME_MCP_JWKS_URL") or _dlt("mcp.jwks_url", False)
        resource = (
            os.environ.get("FREETIME_MCP_RESOURCE_URL")
            or _dlt("mcp.resource_url", False)
            or resource_url
        )
        return cls(
            token=token,
            issuer=issuer.rstrip("/") if issuer else None,
            jwks_url=jwks,
            resource_url=resource.rstrip("/"),
        )


def check_bind(host: str, settings: AuthSettings) -> None:
    """AuthConfigError when the server would listen beyond loopback without credentials."""
    if settings.open and host not in LOOPBACK:
        raise AuthConfigError(
            f"refusing to listen on {host} without credentials: set FREETIME_MCP_TOKEN (or the "
            "dlt secret mcp.token) or an OAuth issuer (FREETIME_MCP_ISSUER), or bind to 127.0.0.1"
        )


class JwtVerifier:
    """Verifies bearer JWTs against the issuer's published keys (fetched once, cached)."""

    def __init__(self, issuer: str, audience: str, jwks_url: str | None = None) -> None:
        self.issuer = issuer
        self.audience = audience
        self._jwks_url = jwks_url
        self._client: jwt.PyJWKClient | None = None

    def _keys(self) -> jwt.PyJWKClient:
        if self._client is None:
            url = self._jwks_url or self._discover()
            self._client = jwt.PyJWKClient(url, cache_keys=True, lifespan=300)
        return self._client

    def _discover(self) -> str:
        for suffix in (
            "/.well-known/oauth-authorization-server",
            "/.well-known/openid-configuration",
        ):
            try:
                r = httpx.get(self.issuer + suffix, timeout=5.0)
                if r.status_code == 200 and r.json().get("jwks_uri"):
                    return str(r.json()["jwks_uri"])
            except (httpx.HTTPError, ValueError):
                continue
        raise jwt.InvalidTokenError(f"the issuer {self.issuer} publishes no jwks_uri")

    def verify(self, token: str) -> dict[str, Any] | None:
        """The token's claims when it is valid for this server, else None."""
        try:
            key = self._keys().get_signing_key_from_jwt(token)
            claims: dict[str, Any] = jwt.decode(
                token,
                key.key,
                algorithms=["RS256", "ES256", "PS256", "EdDSA"],
                audience=[self.audience, self.audience + "/"],
                issuer=self.issuer,
                options={"require": ["exp", "iss", "aud"]},
                leeway=5,
            )
        except (jwt.PyJWTError, httpx.HTTPError):
            return None
        return claims


class AuthMiddleware:
    """ASGI middleware in front of the MCP app: serves the protected-resource metadata and lets
    a request through only with a valid key or bearer token."""

    def __init__(self, app: ASGIApp, settings: AuthSettings) -> None:
        self.app = app
        self.settings = settings
        self.verifier = (
            JwtVerifier(settings.issuer, settings.resource_url or "", settings.jwks_url)
            if settings.issuer
            else None
        )
        self.metadata_url = f"{settings.resource_url}{METADATA_PATH}"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.settings.open:
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        if self.settings.issuer and path.startswith(METADATA_PATH):
            await self._json(
                send,
                200,
                {
                    "resource": self.settings.resource_url,
                    "authorization_servers": [self.settings.issuer],
                    "bearer_methods_supported": ["header"],
                    "resource_name": "freetime warehouse",
                },
            )
            return
        header = ""
        for k, v in scope.get("headers", []):
            if k.lower() == b"authorization":
                header = v.decode("latin-1").strip()
        scheme, _, credential = header.partition(" ")
        credential = credential.strip()
        if scheme.lower() == "token" and self.settings.token:
            if hmac.compare_digest(credential.encode(), self.settings.token.encode()):
                await self.app(scope, receive, send)
                return
            await self._deny(send, "invalid_token", "the API key is not valid")
            return
        if scheme.lower() == "bearer" and self.verifier is not None and credential:
            claims = await anyio.to_thread.run_sync(self.verifier.verify, credential)
            if claims is not None:
                scope.setdefault("state", {})["freetime_auth"] = {"sub": claims.get("sub")}
                await self.app(scope, receive, send)
                return
            await self._deny(
                send,
                "invalid_token",
                "the bearer token is not valid for this "
                "server (signature, issuer, audience or expiry)",
            )
            return
        if scheme.lower() == "bearer" and self.verifier is None:
            await self._deny(
                send,
                "invalid_request",
                "send the API key as Authorization: Token <key>, not Bearer",
            )
            return
        await self._deny(send, "invalid_request", "credentials required")

    async def _deny(self, send: Send, error: str, description: str) -> None:
        if self.settings.issuer:
            challenge = (
                f'Bearer error="{error}", error_description="{description}", '
                f'resource_metadata="{self.metadata_url}"'
            )
        else:
            challenge = 'Token realm="freetime"'
        await self._json(
            send,
            401,
            {"error": error, "error_description": description},
            [(b"www-authenticate", challenge.encode())],
        )

    async def _json(
        self,
        send: Send,
        status: int,
        body: dict[str, Any],
        headers: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        data = json.dumps(body).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(data)).encode()),
                    *(headers or []),
                ],
            }
        )
        await send({"type": "http.response.body", "body": data})
