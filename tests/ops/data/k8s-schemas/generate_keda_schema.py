"""Regenerate scaledobject-keda-v1alpha1.json and
triggerauthentication-keda-v1alpha1.json (the KEDA schemas kubeconform
validates deploy/k8s against; see README.md beside this file).

Run in a throwaway virtualenv, not the project's (cloudcoil is not a
dependency of Fanline)::

    python3 -m venv /tmp/keda-schema && /tmp/keda-schema/bin/pip install \\
        cloudcoil==0.6.0 cloudcoil-models-keda==2.16.1.0
    /tmp/keda-schema/bin/python tests/ops/data/k8s-schemas/generate_keda_schema.py
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from cloudcoil.models.keda.v1alpha1 import ScaledObject, TriggerAuthentication  # type: ignore[import-not-found]

HERE = Path(__file__).parent


def strict(node: Any) -> Any:
    """kubeconform's -strict, done the way its openapi2jsonschema does it:
    every object that lists its properties rejects any other property (so a
    misspelt field fails instead of being silently ignored)."""
    if isinstance(node, dict):
        node = {k: strict(v) for k, v in node.items() if k != "title"}
        if "properties" in node and "additionalProperties" not in node:
            node["additionalProperties"] = False
        return node
    if isinstance(node, list):
        return [strict(v) for v in node]
    return node


def main() -> None:
    for model, kind in ((ScaledObject, "ScaledObject"), (TriggerAuthentication, "TriggerAuthentication")):
        schema = strict(model.model_json_schema(by_alias=True, mode="validation"))
        schema["required"] = sorted({*schema.get("required", []), "apiVersion", "kind", "metadata", "spec"})
        schema = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "description": f"KEDA {kind} (keda.sh/v1alpha1), generated from cloudcoil-models-keda 2.16.1.0",
            **schema,
        }
        out = HERE / f"{kind.lower()}-keda-v1alpha1.json"
        out.write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n")
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
