"""The viewer's side of NACK and LOSS_REPORT (protocol.md §7.9): which video datagrams went missing, and asking.

Pure.  :class:`~pyrofling.core.viewer.connection.ViewerConnection` shows it the
header of every video datagram (:meth:`LossTracker.datagram`), tells it which
packets were delivered or lost, and asks it at :meth:`LossTracker.next_timer`
what to send (:meth:`LossTracker.poll`): NACKs for packets that cannot complete
without help, and a LOSS_REPORT every ``report_interval_s``.

A packet's first transmission is over when its last datagram (the last repair
block) arrives, when a datagram of a newer packet arrives, or ``tail_wait_s``
after its latest datagram (the host sends a frame's datagrams back to back; on
a slow or paced link they arrive spread out, so the wait grows to three times the
usual gap between a packet's datagrams, at most 30 ms).
Then its losses are counted (datagrams and bursts, in send order) and, if the
reassembler still needs blocks, they are asked for: exactly those it names
(with Reed–Solomon, only as many as the repair blocks cannot cover).  A packet
nothing of arrived (a gap in the sequence) is asked for whole.  A NACK is
repeated after ``retry_s`` (plus the round trip) while the packet is still
missing, at most ``max_nacks`` times and never once it is older than
``give_up_s``: by then its frame is due and the reassembler moves on.  The count
is high enough that on a short round trip the asking lasts as long as the
reassembler waits for a resend (about 40 ms of a 60 fps stream): a burst of loss
that takes four resends of one block in a row (a link's bad spell, which the
few datagrams between a frame's resends do not end) would otherwise cost a key
frame and 3 to 5 frozen refreshes, for want of a fifth NACK.  NACKs are
at most one datagram per packet per round and ``max_nack_rate`` a second, so
forged headers on an open session cannot turn the viewer into a NACK flood (the
connection also suspends them while malformed datagrams pour in).  A first
transmission that was only late (a busy host) is credited back when it arrives,
so a loaded host is not reported as a lossy link.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pyrofling.seqnum import seq14_delta
from pyrofling.wire import NACK_BITMAP_BLOCKS, LossReport, MediaHeader, Nack

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
    asked: set[int] | None = None  # data blocks NACKed (None: none yet); a whole-packet NACK asks for all


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
        max_nacks: int = 12,
        give_up_s: float = 0.08,
        max_nack_rate: float = 600.0,
        nack_burst: float = 60.0,
    ) -> None:
        self.nack = nack
        self.reports = reports
        self.report_interval_s = report_interval_s
        self.tail_wait_s = tail_wait_s
        #: The usual gap between consecutive datagrams of one packet (smoothed), seconds.
        self.datagram_gap_s = 0.0
        self.retry_s = retry_s
        self.max_nacks = max_nacks
        self.give_up_s = give_up_s
        self.max_nack_rate = max_nack_rate
        self.nack_burst = nack_burst
        self._tokens = nack_burst
        self._tokens_s: float | None = None
        self._suspended_until_s = float("-inf")
        #: Data blocks of the largest packet the reassembler accepts (the connection sets it from the picture).
        self.max_data_blocks = 8 * 1024
        self.rtt_s = 0.0
        self.total = LossCounters()
        self._interval = LossCounters()
        self._packets: dict[int, _Packet] = {}
        self._open: set[int] = set()  # first transmission not over yet
        self._pending: set[int] = set()  # closed, may need a NACK (due at nack_due_s)
        self._newest: int | None = None
        self._mean_expected = 0.0
        self._report_seq = 0
        self._next_report_s: float | None = None
        self.nacks_sent = 0
        self.reports_sent = 0
        self.packets_closed = 0

    # -- what arrives ------------------------------------------------------------------------

    def datagram(self, header: MediaHeader, now: float, *, stale: bool = False) -> bool:
        """A video datagram's header (not ping replies, not audio) that the reassembler took, or found ``stale``
        (its packet already delivered: it still arrived).  True when a packet's first transmission ended
        (:meth:`poll` has something to decide)."""
        closed_before = self.packets_closed
        if self._next_report_s is None:
            self._next_report_s = now + self.report_interval_s
        seq = header.packet_seq
        data_blocks, expected = _sizes(header)
        if data_blocks > self.max_data_blocks:
            return False
        if stale and seq not in self._open:  # its packet was delivered: it only completes what is known
            known = self._packets.get(seq)
            if known is not None and known.closed:
                self._straggler(known, header)
            return False
        newest = self._newest
        if newest is not None:
            ahead = seq14_delta(seq, newest)
            if ahead < -TRACKED_PACKETS:
                return False
            if ahead > 0:
                for older in list(self._open):
                    self._close(older, now)
                # A jump far ahead is a resync (or a forgery on an open session), not a run of lost packets.
                for missing in range(1, ahead if ahead <= 16 else 1):
                    gap = (newest + missing) & 0x3FFF
                    if gap not in self._packets:
                        self._packets[gap] = _Packet(0, bytearray(), now, now)
                        self._close(gap, now)
                self._newest = seq
        else:
            self._newest = seq
        packet = self._packets.get(seq)
        if packet is None:
            if seq != self._newest:
                return self.packets_closed != closed_before  # behind, and forgotten or never seen: stale
            packet = self._packets[seq] = _Packet(expected, bytearray(expected), now, now)
            self._open.add(seq)
        elif packet.closed:
            self._straggler(packet, header)
            return self.packets_closed != closed_before
        elif packet.expected != expected:
            return self.packets_closed != closed_before  # a header that disagrees: the reassembler drops it
        position = data_blocks + header.subpacket_seq if header.fec else header.subpacket_seq
        if position >= expected:
            return self.packets_closed != closed_before
        if any(packet.got):
            self.datagram_gap_s += 0.1 * (min(0.1, now - packet.last_s) - self.datagram_gap_s)
        packet.got[position] = 1
        packet.last_s = now
        if position == expected - 1:
            self._close(seq, now)
        self._prune()
        return self.packets_closed != closed_before

    def packet_ready(self, seq: int, *, recovered: bool) -> None:
        """The reassembler delivered this video packet."""
        packet = self._packets.get(seq)
        resent = packet is not None and packet.nacks > 0
        if packet is not None:
            packet.done = True
            self._pending.discard(seq)
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
        wait = self._tail_wait_s
        for seq in [s for s in self._open if now >= self._packets[s].last_s + wait]:
            self._close(seq, now)
        for seq in sorted(self._pending, key=lambda s: self._packets[s].first_s):
            packet = self._packets[seq]
            due = packet.nack_due_s
            if due is None or packet.done or not self.nack:
                self._pending.discard(seq)
                continue
            if now < due:
                continue
            if packet.nacks >= self.max_nacks or now - packet.first_s > self.give_up_s:
                self._pending.discard(seq)
                continue
            blocks = needed(seq)
            if blocks is not None and not blocks:
                packet.done = True  # complete, delivered or given up
                self._pending.discard(seq)
                continue
            if blocks is None and packet.expected:
                self._pending.discard(seq)  # it arrived once but the reassembler let it go (a late straggler)
                continue
            if now < self._suspended_until_s:
                self._pending.discard(seq)
                continue
            if not self._spend(now):
                break  # over the NACK rate: the rest waits for the next timer
            if blocks is None:
                out.append(Nack.whole_packet(seq, 0))
            else:
                # One datagram's worth per round: a packet missing more is better asked for again, and a forged
                # header cannot make one packet cost dozens of NACKs.
                nack = Nack.for_blocks(seq, 0, blocks[:NACK_BITMAP_BLOCKS])[0]
                out.append(nack)
                packet.asked = (packet.asked or set()) | set(nack.blocks())
            packet.nacks += 1
            packet.nack_due_s = now + self.rtt_s + self.retry_s
        self.nacks_sent += sum(isinstance(o, Nack) for o in out)
        if self.reports and self._next_report_s is not None and now >= self._next_report_s:
            out.append(self._report())
            self._next_report_s = now + self.report_interval_s
        return out

    def suspend_nacks_until(self, until_s: float) -> None:
        """Send no NACK before ``until_s`` (the connection suspects forged datagrams); reports go on."""
        self._suspended_until_s = max(self._suspended_until_s, until_s)

    def _spend(self, now: float) -> bool:
        """Take one NACK from the rate budget (``max_nack_rate`` a second, bursts of ``nack_burst``)."""
        if self._tokens_s is not None:
            self._tokens = min(self.nack_burst, self._tokens + (now - self._tokens_s) * self.max_nack_rate)
        self._tokens_s = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True

    def next_timer(self) -> float | None:
        times = [self._next_report_s] if self.reports and self._next_report_s is not None else []
        if self._open:
            wait = self._tail_wait_s
            times += [self._packets[s].last_s + wait for s in self._open]
        if self.nack and self._pending:
            times += [d for s in self._pending if (d := self._packets[s].nack_due_s) is not None]
        if self.nack and self._tokens < 1.0 and self._pending and self._tokens_s is not None:
            times = [max(t, self._tokens_s + (1.0 - self._tokens) / self.max_nack_rate) for t in times]
        return min(times) if times else None

    # -- inside --------------------------------------------------------------------------------

    @property
    def _tail_wait_s(self) -> float:
        return min(0.03, max(self.tail_wait_s, 3 * self.datagram_gap_s))

    def _close(self, seq: int, now: float) -> None:
        """The packet's first transmission is over: count what it lost; ask for it at once if it needs help."""
        packet = self._packets[seq]
        self._open.discard(seq)
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
        if lost and not packet.done:
            packet.nack_due_s = now
            self._pending.add(seq)

    def _straggler(self, packet: _Packet, header: MediaHeader) -> None:
        """A datagram of a packet already judged: a resend we asked for, or a first transmission that was only
        late (the host sent the frame slower than ``tail_wait_s``): that one was counted lost, and is not."""
        data_blocks, expected = _sizes(header)
        if not packet.expected or packet.expected != expected:
            return  # nothing of it had come (asked for whole), or a header that does not match
        position = data_blocks + header.subpacket_seq if header.fec else header.subpacket_seq
        if position >= packet.expected or packet.got[position]:
            return
        if not header.fec and packet.asked is not None and header.subpacket_seq in packet.asked:
            return  # the resend
        packet.got[position] = 1
        for c in (self.total, self._interval):
            c.datagrams_lost = max(0, c.datagrams_lost - 1)

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
        # Only the newest packet (and the gap just before it) is ever added, so the dict holds packets in their
        # order on the wire and the old ones are at its front: read up to the first one still tracked, not all 64
        # on every datagram.  Sequences that jumped about (forged, far apart) get the whole scan.
        old = []
        for seq in self._packets:
            if seq14_delta(newest, seq) < TRACKED_PACKETS:
                break
            old.append(seq)
        if len(self._packets) - len(old) > 2 * TRACKED_PACKETS:
            old = [s for s in self._packets if seq14_delta(newest, s) >= TRACKED_PACKETS]
        for seq in old:
            del self._packets[seq]
            self._open.discard(seq)
            self._pending.discard(seq)

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


def _sizes(header: MediaHeader) -> tuple[int, int]:
    """A packet's data blocks and all its datagrams.  No planner sends more than 4 repair blocks per data block:
    a larger count is forged (an open session) and is not believed."""
    data_blocks = -(-header.payload_size // 1024)
    return data_blocks, data_blocks + min(header.num_fec_blocks, 4 * data_blocks + 1)


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
