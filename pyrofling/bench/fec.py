"""``pyrofling bench fec``: packet-loss recovery and codec throughput.

For each frame size K (data blocks) and loss model, every scheme sees the *same*
loss pattern in each trial (common random numbers), so differences between
schemes are not sampling noise.  Schemes:

* ``none`` — no FEC: a frame survives only if no data block is lost.
* ``reference/peel`` — the reference's planner and peeling decoder (native ↔ native).
* ``reference/pyrofling`` — reference planner, pyrofling's decoder (native host → pyrofling viewer).
* ``tuned/peel`` — pyrofling's planner, peeling decoder (pyrofling host → native viewer).
* ``tuned/pyrofling`` — pyrofling ↔ pyrofling without MDS_FEC (mirrored XOR).
* ``rs/pyrofling`` — pyrofling ↔ pyrofling with MDS_FEC negotiated (protocol.md §7.8): Reed–Solomon in
  interleaved groups of at most 100 data blocks, through the viewer's own decoder, 1024-byte blocks.
* ``zfec`` (Reed–Solomon, MDS: the best any code can do at this overhead) and
  ``raptorq`` (RFC 6330), when the ``compare`` extra is installed.

Recovery runs the real decoders on small blocks (which patterns are recoverable
does not depend on the block size) and checks every recovered frame byte for
byte.  Throughput runs them on 1024-byte blocks, single thread, median of many
frames with fresh seeds.
"""

from __future__ import annotations

import math
import random
import sys
import time
from dataclasses import dataclass
from typing import Any, TextIO

from pyrofling.bench.fec_peers import Raptorq, Zfec, peers_available
from pyrofling.bench.fec_speed import (
    Throughput,
    mds_throughput,
    raptorq_throughput,
    xor_throughput,
    zfec_throughput,
)
from pyrofling.fec.codec import BLOCK_BYTES, NO_FEC, FecPlan, FrameDecoder, encode_repair, group_count, split_data
from pyrofling.fec.mds import MdsFrameDecoder, encode_mds_repair
from pyrofling.fec.planner import REFERENCE_RATIO, binomial_tail, reference_plan, repair_count, tuned_plan
from pyrofling.netsim.models import GilbertElliottLoss
from pyrofling.units import parse_fraction

STANDARD_KS = (5, 10, 20, 40, 100, 200)
STANDARD_LOSS = ("n=1", "n=2", "iid:0.5%", "iid:1%", "iid:2%", "iid:5%", "ge")
GE_DEFAULT = (0.01, 0.30, 0.5)
SIM_BLOCK_BYTES = 8


# --------------------------------------------------------------------------------------------
# Loss models for the bench
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LossSpec:
    """A loss model by name: ``n=K`` (exactly K of all packets), ``data=K`` (K data packets,
    all repair received), ``iid:P`` (P as 0.01 or 1%), ``ge[:gb,bg,bad]`` (Gilbert–Elliott
    over a continuous stream of frames)."""

    kind: str
    value: float = 0.0
    ge: tuple[float, float, float] = GE_DEFAULT

    @classmethod
    def parse(cls, text: str) -> LossSpec:
        t = text.strip().lower()
        try:
            if t.startswith("n="):
                return cls("n", int(t[2:]))
            if t.startswith("data="):
                return cls("data", int(t[5:]))
            if t.startswith("iid:"):
                p = parse_fraction(t[4:])
                if not 0 <= p <= 1:
                    raise ValueError
                return cls("iid", p)
            if t == "ge":
                return cls("ge")
            if t.startswith("ge:"):
                parts = tuple(float(x) for x in t[3:].split(","))
                if len(parts) != 3 or not all(0 <= x <= 1 for x in parts):
                    raise ValueError
                return cls("ge", ge=(parts[0], parts[1], parts[2]))
        except ValueError:
            pass
        raise ValueError(f"bad loss model {text!r}: use n=2, data=2, iid:1% (or iid:0.01), ge, or ge:0.01,0.3,0.5")

    @classmethod
    def parse_list(cls, text: str) -> list[LossSpec]:
        """A comma list of models; ``ge:a,b,c`` holds commas of its own, so its three parameters stay together."""
        specs = []
        parts = text.split(",")
        i = 0
        while i < len(parts):
            if parts[i].strip().lower().startswith("ge:"):
                specs.append(cls.parse(",".join(parts[i : i + 3])))
                i += 3
            else:
                if parts[i].strip():
                    specs.append(cls.parse(parts[i]))
                i += 1
        if not specs:
            raise ValueError("give at least one loss model, e.g. iid:1%,ge")
        return specs

    @property
    def label(self) -> str:
        if self.kind == "n":
            return f"n={int(self.value)}"
        if self.kind == "data":
            return f"data={int(self.value)}"
        if self.kind == "iid":
            return f"iid {self.value * 100:g}%"
        if self.ge == GE_DEFAULT:
            return "GE"
        return "GE({:g},{:g},{:g})".format(*self.ge)


