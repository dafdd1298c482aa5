"""``pyrofling pair`` (pair this viewer with a host, once) and ``pyrofling paired`` (list, revoke, forget)."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import logging
import socket
import sys
from pathlib import Path

from pyrofling.cli.options import (
    PASSWORD_ENV,
    add_logging_options,
    add_pairing_dir_option,
    given_password,
    install_stop,
    pairing_dir,
    refuse,
    setup_logging,
)
from pyrofling.client.config import ViewerConfig
from pyrofling.client.uri import parse_uri
from pyrofling.client.viewer import Viewer
from pyrofling.pairing import HostPairings, PairingStoreError, ViewerPairings
from pyrofling.wire import KickFlags

log = logging.getLogger("pyrofling")


def add_pair(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "pair",
        help="pair this viewer with a host once, with the code it shows; later joins need no code",
        description="Prove the host's pairing code (or password) once. Both sides then keep a credential bound to "
        "the host's key: pyrofling view pyro://HOST joins without a code, sealed, and refuses anything at that "
        "address that is not that host. A pairing code works once, within 10 minutes (the host then shows the "
        "next). The host lists and revokes pairings with pyrofling paired.",
    )
    p.add_argument("uri", help="the host: pyro://HOST[:PORT]")
    p.add_argument(
        "--code",
        default=None,
        help=f"the pairing code the host showed, or its password (seen by anyone who lists processes: rather let "
        f"it ask, or set ${PASSWORD_ENV}, or --code-file)",
    )
    p.add_argument(
        "--code-file", type=Path, default=None, metavar="FILE", help="read the code from the first line of FILE"
    )
    p.add_argument(
        "--name",
        default=socket.gethostname(),
        help="how the host lists this viewer (default: this machine's name)",
    )
    p.add_argument("--timeout", type=float, default=10.0, metavar="S", help="give up after this long (default 10 s)")
    add_pairing_dir_option(p)
    add_logging_options(p)
    p.set_defaults(func=run_pair)

    q = sub.add_parser(
        "paired",
        help="list the viewers this host admits without a code and the hosts this viewer paired with; revoke",
        description="Pairings kept on this machine: as a host, the viewers it admits without a code; as a viewer, "
        "the hosts it joins without one.",
    )
    q.add_argument("action", nargs="?", choices=("list", "revoke", "forget"), default="list")
    q.add_argument(
        "which",
        nargs="?",
        help="revoke: a viewer's or browser's id (a prefix will do) or name; forget: a host's id or address",
    )
    add_pairing_dir_option(q)
    q.set_defaults(func=run_paired)


def _code_from_file_or_prompt(path: Path | None) -> str | None:
    """The code from ``path``'s first line, else asked for on the terminal (not echoed); None without either."""
    if path is not None:
        lines = path.read_text().splitlines()
        return lines[0].strip() or None if lines else None
    if not sys.stdin.isatty():
        return None
    try:
        return getpass.getpass("the host's pairing code: ").strip() or None
    except (EOFError, KeyboardInterrupt):
        return None


def run_pair(args: argparse.Namespace) -> int:
    setup_logging(args)
    args.password = args.code
    try:
        code = given_password(args) or _code_from_file_or_prompt(args.code_file)
    except OSError as exc:
        return refuse("pair", f"cannot read the code from {args.code_file}: {exc.strerror or exc}")
    if not code:
        return refuse(
            "pair",
            f"give the host's pairing code: run this on a terminal (it asks), or set ${PASSWORD_ENV}, or --code-file",
        )
    if not args.name.strip() or len(args.name.encode()) > 32:
        return refuse("pair", "--name must be 1 to 32 bytes")
    try:
        uri = parse_uri(args.uri)
    except ValueError as exc:
        return refuse("pair", str(exc))
    cfg = ViewerConfig(
        host=uri.host,
        port=uri.port,
        flags=KickFlags.NONE,
        password=code,
        pair_as=args.name.strip(),
        pairing_dir=pairing_dir(args),
        reconnect=False,
        duration_s=args.timeout,
    )

    async def main() -> int:
        viewer = Viewer(cfg)
        install_stop(asyncio.get_running_loop(), viewer.stop)
        task = asyncio.create_task(viewer.run())
        while not task.done() and not viewer.paired:
            await asyncio.sleep(0.02)
        viewer.stop()
        await task
        if not viewer.paired:
            return refuse("pair", viewer.failure or f"no answer from {cfg.address} in {args.timeout:g} s", 1)
        print(f"paired with {cfg.address}: pyrofling view {args.uri} now joins without a code")
        return 0

    return asyncio.run(main())


def run_paired(args: argparse.Namespace) -> int:
    directory = pairing_dir(args)
    hosts, viewers = HostPairings(directory), ViewerPairings(directory)
    try:
        if args.action == "list":
            rows = viewers.entries()
            kept = hosts.entries()
            admitted = [e for e in kept if e.side == "viewer"]
            browsers = [e for e in kept if e.side == "browser"]
            print(f"viewers this host admits without a code ({directory / 'host.json'}):")
            for e in admitted:
                print(f"  {e.id[:16]}  {e.name:<32}  paired {e.paired_at}")
            if not admitted:
                print("  none (pair one: pyrofling host --pairing-code, then pyrofling pair on the viewer)")
            print("browsers this host admits without a link (over HTTPS; revoke by id):")
            for e in browsers:
                print(f"  {e.id[:16]}  {e.name:<32}  since {e.paired_at}, {e.detail}")
            if not browsers:
                print("  none")
            print(f"hosts this viewer joins without a code ({directory / 'viewer.json'}):")
            for e in rows:
                print(f"  {e.id[:16]}  {e.name:<32}  paired {e.paired_at}")
            if not rows:
                print("  none")
            return 0
        if not args.which:
            return refuse("paired", f"{args.action} which? give an id (a prefix will do), a name or an address")
        gone = hosts.revoke(args.which) if args.action == "revoke" else viewers.forget(args.which)
    except PairingStoreError as exc:
        return refuse("paired", str(exc))
    if not gone:
        return refuse("paired", f"nothing matches {args.which!r}: see pyrofling paired list", 1)
    what = "revoked" if args.action == "revoke" else "forgot host"
    for k in gone:
        print(f"{what} {k[:16]}")
    return 0
