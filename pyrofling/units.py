"""Numbers as people write them on a command line, parsed in one place (pure)."""

from __future__ import annotations


def parse_fraction(text: str) -> float:
    """``0.25`` or ``25%`` → 0.25.  ValueError when it is neither; the caller checks the range."""
    t = text.strip()
    percent = t.endswith("%")
    value = float(t[:-1] if percent else t)  # ValueError for words, empty text...
    if value != value:  # NaN would slip through every range check
        raise ValueError(f"{text!r} is not a number")
    return value / 100 if percent else value


def parse_duration_s(text: str) -> float:
    """Seconds, or minutes / hours with an ``m`` / ``h`` suffix (``90``, ``30m``, ``1.5h``).  ValueError otherwise."""
    t = text.strip().lower()
    scale = {"s": 1.0, "m": 60.0, "h": 3600.0}.get(t[-1:])
    value = float(t[:-1] if scale is not None else t)
    if value != value:
        raise ValueError(f"{text!r} is not a number")
    return value * (scale or 1.0)