class _LossDrawer:
    """Draws which of a frame's ``k + f`` packets are lost, per the spec (send order: data, then repair)."""

    def __init__(self, spec: LossSpec, rng: random.Random) -> None:
        self.spec = spec
        self.rng = rng
        gb, bg, bad = spec.ge
        # One chain over the whole stream of frames: a burst may run from one frame into the next.
        self.bursts = GilbertElliottLoss(p_good_bad=gb, p_bad_good=bg, loss_bad=bad, rng=rng)

    def draw(self, k: int, f: int) -> set[int]:
        spec, rng = self.spec, self.rng
        total = k + f
        if spec.kind == "n":
            return set(rng.sample(range(total), min(int(spec.value), total)))
        if spec.kind == "data":
            return set(rng.sample(range(k), min(int(spec.value), k)))
        if spec.kind == "iid":
            p = spec.value
            return {i for i in range(total) if rng.random() < p}
        return {i for i in range(total) if self.bursts.lose()}


# --------------------------------------------------------------------------------------------
# Results
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class Tally:
    trials: int = 0
    success: int = 0
    damaged: int = 0  # frames that lost at least one data block
    mismatches: int = 0  # recovered but not byte-identical (must stay 0)

    def add(self, ok: bool, damaged: bool) -> None:
        self.trials += 1
        self.success += ok
        self.damaged += damaged


