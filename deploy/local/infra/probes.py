"""Wire probes: is a port free, and do the engines answer their real
protocols — a CQL v4 OPTIONS/STARTUP/QUERY exchange
(``cql_release_version``) and Kafka ApiVersions + Metadata
(``kafka_live_brokers``). Probes raise ``OSError``/``ConnectionError``/
``ValueError``/``struct.error`` when nothing (or something else) answers."""

from __future__ import annotations

import socket
import struct


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


def cql_release_version(host: str, port: int, timeout: float = 5.0) -> str:
    """Do a real CQL v4 handshake and return ``system.local.release_version``.

    Sends OPTIONS (expects SUPPORTED), STARTUP (expects READY) and a QUERY at
    consistency ONE. Raises ``OSError``/``ConnectionError``/``ValueError`` if the
    node is not (yet) serving CQL.
    """
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        op, _ = _cql_request(sock, 0x05, b"", stream=1)  # OPTIONS
        if op != 0x06:
            raise ConnectionError(f"unexpected CQL response opcode {op} to OPTIONS")
        startup = struct.pack(">H", 1) + _cql_string("CQL_VERSION") + _cql_string("3.0.0")
        op, _ = _cql_request(sock, 0x01, startup, stream=2)  # STARTUP
        if op != 0x02:  # READY (0x03 would be AUTHENTICATE)
            raise ConnectionError(f"unexpected CQL response opcode {op} to STARTUP")
        query = b"SELECT release_version FROM system.local"
        body = struct.pack(">i", len(query)) + query + struct.pack(">HB", 0x0001, 0x00)
        op, result = _cql_request(sock, 0x07, body, stream=3)  # QUERY
        if op != 0x08:
            raise ConnectionError(f"unexpected CQL response opcode {op} to QUERY")
        version = _cql_first_text(result)
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


def kafka_live_brokers(host: str, port: int, timeout: float = 5.0) -> int:
    """Talk the real Kafka protocol and return the number of live (unfenced) brokers.

    Sends ApiVersions v0; then, if the broker supports a non-flexible Metadata
    version (1..8), a Metadata request for no topics and returns the broker count.
    If only flexible Metadata versions exist, a successful ApiVersions counts as 1.
    """
    with socket.create_connection((host, port), timeout=timeout) as sock:
        sock.settimeout(timeout)
        resp = _kafka_request(sock, 18, 0, 1, b"")  # ApiVersions v0
        error_code, count = struct.unpack_from(">hi", resp, 0)
        if error_code != 0:
            raise ConnectionError(f"ApiVersions error code {error_code}")
        ranges: dict[int, tuple[int, int]] = {}
        for i in range(count):
            key, lo, hi = struct.unpack_from(">hhh", resp, 6 + 6 * i)
            ranges[key] = (lo, hi)
        if 3 not in ranges:
            raise ConnectionError("broker does not advertise the Metadata API")
        lo, hi = ranges[3]
        version = min(hi, 8)
        if version < max(lo, 1):
            return 1
        body = struct.pack(">i", 0)  # topics: empty array (v1+: null would mean "all")
        if version >= 4:
            body += b"\x00"  # allow_auto_topic_creation = false
        if version >= 8:
            body += b"\x00\x00"  # include cluster/topic authorized operations = false
        meta = _kafka_request(sock, 3, version, 2, body)
        pos = 4 if version >= 3 else 0  # throttle_time_ms
        (brokers,) = struct.unpack_from(">i", meta, pos)
        return int(brokers)
