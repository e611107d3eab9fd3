"""A self-signed certificate for localhost (openssl), for tests of TLS on the gRPC ports."""

from __future__ import annotations

import subprocess
from pathlib import Path


def self_signed(folder: Path) -> tuple[Path, Path]:
    """(certificate, key) PEM files for CN/SAN localhost, valid a day; the certificate is its own CA."""
    key, cert = folder / "key.pem", folder / "cert.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "1", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost"],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key
