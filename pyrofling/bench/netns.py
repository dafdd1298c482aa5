"""A second host on this machine, for tests and benches: a network namespace joined to this one by a veth pair.

WebRTC's ICE (libnice in Janus, Chromium's) gathers no candidates on loopback, so an SFU and the browsers that
watch it need a real interface between them: ``with Namespace() as ns`` gives one, ``ns.outside`` the address on
this side, ``ns.inside`` the namespace's, ``ns.command(argv)`` a command run in it. Needs root (CAP_NET_ADMIN)
and iproute2's ``ip``.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
from types import TracebackType


def missing() -> str | None:
    """Why a namespace cannot be made here, or None."""
    if shutil.which("ip") is None:
        return "iproute2's ip is not installed (apt-get install iproute2)"
    if os.geteuid() != 0:
        return "making a network namespace needs root (CAP_NET_ADMIN)"
    return None


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")


class Namespace:
    """A namespace with its loopback up and a veth pair to this one, on a /30 of 10.x.y.0 of its own."""

    def __init__(self) -> None:
        reason = missing()
        if reason is not None:
            raise RuntimeError(reason)
        tag = secrets.token_hex(3)
        self.name = f"pyrofling-{tag}"
        self.outside_link, self.inside_link = f"pf{tag}a", f"pf{tag}b"
        net = f"10.{secrets.randbelow(200) + 50}.{secrets.randbelow(250)}"
        self.outside, self.inside = f"{net}.1", f"{net}.2"

    def command(self, argv: list[str]) -> list[str]:
        return ["ip", "netns", "exec", self.name, *argv]

    def __enter__(self) -> Namespace:
        _ip("netns", "add", self.name)
        try:
            _ip("link", "add", self.outside_link, "type", "veth", "peer", "name", self.inside_link)
            _ip("link", "set", self.inside_link, "netns", self.name)
            _ip("addr", "add", f"{self.outside}/30", "dev", self.outside_link)
            _ip("link", "set", self.outside_link, "up")
            for args in (("addr", "add", f"{self.inside}/30", "dev", self.inside_link),
                         ("link", "set", self.inside_link, "up"), ("link", "set", "lo", "up")):  # fmt: skip
                _ip("-n", self.name, *args)
        except BaseException:
            self.close()
            raise
        return self

    def link(self, other: Namespace) -> tuple[str, str]:
        """A veth pair straight between this namespace and ``other`` (a second site's link, not through this one):
        (this side's address, the other's), on a /30 of its own."""
        tag = secrets.token_hex(3)
        here, there = f"pf{tag}c", f"pf{tag}d"
        net = f"10.{secrets.randbelow(200) + 50}.{secrets.randbelow(250)}"
        _ip("link", "add", here, "type", "veth", "peer", "name", there)
        _ip("link", "set", here, "netns", self.name)
        _ip("link", "set", there, "netns", other.name)
        for ns, link, address in ((self, here, f"{net}.1"), (other, there, f"{net}.2")):
            _ip("-n", ns.name, "addr", "add", f"{address}/30", "dev", link)
            _ip("-n", ns.name, "link", "set", link, "up")
        # Each reaches the other's address on this side over the link (not through this namespace, which does
        # not forward): what a second site's public address is to the first.
        _ip("-n", self.name, "route", "add", f"{other.inside}/32", "via", f"{net}.2")
        _ip("-n", other.name, "route", "add", f"{self.inside}/32", "via", f"{net}.1")
        return f"{net}.1", f"{net}.2"

    def lose_udp_sent(self, share: float) -> None:
        """Drop ``share`` (0..1) of the UDP datagrams the namespace sends this way, at random (nftables, on this
        end of the pair as they arrive: the sender sees no error, as on a lossy link); 0: none again. For an SFU
        inside: its spectators' link loses that much, what it receives nothing."""
        if shutil.which("nft") is None:
            raise RuntimeError("nftables's nft is not installed (apt-get install nftables)")
        subprocess.run(["nft", "delete", "table", "netdev", self._loss_table], capture_output=True, timeout=10)
        if share <= 0:
            return
        chain = f"{{ type filter hook ingress device {self.outside_link} priority 0 ; }}"
        drop = f"meta l4proto udp numgen random mod 10000 < {round(share * 1e4)} counter drop"
        for rule in (f"add table netdev {self._loss_table}", f"add chain netdev {self._loss_table} lossy {chain}",
                     f"add rule netdev {self._loss_table} lossy {drop}"):  # fmt: skip
            done = subprocess.run(["nft", *rule.split()], capture_output=True, text=True, timeout=10)
            if done.returncode != 0:
                raise RuntimeError(f"nft {rule}: {done.stderr.strip()}")

    def udp_lost(self) -> int:
        """Datagrams :meth:`lose_udp_sent` dropped so far."""
        done = subprocess.run(["nft", "list", "table", "netdev", self._loss_table], capture_output=True, text=True,
                              timeout=10)  # fmt: skip
        found = re.search(r"counter packets (\d+)", done.stdout)
        return int(found.group(1)) if found else 0

    @property
    def _loss_table(self) -> str:
        return f"pyrofling_loss_{self.outside_link}"

    def close(self) -> None:
        """Remove the namespace (its end of the pair goes with it, and so this end, and any loss on it)."""
        if shutil.which("nft") is not None:
            subprocess.run(["nft", "delete", "table", "netdev", self._loss_table], capture_output=True, timeout=10)
        subprocess.run(["ip", "link", "del", self.outside_link], capture_output=True, timeout=10)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, timeout=10)

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
