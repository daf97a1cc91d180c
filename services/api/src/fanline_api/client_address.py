"""Which client address a public request is counted under (api.md, "Rate
limits"; used by ``ratelimit.py`` and the handlers).

The socket's peer, or, only when that peer is listed in
``FANLINE_TRUSTED_PROXIES``, the nearest address in ``X-Forwarded-For`` that
is not itself a trusted proxy. IPv6 clients are counted per /64 (one
subscriber's usual allocation); an IPv4-mapped IPv6 address as its IPv4.
"""

from __future__ import annotations

import functools
import ipaddress

from starlette.datastructures import Headers
from starlette.types import Scope

from fanline_shared.config import ConfigError

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def trusted_networks(raw: str) -> tuple[Network, ...]:
    """``FANLINE_TRUSTED_PROXIES``: comma-separated addresses or networks."""
    out = []
    for part in raw.split(","):
        if part.strip():
            try:
                out.append(ipaddress.ip_network(part.strip(), strict=False))
            except ValueError:
                raise ConfigError(f"FANLINE_TRUSTED_PROXIES: {part.strip()!r} is not an address or network") from None
    return tuple(out)


def _parse_ip(raw: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    raw = raw.strip()
    if raw.startswith("[") and "]" in raw:  # [v6]:port
        raw = raw[1 : raw.index("]")]
    elif raw.count(":") == 1:  # v4:port
        raw = raw.split(":", 1)[0]
    try:
        return ipaddress.ip_address(raw)
    except ValueError:
        return None


# The socket peer's address, parsed once per distinct string: every request
# parses it and a client keeps its address (bounded, so new addresses only
# evict old). X-Forwarded-For hops are client text and are not cached.
_peer_ip = functools.lru_cache(maxsize=65536)(_parse_ip)


def client_address(scope: Scope, trusted: tuple[Network, ...]) -> str:
    """The address a request is counted under (see the module docstring)."""
    peer_raw = (scope.get("client") or ("unknown", 0))[0]
    peer = _peer_ip(str(peer_raw))
    if peer is None:
        return str(peer_raw)
    if trusted and any(peer in net for net in trusted):
        forwarded = ",".join(Headers(scope=scope).getlist("x-forwarded-for"))
        for hop in reversed([h for h in forwarded.split(",") if h.strip()]):
            ip = _parse_ip(hop)
            if ip is None:
                break  # garbage from the client side: stop at the last good hop
            peer = ip
            if not any(ip in net for net in trusted):
                break
    return _counted_as(peer)


@functools.lru_cache(maxsize=65536)
def _counted_as(peer: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    """The key an address is counted under: itself, or its /64 for IPv6."""
    if peer.version == 6:
        if peer.ipv4_mapped is not None:
            return str(peer.ipv4_mapped)
        return str(ipaddress.ip_network(f"{peer}/64", strict=False))
    return str(peer)
