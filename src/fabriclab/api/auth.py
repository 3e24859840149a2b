"""Who may use the API, checked as UFM's clients authenticate: HTTP Basic
``user:password`` (``/ufmRest``, and everything else), an access token from ``POST
/ufmRest/app/tokens`` sent as ``Authorization: Basic <token>`` (``/ufmRestV3``, as
NVIDIA's "Access Tokens API" page and ufm_sdk_3.0's ``utils/ufm_rest_client.py`` send
it; ``Bearer <token>`` is taken too).

Without credentials configured every request is let in (the API then listens on a
loopback address only: :func:`check_listen`); with them, every path but ``/healthz``
needs them."""

from __future__ import annotations

import base64
import binascii
import hmac
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InputError, Problem
from ..inputs import read_text
from ..topology.server import is_loopback
from .errors import ApiError

TOKEN_LIFETIME = 7 * 24 * 3600  # seconds a token is good for
TOKENS_MAX = 1000  # tokens kept at once (the oldest goes)
OPEN_PATHS = frozenset(("/healthz",))
REALM = 'Basic realm="fabriclab"'
CREDENTIALS_MAX_BYTES = 1 << 20


@dataclass
class Auth:
    """Credentials (user -> password; none: every request is let in) and the tokens
    issued."""

    users: dict[str, str] = field(default_factory=dict)
    tokens: dict[str, dict] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def required(self) -> bool:
        """Whether requests must authenticate."""
        return bool(self.users)

    def issue(self, user: str) -> dict:
        """A new access token for ``user``, as UFM answers ``POST app/tokens``."""
        token = secrets.token_hex(16)
        rec = {
            "access_token": token,
            "revoked": False,
            "issued_at": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
            "expires_in": TOKEN_LIFETIME,
            "username": user,
            "_expires": time.time() + TOKEN_LIFETIME,
        }
        with self.lock:
            if len(self.tokens) >= TOKENS_MAX:
                self.tokens.pop(next(iter(self.tokens)))
            self.tokens[token] = rec
        return {k: v for k, v in rec.items() if not k.startswith("_")}

    def user_of(self, path: str, authorization: str | None) -> str:
        """The user a request with header ``authorization`` to ``path`` is from; an
        ApiError 401 when it must authenticate and does not."""
        if path in OPEN_PATHS:
            return "anonymous"
        scheme, _, cred = (authorization or "").partition(" ")
        cred = cred.strip()
        token_user = self._token_user(cred) if scheme.lower() in ("basic", "bearer") else None
        if path.startswith("/ufmRestV3"):
            if token_user is not None:
                return token_user
            if not self.required:
                return "anonymous"
            raise ApiError(401, "/ufmRestV3 wants 'Authorization: Basic <access token>'")
        if token_user is not None:
            return token_user
        if scheme.lower() == "basic":
            user = self._basic_user(cred)
            if user is not None:
                return user
        if not self.required:
            return "anonymous"
        raise ApiError(401, "wants HTTP Basic credentials or a token", {"WWW-Authenticate": REALM})

    def _token_user(self, token: str) -> str | None:
        with self.lock:
            rec = self.tokens.get(token)
        if rec is None or rec["_expires"] < time.time():
            return None
        return rec["username"]

    def _basic_user(self, cred: str) -> str | None:
        try:
            user, _, password = base64.b64decode(cred, validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            return None
        want = self.users.get(user)
        if want is None or not hmac.compare_digest(want.encode(), password.encode()):
            return None
        return user


def load_credentials(spec: str | None) -> dict[str, str]:
    """``USER:PASSWORD``, or ``@FILE`` holding such lines: the users (none: ``{}``)."""
    if not spec:
        return {}
    if spec.startswith("@"):
        path = Path(spec[1:])
        text = read_text(str(path), CREDENTIALS_MAX_BYTES, "--credentials")
        lines = [ln.strip() for ln in text.splitlines()]
        where = str(path)
    else:
        lines, where = [spec], "--credentials"
    users = {}
    for i, ln in enumerate(lines, 1):
        if not ln or ln.startswith("#"):
            continue
        user, sep, password = ln.partition(":")
        if not sep or not user or not password:
            at = f"{where}:{i}" if spec.startswith("@") else where
            raise InputError([Problem(at, "want USER:PASSWORD")])
        users[user] = password
    return users


def check_listen(host: str, auth: Auth, where: str = "--listen") -> None:
    """Refuse to serve beyond this machine with no credentials."""
    if not auth.required and not is_loopback(host):
        raise InputError(
            [
                Problem(
                    f"{where} {host}",
                    "not a loopback address: give --credentials USER:PASSWORD (or @FILE) "
                    "first, so that nobody else on the network drives the fabric",
                )
            ]
        )
