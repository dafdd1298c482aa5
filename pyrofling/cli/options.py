"""What every command shares: value types that say what is wrong, option groups, logging, stopping.

A value type checks one flag at parse time, so a wrong flag is refused with a
message that says how to fix it before any work starts: numbers within their
range, addresses, fractions written as 0.25 or 25 %, and output files whose
directory exists and can be written.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from pyrofling.files import CONFIG_DIR_ENV, default_config_dir, secret_file_problem, unwritable
from pyrofling.units import parse_duration_s, parse_fraction
from pyrofling.wire import VideoCodec

#: Where a password may come from instead of the command line (which other users can read).
PASSWORD_ENV = "PYROFLING_PASSWORD"


# --------------------------------------------------------------------------------------------
# Value types
# --------------------------------------------------------------------------------------------


def whole_number(low: int, high: int, unit: str, *, even: bool = False) -> Callable[[str], int]:
    """A whole number of ``unit`` in ``low..high`` (``even``: and even)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of {unit}") from None
        if not low <= value <= high or (even and value % 2):
            parity = ", even" if even else ""
            raise argparse.ArgumentTypeError(f"{value} {unit} is out of range {low}..{high}{parity}")
        return value

    return parse


def number(low: float, high: float, unit: str = "seconds", *, above_low: bool = False) -> Callable[[str], float]:
    """A number of ``unit`` in ``low..high`` (``above_low``: strictly more than ``low``)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of {unit}") from None
        if not (low < value if above_low else low <= value) or not value <= high:
            span = f"more than {low:g}, up to {high:g}" if above_low else f"{low:g}..{high:g}"
            raise argparse.ArgumentTypeError(f"{text} {unit} is out of range {span}")
        return value

    return parse


def number_list(low: float, high: float, unit: str) -> Callable[[str], tuple[float, ...]]:
    """A comma list of numbers of ``unit``, each in ``low..high`` (at least one)."""
    one = number(low, high, unit)

    def parse(text: str) -> tuple[float, ...]:
        values = tuple(one(x.strip()) for x in text.split(",") if x.strip())
        if not values:
            raise argparse.ArgumentTypeError(f"{text!r}: give numbers of {unit} separated by commas, e.g. 0.25,0.5")
        return values

    return parse


def fraction(what: str, *, zero_ok: bool = True, upper: float = 1.0, upper_ok: bool = True) -> Callable[[str], float]:
    """A share written as 0.25 or 25%, above 0 (or from 0, ``zero_ok``) and up to ``upper``."""

    def parse(text: str) -> float:
        try:
            value = parse_fraction(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a {what} (write 0.02 or 2%)") from None
        above_low = value >= 0 if zero_ok else value > 0
        below_high = value <= upper if upper_ok else value < upper
        if not (above_low and below_high):
            if zero_ok and upper_ok:
                raise argparse.ArgumentTypeError(f"{text!r} is not between 0 and {upper:g} (the {what})")
            low = "at least 0" if zero_ok else "above 0"
            high = f"at most {upper:g}" if upper_ok else f"below {upper:g}"
            raise argparse.ArgumentTypeError(f"{text!r}: the {what} must be {low} and {high}")
        return value

    return parse


probability = fraction("probability")
port_number = whole_number(0, 65535, "(port)")


def duration(low_s: float, high_s: float, span: str) -> Callable[[str], float]:
    """Seconds, or minutes / hours with an m / h suffix (30m, 1.5h), in ``low_s..high_s`` (``span`` in words)."""

    def parse(text: str) -> float:
        try:
            seconds = parse_duration_s(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a duration (e.g. 600, 30m, 2h)") from None
        if not low_s <= seconds <= high_s:
            raise argparse.ArgumentTypeError(f"{text} is out of range: {span} (e.g. 600, 30m, 2h)")
        return seconds

    return parse


#: ``--duration`` of the long-running commands: stop after this long (more than nothing, up to a week).
run_time = number(0.0, 7 * 24 * 3600.0, above_low=True)


def host_port(text: str, *, default_host: str = "127.0.0.1") -> tuple[str, int]:
    """``HOST:PORT``, ``[V6]:PORT`` or ``PORT`` → (host, port)."""
    t = text.strip()
    host = default_host
    if t.startswith("["):
        end = t.find("]")
        if end < 0 or not t[end + 1 :].startswith(":"):
            raise argparse.ArgumentTypeError(f"{text!r}: write IPv6 addresses as [ADDR]:PORT")
        host, port_text = t[1:end], t[end + 2 :]
    elif t.count(":") == 1:
        host, port_text = t.split(":")
    elif ":" in t:
        raise argparse.ArgumentTypeError(f"{text!r}: write IPv6 addresses as [ADDR]:PORT")
    else:
        port_text = t
    try:
        port = int(port_text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: the port must be a number, e.g. 127.0.0.1:9000") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r}: port {port} is out of range 0..65535")
    return host or default_host, port


def int_list(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give whole numbers separated by commas, e.g. 20,100") from None
    if not values or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: give positive whole numbers, e.g. 20,100")
    return values


#: The codecs' names on the command line (``host --codec``, ``view --codecs``).
CODEC_FLAGS = {"h264": VideoCodec.H264, "hevc": VideoCodec.H265, "av1": VideoCodec.AV1}


def choice_list(choices: Sequence[str]) -> Callable[[str], tuple[str, ...]]:
    """A comma list of some of ``choices`` (at least one)."""

    def parse(text: str) -> tuple[str, ...]:
        picked = tuple(c.strip() for c in text.split(",") if c.strip())
        bad = [c for c in picked if c not in choices]
        if bad or not picked:
            raise argparse.ArgumentTypeError(f"{text!r}: give a comma list of {', '.join(choices)}")
        return picked

    return parse


def gilbert_elliott(text: str) -> tuple[float, float, float]:
    parts = text.split(",")
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"{text!r}: give GOOD_TO_BAD,BAD_TO_GOOD,LOSS_WHEN_BAD, e.g. 0.01,0.3,0.5")
    a, b, c = (probability(p) for p in parts)
    return a, b, c


def outages(text: str) -> tuple[float, float, float]:
    """``MEAN_S,MIN_MS,MAX_MS`` (or ``MEAN_S,MS``): outages starting every MEAN_S on average, MIN..MAX ms long."""
    example = "e.g. 2,10 (10 ms every 2 s on average) or 2,5,30"
    parts = text.split(",")
    try:
        values = [float(p) for p in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give MEAN_SECONDS,MIN_MS[,MAX_MS], {example}") from None
    if len(values) not in (2, 3) or not all(math.isfinite(v) for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: give MEAN_SECONDS,MIN_MS[,MAX_MS], {example}")
    mean_s, low_ms = values[0], values[1]
    high_ms = values[2] if len(values) == 3 else low_ms
    if mean_s <= 0 or low_ms <= 0 or high_ms < low_ms:
        raise argparse.ArgumentTypeError(f"{text!r}: need MEAN_SECONDS > 0 and 0 < MIN_MS <= MAX_MS, {example}")
    return mean_s, low_ms / 1000, high_ms / 1000


def output_file(*suffixes: str) -> Callable[[str], Path]:
    """A file this command will write: its directory must exist and take a new file (checked now, by writing)."""

    def parse(text: str) -> Path:
        path = Path(text).expanduser()
        problem = unwritable(path)
        if problem:
            raise argparse.ArgumentTypeError(problem)
        if suffixes and path.suffix.lower() not in suffixes:
            raise argparse.ArgumentTypeError(f"{text}: the file name must end in {' or '.join(suffixes)}")
        return path

    return parse


def secret_file(text: str) -> Path:
    """A file this command will write a secret to (a link's key, a pairing code): checked now as
    :func:`~pyrofling.files.write_private` will write it (no link, this user's, a folder others cannot swap it in)."""
    path = Path(text).expanduser()
    problem = secret_file_problem(path) or unwritable(path)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return path


def output_dir(text: str) -> Path:
    """A directory this command will write files into: made now if missing, and checked to take a new file."""
    path = Path(text).expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise argparse.ArgumentTypeError(f"{text}: cannot make the directory ({exc.strerror})") from None
    problem = unwritable(path / ".pyrofling-check")
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return path


# --------------------------------------------------------------------------------------------
# Shared flags
# --------------------------------------------------------------------------------------------


def add_logging_options(p: argparse.ArgumentParser) -> None:
    """-v / -q, accepted after the command as well as before it."""
    g = p.add_argument_group("output")
    g.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS, help="more detail (-vv: debugging)")
    g.add_argument("-q", "--quiet", action="store_true", default=argparse.SUPPRESS, help="only warnings and errors")


#: The default of --thread-priority, where set: "normal" keeps every command on this machine from raising its
#: threads (a shared machine, a test suite whose other tests must keep their turns).
THREAD_PRIORITY_ENV = "PYROFLING_THREAD_PRIORITY"
THREAD_PRIORITIES = ("auto", "normal")


def _thread_priority(text: str) -> str:
    if text not in THREAD_PRIORITIES:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not one of auto, normal (check ${THREAD_PRIORITY_ENV} if you did not write it)"
        )
    return text


