"""Mastodon's request parameters: the query string merged with a form,
multipart or JSON body, arrays as ``name[]`` (or repeated), Rails' booleans,
and the id and limit rules of ``Api::BaseController`` / ``Paginable``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from starlette.datastructures import FormData
from starlette.formparsers import FormParser, MultiPartException, MultiPartParser
from starlette.requests import Request

from fanline_shared.errors import BadRequest, InvalidInput, NotFound
from fanline_shared.http_routes import MAX_BODY_BYTES, read_body

MAX_FIELDS = 50
TRUE = {"1", "true", "t", "on", "yes", "y"}
STATUSES_LIMIT = 20  # Api::BaseController::DEFAULT_STATUSES_LIMIT
ACCOUNTS_LIMIT = 40  # ::DEFAULT_ACCOUNTS_LIMIT


@dataclass
class Params:
    """Every parameter of one request: ``get`` one value, ``list`` an array."""

    values: dict[str, Any]

    def get(self, name: str) -> Any:
        value = self.values.get(name)
        if isinstance(value, list):
            return value[0] if value else None
        return value

    def text(self, name: str) -> str | None:
        value = self.get(name)
        if value is None:
            return None
        if isinstance(value, dict):
            raise InvalidInput(f"{name} must be a string", code=f"invalid_{name}")
        return (
            value
            if isinstance(value, str)
            else orjson.dumps(value).decode()
            if not isinstance(value, bool | int)
            else str(value).lower()
        )

    def list(self, name: str) -> list[Any]:
        value = self.values.get(f"{name}[]", self.values.get(name))
        if value is None:
            return []
        return value if isinstance(value, list) else [value]

    def flag(self, name: str) -> bool:
        """Rails' truthiness: ``true``, ``1``, ``on`` … (and JSON ``true``)."""
        value = self.get(name)
        if isinstance(value, bool):
            return value
        return value is not None and str(value).strip().lower() in TRUE


async def read_params(request: Request) -> Params:
    """The query string, then the body's fields over it (as Rails merges them)."""
    values: dict[str, Any] = {}
    for key, value in request.query_params.multi_items():
        _add(values, key, value)
    if request.method in ("POST", "PUT", "PATCH", "DELETE"):
        content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type == "application/json":
            raw = await read_body(request, MAX_BODY_BYTES)
            if raw.strip():
                try:
                    parsed = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    raise BadRequest("body is not valid JSON", code="invalid_json") from None
                if not isinstance(parsed, dict):
                    raise BadRequest("body must be a JSON object", code="invalid_json")
                values.update(parsed)
        elif content_type in ("application/x-www-form-urlencoded", "multipart/form-data"):
            for key, field in (await _form(request, content_type)).multi_items():
                if isinstance(field, str):
                    _add(values, key, field)
    return Params(values)


async def _form(request: Request, content_type: str) -> FormData:
    raw = await read_body(request, MAX_BODY_BYTES)

    async def stream():  # type: ignore[no-untyped-def]
        yield raw

    try:
        if content_type == "multipart/form-data":
            return await MultiPartParser(request.headers, stream(), max_files=0, max_fields=MAX_FIELDS).parse()
        return await FormParser(request.headers, stream(), max_fields=MAX_FIELDS).parse()
    except MultiPartException as exc:
        raise BadRequest(f"malformed form: {exc.message}", code="invalid_form") from None


def _add(values: dict[str, Any], key: str, value: str) -> None:
    if key.endswith("[]"):
        values.setdefault(key, []).append(value)
        values.setdefault(key[:-2], values[key])
    elif key in values:
        existing = values[key]
        values[key] = [*existing, value] if isinstance(existing, list) else [existing, value]
    else:
        values[key] = value


def limit(params: Params, default: int = STATUSES_LIMIT) -> int:
    """Rails' ``[params[:limit].to_i.abs, default * 2].min``; 0 or garbage is the default."""
    raw = params.get("limit")
    digits = "".join(_leading_int(str(raw))) if raw is not None else ""
    value = abs(int(digits)) if digits not in ("", "-", "+") else 0
    return min(value, default * 2) if value else default


def _leading_int(raw: str) -> str:
    out = []
    for n, c in enumerate(raw.strip()):
        if (c.isdigit() and c.isascii()) or (n == 0 and c in "+-"):
            out.append(c)
        else:
            break
    return "".join(out)[:19]


def status_id(raw: object, name: str) -> int | None:
    """A status or account id parameter (``max_id``, ``since_id``, ``min_id``,
    a path id): digits, or ``422`` — absent or empty is None."""
    if raw is None or raw == "":
        return None
    text = str(raw).strip()
    if not text.isascii() or not text.isdigit() or len(text) > 19:
        raise InvalidInput(f"{name} must be an id (digits)", code=f"invalid_{name}")
    return int(text)


def path_id(request: Request, name: str = "id") -> int:
    """An id in the path (an account): digits, or ``404`` as for an unknown one."""
    raw = request.path_params[name]
    if not raw.isascii() or not raw.isdigit() or len(raw) > 19:
        raise NotFound(f"no {name} {raw[:32]}", code="not_found")
    return int(raw)
