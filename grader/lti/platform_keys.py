"""The platforms' public keys (their JWKS address), fetched and kept for a while in this process;
fetched again when a token names a key id not yet seen (the platform rotated its keys)."""
from __future__ import annotations

import threading
import time
from typing import Any

import httpx
from joserfc.jwk import KeySet

CACHE_S = 3600
TIMEOUT_S = 10.0
_cache: dict[str, tuple[float, KeySet]] = {}
_lock = threading.Lock()


class KeysUnavailable(Exception):
    """The platform's key set could not be fetched or read."""


def _fetch(url: str) -> KeySet:
    try:
        response = httpx.get(url, timeout=TIMEOUT_S, follow_redirects=False)
        response.raise_for_status()
        data: Any = response.json()
        return KeySet.import_key_set(data)
    except (httpx.HTTPError, ValueError, TypeError, KeyError) as exc:
        raise KeysUnavailable(f"the platform's key set at {url} could not be read: {exc}") from exc


def key_set(url: str, kid: str | None) -> KeySet:
    """The key set at `url`, refetched when older than CACHE_S or lacking `kid`."""
    with _lock:
        cached = _cache.get(url)
    if cached is not None and time.monotonic() - cached[0] < CACHE_S:
        if kid is None or any(k.kid == kid for k in cached[1].keys):
            return cached[1]
    fresh = _fetch(url)
    with _lock:
        _cache[url] = (time.monotonic(), fresh)
    return fresh
