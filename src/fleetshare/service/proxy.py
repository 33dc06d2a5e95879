"""``fleetshare serve`` behind a reverse proxy (docs/service.md): which proxies' forwarded
headers to trust, and the path prefix the proxy serves the API under. Checked before the
server starts; what is wrong is one line naming the option."""

from __future__ import annotations

import ipaddress


class ProxyError(ValueError):
    """An unusable proxy option; the message names it and says why."""


def forwarded_allow_ips(text: str | None) -> list[str] | None:
    """The addresses (IPs or networks, or ``*``) whose X-Forwarded-Proto and X-Forwarded-For
    uvicorn believes; None leaves uvicorn's default ($FORWARDED_ALLOW_IPS, else 127.0.0.1)."""
    if text is None:
        return None
    items = [item.strip() for item in text.split(",")]
    for item in items:
        if item == "*":
            continue
        try:
            ipaddress.ip_network(item, strict=False)
        except ValueError:
            raise ProxyError(
                f"--forwarded-allow-ips: {item!r} is not an IP address, a network (CIDR) or *"
            ) from None
    return items


def root_path(text: str) -> str:
    """The prefix (``/fleetshare``) or ``""``."""
    if text and (
        not text.startswith("/")
        or text.endswith("/")
        or any(c in text for c in "?#")
        or any(c.isspace() for c in text)
    ):
        raise ProxyError(
            f"--root-path: {text!r} is not a path prefix such as /fleetshare (a leading /, "
            "no trailing /, no ?, # or spaces)"
        )
    return text
