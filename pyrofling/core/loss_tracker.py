"""The viewer's side of NACK and LOSS_REPORT (protocol.md §7.9): which video datagrams went missing, and asking.

Pure.  :class:`~pyrofling.core.viewer_connection.ViewerConnection` shows it the
header of every video datagram (:meth:`LossTracker.datagram`), tells it which
packets were delivered or lost, and asks it at :meth:`LossTracker.next_timer`
what to send (:meth:`LossTracker.poll`): NACKs for packets that cannot complete
without help, and a LOSS_REPORT every ``report_interval_s``.

A packet's first transmission is over when its last datagram (the last repair
block) arrives, when a datagram of a newer packet arrives, or ``tail_wait_s``
after its latest datagram (the host sends a frame's datagrams back to back).
Then its losses are counted (datagrams and bursts, in send order) and, if the
reassembler still needs blocks, they are asked for: exactly those it names
(with Reed–Solomon, only as many as the repair blocks cannot cover).  A packet
nothing of arrived (a gap in the sequence) is asked for whole.  A NACK is
repeated after ``retry_s`` (plus the round trip) while the packet is still
missing, at most ``max_nacks`` times and never once it is older than
``give_up_s``: by then its frame is due and the reassembler moves on.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyrofling.seqnum import seq14_delta
from pyrofling.wire import LossReport, MediaHeader, Nack

#: The names :meth:`LossTracker.summary` reports.
LOSS_COUNTERS = (
    "video_datagrams_expected",
    "video_datagrams_lost",
    "loss_bursts",
    "longest_loss_burst",
    "packets_rebuilt_by_fec",
    "packets_rebuilt_by_resend",
    "nacks_sent",
    "loss_reports_sent",
)
#: Packets tracked at once; older ones are forgotten.
TRACKED_PACKETS = 64


@dataclass(slots=True)
class _Packet:
    expected: int  # data + repair datagrams; 0 when nothing of it arrived (size unknown)
    got: bytearray  # first-transmission arrivals, in send order (data blocks, then repair blocks)
    first_s: float
    last_s: float
    closed: bool = False
    done: bool = False
    nacks: int = 0
    nack_due_s: float | None = None


@dataclass(slots=True)
class LossCounters:
    """Totals since the start (``total``) or the last report."""

    datagrams_expected: int = 0
    datagrams_lost: int = 0
    rebuilt_by_fec: int = 0
    rebuilt_by_resend: int = 0
    packets_lost: int = 0
    bursts: int = 0
    longest_burst: int = 0


class LossTracker:
    """See the module docstring.  ``nack``/``reports``: what the host granted."""

    def __init__(
        self,
        *,
        nack: bool,
        reports: bool,
        report_interval_s: float = 0.1,
        tail_wait_s: float = 0.003,
        retry_s: float = 0.004,
        max_nacks: int = 4,
        give_up_s: float = 0.08,
    ) -> None:
        self.nack = nack
        self.reports = reports
        self.report_interval_s = report_interval_s
        self.tail_wait_s = tail_wait_s
        self.retry_s = retry_s
        self.max_nacks = max_nacks
        self.give_up_s = give_up_s
        self.rtt_s = 0.0
        self.total = LossCounters()
        self._interval = LossCounters()
        self._packets: dict[int, _Packet] = {}
        self._newest: int | None = None
        self._mean_expected = 0.0
        self._report_seq = 0
        self._next_report_s: float | None = None
        self.nacks_sent = 0
        self.reports_sent = 0
        self.packets_closed = 0

    # -- what arrives ------------------------------------------------------------------------

    def datagram(self, header: MediaHeader, now: float) -> bool:
        """A video datagram's header (not ping replies, not audio).  True when a packet's first transmission ended
        (:meth:`poll` has something to decide)."""
        closed_before = self.packets_closed
        if self._next_report_s is None:
            self._next_report_s = now + self.report_interval_s
        seq = header.packet_seq
        newest = self._newest
        if newest is not None:
            ahead = seq14_delta(seq, newest)
            if ahead < -TRACKED_PACKETS:
                return False
            if ahead > 0:
                for older in self._packets.values():
                    if not older.closed:
                        self._close(older, now)
                # A jump far ahead is a resync (or a forgery on an open session), not a run of lost packets.
                for missing in range(1, ahead if ahead <= 16 else 1):
                    gap = (newest + missing) & 0x3FFF
                    if gap not in self._packets:
                        self._packets[gap] = ghost = _Packet(0, bytearray(), now, now)
                        self._close(ghost, now)
                self._newest = seq
        else:
            self._newest = seq
        packet = self._packets.get(seq)
        data_blocks = -(-header.payload_size // 1024)
        expected = data_blocks + header.num_fec_blocks
        if packet is None:
            packet = self._packets[seq] = _Packet(expected, bytearray(expected), now, now)
        elif packet.closed:
            return self.packets_closed != closed_before  # a resend or a straggler: not a first transmission
        elif packet.expected != expected:
            return self.packets_closed != closed_before  # a header that disagrees: the reassembler drops it
        position = data_blocks + header.subpacket_seq if header.fec else header.subpacket_seq
        if position < expected:
            packet.got[position] = 1
        packet.last_s = now
        if position == expected - 1:
            self._close(packet, now)
        self._prune()
        return self.packets_closed != closed_before

    def packet_ready(self, seq: int, *, recovered: bool) -> None:
        """The reassembler delivered this video packet."""
        packet = self._packets.get(seq)
        resent = packet is not None and packet.nacks > 0
        if packet is not None:
            packet.done = True
        for c in (self.total, self._interval):
            if resent:
                c.rebuilt_by_resend += 1
            elif recovered:
                c.rebuilt_by_fec += 1

    def packets_lost(self, count: int) -> None:
        for c in (self.total, self._interval):
            c.packets_lost += count

    # -- what to send ----------------------------------------------------------------------

    def poll(self, now: float, needed: Callable[[int], list[int] | None]) -> list[Nack | LossReport]:
        """NACKs and a report due at ``now``.  ``needed(seq)``: the reassembler's answer (see module docstring)."""
        out: list[Nack | LossReport] = []
        for seq, packet in list(self._packets.items()):
            if not packet.closed and now >= packet.last_s + self.tail_wait_s:
                self._close(packet, now)
            if not self.nack or packet.done or packet.nack_due_s is None or now < packet.nack_due_s:
                continue
            if packet.nacks >= self.max_nacks or now - packet.first_s > self.give_up_s:
                packet.nack_due_s = None
                continue
            blocks = needed(seq)
            if blocks is not None and not blocks:
                packet.done = True  # complete, delivered or given up
                continue
            if blocks is None:
                if packet.expected:
                    packet.nack_due_s = None  # it arrived once but the reassembler let it go (a late straggler)
                    continue
                out.append(Nack.whole_packet(seq, 0))
            else:
                out += Nack.for_blocks(seq, 0, blocks)
            packet.nacks += 1
            packet.nack_due_s = now + self.rtt_s + self.retry_s
        self.nacks_sent += sum(isinstance(o, Nack) for o in out)
        if self.reports and self._next_report_s is not None and now >= self._next_report_s:
            out.append(self._report())
            self._next_report_s = now + self.report_interval_s
        return out

    def next_timer(self) -> float | None:
        times = [self._next_report_s] if self.reports and self._next_report_s is not None else []
        for packet in self._packets.values():
            if not packet.closed:
                times.append(packet.last_s + self.tail_wait_s)
            elif self.nack and not packet.done and packet.nack_due_s is not None:
                times.append(packet.nack_due_s)
        return min(times) if times else None

    # -- inside --------------------------------------------------------------------------------

    def _close(self, packet: _Packet, now: float) -> None:
        """The packet's first transmission is over: count what it lost; ask for it at once if it needs help."""
        packet.closed = True
        self.packets_closed += 1
        if packet.expected:
            lost = packet.expected - sum(packet.got)
            runs = _runs_of_zeros(packet.got)
            self._mean_expected += 0.1 * (packet.expected - self._mean_expected)
            expected = packet.expected
        else:  # nothing arrived: as large as packets usually are
            expected = lost = max(1, round(self._mean_expected))
            runs = [lost]
        for c in (self.total, self._interval):
            c.datagrams_expected += expected
            c.datagrams_lost += lost
            c.bursts += len(runs)
            c.longest_burst = max(c.longest_burst, max(runs, default=0))
        if lost:
            packet.nack_due_s = now

    def _report(self) -> LossReport:
        c = self._interval
        self._interval = LossCounters()
        self._report_seq = (self._report_seq + 1) & 0xFFFFFFFF
        self.reports_sent += 1
        cap = 0xFFFFFFFF
        return LossReport(
            self._report_seq,
            min(cap, c.datagrams_expected),
            min(cap, c.datagrams_lost),
            min(cap, c.rebuilt_by_fec),
            min(cap, c.rebuilt_by_resend),
            min(cap, c.packets_lost),
            min(0xFFFF, c.bursts),
            min(0xFFFF, c.longest_burst),
        )

    def _prune(self) -> None:
        if len(self._packets) <= TRACKED_PACKETS or self._newest is None:
            return
        newest = self._newest
        for seq in [s for s in self._packets if seq14_delta(newest, s) >= TRACKED_PACKETS]:
            del self._packets[seq]

    def summary(self) -> dict[str, int]:
        t = self.total
        return {
            "video_datagrams_expected": t.datagrams_expected,
            "video_datagrams_lost": t.datagrams_lost,
            "loss_bursts": t.bursts,
            "longest_loss_burst": t.longest_burst,
            "packets_rebuilt_by_fec": t.rebuilt_by_fec,
            "packets_rebuilt_by_resend": t.rebuilt_by_resend,
            "nacks_sent": self.nacks_sent,
            "loss_reports_sent": self.reports_sent,
        }


def _runs_of_zeros(flags: bytearray) -> list[int]:
    runs, current = [], 0
    for f in flags:
        if f:
            if current:
                runs.append(current)
            current = 0
        else:
            current += 1
    if current:
        runs.append(current)
    return runs
