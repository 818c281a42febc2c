"""TLS for the extender's server: HTTPS, and optionally client certificates (mTLS)."""

from __future__ import annotations

import asyncio
import logging
import ssl
from pathlib import Path

from extender.core.errors import ExtenderError

log = logging.getLogger("extender.shell.tls")


class TLSConfigError(ExtenderError, ValueError):
    """Inconsistent TLS flags."""


def server_ssl_context(
    cert_file: Path | None, key_file: Path | None, client_ca_file: Path | None
) -> ssl.SSLContext | None:
    """None for plain HTTP; HTTPS when a certificate is given; mTLS when a client CA is."""
    if cert_file is None and key_file is None:
        if client_ca_file is not None:
            raise TLSConfigError("--client-ca-file needs --tls-cert-file and --tls-key-file")
        return None
    if cert_file is None or key_file is None:
        raise TLSConfigError("--tls-cert-file and --tls-key-file go together")
    for flag, path in (
        ("--tls-cert-file", cert_file),
        ("--tls-key-file", key_file),
        ("--client-ca-file", client_ca_file),
    ):
        if path is not None and not path.is_file():
            raise TLSConfigError(f"{flag} {path}: no such file")
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    # No session resumption: a resumed session skips the client certificate's check, so a client
    # whose CA was removed (``CertificateReloader``) kept resuming its earlier session. Tickets are
    # issued by the first context, whatever context a handshake is switched to; none are issued.
    context.options |= ssl.OP_NO_TICKET
    context.num_tickets = 0
    try:
        context.load_cert_chain(cert_file, key_file)
    except ssl.SSLError as error:
        raise TLSConfigError(f"--tls-cert-file and --tls-key-file: not a certificate and its key ({error})") from None
    if client_ca_file is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        # TLS 1.2 also resumes by session ID from the server's cache, which Python cannot turn off;
        # TLS 1.3 resumes only with tickets. The scheduler (Go's crypto/tls) speaks 1.3.
        context.minimum_version = ssl.TLSVersion.TLSv1_3
        try:
            context.load_verify_locations(cafile=client_ca_file)
        except ssl.SSLError as error:
            raise TLSConfigError(f"--client-ca-file {client_ca_file}: not a CA certificate ({error})") from None
    return context


def _signature(paths: tuple[Path, ...]) -> tuple[tuple[int, int, int], ...] | None:
    try:
        return tuple((st.st_ino, st.st_size, st.st_mtime_ns) for st in (path.stat() for path in paths))
    except OSError:
        return None


class CertificateReloader:
    """Serves renewed certificate files, and a renewed client CA, without a restart.

    cert-manager (or a Secret volume) replaces the files; the next check sees them
    changed and loads them into a fresh context (a half-written or mismatched pair is
    refused and the old context kept). Every handshake from then on is switched to the
    fresh context by the live one's ``sni_callback``, which OpenSSL calls on every
    ClientHello, with or without a server name: new connections get the new
    certificate and are checked against the new client CA alone (a CA removed from
    the file is no longer trusted), open ones keep theirs, and no request fails.
    An SSLContext can add trusted CAs but never remove one, hence a fresh context. No session
    is resumed (``server_ssl_context``): a resumption would skip the check against the new CA.
    """

    def __init__(self, context: ssl.SSLContext, cert_file: Path, key_file: Path, client_ca_file: Path | None) -> None:
        self._cert, self._key, self._ca = cert_file, key_file, client_ca_file
        self._paths = tuple(p for p in (cert_file, key_file, client_ca_file) if p is not None)
        self._seen = _signature(self._paths)
        self._current: ssl.SSLContext | None = None  # None: the live context's own files
        self.reloads = 0
        context.sni_callback = self._to_current

    def _to_current(self, connection: ssl.SSLObject, server_name: str | None, live: ssl.SSLContext) -> None:
        if self._current is not None:
            connection.context = self._current

    def check(self) -> bool:
        """Reload when the files changed; True when new handshakes now get them."""
        seen = _signature(self._paths)
        if seen is None or seen == self._seen:
            return False
        try:
            fresh = server_ssl_context(self._cert, self._key, self._ca)
        except (OSError, ssl.SSLError, ValueError) as error:
            log.warning("renewed TLS files not loaded yet (%s); still serving the previous certificate", error)
            return False
        if fresh is None or _signature(self._paths) != seen:  # replaced again while loading
            log.warning("renewed TLS files changed while loading; retrying at the next check")
            return False
        self._current = fresh
        self._seen = seen
        self.reloads += 1
        log.info("TLS certificate%s reloaded from %s", " and client CA" if self._ca else "", self._cert)
        return True

    async def watch(self, interval_seconds: float = 10.0) -> None:
        while True:
            await asyncio.sleep(interval_seconds)
            self.check()