def add_thread_priority_option(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """--thread-priority: whether the timing threads ask the system for a raised or real-time priority."""
    p.add_argument(
        "--thread-priority",
        type=_thread_priority,  # applied to the default too: a wrong $PYROFLING_THREAD_PRIORITY is refused by name
        default=os.environ.get(THREAD_PRIORITY_ENV, "auto"),
        metavar="{auto,normal}",
        help="auto (default): the threads that keep the beat ask for real-time scheduling, the encoder and the "
        "decoder for real-time below them (each steps down to raised if it needs more than half of its CPU), the "
        "event loops for a raised priority, where the system allows it (root, CAP_SYS_NICE or an rtprio/nice "
        f"limit; a line at start says what was granted); normal: leave every thread as it is. ${THREAD_PRIORITY_ENV} "
        "sets the default",
    )


def add_stream_size_options(
    p: argparse.ArgumentParser | argparse._ArgumentGroup,
    *,
    size: tuple[int, int] = (1280, 720),
    bitrate_kbits: int = 10_000,
) -> None:
    """Picture size, rate and bitrate of a stream (on a parser, or on one of its groups)."""
    width, height = size
    p.add_argument("--width", type=whole_number(64, 8192, "pixels", even=True), default=width, help=f"default {width}")
    p.add_argument(
        "--height", type=whole_number(64, 8192, "pixels", even=True), default=height, help=f"default {height}"
    )
    p.add_argument("--fps", type=whole_number(1, 240, "fps"), default=60, help="frames per second (default 60)")
    p.add_argument(
        "--bitrate-kbits",
        type=whole_number(1, 10_000_000, "kbit/s"),
        default=bitrate_kbits,
        help=f"default {bitrate_kbits}",
    )


def add_viewer_security_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group(
        "security",
        "A viewer that paired with the host (pyrofling pair) needs nothing here. With a password or a pairing, "
        "the viewer accepts only a host that proves it knows it and seals the whole stream (control, pictures, "
        "pad); anything else is refused, never watched in the clear.",
    )
    g.add_argument(
        "--password",
        default=None,
        metavar="SECRET",
        help=f"the host's password or pairing code, if it asks for one (or set ${PASSWORD_ENV})",
    )
    g.add_argument(
        "--allow-open-host",
        action="store_true",
        help="watch the host even if it does not authenticate (although a password is given or this viewer paired "
        "with it): the stream and your pad then travel in the clear, to whoever answers at that address",
    )
    add_pairing_dir_option(g)


def add_pairing_dir_option(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    p.add_argument(
        "--pairing-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"where pairings (and the browsers a host remembers) are kept (default ${CONFIG_DIR_ENV}, else "
        "~/.config/pyrofling)",
    )


def pairing_dir(args: argparse.Namespace) -> Path:
    return getattr(args, "pairing_dir", None) or default_config_dir()


def given_password(args: argparse.Namespace) -> str | None:
    """--password, else $PYROFLING_PASSWORD (which keeps the secret out of the process list)."""
    return getattr(args, "password", None) or os.environ.get(PASSWORD_ENV) or None


def viewer_password(args: argparse.Namespace) -> str | None:
    password = given_password(args)
    if password is not None and getattr(args, "native", False):
        raise ValueError("--native viewers cannot authenticate: drop --native to use a password")
    return password


# --------------------------------------------------------------------------------------------
# Running a command
# --------------------------------------------------------------------------------------------


def setup_logging(args: argparse.Namespace, *, default: int = logging.INFO) -> None:
    """``default`` for the command (INFO for the ones a person watches, WARNING for benches); -v, -q adjust."""
    level = logging.WARNING if getattr(args, "quiet", False) else default
    for _ in range(getattr(args, "verbose", 0)):
        level = max(logging.DEBUG, level - 10)
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("pyrofling").setLevel(level)
    if getattr(args, "verbose", 0) >= 2:
        logging.getLogger().setLevel(logging.DEBUG)


def install_stop(loop: asyncio.AbstractEventLoop, stop: Callable[[], None]) -> None:
    """Ctrl-C and SIGTERM stop the command cleanly (statistics written, recordings finished)."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop)


def refuse(command: str, problem: str, status: int = 2) -> int:
    """Say what is wrong in one line, the way argparse does, and return the exit status."""
    print(f"pyrofling {command}: {problem}", file=sys.stderr)
    return status


def exit_now(status: int) -> None:
    """Leave without exit handlers (statistics already written): PortAudio's would wait for a stuck device."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def lingering_workers() -> list[str]:
    """The names of pyrofling's worker threads still running once a command has stopped them all (each was
    joined with a timeout: a decoder or an audio device that did not finish in it)."""
    return sorted(t.name for t in threading.enumerate() if t.name.startswith("pyrofling-") and t.is_alive())


def leave_if_workers_linger(status: int, log: logging.Logger) -> None:
    """Exit at once, without the interpreter's teardown, when a worker thread outlived its join: tearing the
    interpreter down under a thread that is inside FFmpeg or PortAudio can crash the process (after its
    statistics were written, but with a signal's exit status instead of ``status``)."""
    if names := lingering_workers():
        log.warning("%s still running after the stop; leaving without waiting for %s", ", ".join(names),
                    "it" if len(names) == 1 else "them")  # fmt: skip
        exit_now(status)
