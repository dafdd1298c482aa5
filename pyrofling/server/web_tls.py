"""The web viewer's certificate: one you give (``--web-cert``/``--web-key``), or one the host makes and keeps.

A page served to another machine needs HTTPS (browsers run WebCodecs, pointer
lock and the Gamepad API only in a secure context, and plain HTTP would show the
link's key and the pictures to anyone on the path).  Without a certificate of
your own the host makes a self-signed one (ECDSA P-256, for the names and
addresses you give) and keeps it in its configuration directory, so that a
browser that accepted it once is not asked again; the host prints its SHA-256
fingerprint beside the link, to compare with what the browser shows.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import ipaddress
import socket
import ssl
import tempfile
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from pyrofling.files import private_dir, write_private

#: A self-made certificate lasts this long; a new one is made when it is within a week of its end.
LIFETIME_DAYS = 365
#: Binds that mean this machine only.
LOOPBACK_BINDS = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True)
class PageTls:
    context: ssl.SSLContext
    #: The certificate's SHA-256 fingerprint (AA:BB:…) and its public key's (base64: Chromium's flag).
    fingerprint: str
    spki: str
    #: Where a certificate made for this run only is kept (removed when the host stops); None otherwise.
    made_in: tempfile.TemporaryDirectory[str] | None


def certificate_names(bind: str) -> list[str]:
    """What a self-made certificate names: this machine, and the address it was bound to."""
    names = ["localhost", "127.0.0.1", "::1", socket.gethostname()]
    if bind not in LOOPBACK_BINDS and bind not in ("0.0.0.0", "::", ""):
        names.append(bind)
    return names


def page_tls(cert: Path | None, key: Path | None, keep_in: Path | None, names: list[str]) -> PageTls:
    """TLS for the page: the certificate you gave (``cert``, ``key``), else one the host makes and keeps in
    ``keep_in`` (its configuration directory: 0700), or for this run only where it has none."""
    made_in = None
    if cert is not None:
        if key is None:
            raise ValueError("--web-cert needs --web-key (the certificate's private key)")
    else:
        if keep_in is None:
            made_in = tempfile.TemporaryDirectory(prefix="pyrofling-web-")
            keep_in = Path(made_in.name)
        try:
            cert, key = self_signed(keep_in, names)
        except OSError as exc:  # a folder that is not safe for a key, or cannot be written: said, before starting
            raise ValueError(f"cannot keep the page's certificate: {exc}") from exc
    fingerprint, spki = fingerprints(cert)
    return PageTls(server_context(cert, key), fingerprint, spki, made_in)


def self_signed(directory: Path, names: list[str]) -> tuple[Path, Path]:
    """(certificate, key) in ``directory`` (web-cert.pem, web-key.pem; 0600), made now unless one for these names
    and not near its end is there."""
    cert_path, key_path = directory / "web-cert.pem", directory / "web-key.pem"
    if cert_path.exists() and key_path.exists():
        try:
            cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
            covered = set(_names(cert))
            fresh = cert.not_valid_after_utc - datetime.timedelta(days=7) > datetime.datetime.now(datetime.UTC)
            if fresh and set(names) <= covered:
                return cert_path, key_path
        except ValueError:
            pass  # unreadable: made again
    private_dir(directory)  # 0700, or refused: the key is kept there
    cert, key = make_certificate(names, datetime.timedelta(days=LIFETIME_DAYS))
    write_private(key_path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                               serialization.NoEncryption()))  # fmt: skip
    write_private(cert_path, cert.public_bytes(serialization.Encoding.PEM))
    return cert_path, key_path


def make_certificate(
    names: list[str], lifetime: datetime.timedelta
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A self-signed ECDSA P-256 certificate for these names and addresses, valid from five minutes ago."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.datetime.now(datetime.UTC)
    alt: list[x509.GeneralName] = []
    for name in names:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            alt.append(x509.DNSName(name))
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "pyrofling host")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + lifetime)
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _names(cert: x509.Certificate) -> list[str]:
    try:
        alt = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [str(v) for v in alt.get_values_for_type(x509.IPAddress)] + alt.get_values_for_type(x509.DNSName)


def server_context(cert: Path, key: Path) -> ssl.SSLContext:
    """TLS 1.2+ for the page and its WebSocket; a bad file says which."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"cannot use the web certificate {cert} with key {key}: {exc}") from exc
    return context


def fingerprints(cert: Path) -> tuple[str, str]:
    """The certificate's SHA-256 fingerprint as browsers show it (AA:BB:…), and its public key's SHA-256 in base64
    (what Chromium's ``--ignore-certificate-errors-spki-list`` takes)."""
    parsed = x509.load_pem_x509_certificate(cert.read_bytes())
    digest = parsed.fingerprint(hashes.SHA256()).hex().upper()
    spki = parsed.public_key().public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return ":".join(digest[i : i + 2] for i in range(0, len(digest), 2)), base64.b64encode(
        hashlib.sha256(spki).digest()
    ).decode()
