"""social-graph's page of edges as JSON: each instant formatted once, same text."""

from datetime import UTC, datetime, timedelta

from fanline_shared.domain import Edge
from fanline_social_graph.service import edge_json, edges_json


def test_a_page_is_the_rows_edge_json() -> None:
    epoch = datetime.fromtimestamp(0, UTC)
    later = datetime(2026, 11, 26, 19, 0, 0, 1, tzinfo=UTC)
    page = [Edge("Ann", epoch), Edge("bob", epoch), Edge("Cy", later), Edge("dee", later + timedelta(days=1))]
    assert edges_json(page) == [edge_json(e) for e in page]
    assert edges_json(page)[1] == {"username": "bob", "since": "1970-01-01T00:00:00.000000Z"}
    assert edges_json([]) == []
