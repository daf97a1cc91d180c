"""TLS and authentication to Cassandra and Kafka (README "Configuration";
docs/operations/secure.md).

Managed clusters require both, so every client Fanline runs can be given
them: the gateway's producer, its live-stream tap and the topic admin
client, the fan-out worker (faust), the ``fanline`` CLI, and the Cassandra
sessions of both storage services and the CLI.

* Kafka: ``FANLINE_KAFKA_SECURITY_PROTOCOL`` ``PLAINTEXT`` (the default),
  ``SSL`` (TLS, optionally with a client certificate) or ``SASL_SSL`` (TLS
  plus a SASL user, ``SCRAM-SHA-512`` unless ``FANLINE_KAFKA_SASL_MECHANISM``
  says ``SCRAM-SHA-256`` or ``PLAIN``).
* Cassandra: ``FANLINE_CASSANDRA_TLS`` (client encryption) and, with
  ``FANLINE_CASSANDRA_USERNAME``, ``PasswordAuthenticator`` credentials.
* TLS, either engine (``FANLINE_<ENGINE>_TLS_*``): the CA bundle to trust
  (else the system's), an optional client certificate and key (mutual
  TLS), and hostname verification (on unless turned off).

Passwords are secrets: read from ``NAME`` or from the file ``NAME_FILE``
names (a mounted Kubernetes Secret; ``Env.secret``), held as pydantic
``SecretStr`` (``repr`` and ``str`` print stars) and revealed only to the
client library that sends them. No setting object prints one, and nothing
here logs one. TLS contexts are built when a client is made, not when the
settings are read, so settings stay plain, comparable data.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import SecretStr

# The module, not its names: config.py imports this module for its settings,
# so its names are looked up when used (after both modules are loaded).
from . import config

KAFKA_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_SSL")
SASL_MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")


@dataclass(frozen=True)
class Tls:
    """A TLS client: whom to trust, who we are (optional), whether the
    server's name must match its certificate."""

    ca_file: Path | None = None  # None: the system's trust store
    cert_file: Path | None = None  # with key_file: mutual TLS
    key_file: Path | None = None
    key_password: SecretStr | None = None
    check_hostname: bool = True

    @classmethod
    def from_env(cls, env: config.Env, engine: str) -> Tls:
        """``FANLINE_<engine>_TLS_CA``, ``_CERT``, ``_KEY``, ``_KEY_PASSWORD``
        and ``_CHECK_HOSTNAME`` (``engine``: ``KAFKA`` or ``CASSANDRA``)."""
        prefix = f"FANLINE_{engine}_TLS"

        def path(name: str) -> Path | None:
            raw = env.string(f"{prefix}_{name}", "")
            if not raw:
                return None
            found = Path(raw)
            if not found.is_file():
                raise config.ConfigError(f"{prefix}_{name}: no file {raw}")
            return found

        tls = cls(
            ca_file=path("CA"),
            cert_file=path("CERT"),
            key_file=path("KEY"),
            key_password=env.secret(f"{prefix}_KEY_PASSWORD"),
            check_hostname=env.boolean(f"{prefix}_CHECK_HOSTNAME", True),
        )
        if (tls.cert_file is None) != (tls.key_file is None):
            raise config.ConfigError(f"{prefix}_CERT and {prefix}_KEY go together (a client certificate and its key)")
        return tls

    def context(self) -> ssl.SSLContext:
        """A client context: TLS 1.2 or later, the certificate chain verified,
        the host name too unless ``check_hostname`` is off."""
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(self.ca_file) if self.ca_file else None)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if self.cert_file is not None and self.key_file is not None:
            password = self.key_password.get_secret_value() if self.key_password else None
            ctx.load_cert_chain(str(self.cert_file), str(self.key_file), password)
        ctx.check_hostname = self.check_hostname
        ctx.verify_mode = ssl.CERT_REQUIRED  # the chain is verified either way
        return ctx


