"""TLS for ``fleetshare serve`` (``--tls-cert`` / ``--tls-key``) and for its clients
(``--ca-cert``): the files are checked before anything starts, and what is wrong with them is
one line naming the option."""

from __future__ import annotations

import ssl
from pathlib import Path


class TlsError(ValueError):
    """An unusable TLS option; the message names it and says why."""


def _read(option: str, path: Path) -> None:
    try:
        path.read_bytes()
    except OSError as exc:
        raise TlsError(f"{option}: cannot read {path}: {exc.strerror or exc}") from None


def server_files(cert: Path | None, key: Path | None) -> tuple[str, str] | None:
    """The certificate and key files to serve https with (None: plain http); TlsError when
    only one is given, or they cannot be read, or are not a PEM certificate and its key."""
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        given, missing = (
            ("--tls-key", "--tls-cert") if cert is None else ("--tls-cert", "--tls-key")
        )
        raise TlsError(f"{given}: give {missing} with it")
    _read("--tls-cert", cert)
    _read("--tls-key", key)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:  # an encrypted key gets an empty password (and fails) rather than a prompt
        context.load_cert_chain(cert, key, password=lambda: b"")
    except ssl.SSLError as exc:
        raise TlsError(
            f"--tls-cert/--tls-key: {cert} and {key} are not a PEM certificate and its "
            f"unencrypted private key ({exc.reason or exc})"
        ) from None
    return str(cert), str(key)


def client_context(ca_cert: Path) -> ssl.SSLContext:
    """A client context trusting the certificates ``ca_cert`` (PEM) signed, and only them."""
    _read("--ca-cert", ca_cert)
    try:
        return ssl.create_default_context(cafile=str(ca_cert))
    except ssl.SSLError as exc:
        raise TlsError(
            f"--ca-cert: {ca_cert} holds no PEM certificate ({exc.reason or exc})"
        ) from None
