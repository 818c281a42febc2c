"""TLS for the extender's server: HTTPS, and optionally client certificates (mTLS)."""

from __future__ import annotations

import ssl
from pathlib import Path

from extender.errors import ExtenderError


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
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert_file, key_file)
    if client_ca_file is not None:
        context.verify_mode = ssl.CERT_REQUIRED
        context.load_verify_locations(cafile=client_ca_file)
    return context
