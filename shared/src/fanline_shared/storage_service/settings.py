"""``StorageServiceSettings``: the settings every storage service has.

A service subclasses it (frozen, ``kw_only``), names itself in ``SERVICE``,
``PORT`` and ``ADMISSION``, and declares only its own fields
(``env_settings``): where it listens (``FANLINE_<SERVICE>_HOST``/``_PORT``),
its storage, the service credential and its admission control are read here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from fanline_shared.env_settings import EnvSettings, class_field, env_field  # absolute: ruff resolves the readers (RUF009)

from ..config import HttpSettings, StorageSettings, admission_policy, internal_token
from ..policies import AdmissionPolicy


def _http(env: Any, cls: type[StorageServiceSettings]) -> HttpSettings:
    return HttpSettings.from_env(env, cls.SERVICE.upper().replace("-", "_"), cls.PORT)


@dataclass(frozen=True, kw_only=True)
class StorageServiceSettings(EnvSettings):
    SERVICE: ClassVar[str]  # e.g. "social-graph": FANLINE_SOCIAL_GRAPH_HOST/_PORT
    PORT: ClassVar[int]  # the default port
    ADMISSION: ClassVar[AdmissionPolicy]  # the named policy FANLINE_ADMISSION_* adjust

    http: HttpSettings = class_field(_http)
    storage: StorageSettings = env_field(StorageSettings.from_env)
    # FANLINE_INTERNAL_TOKEN (internal_auth.py); a secret: never in a repr.
    internal_token: str | None = env_field(internal_token, secret=True)
    admission: AdmissionPolicy = class_field(lambda env, cls: admission_policy(env, cls.ADMISSION))
