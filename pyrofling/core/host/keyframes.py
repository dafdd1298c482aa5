"""When the host forces a key frame (protocol.md §3.3, "Key frames").

Pure.  One encoder serves every viewer, so a forced IDR costs everyone a large
frame; this policy collects the reasons (a viewer joined, a viewer lost video)
and rate-limits them.  The host's frame loop asks :meth:`KeyframePolicy.should_force`
once per frame, before encoding; a True answer consumes the pending reasons,
whichever of them the IDR serves.

Compared with the reference (hold-off of 60 frames after every forced IDR), the
limit is in seconds and separate for joins and losses: a new viewer is served
at the next frame unless another viewer joined within ``join_interval_s``,
because a viewer waiting for its first picture is waiting on nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class KeyframeConfig:
    """Rate limits for forced key frames.  Seconds."""

    #: Least time between two key frames forced because viewers lost video.
    loss_interval_s: float = 0.05
    #: Least time between two key frames forced for joining viewers.
    join_interval_s: float = 0.05


class KeyframePolicy:
    """Decides, per encoded frame, whether to force an IDR."""

    def __init__(self, config: KeyframeConfig | None = None) -> None:
        self.config = config or KeyframeConfig()
        self._join_pending = False
        self._loss_pending = False
        self._last_forced_s: float | None = None
        self._last_join_s: float | None = None
        self.forced = 0
        self.forced_for_join = 0
        self.forced_for_loss = 0
        self.requests_for_loss = 0

    def viewer_joined(self) -> None:
        self._join_pending = True

    def loss_reported(self) -> None:
        self.requests_for_loss += 1
        self._loss_pending = True

    @property
    def pending(self) -> bool:
        return self._join_pending or self._loss_pending

    def should_force(self, now: float) -> bool:
        """Ask once per frame; True means encode this frame as an IDR (the request is then consumed)."""
        since_forced = None if self._last_forced_s is None else now - self._last_forced_s
        since_join = None if self._last_join_s is None else now - self._last_join_s
        join = self._join_pending and (since_join is None or since_join >= self.config.join_interval_s)
        loss = self._loss_pending and (since_forced is None or since_forced >= self.config.loss_interval_s)
        if not (join or loss):
            return False
        # Either reason's IDR serves both.
        self._join_pending = self._loss_pending = False
        self._last_forced_s = now
        self.forced += 1
        if join:
            self._last_join_s = now
            self.forced_for_join += 1
        else:
            self.forced_for_loss += 1
        return True

    def summary(self) -> dict[str, int]:
        return {
            "keyframes_forced": self.forced,
            "keyframes_forced_for_join": self.forced_for_join,
            "keyframes_forced_for_loss": self.forced_for_loss,
        }
