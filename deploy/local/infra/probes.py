"""Wire probes: is a port free, and do the engines answer their real
protocols — a CQL v4 OPTIONS/STARTUP/QUERY exchange
(``cql_release_version``) and Kafka ApiVersions + Metadata
(``kafka_live_brokers``). Probes raise ``OSError``/``ConnectionError``/
``ValueError``/``struct.error`` when nothing (or something else) answers.

For the secure engines (``make infra-up SECURE=1``) both speak TLS (an
``ssl.SSLContext``, with the client certificate the engines require) and
authenticate: CQL with ``PasswordAuthenticator``'s SASL PLAIN token, Kafka
with SASL SCRAM-SHA-512 (RFC 5802, stdlib ``hashlib``/``hmac``). A refused
credential raises ``AuthenticationFailed``."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import socket
import ssl
import struct
from dataclasses import dataclass


class AuthenticationFailed(ConnectionError):
    """The engine answered and refused the credentials."""


@dataclass(frozen=True)
class Credentials:
    """A user and password for a probe (never printed: ``repr`` hides it)."""

    username: str
    password: str

    def __repr__(self) -> str:
        return f"Credentials(username={self.username!r}, password='***')"


def _connect(host: str, port: int, timeout: float, tls: ssl.SSLContext | None) -> socket.socket:
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.settimeout(timeout)
    if tls is None:
        return sock
    try:
        return tls.wrap_socket(sock, server_hostname=host)
    except BaseException:
        sock.close()
        raise


def _port_free(host: str, port: int) -> bool:
    """True if nothing is listening on / bound to ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed by peer")
        buf += chunk
    return bytes(buf)


def _cql_string(s: str) -> bytes:
    raw = s.encode("utf-8")
    return struct.pack(">H", len(raw)) + raw


def _cql_request(sock: socket.socket, opcode: int, body: bytes, stream: int) -> tuple[int, bytes]:
    """Send one CQL v4 frame and return ``(opcode, body)`` of the response."""
    sock.sendall(struct.pack(">BBhBi", 0x04, 0x00, stream, opcode, len(body)) + body)
    _version, flags, _stream, resp_op, length = struct.unpack(">BBhBi", _recv_exact(sock, 9))
    payload = _recv_exact(sock, length)
    pos = 0
    if flags & 0x02:  # tracing id
        pos += 16
    if flags & 0x08:  # warnings: [string list]
        (n,) = struct.unpack_from(">H", payload, pos)
        pos += 2
        for _ in range(n):
            (ln,) = struct.unpack_from(">H", payload, pos)
            pos += 2 + ln
    if flags & 0x04:  # custom payload: [bytes map]
        (n,) = struct.unpack_from(">H", payload, pos)
        pos += 2
        for _ in range(n):
            (ln,) = struct.unpack_from(">H", payload, pos)
            pos += 2 + ln
            (bl,) = struct.unpack_from(">i", payload, pos)
            pos += 4 + max(bl, 0)
    body = payload[pos:]
    if resp_op == 0x00:  # ERROR
        code, msg_len = struct.unpack_from(">iH", body, 0)
        message = body[6 : 6 + msg_len].decode("utf-8", errors="replace")
        raise ConnectionError(f"CQL error 0x{code:04x}: {message}")
    return resp_op, body


def _cql_skip_option(body: bytes, pos: int) -> int:
    """Skip one CQL ``[option]`` type descriptor (enough for system.local columns)."""
    (type_id,) = struct.unpack_from(">H", body, pos)
    pos += 2
    if type_id == 0x0000:  # custom: [string]
        (ln,) = struct.unpack_from(">H", body, pos)
        return int(pos + 2 + ln)
    if type_id in (0x0020, 0x0022):  # list, set
        return _cql_skip_option(body, pos)
    if type_id == 0x0021:  # map
        return _cql_skip_option(body, _cql_skip_option(body, pos))
    if type_id in (0x0030, 0x0031):
        raise ValueError("UDT/tuple columns are not supported by this minimal CQL probe")
    return pos