@dataclass(frozen=True)
class KafkaSecurity:
    """How every Kafka client connects (``FANLINE_KAFKA_SECURITY_PROTOCOL`` & co)."""

    protocol: str = "PLAINTEXT"
    tls: Tls | None = None  # SSL, SASL_SSL
    sasl_mechanism: str = "SCRAM-SHA-512"
    username: str | None = None  # SASL_SSL
    password: SecretStr | None = None

    @classmethod
    def from_env(cls, env: config.Env) -> KafkaSecurity:
        protocol = env.choice("FANLINE_KAFKA_SECURITY_PROTOCOL", "PLAINTEXT", KAFKA_PROTOCOLS)
        if protocol == "PLAINTEXT":
            return cls()
        security = cls(
            protocol=protocol,
            tls=Tls.from_env(env, "KAFKA"),
            sasl_mechanism=env.choice("FANLINE_KAFKA_SASL_MECHANISM", "SCRAM-SHA-512", SASL_MECHANISMS),
            username=env.string("FANLINE_KAFKA_USERNAME", "") or None,
            password=env.secret("FANLINE_KAFKA_PASSWORD"),
        )
        if protocol == "SASL_SSL" and not (security.username and security.password):
            raise config.ConfigError(
                "FANLINE_KAFKA_SECURITY_PROTOCOL=SASL_SSL needs FANLINE_KAFKA_USERNAME and "
                "FANLINE_KAFKA_PASSWORD (or FANLINE_KAFKA_PASSWORD_FILE)"
            )
        return security

    def client_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of every aiokafka client (producer, consumer, admin)."""
        if self.protocol == "PLAINTEXT" or self.tls is None:
            return {}
        kwargs: dict[str, Any] = {"security_protocol": self.protocol, "ssl_context": self.tls.context()}
        if self.protocol == "SASL_SSL" and self.password is not None:
            kwargs.update(
                sasl_mechanism=self.sasl_mechanism,
                sasl_plain_username=self.username,
                sasl_plain_password=self.password.get_secret_value(),
            )
        return kwargs

    def faust_credentials(self) -> Any:
        """faust's ``broker_credentials`` (None for PLAINTEXT)."""
        if self.protocol == "PLAINTEXT" or self.tls is None:
            return None
        import faust  # only the worker has faust

        if self.protocol == "SSL":
            return faust.SSLCredentials(self.tls.context())
        assert self.password is not None
        return faust.SASLCredentials(
            username=self.username,
            password=self.password.get_secret_value(),
            ssl_context=self.tls.context(),
            mechanism=self.sasl_mechanism,
        )


@dataclass(frozen=True)
class CassandraSecurity:
    """Client encryption and ``PasswordAuthenticator`` credentials."""

    tls: Tls | None = None  # FANLINE_CASSANDRA_TLS=true
    username: str | None = None
    password: SecretStr | None = None

    @classmethod
    def from_env(cls, env: config.Env) -> CassandraSecurity:
        security = cls(
            tls=Tls.from_env(env, "CASSANDRA") if env.boolean("FANLINE_CASSANDRA_TLS", False) else None,
            username=env.string("FANLINE_CASSANDRA_USERNAME", "") or None,
            password=env.secret("FANLINE_CASSANDRA_PASSWORD"),
        )
        if (security.username is None) != (security.password is None):
            raise config.ConfigError(
                "FANLINE_CASSANDRA_USERNAME and FANLINE_CASSANDRA_PASSWORD (or FANLINE_CASSANDRA_PASSWORD_FILE) go together"
            )
        return security

    def cluster_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of cassandra-driver's ``Cluster``."""
        kwargs: dict[str, Any] = {}
        if self.tls is not None:
            kwargs["ssl_context"] = self.tls.context()
        if self.username is not None and self.password is not None:
            from cassandra.auth import PlainTextAuthProvider

            kwargs["auth_provider"] = PlainTextAuthProvider(self.username, self.password.get_secret_value())
        return kwargs
