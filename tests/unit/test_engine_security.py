"""TLS and authentication settings of the engines' clients (issue #29 item 3;
``engine_security``), read the way a service reads them. The engines
themselves refusing and accepting them is tests/e2e/test_secure.py."""

from __future__ import annotations

import ssl
import subprocess
from pathlib import Path

import pytest

from fanline_shared.config import ConfigError, Env, KafkaSettings, StorageSettings
from fanline_shared.engine_security import CassandraSecurity, KafkaSecurity

PASSWORD = "s3cret-value-never-shown"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A CA and a client certificate, made with openssl like the launcher's."""
    d = tmp_path_factory.mktemp("pki")

    def run(*args: object) -> None:
        subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)

    run(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        d / "ca.key",
        "-out",
        d / "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=t",
    )
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", d / "c.key", "-out", d / "c.csr", "-subj", "/CN=c")
    run(
        "x509",
        "-req",
        "-in",
        d / "c.csr",
        "-CA",
        d / "ca.pem",
        "-CAkey",
        d / "ca.key",
        "-CAcreateserial",
        "-out",
        d / "c.pem",
        "-days",
        "2",
    )
    (d / "password").write_text(PASSWORD + "\n")
    return {"ca": d / "ca.pem", "cert": d / "c.pem", "key": d / "c.key", "password": d / "password"}


def test_plaintext_by_default_and_nothing_added_to_the_clients() -> None:
    kafka = KafkaSettings.from_env(Env({}))
    assert kafka.security == KafkaSecurity() and kafka.security.client_kwargs() == {}
    assert kafka.security.faust_credentials() is None
    storage = StorageSettings.from_env(Env({"FANLINE_BACKEND": "cassandra"}))
    assert storage.security == CassandraSecurity() and storage.security.cluster_kwargs() == {}


def test_kafka_sasl_ssl_with_a_client_certificate_and_a_password_file(pki: dict[str, Path]) -> None:
    env = Env(
        {
            "FANLINE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
            "FANLINE_KAFKA_USERNAME": "fanline",
            "FANLINE_KAFKA_PASSWORD_FILE": str(pki["password"]),
            "FANLINE_KAFKA_TLS_CA": str(pki["ca"]),
            "FANLINE_KAFKA_TLS_CERT": str(pki["cert"]),
            "FANLINE_KAFKA_TLS_KEY": str(pki["key"]),
        }
    )
    settings = KafkaSettings.from_env(env)
    kwargs = settings.security.client_kwargs()
    assert kwargs["security_protocol"] == "SASL_SSL" and kwargs["sasl_mechanism"] == "SCRAM-SHA-512"
    assert kwargs["sasl_plain_username"] == "fanline" and kwargs["sasl_plain_password"] == PASSWORD  # file's newline dropped
    ctx: ssl.SSLContext = kwargs["ssl_context"]
    assert ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname and ctx.minimum_version >= ssl.TLSVersion.TLSv1_2
    assert any(c.get("subject") for c in ctx.get_ca_certs()), "the CA file is trusted"
    credentials = settings.security.faust_credentials()
    assert type(credentials).__name__ == "SASLCredentials" and credentials.mechanism.value == "SCRAM-SHA-512"
    assert credentials.protocol.value == "SASL_SSL" and credentials.ssl_context is not None
    # Never shown: not in the settings' repr, nor in faust's.
    assert PASSWORD not in repr(settings) and PASSWORD not in repr(credentials) and PASSWORD not in str(settings)


def test_kafka_ssl_alone_and_hostname_checks_can_be_turned_off(pki: dict[str, Path]) -> None:
    security = KafkaSecurity.from_env(
        Env(
            {
                "FANLINE_KAFKA_SECURITY_PROTOCOL": "SSL",
                "FANLINE_KAFKA_TLS_CA": str(pki["ca"]),
                "FANLINE_KAFKA_TLS_CHECK_HOSTNAME": "false",
            }
        )
    )
    kwargs = security.client_kwargs()
    assert kwargs["security_protocol"] == "SSL" and "sasl_mechanism" not in kwargs
    assert kwargs["ssl_context"].check_hostname is False and kwargs["ssl_context"].verify_mode == ssl.CERT_REQUIRED
    assert type(security.faust_credentials()).__name__ == "SSLCredentials"


def test_cassandra_client_encryption_and_password_authenticator(pki: dict[str, Path]) -> None:
    storage = StorageSettings.from_env(
        Env(
            {
                "FANLINE_BACKEND": "cassandra",
                "FANLINE_CASSANDRA_TLS": "true",
                "FANLINE_CASSANDRA_TLS_CA": str(pki["ca"]),
                "FANLINE_CASSANDRA_USERNAME": "fanline",
                "FANLINE_CASSANDRA_PASSWORD": PASSWORD,
            }
        )
    )
    kwargs = storage.security.cluster_kwargs()
    assert kwargs["ssl_context"].check_hostname and kwargs["ssl_context"].verify_mode == ssl.CERT_REQUIRED
    assert kwargs["auth_provider"].username == "fanline" and kwargs["auth_provider"].password == PASSWORD
    assert PASSWORD not in repr(storage)


@pytest.mark.parametrize(
    ("env", "names"),
    [
        ({"FANLINE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}, "FANLINE_KAFKA_USERNAME"),
        ({"FANLINE_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT"}, "FANLINE_KAFKA_SECURITY_PROTOCOL"),
        ({"FANLINE_KAFKA_SECURITY_PROTOCOL": "SSL", "FANLINE_KAFKA_TLS_CA": "/nonexistent/ca.pem"}, "FANLINE_KAFKA_TLS_CA"),
        ({"FANLINE_KAFKA_SECURITY_PROTOCOL": "SSL", "FANLINE_KAFKA_TLS_CERT": "__cert__"}, "FANLINE_KAFKA_TLS_KEY"),
        (
            {"FANLINE_KAFKA_PASSWORD": "x", "FANLINE_KAFKA_PASSWORD_FILE": "/x", "FANLINE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"},
            "not both",
        ),
        (
            {"FANLINE_KAFKA_PASSWORD_FILE": "/nonexistent", "FANLINE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"},
            "FANLINE_KAFKA_PASSWORD_FILE",
        ),
        ({"FANLINE_BACKEND": "cassandra", "FANLINE_CASSANDRA_USERNAME": "fanline"}, "FANLINE_CASSANDRA_PASSWORD"),
    ],
)
def test_incomplete_or_broken_settings_are_refused_naming_the_variable(
    pki: dict[str, Path], env: dict[str, str], names: str
) -> None:
    env = {k: str(pki["cert"]) if v == "__cert__" else v for k, v in env.items()}
    with pytest.raises(ConfigError, match=names) as refused:
        KafkaSettings.from_env(Env(env)) if "FANLINE_BACKEND" not in env else StorageSettings.from_env(Env(env))
    assert PASSWORD not in str(refused.value)


def test_secrets_from_files_for_the_token_and_the_cursor_secret(tmp_path: Path) -> None:
    from fanline_api.config import Settings

    (tmp_path / "token").write_text("t" * 24 + "\n")
    (tmp_path / "cursor").write_text("c" * 40)
    settings = Settings.from_env(
        {"FANLINE_INTERNAL_TOKEN_FILE": str(tmp_path / "token"), "FANLINE_CURSOR_SECRET_FILE": str(tmp_path / "cursor")}
    )
    assert settings.peers.internal_token == "t" * 24 and settings.cursor_secret == b"c" * 40
    assert "t" * 24 not in repr(settings) and "c" * 40 not in repr(settings)