def _cql_first_text(body: bytes) -> str | None:
    """Decode the first column of the first row of a RESULT/Rows body as UTF-8."""
    (kind,) = struct.unpack_from(">i", body, 0)
    if kind != 0x0002:
        return None
    flags, ncols = struct.unpack_from(">ii", body, 4)
    pos = 12
    if flags & 0x0002:  # has_more_pages: paging state [bytes]
        (ln,) = struct.unpack_from(">i", body, pos)
        pos += 4 + max(ln, 0)
    if not flags & 0x0004:  # metadata present
        global_spec = bool(flags & 0x0001)
        if global_spec:
            for _ in range(2):
                (ln,) = struct.unpack_from(">H", body, pos)
                pos += 2 + ln
        for _ in range(ncols):
            for _ in range(0 if global_spec else 2):
                (ln,) = struct.unpack_from(">H", body, pos)
                pos += 2 + ln
            (ln,) = struct.unpack_from(">H", body, pos)
            pos += 2 + ln
            pos = _cql_skip_option(body, pos)
    (nrows,) = struct.unpack_from(">i", body, pos)
    pos += 4
    if nrows < 1 or ncols < 1:
        return None
    (ln,) = struct.unpack_from(">i", body, pos)
    if ln < 0:
        return None
    return body[pos + 4 : pos + 4 + ln].decode("utf-8", errors="replace")


def _cql_session(host: str, port: int, timeout: float, tls: ssl.SSLContext | None, login: Credentials | None) -> socket.socket:
    """A CQL v4 connection past STARTUP (and, when the node asks, authenticated)."""
    sock = _connect(host, port, timeout, tls)
    try:
        op, _ = _cql_request(sock, 0x05, b"", stream=1)  # OPTIONS
        if op != 0x06:
            raise ConnectionError(f"unexpected CQL response opcode {op} to OPTIONS")
        startup = struct.pack(">H", 1) + _cql_string("CQL_VERSION") + _cql_string("3.0.0")
        op, _ = _cql_request(sock, 0x01, startup, stream=2)  # STARTUP
        if op == 0x03:  # AUTHENTICATE: PasswordAuthenticator's SASL PLAIN token
            if login is None:
                raise AuthenticationFailed("the node requires authentication")
            token = b"\x00" + login.username.encode() + b"\x00" + login.password.encode()
            try:
                op, _ = _cql_request(sock, 0x0F, struct.pack(">i", len(token)) + token, stream=3)  # AUTH_RESPONSE
            except ConnectionError as exc:
                if "0x0100" in str(exc):  # Bad credentials
                    raise AuthenticationFailed(str(exc)) from None
                raise
            if op != 0x10:  # AUTH_SUCCESS
                raise ConnectionError(f"unexpected CQL response opcode {op} to AUTH_RESPONSE")
        elif op != 0x02:  # READY
            raise ConnectionError(f"unexpected CQL response opcode {op} to STARTUP")
        return sock
    except BaseException:
        sock.close()
        raise


def cql_query(sock: socket.socket, cql: str, stream: int = 4) -> bytes:
    """Run one statement at consistency ONE; return the RESULT body."""
    query = cql.encode()
    body = struct.pack(">i", len(query)) + query + struct.pack(">HB", 0x0001, 0x00)
    op, result = _cql_request(sock, 0x07, body, stream=stream)  # QUERY
    if op != 0x08:
        raise ConnectionError(f"unexpected CQL response opcode {op} to QUERY")
    return result


def cql_execute(
    host: str, port: int, statements: list[str], *, tls: ssl.SSLContext | None = None, login: Credentials | None = None
) -> None:
    """Run ``statements`` in order on one authenticated connection."""
    with _cql_session(host, port, 10.0, tls, login) as sock:
        for i, cql in enumerate(statements):
            cql_query(sock, cql, stream=4 + i)


def cql_release_version(
    host: str, port: int, timeout: float = 5.0, *, tls: ssl.SSLContext | None = None, login: Credentials | None = None
) -> str:
    """Do a real CQL v4 handshake and return ``system.local.release_version``.

    Sends OPTIONS (expects SUPPORTED), STARTUP (expects READY, or AUTHENTICATE
    answered with ``login``) and a QUERY at consistency ONE, over ``tls`` if
    given. Raises ``OSError``/``ConnectionError``/``ValueError`` if the node
    is not (yet) serving CQL, ``AuthenticationFailed`` if it refuses ``login``.
    """
    with _cql_session(host, port, timeout, tls, login) as sock:
        version = _cql_first_text(cql_query(sock, "SELECT release_version FROM system.local"))
        if not version:
            raise ConnectionError("system.local returned no release_version")
        return version


def _kafka_request(sock: socket.socket, api_key: int, api_version: int, correlation_id: int, body: bytes) -> bytes:
    """Send a non-flexible (header v1) Kafka request and return the response body."""
    client_id = b"fanline-infra"
    header = struct.pack(">hhih", api_key, api_version, correlation_id, len(client_id)) + client_id
    frame = header + body
    sock.sendall(struct.pack(">i", len(frame)) + frame)
    (size,) = struct.unpack(">i", _recv_exact(sock, 4))
    payload = _recv_exact(sock, size)
    (corr,) = struct.unpack_from(">i", payload, 0)
    if corr != correlation_id:
        raise ConnectionError(f"Kafka correlation id mismatch ({corr} != {correlation_id})")
    return payload[4:]


