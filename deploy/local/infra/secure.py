"""The secure engines' material (``make infra-up SECURE=1``): a private CA,
the engines' certificate (SAN ``IP:127.0.0.1``, ``DNS:localhost``) in PKCS12
key and trust stores, a client certificate (Kafka verifies one when a client
presents it, and its controller listener requires one), and generated
passwords.

Generated once per state directory, at the first start (``openssl`` makes
the keys and certificates, ``keytool`` the Java trust store), under
``<state>/tls`` and ``<state>/secrets`` (directories 0700, files 0600), and
kept: Kafka's SCRAM users are written into its storage when it is formatted,
so new passwords would lock the clients out of existing data (``up
--fresh`` wipes data, not this; delete the state directory to start over).

Users: Kafka ``admin`` (the broker's own inter-broker login) and ``fanline``
(the services); Cassandra ``fanline`` (created by the launcher at the first
start, when it also replaces the default superuser's well-known password
``cassandra`` with a generated one, kept in ``cassandra-admin.password``).
"""

from __future__ import annotations

import os
import secrets
import shutil
import ssl
import subprocess
from pathlib import Path

from .errors import InfraError, InfraUnavailable
from .probes import Credentials

DAYS = 365
SERVER_SAN = "subjectAltName=IP:127.0.0.1,DNS:localhost"
KAFKA_USER = "fanline"
KAFKA_ADMIN = "admin"
CASSANDRA_USER = "fanline"
CASSANDRA_SUPERUSER = "cassandra"  # the role Cassandra creates, with this very password
CASSANDRA_DEFAULT_PASSWORD = "cassandra"
PASSWORDS = ("store", "kafka-admin", "kafka-fanline", "cassandra-admin", "cassandra-fanline")


class SecureMaterial:
    """Paths and secrets under one state directory; ``ensure()`` creates them."""

    def __init__(self, state_dir: Path, java: str = "java") -> None:
        self.tls_dir = state_dir / "tls"
        self.secrets_dir = state_dir / "secrets"
        self.java = java

    # -- files -------------------------------------------------------------------
    @property
    def ca(self) -> Path:
        return self.tls_dir / "ca.pem"

    @property
    def keystore(self) -> Path:
        """The engines' key and certificate chain (PKCS12)."""
        return self.tls_dir / "server.p12"

    @property
    def truststore(self) -> Path:
        """The CA, as a Java (PKCS12) trust store: client certificates are checked against it."""
        return self.tls_dir / "truststore.p12"

    @property
    def client_cert(self) -> Path:
        return self.tls_dir / "client.pem"

    @property
    def client_key(self) -> Path:
        return self.tls_dir / "client.key"

    def password_file(self, name: str) -> Path:
        return self.secrets_dir / f"{name}.password"

    def password(self, name: str) -> str:
        return self.password_file(name).read_text().strip()

    # -- what clients use ----------------------------------------------------------
    def client_context(self) -> ssl.SSLContext:
        """The launcher's own probes: trust the CA, present the client certificate."""
        ctx = ssl.create_default_context(cafile=str(self.ca))
        ctx.load_cert_chain(str(self.client_cert), str(self.client_key))
        return ctx

    def kafka_login(self) -> Credentials:
        return Credentials(KAFKA_USER, self.password("kafka-fanline"))

    def cassandra_login(self) -> Credentials:
        return Credentials(CASSANDRA_USER, self.password("cassandra-fanline"))

    def settings_env(self) -> dict[str, str]:
        """The services' settings for these engines: TLS with the client
        certificate, and their users' passwords as files (never inline)."""
        tls = {"CA": self.ca, "CERT": self.client_cert, "KEY": self.client_key}
        env = {
            "FANLINE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "FANLINE_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
            "FANLINE_KAFKA_USERNAME": KAFKA_USER,
            "FANLINE_KAFKA_PASSWORD_FILE": str(self.password_file("kafka-fanline")),
            "FANLINE_CASSANDRA_TLS": "true",
            "FANLINE_CASSANDRA_USERNAME": CASSANDRA_USER,
            "FANLINE_CASSANDRA_PASSWORD_FILE": str(self.password_file("cassandra-fanline")),
        }
        for engine in ("KAFKA", "CASSANDRA"):
            env.update({f"FANLINE_{engine}_TLS_{name}": str(path) for name, path in tls.items()})
        return env

    # -- generation ----------------------------------------------------------------
    def ensure(self) -> None:
        """Create whatever is missing (idempotent)."""
        for directory in (self.tls_dir, self.secrets_dir):
            directory.mkdir(parents=True, exist_ok=True)
            directory.chmod(0o700)
        for name in PASSWORDS:
            path = self.password_file(name)
            if not path.is_file():
                _write_private(path, secrets.token_hex(16))  # no newline: openssl and keytool read it whole
        if not all(p.is_file() for p in (self.ca, self.keystore, self.truststore, self.client_cert, self.client_key)):
            self._generate_tls()

    def _generate_tls(self) -> None:
        openssl = shutil.which("openssl")
        keytool = shutil.which("keytool") or str(Path(self.java).resolve().parent / "keytool")
        if openssl is None or not Path(keytool).is_file():
            raise InfraUnavailable("SECURE=1 needs openssl and keytool (Debian: openssl, openjdk-17-jdk-headless)")
        d = self.tls_dir
        old = os.umask(0o077)
        try:
            _run(
                openssl,
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-keyout",
                d / "ca.key",
                "-out",
                self.ca,
                "-days",
                str(DAYS),
                "-subj",
                "/CN=Fanline local CA",
                "-addext",
                "basicConstraints=critical,CA:TRUE",
                "-addext",
                "keyUsage=critical,keyCertSign,cRLSign",
            )
            for name, cn, ext in (
                ("server", "localhost", f"{SERVER_SAN}\nextendedKeyUsage=serverAuth,clientAuth\n"),
                ("client", "fanline-client", "extendedKeyUsage=clientAuth\n"),
            ):
                _run(
                    openssl,
                    "req",
                    "-newkey",
                    "rsa:2048",
                    "-nodes",
                    "-keyout",
                    d / f"{name}.key",
                    "-out",
                    d / f"{name}.csr",
                    "-subj",
                    f"/CN={cn}",
                )
                (d / f"{name}.ext").write_text(f"basicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\n{ext}")
                _run(
                    openssl,
                    "x509",
                    "-req",
                    "-in",
                    d / f"{name}.csr",
                    "-CA",
                    self.ca,
                    "-CAkey",
                    d / "ca.key",
                    "-CAcreateserial",
                    "-out",
                    d / f"{name}.pem",
                    "-days",
                    str(DAYS),
                    "-extfile",
                    d / f"{name}.ext",
                )
            _run(
                openssl,
                "pkcs12",
                "-export",
                "-in",
                d / "server.pem",
                "-inkey",
                d / "server.key",
                "-certfile",
                self.ca,
                "-name",
                "server",
                "-out",
                self.keystore,
                "-passout",
                f"file:{self.password_file('store')}",
            )
            self.truststore.unlink(missing_ok=True)
            _run(
                keytool,
                "-importcert",
                "-noprompt",
                "-alias",
                "fanline-ca",
                "-file",
                self.ca,
                "-keystore",
                self.truststore,
                "-storetype",
                "PKCS12",
                "-storepass:file",
                self.password_file("store"),
            )
        finally:
            os.umask(old)


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def _run(*argv: object) -> None:
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=120)
    if done.returncode != 0:
        raise InfraError(f"{Path(str(argv[0])).name} {argv[1]} failed: {(done.stderr or done.stdout)[-2000:]}")
