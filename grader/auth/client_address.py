"""Who is on the other end of a request, as far as the throttle, the audit log and the Origin
check need to know: the client's address and the scheme and host it asked for.

*Decision:* forwarded headers are believed only from the reverse proxies named in
KG_TRUSTED_PROXIES (none by default). Anyone can send `X-Forwarded-For: 1.2.3.4`; believed
from anyone, it would let a guesser pick a fresh address per attempt and dodge the per-address
throttle. So the address is the connection's peer unless that peer is a trusted proxy; then
X-Forwarded-For is read from the right (each proxy appends the address it received from) and
the first entry that is not itself a trusted proxy is the client. uvicorn's own reading of
these headers is turned off (`grader serve`), so this is the one rule.
"""
from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from functools import lru_cache

from starlette.requests import HTTPConnection

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
MAX_ADDRESS = 64  # the audit log's column; an IPv6 address with a zone is at most ~50


@lru_cache(maxsize=16)
def networks(entries: tuple[str, ...]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(entry, strict=False) for entry in entries)


def _trusted(address: str, trusted: Sequence[Network]) -> bool:
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in net for net in trusted)


def client_address(peer: str | None, forwarded_for: Iterable[str], trusted: Sequence[Network]) -> str:
    """The client's address: `peer` (the connection's), unless it is a trusted proxy; then the
    rightmost X-Forwarded-For entry that is not one (an entry that is not an address ends the
    walk: the last trusted hop is answered). "unknown" without a peer (a test transport)."""
    if not peer:
        return "unknown"
    address = peer
    if not _trusted(peer, trusted):
        return peer[:MAX_ADDRESS]
    hops = [hop.strip() for value in forwarded_for for hop in value.split(",")]
    for hop in reversed(hops):
        try:
            ipaddress.ip_address(hop)
        except ValueError:
            break
        address = hop
        if not _trusted(hop, trusted):
            break
    return address[:MAX_ADDRESS]


def _trusted_of(connection: HTTPConnection) -> tuple[Network, ...]:
    return networks(tuple(connection.app.state.context.settings.trusted_proxies))


def request_address(connection: HTTPConnection) -> str:
    """The client address of a request to the app (KG_TRUSTED_PROXIES from its settings)."""
    peer = connection.client.host if connection.client else None
    return client_address(peer, connection.headers.getlist("x-forwarded-for"), _trusted_of(connection))


def request_origin(connection: HTTPConnection) -> str:
    """scheme://host of the request as the browser sent it: the Host header, and the scheme of
    the connection or, from a trusted proxy, its X-Forwarded-Proto."""
    scheme = connection.url.scheme
    peer = connection.client.host if connection.client else ""
    proto = connection.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
    if proto in ("http", "https") and _trusted(peer, _trusted_of(connection)):
        scheme = proto
    return f"{scheme}://{connection.headers.get('host', '')}".lower()
