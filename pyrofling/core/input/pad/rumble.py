"""Rumble (RUMBLE, protocol.md §7.13): the force-feedback effects games give a virtual pad; pure.

Games drive rumble the Linux way: they upload an effect (FF_RUMBLE: a strong and a
weak motor's magnitude, a length), then play it (a count) or stop it, and may set
the pad's gain.  :class:`RumbleEffects` follows that life cycle for one virtual
pad and says what the player's real pad should do now, as a :class:`RumbleCommand`
(both magnitudes and how long; zero length: stop).  Effects other than rumble are
refused at upload.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pyrofling.core.input.pad.state import FF_GAIN, FF_RUMBLE

__all__ = ["FF_GAIN", "FF_RUMBLE", "STOP", "UNTIL_STOPPED_MS", "RumbleCommand", "RumbleEffects"]

MAX_MAGNITUDE = 0xFFFF
#: A RUMBLE with this duration lasts until the next one (a Linux effect of length 0 plays until stopped).
UNTIL_STOPPED_MS = 0xFFFF


@dataclass(frozen=True, slots=True)
class RumbleCommand:
    """What the player's pad should do from now on: both motors, for ``duration_ms`` (0: stop)."""

    strong: int
    weak: int
    duration_ms: int

    @property
    def stop(self) -> bool:
        return self.duration_ms == 0 or (self.strong == 0 and self.weak == 0)


STOP = RumbleCommand(0, 0, 0)


@dataclass(frozen=True, slots=True)
class _Effect:
    strong: int
    weak: int
    length_ms: int


@dataclass(slots=True)
class RumbleEffects:
    """One virtual pad's effects: upload, erase, play and stop, gain."""

    max_effects: int = 16
    gain: int = MAX_MAGNITUDE
    _effects: dict[int, _Effect] = field(default_factory=dict)
    _playing: int | None = None
    refused: int = 0

    def upload(self, effect_id: int, kind: int, strong: int, weak: int, length_ms: int) -> bool:
        """A game uploads (or updates) an effect; False refuses it (not a rumble, or too many)."""
        if kind != FF_RUMBLE or (effect_id not in self._effects and len(self._effects) >= self.max_effects):
            self.refused += 1
            return False
        self._effects[effect_id] = _Effect(_clamp(strong), _clamp(weak), max(0, length_ms))
        return True

    def erase(self, effect_id: int) -> RumbleCommand | None:
        """The effect is gone; if it was playing, the pad stops."""
        self._effects.pop(effect_id, None)
        if self._playing == effect_id:
            self._playing = None
            return STOP
        return None

    def play(self, effect_id: int, count: int) -> RumbleCommand | None:
        """EV_FF with the effect's id: ``count`` > 0 plays it that many times, 0 stops it."""
        effect = self._effects.get(effect_id)
        if effect is None:
            return None
        if count <= 0:
            if self._playing != effect_id:
                return None
            self._playing = None
            return STOP
        self._playing = effect_id
        duration = UNTIL_STOPPED_MS if effect.length_ms == 0 else min(UNTIL_STOPPED_MS - 1, effect.length_ms * count)
        scale = self.gain / MAX_MAGNITUDE
        return RumbleCommand(round(effect.strong * scale), round(effect.weak * scale), duration)

    def set_gain(self, gain: int) -> None:
        self.gain = _clamp(gain)


def _clamp(value: int) -> int:
    return max(0, min(MAX_MAGNITUDE, value))
