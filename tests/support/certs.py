"""Test certificates made with the ``openssl`` command: a CA and certificates it signs.

EC P-256 keys (fast to make); subjects in openssl's ``-subj`` syntax
(``/O=team-a/CN=alice``, ``+`` joining a multi-valued RDN).
"""

from __future__ import annotations

import pathlib
import subprocess

_EC = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]


def openssl(*args: str, cwd: pathlib.Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(directory: pathlib.Path, name: str = "ca") -> str:
    """A self-signed CA (``<name>.pem``, ``<name>.key``) valid for two days; its PEM path."""
    openssl(
        "req", "-x509", *_EC, "-keyout", f"{name}.key", "-out", f"{name}.pem",
        "-days", "2", "-subj", f"/CN=sparklog-test-{name}", cwd=directory,
    )  # fmt: skip
    return str(directory / f"{name}.pem")


def sign(
    directory: pathlib.Path,
    name: str,
    subject: str,
    *,
    ca: str = "ca",
    days: int = 2,
    server: bool = False,
) -> tuple[str, str]:
    """A certificate ``<name>.pem`` for ``subject`` signed by ``ca``, and its key; their paths.

    ``server``: with subjectAltName 127.0.0.1 and localhost.  ``days`` may be
    negative: a certificate that expired that many days ago.
    """
    openssl(
        "req", *_EC, "-keyout", f"{name}.key", "-out", f"{name}.csr",
        "-subj", subject, "-multivalue-rdn", "-utf8", cwd=directory,
    )  # fmt: skip
    extra: list[str] = []
    if server:
        (directory / "san.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
        extra = ["-extfile", "san.ext"]
    if days < 0:
        # -not_before/-not_after need OpenSSL 3.4; a backdated validity through `ca` works anywhere
        return _expired(directory, name, ca, -days)
    openssl(
        "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-out", f"{name}.pem", "-days", str(days), *extra, cwd=directory,
    )  # fmt: skip
    return str(directory / f"{name}.pem"), str(directory / f"{name}.key")


def _expired(directory: pathlib.Path, name: str, ca: str, days_ago: int) -> tuple[str, str]:
    (directory / "ca.conf").write_text(
        "[ca]\ndefault_ca=test\n[test]\ndatabase=index.txt\nnew_certs_dir=.\n"
        "serial=serial\ndefault_md=sha256\npolicy=anything\ncopy_extensions=copy\n"
        "[anything]\ncommonName=optional\n"
        "[ext]\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n"
    )
    (directory / "index.txt").write_text("")
    (directory / "serial").write_text("01\n")
    openssl(
        "ca", "-batch", "-config", "ca.conf", "-cert", f"{ca}.pem", "-keyfile", f"{ca}.key",
        "-in", f"{name}.csr", "-out", f"{name}.pem", "-extensions", "ext",
        "-startdate", "20200101000000Z", "-enddate", _days_ago(days_ago), cwd=directory,
    )  # fmt: skip
    return str(directory / f"{name}.pem"), str(directory / f"{name}.key")


def _days_ago(days: int) -> str:
    import datetime

    when = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=days)
    return when.strftime("%Y%m%d%H%M%SZ")
