"""Which decoded pictures the viewer shows, and how long its picture stood still (pure; the decode thread's)."""

from __future__ import annotations

from dataclasses import dataclass

from pyrofling.seqnum import SEQ14_MASK


@dataclass(slots=True)
class Concealment:
    """Which decoded pictures are shown, and how long the picture stood still (the decode thread's).

    Whole pictures always are.  After a loss, damaged ones wait for the key frame
    that repairs them, unless the picture has already been still for
    ``conceal_after_s``: then they are shown (the freeze is bounded in time rather
    than by the next key frame, and intra refresh heals what they lack).  Never
    before a connection's first whole picture: there is nothing to conceal yet.
    """

    conceal_after_s: float | None = 0.1
    #: A still picture longer than this counts as a freeze.
    freeze_s: float = 0.25
    last_shown_s: float | None = None
    max_still_s: float = 0.0
    freezes: int = 0
    #: The most of the host's frames in a row that were never shown (lost, or damaged and held back): a
    #: freeze counted on the stream itself, the same however busy the viewer's machine is.
    max_unshown_frames: int = 0
    _whole_since: int | None = None  # the connection whose first whole picture has been shown
    _last_shown: tuple[int, int] | None = None  # (connection, video packet sequence) of the last picture shown

    def show(self, *, whole: bool, connection: int, now: float) -> bool:
        """Whether to show a decoded picture of connection number ``connection``."""
        if whole:
            self._whole_since = connection
            return True
        limit = self.conceal_after_s
        if limit is None or self.last_shown_s is None or self._whole_since != connection:
            return False
        return now - self.last_shown_s >= limit

    def still_s(self, now: float) -> float:
        """The longest still spell so far, the one still running at ``now`` included (a picture that is never
        replaced is the longest freeze of all)."""
        running = now - self.last_shown_s if self.last_shown_s is not None else 0.0
        return max(self.max_still_s, running)

    def stream_ended(self, now: float) -> None:
        """The connection ended at ``now``: a picture still on screen since long before was a freeze to its end."""
        self.max_still_s = self.still_s(now)

    def shown(self, now: float, *, connection: int = 0, seq: int | None = None) -> None:
        """A picture went to the presenter at ``now``: that of video packet ``seq`` (14 bits) of the connection
        numbered ``connection``."""
        if seq is not None:
            last = self._last_shown
            if last is not None and last[0] == connection:
                skipped = ((seq - last[1]) & SEQ14_MASK) - 1
                self.max_unshown_frames = max(self.max_unshown_frames, skipped)
            self._last_shown = (connection, seq)
        if self.last_shown_s is not None:
            still = now - self.last_shown_s
            self.max_still_s = max(self.max_still_s, still)
            if still > self.freeze_s:
                self.freezes += 1
        self.last_shown_s = now
