"""``pyro://HOST:PORT?phase_locked=…&deadline=…`` — the viewer's address form (the reference's).

IPv6 literals go in brackets (``pyro://[::1]:9876``), which the reference's
split on ':' cannot parse.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

DEFAULT_PORT = 9876
KNOWN_PARAMS = ("phase_locked", "deadline", "latency", "debug")


@dataclass(frozen=True, slots=True)
class PyroUri:
    host: str
    port: int
    phase_locked: float | None = None
    deadline_s: float | None = None
    latency_s: float | None = None
    debug_path: str | None = None


def parse_uri(text: str) -> PyroUri:
    """Parse a viewer URI; raises ValueError saying what is wrong.  ``HOST:PORT`` alone is accepted too."""
    if "://" not in text:
        text = "pyro://" + text
    parts = urlsplit(text)
    if parts.scheme != "pyro":
        raise ValueError(f"unsupported scheme {parts.scheme!r}: use pyro://HOST:PORT")
    try:
        host, port = parts.hostname, parts.port
    except ValueError as exc:  # a port that is not a number or out of range
        raise ValueError(f"bad port in {text!r}: {exc}") from None
    if not host:
        raise ValueError(f"no host in {text!r}: use pyro://HOST:PORT (IPv6 as pyro://[::1]:PORT)")
    params = parse_qs(parts.query, keep_blank_values=True)
    unknown = sorted(set(params) - set(KNOWN_PARAMS))
    if unknown:
        raise ValueError(f"unknown URI parameter(s) {', '.join(unknown)}; known: {', '.join(KNOWN_PARAMS)}")

    def number(name: str) -> float | None:
        if name not in params:
            return None
        raw = params[name][-1]
        try:
            return float(raw)
        except ValueError:
            raise ValueError(f"URI parameter {name}={raw!r} is not a number") from None

    return PyroUri(
        host=host,
        port=port or DEFAULT_PORT,
        phase_locked=number("phase_locked"),
        deadline_s=number("deadline"),
        latency_s=number("latency"),
        debug_path=params["debug"][-1] if "debug" in params else None,
    )