def _scram_sha512(sock: socket.socket, login: Credentials) -> None:
    """SASL SCRAM-SHA-512 (RFC 5802, RFC 7677) over SaslHandshake v1 and
    SaslAuthenticate v0; raises ``AuthenticationFailed`` if refused."""
    mechanism = b"SCRAM-SHA-512"
    resp = _kafka_request(sock, 17, 1, 2, struct.pack(">h", len(mechanism)) + mechanism)  # SaslHandshake v1
    (error_code,) = struct.unpack_from(">h", resp, 0)
    if error_code != 0:
        raise ConnectionError(f"SaslHandshake error code {error_code}")

    def authenticate(message: bytes, correlation_id: int) -> bytes:
        body = _kafka_request(sock, 36, 0, correlation_id, struct.pack(">i", len(message)) + message)  # SaslAuthenticate v0
        code, msg_len = struct.unpack_from(">hh", body, 0)
        pos = 4 + max(msg_len, 0)
        if code != 0:
            text = body[4 : 4 + msg_len].decode(errors="replace") if msg_len > 0 else ""
            raise AuthenticationFailed(f"SASL authentication failed (error code {code}): {text}")
        (length,) = struct.unpack_from(">i", body, pos)
        return body[pos + 4 : pos + 4 + max(length, 0)]

    user = login.username.replace("=", "=3D").replace(",", "=2C")
    client_nonce = base64.b64encode(secrets.token_bytes(24)).decode()
    first_bare = f"n={user},r={client_nonce}"
    server_first = authenticate(f"n,,{first_bare}".encode(), 3).decode()
    fields = dict(part.split("=", 1) for part in server_first.split(","))
    nonce, salt, rounds = fields["r"], base64.b64decode(fields["s"]), int(fields["i"])
    if not nonce.startswith(client_nonce):
        raise ConnectionError("SCRAM: the server's nonce does not extend ours")
    salted = hashlib.pbkdf2_hmac("sha512", login.password.encode(), salt, rounds)
    client_key = hmac.digest(salted, b"Client Key", "sha512")
    final_bare = f"c=biws,r={nonce}"
    auth_message = f"{first_bare},{server_first},{final_bare}".encode()
    signature = hmac.digest(hashlib.sha512(client_key).digest(), auth_message, "sha512")
    proof = base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature, strict=True))).decode()
    server_final = authenticate(f"{final_bare},p={proof}".encode(), 4).decode()
    server_key = hmac.digest(salted, b"Server Key", "sha512")
    expected = base64.b64encode(hmac.digest(server_key, auth_message, "sha512")).decode()
    if server_final != f"v={expected}":
        raise ConnectionError("SCRAM: the server's signature does not verify")


def kafka_live_brokers(
    host: str, port: int, timeout: float = 5.0, *, tls: ssl.SSLContext | None = None, login: Credentials | None = None
) -> int:
    """Talk the real Kafka protocol and return the number of live (unfenced) brokers.

    Sends ApiVersions v0; then (after SASL SCRAM-SHA-512 with ``login``, over
    ``tls``, on a secure broker), if the broker supports a non-flexible
    Metadata version (1..8), a Metadata request for no topics and returns the
    broker count. If only flexible Metadata versions exist, a successful
    ApiVersions counts as 1.
    """
    with _connect(host, port, timeout, tls) as sock:
        resp = _kafka_request(sock, 18, 0, 1, b"")  # ApiVersions v0 (allowed before authentication)
        error_code, count = struct.unpack_from(">hi", resp, 0)
        if error_code != 0:
            raise ConnectionError(f"ApiVersions error code {error_code}")
        ranges: dict[int, tuple[int, int]] = {}
        for i in range(count):
            key, lo, hi = struct.unpack_from(">hhh", resp, 6 + 6 * i)
            ranges[key] = (lo, hi)
        if 3 not in ranges:
            raise ConnectionError("broker does not advertise the Metadata API")
        if login is not None:
            _scram_sha512(sock, login)
        lo, hi = ranges[3]
        version = min(hi, 8)
        if version < max(lo, 1):
            return 1
        body = struct.pack(">i", 0)  # topics: empty array (v1+: null would mean "all")
        if version >= 4:
            body += b"\x00"  # allow_auto_topic_creation = false
        if version >= 8:
            body += b"\x00\x00"  # include cluster/topic authorized operations = false
        meta = _kafka_request(sock, 3, version, 5, body)
        pos = 4 if version >= 3 else 0  # throttle_time_ms
        (brokers,) = struct.unpack_from(">i", meta, pos)
        return int(brokers)
