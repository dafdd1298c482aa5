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

import hashlib
import hmac
import json
import logging
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyrofling.core.secure import HostIdentity, limiter_key
from pyrofling.core.viewer.auth import HostCredential
from pyrofling.files import default_config_dir, private_dir_problem

if TYPE_CHECKING:  # the host's side, which a viewer keeping its credentials here does not load
    from pyrofling.core.host.auth import PairedViewer
    from pyrofling.core.host.state import ViewerPaired
    from pyrofling.core.host.web_viewers import RememberBrowser

log = logging.getLogger(__name__)

#: Browsers' passes a host keeps (each a browser that proved a link, the password or a pairing code), in all and
#: from one address prefix. None is pushed out for a newer one: past these, a new browser's pass lasts the host's
#: run only, so logins in a hurry cannot take a friend's place.
MAX_BROWSERS = 64
MAX_BROWSERS_PER_PREFIX = 4
#: A kept pass unused this long opens nothing more (its browser proves a link, the password or a code again).
BROWSER_UNUSED_S = 30 * 86400
#: How often a pass's last use is written back (not at every reload).
BROWSER_USE_RESOLUTION_S = 3600


class PairingStoreError(Exception):
    """The pairing files cannot be trusted or written; the text says why and what to do."""


@dataclass(frozen=True, slots=True)
class PairingEntry:
    """One line of ``pyrofling paired list``."""

    side: str  # "viewer" (a viewer this host admits), "browser" (a browser's pass it keeps) or "host" (one joined)
    id: str
    name: str
    paired_at: str
    #: A browser's: what it proved, and until when its pass opens if unused.
    detail: str = ""


class _JsonFile:
    def __init__(self, directory: Path, name: str) -> None:
        self.directory = directory
        self.path = directory / name

    def _check_dir(self, create: bool) -> None:
        if create and not self.directory.exists():
            self.directory.mkdir(mode=0o700, parents=True)
        problem = private_dir_problem(self.directory)
        if problem is not None:
            raise PairingStoreError(problem)

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


def _fresh(entry: dict[str, Any], now: float) -> bool:
    """A kept pass used within :data:`BROWSER_UNUSED_S` (one kept before passes recorded their use opens nothing:
    it may have been kept from a page anyone on this machine could have served)."""
    last = entry.get("last_used")
    return isinstance(last, int | float) and now - last < BROWSER_UNUSED_S


def _browser_detail(entry: dict[str, Any]) -> str:
    if not _fresh(entry, time.time()):
        return "expired: opens nothing (revoke it to tidy up)"
    until = time.strftime("%Y-%m-%d", time.localtime(float(entry["last_used"]) + BROWSER_UNUSED_S))
    return f"by the {entry.get('via', 'link')}, opens until {until} unless used again"