def wilson_interval(successes: int, trials: int, z: float = 1.96) -> tuple[float, float]:
    """95 % Wilson score interval for a proportion."""
    if trials == 0:
        return (0.0, 1.0)
    p = successes / trials
    denom = 1 + z * z / trials
    centre = (p + z * z / (2 * trials)) / denom
    half = z * math.sqrt(p * (1 - p) / trials + z * z / (4 * trials * trials)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


# --------------------------------------------------------------------------------------------
# The bench
# --------------------------------------------------------------------------------------------


@dataclass(slots=True)
class FecBenchConfig:
    """What to run.  ``trials`` per (K, loss model); peers get ``peer_trials``."""

    ks: tuple[int, ...] = STANDARD_KS
    losses: tuple[LossSpec, ...] = tuple(LossSpec.parse(s) for s in STANDARD_LOSS)
    ratio: float = REFERENCE_RATIO
    repair_blocks: int | None = None  # fixed count instead of the ratio rule
    trials: int = 4000
    peer_trials: int = 1000
    seed: int = 1
    compare: bool = True
    #: The Reed-Solomon code beside the XOR schemes (near half of the recovery run's time).
    reed_solomon: bool = True
    throughput: bool = True
    throughput_frames: int = 300
    #: Extra candidate degrees to compare (schemes "d=N/peel", "d=N/pyrofling").
    sweep_degrees: tuple[int, ...] = ()

    def repair_for(self, k: int) -> int:
        return self.repair_blocks if self.repair_blocks is not None else repair_count(k, self.ratio)

    def plans(self, k: int) -> dict[str, FecPlan]:
        """The XOR plans compared at frame size ``k``, by planner name."""
        f = self.repair_for(k)
        plans = {"reference": reference_plan(k, f), "tuned": tuned_plan(k, f)}
        for d in self.sweep_degrees:
            plans[f"d={d}"] = FecPlan(f, min(d, k), min(d, k)) if f else NO_FEC
        return plans

    def schemes(self) -> list[str]:
        """Every scheme name, in report order."""
        xor = [
            f"{p}/{d}"
            for p in ("reference", "tuned", *(f"d={d}" for d in self.sweep_degrees))
            for d in ("peel", "pyrofling")
        ]
        return ["none", *xor, "rs/pyrofling", "zfec", "raptorq", "rs-exact", "mds-exact"]


class Progress:
    """A one-line progress bar on a terminal, a line per step otherwise."""

    def __init__(self, total: int, stream: TextIO | None) -> None:
        self.total = max(1, total)
        self.done = 0
        self.stream = stream
        self.tty = bool(stream is not None and stream.isatty())
        self.started = time.monotonic()

    def step(self, label: str, amount: int = 1) -> None:
        self.done += amount
        if self.stream is None:
            return
        frac = min(1.0, self.done / self.total)
        elapsed = time.monotonic() - self.started
        eta = elapsed / frac - elapsed if frac > 0 else 0.0
        if self.tty:
            bar = "#" * int(frac * 30)
            self.stream.write(f"\r[{bar:<30}] {frac * 100:5.1f}%  {label:<28} eta {eta:4.0f}s")
            self.stream.flush()
        else:
            self.stream.write(f"progress {frac * 100:5.1f}% {label} (eta {eta:.0f}s)\n")

    def close(self) -> None:
        if self.stream is not None and self.tty:
            self.stream.write("\r" + " " * 80 + "\r")
            self.stream.flush()


def _decode_xor(
    frame: bytes,
    data: list[memoryview],
    repair: list[bytes],
    plan: FecPlan,
    seed: int,
    lost: set[int],
    *,
    eliminate: bool,
    block_bytes: int,
) -> bytes | None:
    """Feed the surviving packets in send order; the frame if it completes."""
    dec = FrameDecoder(len(frame), plan, seed, block_bytes=block_bytes, eliminate=eliminate)
    k = len(data)
    for i, data_block in enumerate(data):
        if i not in lost and dec.add_data(i, data_block):
            return dec.frame()
    for j, repair_block in enumerate(repair):
        if k + j not in lost and dec.add_repair(j, repair_block):
            return dec.frame()
    return None


def _decode_mds(data: list[memoryview], f: int, lost: set[int]) -> bool | None:
    """The negotiated Reed–Solomon code with the frame's blocks widened to the wire's 1024 bytes (its groups and
    limits are in wire blocks).  True: rebuilt byte-exact; False: rebuilt wrong; None: not rebuilt."""
    wide = b"".join(bytes(b) * (BLOCK_BYTES // SIM_BLOCK_BYTES) for b in data[:-1]) + bytes(data[-1])
    k = len(data)
    repair = encode_mds_repair(wide, f)
    dec = MdsFrameDecoder(len(wide), f)
    for i, data_block in enumerate(split_data(wide)):
        if i not in lost:
            dec.add_data(i, data_block)
    for j, repair_block in enumerate(repair):
        if dec.complete:
            break
        if k + j not in lost:
            dec.add_repair(j, repair_block)
    return dec.frame() == wide if dec.complete else None


def run_recovery(cfg: FecBenchConfig, progress: Progress | None = None) -> dict[tuple[str, int, str], Tally]:
    """Recovery tallies keyed by (scheme, K, loss label)."""
    peers = peers_available() if cfg.compare else {"zfec": False, "raptorq": False}
    zf = Zfec() if peers["zfec"] else None
    rq = Raptorq() if peers["raptorq"] else None
    tallies: dict[tuple[str, int, str], Tally] = {}
    bb = SIM_BLOCK_BYTES
    for k in cfg.ks:
        f = cfg.repair_for(k)
        plans = cfg.plans(k)
        xor_schemes = [f"{p}/{d}" for p in plans for d in ("peel", "pyrofling")]
        for spec in cfg.losses:
            rng = random.Random(f"{cfg.seed}/{k}/{spec.label}")
            drawer = _LossDrawer(spec, rng)
            label = spec.label
            for name in ("none", *xor_schemes, "rs/pyrofling", "zfec", "raptorq"):
                tallies[(name, k, label)] = Tally()
            for trial in range(cfg.trials):
                lost = drawer.draw(k, f)
                frame = rng.randbytes(k * bb - rng.randrange(bb))
                seed = rng.getrandbits(32)
                damaged = any(i < k for i in lost)
                tallies[("none", k, label)].add(not damaged, damaged)
                if not damaged:
                    # Systematic code: nothing to rebuild, every scheme delivers.
                    for name in (*xor_schemes, "rs/pyrofling", "zfec", "raptorq"):
                        if (name == "zfec" and zf is None) or (name == "raptorq" and rq is None):
                            continue
                        if name == "rs/pyrofling" and not cfg.reed_solomon:
                            continue
                        if name in ("zfec", "raptorq") and trial >= cfg.peer_trials:
                            continue
                        tallies[(name, k, label)].add(True, False)
                    continue
                data = split_data(frame, block_bytes=bb)
                enough = k + f - len(lost) >= k
                for planner, plan in plans.items():
                    repair = encode_repair(frame, plan, seed, block_bytes=bb)
                    peeled: bytes | None = None
                    for decoder in ("peel", "pyrofling"):
                        name = f"{planner}/{decoder}"
                        out: bytes | None = None
                        if enough and f:
                            if decoder == "peel" or peeled is None:
                                out = _decode_xor(
                                    frame, data, repair, plan, seed, lost, eliminate=decoder != "peel", block_bytes=bb
                                )
                            else:
                                out = peeled  # peeling succeeded, so elimination does too
                        if decoder == "peel":
                            peeled = out
                        t = tallies[(name, k, label)]
                        if out is not None and out != frame:
                            t.mismatches += 1
                        t.add(out == frame, True)
                if cfg.reed_solomon:
                    t = tallies[("rs/pyrofling", k, label)]
                    rebuilt = _decode_mds(data, f, lost) if enough and f else None
                    t.mismatches += rebuilt is False
                    t.add(rebuilt is True, True)
                if trial < cfg.peer_trials:
                    if zf is not None:
                        ok = False
                        if enough and f:
                            blocks = [bytes(b).ljust(bb, b"\0") for b in data]
                            rep = zf.encode(blocks, f)
                            received = [(i, b) for i, b in enumerate(blocks + rep) if i not in lost]
                            out = zf.decode(k, f, received)
                            ok = out is not None and out[: len(frame)] == frame
                        tallies[("zfec", k, label)].add(ok, True)
                    if rq is not None:
                        ok = False
                        if enough and f:
                            packets = rq.encode(frame, bb, f)
                            survivors = (p for i, p in enumerate(packets) if i not in lost)
                            out = rq.decode(len(frame), bb, survivors)
                            ok = out == frame
                        tallies[("raptorq", k, label)].add(ok, True)
            if progress is not None:
                progress.step(f"K={k} {label}")
    return {key: t for key, t in tallies.items() if t.trials}


def run_throughput(cfg: FecBenchConfig, progress: Progress | None = None) -> dict[tuple[str, int], Throughput]:
    """Encode/decode MB/s per (scheme, K) with 1024-byte blocks, 0/1/2 lost data blocks."""
    peers = peers_available() if cfg.compare else {"zfec": False, "raptorq": False}
    out: dict[tuple[str, int], Throughput] = {}
    rng = random.Random(cfg.seed)
    for k in cfg.ks:
        f = cfg.repair_for(k)
        frame = rng.randbytes(k * 1024)
        seeds = [rng.getrandbits(32) for _ in range(cfg.throughput_frames)]
        for planner, plan in cfg.plans(k).items():
            tp = xor_throughput(frame, plan, seeds)
            for decoder in ("peel", "pyrofling"):
                out[(f"{planner}/{decoder}", k)] = tp
        if f:
            out[("rs/pyrofling", k)] = mds_throughput(frame, f, cfg.throughput_frames)
        if peers["zfec"] and f and k + f <= 256:  # zfec's limit: 256 blocks in all
            out[("zfec", k)] = zfec_throughput(frame, f, cfg.throughput_frames)
        if peers["raptorq"] and f:
            out[("raptorq", k)] = raptorq_throughput(frame, f, cfg.throughput_frames)
        if progress is not None:
            progress.step(f"throughput K={k}")
    return out


def build_rows(
    cfg: FecBenchConfig,
    tallies: dict[tuple[str, int, str], Tally],
    speed: dict[tuple[str, int], Throughput],
) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for (scheme, k, label), t in tallies.items():
        tp = speed.get((scheme, k))
        f = cfg.repair_for(k)
        plan = cfg.plans(k).get(scheme.split("/")[0])
        success = t.success / t.trials
        lo, hi = wilson_interval(t.success, t.trials)
        zf = tallies.get(("zfec", k, label))
        row: dict[str, Any] = {
            "scheme": scheme,
            "k": k,
            "repair_blocks": 0 if scheme == "none" else f,
            "degrees": [plan.degree_even, plan.degree_odd] if plan else None,
            "overhead": 0.0 if scheme == "none" else f / k,
            "loss_model": label,
            "trials": t.trials,
            "frame_success": success,
            "residual_frame_loss": 1 - success,
            "residual_frame_loss_ci95": [1 - hi, 1 - lo],
            "damaged_frames": t.damaged,
            "recovered_share": (t.success - (t.trials - t.damaged)) / t.damaged if t.damaged else None,
            "mismatches": t.mismatches,
            "zfec_frame_success": zf.success / zf.trials if zf and zf.trials else None,
            "encode_MBps": tp.encode_MBps if tp else None,
            "decode_MBps": tp.decode_MBps.get(1) if tp else None,
            "decode_MBps_by_losses": {str(n): v for n, v in tp.decode_MBps.items()} if tp else None,
            "incremental_decode_MBps_by_losses": (
                {str(n): v for n, v in tp.incremental_decode_MBps.items()}
                if tp and tp.incremental_decode_MBps
                else None
            ),
        }
        rows.append(row)
    # The best any code can do at this overhead (an MDS code fails iff more than F of the
    # K + F packets are lost), computed exactly where the loss model allows; and the same for the grouped
    # Reed–Solomon code pyrofling peers negotiate (each group is MDS: it fails iff a group loses more than its
    # repair count), exact for i.i.d. loss.
    for k in cfg.ks:
        f = cfg.repair_for(k)
        for spec in cfg.losses:
            exact = {}
            if spec.kind == "iid":
                exact["mds-exact"] = binomial_tail(k + f, spec.value, f)
                if f:
                    exact["rs-exact"] = rs_residual(k, f, spec.value)
            elif spec.kind in ("n", "data"):
                exact["mds-exact"] = 1.0 if spec.value > f else 0.0
            for scheme, loss in exact.items():
                rows.append(_exact_row(scheme, k, f, spec.label, loss))
    return rows


def rs_residual(k: int, f: int, p: float) -> float:
    """Exact frame loss of the grouped Reed–Solomon code (protocol.md §7.8) under i.i.d. loss ``p``."""
    groups = group_count(k)
    survive = 1.0
    for g in range(groups):
        kg, fg = len(range(g, k, groups)), len(range(g, f, groups))
        survive *= 1.0 - binomial_tail(kg + fg, p, fg)
    return 1.0 - survive


def _exact_row(scheme: str, k: int, f: int, label: str, loss: float) -> dict[str, Any]:
    return {
        "scheme": scheme,
        "k": k,
        "repair_blocks": f,
        "degrees": None,
        "overhead": f / k,
        "loss_model": label,
        "trials": 0,
        "frame_success": 1.0 - loss,
        "residual_frame_loss": loss,
        "residual_frame_loss_ci95": [loss, loss],
        "damaged_frames": None,
        "recovered_share": None,
        "mismatches": 0,
        "zfec_frame_success": None,
        "encode_MBps": None,
        "decode_MBps": None,
        "decode_MBps_by_losses": None,
        "incremental_decode_MBps_by_losses": None,
    }


def run(cfg: FecBenchConfig, *, progress_stream: TextIO | None = sys.stderr) -> dict[str, Any]:
    """Run recovery and throughput; the JSON document ``--json`` prints."""
    steps = len(cfg.ks) * len(cfg.losses) + (len(cfg.ks) if cfg.throughput else 0)
    progress = Progress(steps, progress_stream)
    t0 = time.monotonic()
    tallies = run_recovery(cfg, progress)
    speed = run_throughput(cfg, progress) if cfg.throughput else {}
    progress.close()
    peers = peers_available() if cfg.compare else {"zfec": False, "raptorq": False}
    return {
        "bench": "fec",
        "config": {
            "ks": list(cfg.ks),
            "losses": [s.label for s in cfg.losses],
            "ratio": cfg.ratio,
            "repair_blocks": cfg.repair_blocks,
            "trials": cfg.trials,
            "peer_trials": cfg.peer_trials,
            "seed": cfg.seed,
            "peers": peers,
            "schemes": cfg.schemes(),
        },
        "elapsed_s": time.monotonic() - t0,
        "rows": build_rows(cfg, tallies, speed),
    }
