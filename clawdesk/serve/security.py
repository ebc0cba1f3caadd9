"""Who may talk to the server: the API token file, and a guard in front of every route.

The guard is plain ASGI (it wraps the Starlette app) and refuses, in this order:

1. a ``Host`` header that is not the address the server is bound to: a web page that rebinds its own
   domain name to 127.0.0.1 (DNS rebinding) sends its own name as Host, never ``127.0.0.1:PORT``;
2. a browser ``Origin`` that was not allowed with ``--allow-origin``: any page the user opens could
   otherwise send requests to the local port;
3. a request without ``Authorization: Bearer <token>`` matching ``<data dir>/api-token``.

Refusals are OpenAI error JSON (403 / 401), so clients show them as they show OpenAI's.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import os
import secrets
import stat
from collections.abc import Iterable
from pathlib import Path

from clawdesk.errors import DataDirError
from clawdesk.serve.schema import ApiError

TOKEN_FILE = "api-token"
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def load_or_create_token(home: Path) -> tuple[str, Path]:
    """The API token and its file, created (mode 0600) at first start; a readable-by-others file is tightened."""
    path = home / TOKEN_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return _read_token(path), path
    except OSError as exc:
        raise DataDirError(f"cannot create the API token {path} ({exc})") from exc
    token = secrets.token_urlsafe(32)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(token + "\n")
    return token, path


def _read_token(path: Path) -> str:
    try:
        if stat.S_IMODE(path.stat().st_mode) & 0o077:
            path.chmod(0o600)
        token = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise DataDirError(f"cannot read the API token {path} ({exc}); delete it to make a new one") from exc
    if len(token) < 16:
        raise DataDirError(f"the API token in {path} is shorter than 16 characters; delete it to make a new one")
    return token


def allowed_hosts(host: str, port: int) -> frozenset[str] | None:
    """``Host`` header values to accept; None for a wildcard bind (0.0.0.0, ::), where any IP literal is."""
    if host in ("0.0.0.0", "::", ""):
        return None
    name = f"[{host}]" if ":" in host and not host.startswith("[") else host
    names = {name, *LOOPBACK_NAMES} if is_loopback(host) else {name}
    return frozenset(f"{n}:{port}" for n in names)


def _ip_literal_host(value: str) -> bool:
    name = value.rsplit(":", 1)[0] if not value.endswith("]") else value
    return name == "localhost" or _is_ip(name.strip("[]"))


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class Guard:
    """ASGI middleware: Host, Origin and bearer token checks before the app sees a request."""

    def __init__(
        self,
        app,
        *,
        token: str,
        hosts: frozenset[str] | None,
        origins: Iterable[str] = (),
        extra_hosts: Iterable[str] = (),
    ):
        self.app = app
        self.token = token.encode("utf-8")
        self.hosts = hosts
        self.extra_hosts = frozenset(h.lower() for h in extra_hosts)  # "name:port" allowed with --allow-host
        self.origins = frozenset(o.rstrip("/") for o in origins)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        error = self.check({k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]})
        if error is None:
            await self.app(scope, receive, send)
            return
        body = json.dumps(error.body()).encode("utf-8")
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        if error.status == 401:
            headers.append((b"www-authenticate", b"Bearer"))
        await send({"type": "http.response.start", "status": error.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def check(self, headers: dict[str, str]) -> ApiError | None:
        host = headers.get("host", "")
        bound = _ip_literal_host(host) if self.hosts is None else host.lower() in self.hosts
        if not bound and host.lower() not in self.extra_hosts:
            return ApiError(
                403,
                f"refused: Host {host!r} is not the address this server is bound to "
                f"({', '.join(sorted(self.hosts or ['an IP address']))}); use that address in the URL, or allow "
                "this name with `clawdesk serve --allow-host NAME`.",
                type_="permission_error",
                code="host_not_allowed",
            )
        origin = headers.get("origin")
        if origin is not None and origin.rstrip("/") not in self.origins:
            return ApiError(
                403,
                f"refused: requests from the web page origin {origin!r} are not allowed. If you trust it, "
                "restart with `clawdesk serve --allow-origin ORIGIN`.",
                type_="permission_error",
                code="origin_not_allowed",
            )
        scheme, _, given = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode("utf-8"), self.token):
            what = "no API token was sent" if not given else "the API token is wrong"
            return ApiError(
                401,
                f"{what}: send 'Authorization: Bearer <token>' with the token from the file "
                f"{TOKEN_FILE} in ClawDesk's data directory (`clawdesk paths` shows where).",
                code="invalid_api_key",
            )
        return None
