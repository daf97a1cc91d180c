"""Settings classes whose fields are declared once: name, type and variable.

A service's settings are a frozen dataclass subclassing ``EnvSettings``; each
field's default is a *reader* (``env_int``, ``env_float``, ``env_bool``,
``env_str`` or ``env_field``) that says which variable fills it and how, so
``Settings.from_env(os.environ)`` needs no constructor listing every field a
second time::

    @dataclass(frozen=True, kw_only=True)
    class Settings(EnvSettings):
        session_ttl_s: int = env_int("FANLINE_SESSION_TTL_S", 30 * 24 * 3600, minimum=60)
        hybrid: HybridPolicy = env_field(lambda env: HybridPolicy(...))

Reading goes through ``config.Env``, so every error names its variable. A
field without a reader keeps its dataclass default.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, Self, TypeVar

from .config import Env

T = TypeVar("T")
_READ = "fanline.env_read"
# A reader: (the environment, the settings class being built) -> value.
Reader = Callable[[Env, type[Any]], Any]


def env_field(read: Callable[[Env], T], *, secret: bool = False) -> T:
    """A field filled by ``read(env)`` (several variables, a nested policy).
    ``secret``: the field stays out of the settings' ``repr`` (and so out of
    any log line that prints them)."""
    return class_field(lambda env, _cls: read(env), secret=secret)


def class_field(read: Callable[[Env, Any], T], *, secret: bool = False) -> T:
    """A field filled by ``read(env, cls)``: for base classes whose fields
    depend on the subclass being built (its service name, its port)."""
    return dataclasses.field(metadata={_READ: read}, repr=not secret)  # type: ignore[no-any-return]


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    return env_field(lambda env: env.integer(name, default, minimum=minimum))


def env_float(name: str, default: float, *, positive: bool = False) -> float:
    return env_field(lambda env: env.number(name, default, positive=positive))


def env_bool(name: str, default: bool) -> bool:
    return env_field(lambda env: env.boolean(name, default))


def env_str(name: str, default: str) -> str:
    return env_field(lambda env: env.string(name, default))


class EnvSettings:
    """Base of a frozen settings dataclass built with ``from_env``."""

    @classmethod
    def from_env(cls, environ: Mapping[str, str]) -> Self:
        """Every field with a reader, read from ``environ`` (a plain dict in tests)."""
        env = Env(environ)
        fields = dataclasses.fields(cls)  # type: ignore[arg-type]
        return cls(**{f.name: f.metadata[_READ](env, cls) for f in fields if _READ in f.metadata})
