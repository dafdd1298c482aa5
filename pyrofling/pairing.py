"""Where pairings are kept (protocol.md §7.7): the host's paired viewers, the viewer's paired hosts.

Two small JSON files in the user's configuration directory (``$PYROFLING_CONFIG_DIR``,
else ``$XDG_CONFIG_HOME/pyrofling``, else ``~/.config/pyrofling``): ``host.json``
(this host's lasting id and the viewers it admits without a code) and
``viewer.json`` (the hosts this viewer paired with).  The directory is 0700 and the
files 0600, owned by the user; a file that is a link, or a directory anyone else
can write, is refused rather than trusted.  Each write goes to a new file renamed
into place, so a crash leaves the old list.  The host reads its list at each
paired login, so ``pyrofling paired revoke`` takes effect at the viewer's next
connection, without a restart.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyrofling.core.host.auth import PairedViewer
from pyrofling.core.viewer.auth import HostCredential

log = logging.getLogger(__name__)

CONFIG_DIR_ENV = "PYROFLING_CONFIG_DIR"


class PairingStoreError(Exception):
    """The pairing files cannot be trusted or written; the text says why and what to do."""


def default_config_dir() -> Path:
    given = os.environ.get(CONFIG_DIR_ENV)
    if given:
        return Path(given)
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "pyrofling"


@dataclass(frozen=True, slots=True)
class PairingEntry:
    """One line of ``pyrofling paired list``."""

    side: str  # "viewer" (a viewer this host admits) or "host" (a host this viewer joins)
    id: str
    name: str
    paired_at: str


class _JsonFile:
    def __init__(self, directory: Path, name: str) -> None:
        self.directory = directory
        self.path = directory / name

    def _check_dir(self, create: bool) -> None:
        d = self.directory
        if create and not d.exists():
            d.mkdir(mode=0o700, parents=True)
        try:
            st = d.lstat()
        except FileNotFoundError:
            return
        if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
            raise PairingStoreError(f"{d} is not a directory (a link?): pairings are kept only in a real directory")
        if st.st_uid != os.getuid():
            raise PairingStoreError(f"{d} belongs to another user: refusing to trust pairings kept there")
        if st.st_mode & 0o022:
            raise PairingStoreError(f"{d} can be written by others: chmod 700 {d}")

    def read(self) -> dict[str, Any]:
        self._check_dir(create=False)
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return {}
        except OSError as exc:
            raise PairingStoreError(f"cannot read {self.path}: {exc.strerror or exc} (a link?)") from exc
        with os.fdopen(fd) as f:
            st = os.fstat(f.fileno())
            if st.st_uid != os.getuid() or st.st_mode & 0o077:
                raise PairingStoreError(f"{self.path} is readable by others or not yours: chmod 600 it, or remove it")
            try:
                data = json.load(f)
            except ValueError as exc:
                raise PairingStoreError(f"{self.path} is damaged ({exc}): remove it and pair again") from exc
        return data if isinstance(data, dict) else {}

    def write(self, data: dict[str, Any]) -> None:
        self._check_dir(create=True)
        tmp = self.path.with_name(f".{self.path.name}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "w") as f:
                json.dump(data, f, indent=2)
            os.replace(tmp, self.path)
        finally:
            tmp.unlink(missing_ok=True)


def _now() -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S")


class HostPairings:
    """This host's id and the viewers it admits without a code (a :class:`PairedViewers` for the core)."""

    def __init__(self, directory: Path | None = None) -> None:
        self._file = _JsonFile(directory or default_config_dir(), "host.json")

    def host_id(self) -> bytes:
        """This host's lasting id, made on first use."""
        data = self._file.read()
        if "host_id" not in data:
            data["host_id"] = secrets.token_hex(16)
            self._file.write(data)
        return bytes.fromhex(data["host_id"])

    def lookup(self, viewer_id: bytes) -> PairedViewer | None:
        """The viewer's credential, read now (a revocation counts at once); None also when the file cannot be
        trusted (said in the log): a paired login then fails, nothing else does."""
        try:
            entry = self._file.read().get("viewers", {}).get(viewer_id.hex())
            if not isinstance(entry, dict):
                return None
            return PairedViewer(str(entry.get("name", "")), bytes.fromhex(entry["credential"]))
        except (PairingStoreError, KeyError, ValueError, OSError) as exc:
            log.warning("pairings: %s", exc)
            return None

    def add(self, viewer_id: bytes, name: str, credential: bytes) -> None:
        data = self._file.read()
        data.setdefault("viewers", {})[viewer_id.hex()] = {
            "name": name,
            "credential": credential.hex(),
            "paired_at": _now(),
        }
        self._file.write(data)

    def entries(self) -> list[PairingEntry]:
        viewers = self._file.read().get("viewers", {})
        return [PairingEntry("viewer", k, v.get("name", ""), v.get("paired_at", "")) for k, v in viewers.items()]

    def revoke(self, which: str) -> list[str]:
        """Remove the viewers whose id starts with ``which`` or whose name is ``which``; returns their names."""
        data = self._file.read()
        viewers = data.get("viewers", {})
        gone = [k for k, v in viewers.items() if k.startswith(which.lower()) or v.get("name") == which]
        if len(gone) > 1 and not any(viewers[k].get("name") == which for k in gone):
            raise PairingStoreError(f"{which!r} matches {len(gone)} viewers: give more of the id")
        for k in gone:
            del viewers[k]
        if gone:
            self._file.write(data)
        return gone


class ViewerPairings:
    """The hosts this viewer paired with, by host id, and the address it paired at."""

    def __init__(self, directory: Path | None = None) -> None:
        self._file = _JsonFile(directory or default_config_dir(), "viewer.json")

    def credentials(self) -> tuple[HostCredential, ...]:
        hosts = self._file.read().get("hosts", {})
        return tuple(
            HostCredential(bytes.fromhex(k), bytes.fromhex(v["viewer_id"]), bytes.fromhex(v["credential"]))
            for k, v in hosts.items()
        )

    def paired_at(self, address: str) -> bool:
        """Whether a host at ``address`` (host:port as typed) paired with this viewer: it must authenticate."""
        return any(v.get("address") == address for v in self._file.read().get("hosts", {}).values())

    def add(self, credential: HostCredential, address: str) -> None:
        data = self._file.read()
        data.setdefault("hosts", {})[credential.host_id.hex()] = {
            "viewer_id": credential.viewer_id.hex(),
            "credential": credential.credential.hex(),
            "address": address,
            "paired_at": _now(),
        }
        self._file.write(data)

    def entries(self) -> list[PairingEntry]:
        hosts = self._file.read().get("hosts", {})
        return [PairingEntry("host", k, v.get("address", ""), v.get("paired_at", "")) for k, v in hosts.items()]

    def forget(self, which: str) -> list[str]:
        data = self._file.read()
        hosts = data.get("hosts", {})
        gone = [k for k, v in hosts.items() if k.startswith(which.lower()) or v.get("address") == which]
        for k in gone:
            del hosts[k]
        if gone:
            self._file.write(data)
        return gone
