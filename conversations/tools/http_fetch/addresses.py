"""Which IP addresses ``http_fetch`` may connect to (pure; DESIGN §9, rules in ``tools/README.md``).

:func:`address_refusal` names why an address is refused, or returns None when it is public.
IPv6 forms that embed an IPv4 address are judged by that address too.
"""

from __future__ import annotations

import ipaddress

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

METADATA_ADDRESSES = frozenset(
    {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}
)
"""Cloud metadata services: refused even when private addresses are allowed."""
_SHARED_ADDRESS_SPACE = ipaddress.ip_network("100.64.0.0/10")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")  # well-known NAT64 prefix: the last 32 bits are IPv4
_LOCAL_NAT64 = ipaddress.ip_network("64:ff9b:1::/48")  # local-use NAT64 (RFC 8215)


def address_refusal(ip: IPAddress, *, allow_private: bool = False) -> str | None:
    """Why ``ip`` must not be contacted ("loopback", "private", …), or None when it may be.

    IPv6 addresses embedding an IPv4 address (IPv4-mapped ``::ffff:a.b.c.d``, 6to4, Teredo, NAT64
    ``64:ff9b::a.b.c.d``) are judged by that IPv4 address too.

    Args:
        ip: the address.
        allow_private: lift the loopback/private/link-local refusals (an intranet); metadata,
            unspecified and multicast addresses stay refused.
    """
    if isinstance(ip, ipaddress.IPv6Address):
        if ip in _NAT64:  # a DNS64 answer: exactly as safe as the IPv4 address it carries
            reason = address_refusal(ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF), allow_private=allow_private)
            return f"{reason} (embedded in {ip})" if reason else None
        embedded = [ip.ipv4_mapped, ip.sixtofour, *(ip.teredo or ())]
        for inner in embedded:
            if inner is not None:
                reason = address_refusal(inner, allow_private=allow_private)
                if reason:
                    return f"{reason} (embedded in {ip})"
    if ip in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_multicast:
        return "multicast"
    if allow_private:
        return None
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if isinstance(ip, ipaddress.IPv4Address) and ip in _SHARED_ADDRESS_SPACE:
        return "private (shared address space)"
    if ip.is_private or (isinstance(ip, ipaddress.IPv6Address) and ip in _LOCAL_NAT64):
        return "private"
    if ip.is_reserved or not ip.is_global:
        return "not a public address"
    return None
