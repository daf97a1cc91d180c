"""The images, without a container engine (CI has none).

* Every Dockerfile that docker-compose.yml builds (whatever their number and
  build arguments: they are read, not listed here) copies only files that
  exist and that .dockerignore lets into the build context.
* Each image's Python packages build as wheels exactly as its builder stage
  builds them: the builder's working directory is recreated from its COPY
  instructions (through .dockerignore), and its ``pip install`` runs as
  ``pip wheel`` with the same options and paths; every file of each
  package's ``src/`` must be in its wheel (package data included).
* The version: every package carries the newest release of CHANGELOG.md,
  which `make images` tags the images with.

`make images` (tools/images.py) builds from the same compose ``build:``
sections; its command lines are checked here too.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from unit.test_deploy_files import Stage, dockerfile_stages, dockerignored

from .support import REPO

COMPOSE = REPO / "docker-compose.yml"


@dataclass(frozen=True)
class Build:
    image: str  # fanline/api
    context: Path
    dockerfile: Path
    args: tuple[tuple[str, str], ...]


@cache
def builds() -> tuple[Build, ...]:
    """One per image, from docker-compose.yml's ``build:`` sections."""
    found: dict[str, Build] = {}
    for name, service in yaml.safe_load(COMPOSE.read_text())["services"].items():
        build: Any = service.get("build")
        if build is None:
            continue
        if isinstance(build, str):
            build = {"context": build}
        args = build.get("args", {})
        pairs = tuple(sorted(args.items() if isinstance(args, dict) else (a.split("=", 1) for a in args)))
        context = (REPO / build["context"]).resolve()
        image = re.sub(r":[^/]*$", "", service.get("image", name))
        found.setdefault(image, Build(image, context, context / build.get("dockerfile", "Dockerfile"), pairs))
    return tuple(found[k] for k in sorted(found))


by_build = pytest.mark.parametrize("build", builds(), ids=lambda b: b.image)


def ignore_patterns(context: Path) -> list[str]:
    path = context / ".dockerignore"
    lines = path.read_text().splitlines() if path.exists() else []
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]


@dataclass(frozen=True)
class Copy:
    sources: tuple[str, ...]
    dest: str
    workdir: str


def copies(build: Build, stage: Stage) -> list[Copy]:
    """The stage's COPY/ADD instructions from the build context (not --from)."""
    out, workdir = [], "/"
    for keyword, args in stage.instructions:  # build arguments already substituted
        if keyword == "WORKDIR":
            workdir = args if args.startswith("/") else f"{workdir.rstrip('/')}/{args}"
        if keyword not in ("COPY", "ADD"):
            continue
        words = __import__("json").loads(args) if args.startswith("[") else shlex.split(args)
        flags = [w for w in words if w.startswith("--")]
        if any(f.startswith("--from") for f in flags):
            continue
        *sources, dest = [w for w in words if not w.startswith("--")]
        out.append(Copy(tuple(sources), dest, workdir))
    return out


def context_files(build: Build, source: str) -> list[Path]:
    """Files of the build context a COPY source names, after .dockerignore."""
    patterns = ignore_patterns(build.context)
    matched = [p for p in build.context.glob(source.strip("/"))] if any(c in source for c in "*?[") else [build.context / source]
    files: list[Path] = []
    for path in matched:
        candidates = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
        files += [p for p in candidates if not dockerignored(str(p.relative_to(build.context)), patterns)]
    return files


@by_build
def test_every_file_the_dockerfile_copies_exists_in_the_build_context(build: Build) -> None:
    assert build.dockerfile.is_file(), f"{build.image}: no {build.dockerfile}"
    for stage in dockerfile_stages(build.dockerfile, build.args):
        for copy in copies(build, stage):
            for source in copy.sources:
                assert context_files(build, source), f"{build.image}: COPY {source} copies nothing (missing or .dockerignored)"


def builder_install(build: Build) -> tuple[Stage, list[str]]:
    """The builder stage and the arguments of its ``pip install`` (the shell
    command it is part of cut at ``&&``, ``;`` and ``|``)."""
    for stage in dockerfile_stages(build.dockerfile, build.args)[:-1]:
        for keyword, args in stage.instructions:
            if keyword == "RUN" and "pip install" in args:
                for command in re.split(r"&&|;|\|\|?", args):
                    words = shlex.split(command)
                    if "pip" in words and "install" in words:
                        return stage, words[words.index("install") + 1 :]
    raise AssertionError(f"{build.image}: no builder stage runs pip install")


def image_installs(image: str) -> list[str]:
    """What an image's builder passes to pip install (for other tests)."""
    (build,) = [b for b in builds() if b.image == image]
    return builder_install(build)[1]


def recreate_workdir(build: Build, stage: Stage, root: Path) -> Path:
    """The builder's working directory as its COPY instructions leave it."""
    workdir = "/"
    for copy in copies(build, stage):
        workdir = copy.workdir
        dest = copy.dest if copy.dest.startswith("/") else f"{copy.workdir.rstrip('/')}/{copy.dest}"
        for source in copy.sources:
            base = build.context / source.rstrip("/")
            for file in context_files(build, source):
                relative = file.relative_to(base) if base.is_dir() else Path(file.name)
                target = root / dest.lstrip("/") / relative if dest.endswith("/") or base.is_dir() else root / dest.lstrip("/")
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(file, target)
    return root / workdir.lstrip("/")


