"""Bearer-token authentication.

The key comes from the environment (``EAGLE_HAL_API_KEY``, declared in
``eagle_hal.settings``) or from a file (``--api-key-file``), never from the command line,
where every user of the machine could read it in the process list. A request passes with
``Authorization: Bearer KEY``; the comparison takes the same time wherever the strings
differ (``hmac.compare_digest``), so a client cannot find the key byte by byte by timing.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from collections.abc import Mapping
from pathlib import Path

from eagle_hal import settings
from eagle_hal.errors import InvalidArgument

__all__ = ["API_KEY_SETTING", "authorized", "cache_scope", "is_loopback", "load_api_key"]

API_KEY_SETTING = "EAGLE_HAL_API_KEY"


def load_api_key(key_file: str | Path | None,
                 environ: Mapping[str, str] | None = None) -> str | None:
    """The key ``key_file`` holds (its first line, blanks stripped), else the environment's;
    ``None`` when neither gives one. ``InvalidArgument`` for an unreadable or empty file."""
    if key_file is not None:
        try:
            text = Path(key_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise InvalidArgument("--api-key-file", str(key_file),
                                  f"a readable UTF-8 file holding the key ({error})") from None
        lines = text.strip().splitlines()
        key = lines[0].strip() if lines else ""
        if not key:
            raise InvalidArgument("--api-key-file", str(key_file), "a file holding the key "
                                  "on its first line")
        return key
    key = settings.get(API_KEY_SETTING, environ)
    return key.strip() or None if key is not None else None


def authorized(header: str | None, key: str) -> bool:
    """Whether an ``Authorization`` header value carries ``key`` as a bearer token."""
    if not header:
        return False
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(token.strip().encode(), key.encode())


def cache_scope(header: str | None, key: str | None) -> str:
    """The prefix-cache scope of an (authorized) request: a hash of its bearer token, or
    one fixed scope without authentication. Requests of different scopes never share KV
    pages: a hit shortens the time to first token, which would tell one client what
    prefixes another sent."""
    if key is None:
        return "unauthenticated"
    token = (header or "").partition(" ")[2].strip()
    return "key:" + hashlib.sha256(token.encode()).hexdigest()


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or ``localhost``) is reachable only from this machine."""
    if host.lower() in ("localhost", "localhost.localdomain"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
