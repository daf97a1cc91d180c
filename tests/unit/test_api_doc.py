"""docs/api.md (the project's API reference) and /openapi.json describe the
same routes, and the docs never send a reader outside the repository."""

from __future__ import annotations

import re
from pathlib import Path

from fanline_api.openapi import openapi_document

REPO = Path(__file__).resolve().parents[2]
API_DOC = REPO / "docs" / "api.md"
ROUTE = re.compile(r"`(GET|POST|PUT|PATCH|DELETE) (/[^`?\s]*)")
METHODS = {"get", "post", "put", "patch", "delete"}


def _normal(path: str) -> str:
    return re.sub(r"\{[^}]+\}", "{}", path)


def documented() -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """(served, planned) routes named in docs/api.md: a route under a heading
    marked "(planned" is part of the contract but not served yet."""
    served: set[tuple[str, str]] = set()
    planned: set[tuple[str, str]] = set()
    is_planned = False
    for line in API_DOC.read_text().splitlines():
        if line.startswith("#"):
            is_planned = "(planned" in line
            continue
        for method, path in ROUTE.findall(line):
            (planned if is_planned else served).add((method, _normal(path)))
    return served, planned


def openapi_routes() -> set[tuple[str, str]]:
    paths = openapi_document("test")["paths"]
    return {(m.upper(), _normal(p)) for p, item in paths.items() for m in item if m in METHODS}


def test_every_documented_route_is_in_openapi_and_vice_versa() -> None:
    served, planned = documented()
    routes = openapi_routes()
    assert len(served) >= 19, served
    assert served - routes == set(), "in docs/api.md but not in /openapi.json"
    assert routes - served == set(), "in /openapi.json but not in docs/api.md"
    # A route under a "(planned" heading is contract not served yet; once served it moves out.
    assert (planned - served) & routes == set(), "a planned route is served now: move it out of its (planned) section"


def test_the_reference_covers_every_section_of_the_contract() -> None:
    headings = [line.lstrip("#").strip() for line in API_DOC.read_text().splitlines() if line.startswith("#")]
    for section in (
        "Errors",
        "Authentication",
        "Users",
        "Tweets",
        "Timelines",
        "Large accounts",
        "Newer than",
        "Live updates",
        "Rate limits",
        "Operations",
    ):
        assert any(h.startswith(section) for h in headings), section
    text = API_DOC.read_text()
    for header in (
        "RateLimit-Limit",
        "RateLimit-Remaining",
        "RateLimit-Reset",
        "Retry-After",
        "Allow",
        "X-Forwarded-For",
        "FANLINE_TRUSTED_PROXIES",
        "Idempotency-Key",
        "Last-Event-ID",
    ):
        assert header in text, header


LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_markdown_links_stay_inside_the_repository() -> None:
    """Someone who clones Fanline can follow every link: no ../ outside it,
    no file that does not exist (web links are fine)."""
    for doc in [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]:
        for target in LINK.findall(doc.read_text()):
            if re.match(r"[a-z]+://|mailto:|#", target):
                continue
            resolved = (doc.parent / target.split("#")[0]).resolve()
            assert resolved.is_relative_to(REPO), f"{doc.relative_to(REPO)} links outside the repository: {target}"
            assert resolved.exists(), f"{doc.relative_to(REPO)} links to a missing file: {target}"