def package_dir(wheel: Path) -> Path:
    name = wheel.name.split("-")[0].replace("_", "-")
    for pyproject in REPO.glob("**/pyproject.toml"):
        if ".venv" in pyproject.parts or pyproject.parent == REPO:
            continue
        if tomllib.loads(pyproject.read_text())["project"]["name"] == name:
            return pyproject.parent
    raise AssertionError(f"no package named {name}")


@by_build
def test_the_images_packages_build_as_their_dockerfile_builds_them(build: Build, tmp_path: Path) -> None:
    stage, install = builder_install(build)
    workdir = recreate_workdir(build, stage, tmp_path / "root")
    out = tmp_path / "wheels"
    # As the Dockerfile, but wheels of our own packages only (--no-deps: the
    # third-party ones are pinned by the same -c and make dev installs them),
    # built by the venv's setuptools instead of an isolated build environment
    # downloaded per package (4 s instead of 20 s an image).
    done = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check"),
            *("--no-deps", "--no-build-isolation", "-w", str(out), *install),
        ],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    wheels = sorted(out.glob("*.whl"))
    local = [w for w in install if w.startswith(("./", "/")) or (workdir / w).is_dir()]
    assert len(wheels) == len(local), (wheels, install)
    for wheel in wheels:
        source = package_dir(wheel) / "src"
        expected = {
            str(p.relative_to(source))
            for p in source.rglob("*")
            if p.is_file() and "__pycache__" not in p.parts and not any(x.endswith(".egg-info") for x in p.parts)
        }
        shipped = set(zipfile.ZipFile(wheel).namelist())
        missing = sorted(expected - shipped)
        assert not missing, f"{build.image}: {wheel.name} lacks {missing}"


def test_the_dockerfile_checks_are_not_vacuous(tmp_path: Path) -> None:
    """A COPY of a file that is not there, or that .dockerignore keeps out, fails."""
    (tmp_path / "Dockerfile").write_text("FROM python:3.11-slim AS b\nWORKDIR /src\nCOPY constraints.txt missing.txt ./\n")
    (tmp_path / "constraints.txt").write_text("")
    (tmp_path / ".dockerignore").write_text("*\n!missing.txt\n")
    build = Build("x", tmp_path, tmp_path / "Dockerfile", ())
    (stage,) = dockerfile_stages(build.dockerfile)
    (copy,) = copies(build, stage)
    assert [bool(context_files(build, s)) for s in copy.sources] == [False, False]


# --------------------------------------------------------------------------
# version and `make images`
# --------------------------------------------------------------------------


def released_version() -> str:
    match = re.search(r"^## \[(\d+\.\d+\.\d+)\]", (REPO / "CHANGELOG.md").read_text(), re.M)
    assert match, "CHANGELOG.md has no released version"
    return match.group(1)


def test_every_package_carries_the_newest_release() -> None:
    version = released_version()
    found = {}
    for pyproject in [
        REPO / "shared" / "pyproject.toml",
        *REPO.glob("services/*/pyproject.toml"),
        *REPO.glob("tools/*/pyproject.toml"),
    ]:
        found[str(pyproject.relative_to(REPO))] = tomllib.loads(pyproject.read_text())["project"]["version"]
    for init in [*REPO.glob("services/*/src/*/__init__.py"), *REPO.glob("tools/*/src/*/__init__.py")]:
        match = re.search(r'^__version__ = "([^"]+)"', init.read_text(), re.M)
        if match:
            found[str(init.relative_to(REPO))] = match.group(1)
    assert len(found) >= 10
    assert set(found.values()) == {version}, {k: v for k, v in found.items() if v != version}


def images_script(*args: str, path: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(REPO / "tools" / "images.py"), *args],
        env={"PATH": path},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_make_images_builds_every_image_with_whichever_engine_is_present(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls"
    podman = bin_dir / "podman"
    podman.write_text(f'#!/bin/sh\necho "$*" >> {log}\n')
    podman.chmod(0o755)
    done = images_script(path=str(bin_dir))
    assert done.returncode == 0, done.stderr
    calls = log.read_text().splitlines()
    version = released_version()
    assert len(calls) == len(builds()) == 4
    for build, call in zip(builds(), calls, strict=True):
        assert call.startswith(f"build -f {build.dockerfile} ")
        assert f"-t {build.image}:{version} -t {build.image}:dev" in call
        assert call.endswith(str(build.context))


def test_make_images_says_so_when_there_is_no_engine(tmp_path: Path) -> None:
    done = images_script(path=str(tmp_path))
    assert done.returncode == 1
    assert "docker or podman" in done.stderr


def test_images_are_named_as_the_manifests_name_them() -> None:
    kustomization = yaml.safe_load((REPO / "deploy" / "k8s" / "base" / "kustomization.yaml").read_text())
    assert {i["name"] for i in kustomization["images"]} == {b.image for b in builds()}
    assert {i["newTag"] for i in kustomization["images"]} == {released_version()}
    assert all(fnmatch.fnmatch(b.image, "fanline/*") for b in builds())
