"""The host's rate control across its viewers (protocol.md §7.10): each link, the one bitrate, what each hears.

Pure, and :class:`~pyrofling.core.host.sessions.HostSessions`'s, as
:class:`~pyrofling.core.host.auth.HostAuth` is: the sessions hand it each
RATE_FEEDBACK with the viewers streaming video, and perform what it returns — the
encoder's new bitrate (:class:`SetBitrate`) and each reporting viewer's
STREAM_RATE.  The link estimate itself is
:class:`~pyrofling.core.host.congestion.LinkController`'s, the policy
:class:`~pyrofling.core.host.congestion.SharedBitrate`'s.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from pyrofling.core.host.congestion import LinkController, RateConfig, RateVoter, SharedBitrate
from pyrofling.core.host.pacer import TokenBucketPacer
from pyrofling.core.host.state import HostOutput, RemoteViewer, SetBitrate
from pyrofling.wire import RateDecider, RateFeedback, StreamRate

#: STREAM_RATE to one viewer at most this often.
TELL_EVERY_S = 0.25


class HostRate:
    """The shared bitrate (``policy`` over the viewers' links) between ``config``'s floor and ceiling."""

    def __init__(self, config: RateConfig, policy: str) -> None:
        self.config = config
        self.shared = SharedBitrate(config, policy)
        #: The last word on the links of viewers that have left (for the statistics).
        self.departed: dict[str, dict[str, object]] = {}

    def link_for(self, conn: RemoteViewer) -> None:
        """A viewer that negotiated RATE_CONTROL starts streaming: its link gets a controller, fed with the send
        times of its paced queue."""
        assert conn.paced is not None
        conn.link = LinkController(self.config)
        conn.paced.on_sent = conn.link.sent

    def feedback(
        self,
        conn: RemoteViewer,
        msg: RateFeedback,
        now: float,
        viewers: list[RemoteViewer],
        player: int | None,
        learn_loss: Callable[[RemoteViewer, int, int], None],
    ) -> list[HostOutput]:
        """One RATE_FEEDBACK from ``conn``; ``viewers``: everyone streaming video; ``player``: the connection
        whose states drive the virtual pad; ``learn_loss``: feeds a viewer's FEC planners the loss its link had
        (not its queue's)."""
        link = conn.link
        assert link is not None and conn.paced is not None
        conn.rate_feedbacks += 1
        link.feedback(msg, now)
        if link.pending_loss is not None:
            lost, expected = link.pending_loss
            link.pending_loss = None
            learn_loss(conn, 0 if link.queue_loss(now) else lost, expected)
        pacer = conn.paced.pacer
        if isinstance(pacer, TokenBucketPacer):
            pacer.set_rate(link.pacing_bps(pacer.configured_bits_per_s))
        return self.decide(now, viewers, player)

    def browser_feedback(
        self, conn: RemoteViewer, msg: RateFeedback, lost: int, sent: int, now: float,
        viewers: list[RemoteViewer], player: int | None,
    ) -> list[HostOutput]:  # fmt: skip
        """A browser's own report of when its pictures arrived (and the datagrams its QUIC connection lost and
        sent since the last): its link, by the same controller and the same policy as a viewer's."""
        link = conn.link
        assert link is not None
        conn.rate_feedbacks += 1
        link.lost(lost, sent)
        link.feedback(msg, now)
        link.pending_loss = None
        return self.decide(now, viewers, player)

    def left(self, conn: RemoteViewer, now: float, viewers: list[RemoteViewer], player: int | None) -> list[HostOutput]:
        """A reporting viewer has gone: the bitrate it set may rise."""
        self.departed[conn.label] = _link_summary(conn)
        return self.decide(now, viewers, player)

    def decide(self, now: float, viewers: list[RemoteViewer], player: int | None) -> list[HostOutput]:
        """The bitrate by the policy; STREAM_RATE to each reporting viewer whose news changed."""
        shared = self.shared
        voters = [
            RateVoter(
                c.conn_id,
                c.link.video_bps if c.link is not None and c.link.feedbacks else None,
                c.conn_id == player,
                c.kicked_s or 0.0,
            )
            for c in viewers
        ]
        out: list[HostOutput] = []
        if shared.decide(voters):
            why = {
                RateDecider.YOUR_LINK: "a viewer's link",
                RateDecider.CEILING: "the ceiling",
                RateDecider.FLOOR: "the floor",
            }.get(shared.reason, "the policy")
            out.append(SetBitrate(round(shared.bitrate_bps), f"set by {why}"))
        kbits = round(shared.bitrate_bps / 1000)
        ceiling = round(self.config.ceiling_bps / 1000)
        for c in viewers:
            if c.link is None or c.is_browser:  # a browser has no control channel to be told on
                continue
            link_bps = min(c.link.link_video_bps, self.config.ceiling_bps)
            told = (kbits, round(link_bps / 1000), int(shared.told(c.conn_id, link_bps)))
            previous = c.rate_told
            changed = previous is None or told[2] != previous[2] or _moved(told[0], previous[0], 0.05)
            changed = changed or (previous is not None and _moved(told[1], previous[1], 0.10))
            if changed and now - c.rate_told_s >= TELL_EVERY_S:
                c.rate_told, c.rate_told_s = told, now
                out.append(c.send(StreamRate(told[0], ceiling, told[1], told[2])))
        return out

    def summary(self, connections: list[RemoteViewer]) -> dict[str, object]:
        links = dict(self.departed)
        links.update({c.label: _link_summary(c) for c in connections if c.link is not None})
        return {
            "rate_policy": self.shared.policy,
            "bitrate_kbits": round(self.shared.bitrate_bps / 1000),
            "bitrate_changes": self.shared.changes,
            "links": links,
        }


def _moved(new: int, old: int, share: float) -> bool:
    return abs(new - old) > share * max(1, old)


def _link_summary(c: RemoteViewer) -> dict[str, object]:
    assert c.link is not None
    st = c.link.state()
    return {
        "video_kbits": round(st.video_bps / 1000),
        "allowed_kbits": round(st.allowed_bps / 1000) if math.isfinite(st.allowed_bps) else None,
        "capacity_kbits": round(st.capacity_bps / 1000) if st.capacity_bps else None,
        "train_kbits": round(st.train_bps / 1000) if st.train_bps else None,
        "queue_delay_ms": st.queue_delay_ms,
        "cuts": st.cuts,
        "feedbacks": c.rate_feedbacks,
        "overhead": round(c.link.overhead, 3),
        "other_kbits": round(c.link.other_bps / 1000),
        "correction": round(c.link.correction, 3),
        "events": list(c.link.events),
    }
