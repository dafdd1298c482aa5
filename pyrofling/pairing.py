"""Where pairings are kept (protocol.md §7.7): the host's paired viewers, the viewer's paired hosts.

Two small JSON files in the user's configuration directory (``$PYROFLING_CONFIG_DIR``,
else ``$XDG_CONFIG_HOME/pyrofling``, else ``~/.config/pyrofling``): ``host.json``
(this host's identity key, the viewers it admits without a code, and the browsers
whose pass it keeps across runs: only each pass's SHA-256) and
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
from pyrofling.core.host.state import ViewerPaired
from pyrofling.core.secure import HostIdentity
from pyrofling.core.viewer.auth import HostCredential

log = logging.getLogger(__name__)

CONFIG_DIR_ENV = "PYROFLING_CONFIG_DIR"
#: Browsers' passes a host keeps (each a browser that opened one of its links); the oldest go first.
MAX_BROWSERS = 64


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

    side: str  # "viewer" (a viewer this host admits), "browser" (a browser's pass it keeps) or "host" (one joined)
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

    def identity(self) -> HostIdentity:
        """This host's lasting identity key, made on first use; its id is the key's hash."""
        data = self._file.read()
        if "host_key" in data:
            try:
                return HostIdentity(bytes.fromhex(data["host_key"]))
            except ValueError as exc:
                raise PairingStoreError(f"{self._file.path} holds a damaged host key: remove it") from exc
        identity = HostIdentity()
        if "host_id" in data:
            log.warning(
                "pairings: this host now proves who it is with a key, so its id changes; viewers paired before "
                "must pair again (pyrofling pair)"
            )
            data.pop("host_id")
        data["host_key"] = identity.private_bytes().hex()
        self._file.write(data)
        return identity

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
        viewers = data.setdefault("viewers", {})
        if viewer_id.hex() in viewers:  # the core refuses this first; a store never overwrites a pairing
            raise PairingStoreError(f"viewer {viewer_id.hex()[:8]} is already paired: not replaced")
        viewers[viewer_id.hex()] = {
            "name": name,
            "credential": credential.hex(),
            "paired_at": _now(),
        }
        self._file.write(data)

    def knows_browser(self, pass_sha256: str) -> bool:
        """Whether a browser's pass (by its SHA-256, hex) is one this host keeps, read now (a revocation counts at
        once); False also when the file cannot be trusted (said in the log)."""
        try:
            return pass_sha256 in self._file.read().get("browsers", {})
        except (PairingStoreError, OSError) as exc:
            log.warning("pairings: %s", exc)
            return False

    def add_browser(self, pass_sha256: str, name: str) -> None:
        """Keep a browser's pass (its SHA-256 only: the file gives no pass away); the oldest go past
        :data:`MAX_BROWSERS`."""
        data = self._file.read()
        browsers = data.setdefault("browsers", {})
        browsers[pass_sha256] = {"name": name, "paired_at": _now()}
        for old in list(browsers)[:-MAX_BROWSERS]:
            del browsers[old]
        self._file.write(data)

    def entries(self) -> list[PairingEntry]:
        data = self._file.read()
        return [
            PairingEntry(side, k, v.get("name", ""), v.get("paired_at", ""))
            for side, kind in (("viewer", "viewers"), ("browser", "browsers"))
            for k, v in data.get(kind, {}).items()
        ]

    def revoke(self, which: str) -> list[str]:
        """Remove the viewers and browsers whose id starts with ``which`` or whose name is ``which``; returns their
        ids."""
        data = self._file.read()
        lists = [data.get("viewers", {}), data.get("browsers", {})]
        gone = [(d, k) for d in lists for k, v in d.items() if k.startswith(which.lower()) or v.get("name") == which]
        if len(gone) > 1 and not any(d[k].get("name") == which for d, k in gone):
            raise PairingStoreError(f"{which!r} matches {len(gone)} pairings: give more of the id")
        for d, k in gone:
            del d[k]
        if gone:
            self._file.write(data)
        return [k for _, k in gone]


def open_host_pairings(directory: Path | None, needed: bool) -> tuple[HostPairings | None, HostIdentity]:
    """A host's pairings (None: it keeps none) and its identity: the lasting one when it takes a code or
    pairings (``needed``), else a throwaway one (an open host never touches the pairing files)."""
    pairings = HostPairings(directory) if directory is not None else None
    if pairings is None or not needed:
        return pairings, HostIdentity()
    try:
        return pairings, pairings.identity()
    except PairingStoreError as exc:
        log.warning("pairings: %s; codes still work, stored pairings do not", exc)
        return None, HostIdentity()


def keep_pairing(pairings: HostPairings | None, paired: ViewerPaired) -> None:
    """The host's side of a new pairing: stored, or said why not (the viewer needs the code next time)."""
    if pairings is None:
        log.warning("a viewer paired, but this host keeps no pairings: it will need the code next time")
        return
    try:
        pairings.add(paired.viewer_id, paired.name, paired.credential)
    except (PairingStoreError, OSError) as exc:
        log.error("could not keep the pairing with %r: %s", paired.name, exc)


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

    def host_at(self, address: str) -> bytes | None:
        """The id of the host this viewer paired with at ``address`` (host:port as typed), if any: only that host
        is accepted there, and it must authenticate."""
        for host_id, v in self._file.read().get("hosts", {}).items():
            if v.get("address") == address:
                return bytes.fromhex(host_id)
        return None

    def add(self, credential: HostCredential, address: str) -> None:
        """Keep a pairing the host proved with its identity key. Pairing again at an address replaces what was
        paired there (the person typed that host's code)."""
        data = self._file.read()
        hosts = data.setdefault("hosts", {})
        for host_id in [k for k, v in hosts.items() if v.get("address") == address]:
            del hosts[host_id]
        hosts[credential.host_id.hex()] = {
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
