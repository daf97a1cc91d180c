"""Build Fanline's container images with docker or podman (`make images`).

    python tools/images.py                 # every image, tagged <version> and dev
    python tools/images.py --tag 0.2.0-rc1 # another tag instead of <version>
    python tools/images.py --print         # only print the build commands

What to build comes from docker-compose.yml, the one place that says how
each image is built (its ``build:``: context, Dockerfile, build arguments)
and named (its ``image:``, ``fanline/<name>:…``), so a Dockerfile merged or
split, or a build argument added, needs no change here. The engine is
``$ENGINE`` if set, else ``docker``, else ``podman``; with neither, exit 1
saying so. The version is the packages' (shared/pyproject.toml), which
tests/ops/test_images.py keeps equal to the newest release in CHANGELOG.md.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
COMPOSE = REPO / "docker-compose.yml"


def version() -> str:
    """The release version every package carries."""
    return str(tomllib.loads((REPO / "shared" / "pyproject.toml").read_text())["project"]["version"])


def builds() -> dict[str, dict[str, Any]]:
    """Image repository (``fanline/api``) -> its compose ``build:`` section,
    one per image however many services share it."""
    found: dict[str, dict[str, Any]] = {}
    for name, service in yaml.safe_load(COMPOSE.read_text())["services"].items():
        build = service.get("build")
        if build is None:
            continue
        if isinstance(build, str):
            build = {"context": build}
        image = re.sub(r":[^/]*$", "", service.get("image", f"fanline/{name}"))
        if found.setdefault(image, build) != build:
            raise SystemExit(f"docker-compose.yml builds {image} two different ways")
    return found


def commands(engine: str, tags: list[str]) -> list[list[str]]:
    out = []
    for image, build in sorted(builds().items()):
        argv = [engine, "build", "-f", str(REPO / build["context"] / build.get("dockerfile", "Dockerfile"))]
        args = build.get("args", {})
        items = args.items() if isinstance(args, dict) else (a.partition("=")[::2] for a in args)
        for key, value in items:
            argv += ["--build-arg", f"{key}={value}"]
        for tag in tags:
            argv += ["-t", f"{image}:{tag}"]
        out.append([*argv, str((REPO / build["context"]).resolve())])
    return out


def engine() -> str | None:
    chosen = os.environ.get("ENGINE") or shutil.which("docker") or shutil.which("podman")
    return chosen or None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tag", default=version(), help="tag besides 'dev' (default: the release version)")
    parser.add_argument("--print", action="store_true", help="print the build commands, run nothing")
    args = parser.parse_args(argv)
    tags = [args.tag] if args.tag == "dev" else [args.tag, "dev"]
    chosen = engine()
    if chosen is None and not args.print:
        print("make images needs a container engine: install docker or podman (or set ENGINE=...)", file=sys.stderr)
        return 1
    for argv_ in commands(chosen or "docker", tags):
        print("+ " + " ".join(argv_), flush=True)
        if not args.print:
            done = subprocess.run(argv_, check=False)
            if done.returncode != 0:
                return done.returncode
    return 0


if __name__ == "__main__":
    sys.exit(main())