def _password_tag(data: dict[str, Any], password: str | None) -> str:
    """What a pass given for a password keeps of it: a keyed hash (the file's own salt), never the password."""
    salt = data.get("browser_salt")
    if password is None or not isinstance(salt, str):
        return "-"
    return hmac.new(bytes.fromhex(salt), password.encode(), hashlib.sha256).hexdigest()


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
        from pyrofling.core.host.auth import PairedViewer  # loaded by the host long before; not by a viewer

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

    def knows_browser(self, pass_sha256: str, password: str | None = None) -> bool:
        """Whether a browser's pass (by its SHA-256, hex) is one this host keeps, read now (a revocation counts at
        once): not unused for :data:`BROWSER_UNUSED_S`, and, given for the password, only while ``password`` (the
        host's now) is the one it was given for. False also when the file cannot be trusted (said in the log)."""
        try:
            data = self._file.read()
            entry = data.get("browsers", {}).get(pass_sha256)
            now = time.time()
            if not isinstance(entry, dict) or not _fresh(entry, now):
                return False
            if entry.get("via") == "password" and not hmac.compare_digest(
                str(entry.get("password_tag", "")), _password_tag(data, password)
            ):
                return False
        except (PairingStoreError, OSError, ValueError) as exc:
            log.warning("pairings: %s", exc)
            return False
        if now - float(entry["last_used"]) >= BROWSER_USE_RESOLUTION_S:
            entry["last_used"] = int(now)
            try:
                self._file.write(data)
            except (PairingStoreError, OSError) as exc:  # the pass still opens; its use is not recorded
                log.warning("pairings: could not record a browser's use: %s", exc)
        return True

    def add_browser(
        self, pass_sha256: str, name: str, *, via: str = "link", address: str = "", password: str | None = None
    ) -> bool:
        """Keep a browser's pass (its SHA-256 only: the file gives no pass away) and what it proved for it (a pass
        given for ``password`` opens only while the host's password is that one); False when it is not kept: this
        address prefix already has :data:`MAX_BROWSERS_PER_PREFIX` kept, or the host :data:`MAX_BROWSERS` (passes
        unused for :data:`BROWSER_UNUSED_S` are forgotten first; none is pushed out for a newer one)."""
        data = self._file.read()
        now = time.time()
        browsers = {k: v for k, v in data.get("browsers", {}).items() if isinstance(v, dict) and _fresh(v, now)}
        prefix = limiter_key(address) if address else ""
        if len(browsers) >= MAX_BROWSERS or sum(1 for v in browsers.values() if v.get("prefix") == prefix) >= (
            MAX_BROWSERS_PER_PREFIX
        ):
            return False
        entry: dict[str, Any] = {"name": name, "paired_at": _now(), "last_used": int(now), "via": via, "prefix": prefix}
        if via == "password":
            data.setdefault("browser_salt", secrets.token_hex(16))
            entry["password_tag"] = _password_tag(data, password)
        browsers[pass_sha256] = entry
        data["browsers"] = browsers
        self._file.write(data)
        return True

    def entries(self) -> list[PairingEntry]:
        data = self._file.read()
        return [
            PairingEntry(
                side, k, v.get("name", ""), v.get("paired_at", ""), _browser_detail(v) if side == "browser" else ""
            )
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


class KeptBrowsers:
    """The host's kept browsers' passes as :class:`~pyrofling.core.host.web_viewers.WebViewers` asks for them
    (``remembered``), for a host whose password is ``password``: a pass given for the password opens only while it
    is that one."""

    def __init__(self, pairings: HostPairings, password: str | None) -> None:
        self.pairings, self.password = pairings, password

    def knows_browser(self, pass_sha256: str) -> bool:
        return self.pairings.knows_browser(pass_sha256, self.password)

    def add(self, out: RememberBrowser) -> bool:
        """Keep it; False (said in the log) when the store keeps enough from there, or in all, or cannot write."""
        try:
            if self.pairings.add_browser(
                out.pass_sha256, out.name, via=out.via, address=out.address, password=self.password
            ):
                return True
            log.warning(
                "%s is admitted for this run only: the host keeps enough browsers from there, or in all "
                "(pyrofling paired list; revoke the ones you no longer use)",
                out.name,
            )
        except (PairingStoreError, OSError) as exc:
            log.error("could not keep the browser's pass (after the host's next start it needs a new link): %s", exc)
        return False


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


class PortalToken:
    """The desktop portal's restore token (``--source wayland``), kept beside the pairings (``portal.json``, only
    this user's) so that the next start asks the person nothing. A token serves once: each start keeps the next.
    ``kind``: the session it restores (``screen_cast``, or ``remote_desktop`` with the keyboard and mouse)."""

    def __init__(self, directory: Path | None = None, kind: str = "screen_cast") -> None:
        self._file = _JsonFile(directory or default_config_dir(), "portal.json")
        self._key = f"{kind}_restore_token"

    def get(self) -> str | None:
        token = self._file.read().get(self._key)
        return token if isinstance(token, str) and token else None

    def put(self, token: str | None) -> None:
        data = self._file.read()
        data[self._key] = token
        self._file.write(data)
