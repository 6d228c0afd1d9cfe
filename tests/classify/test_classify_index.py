"""The path-segment index: it narrows the candidates but never changes which rule wins."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.classify import Classifier, Observation, ObservationKind
from gateway.classify.rules import literal_first_segment
from gateway.config.loader import load_config

GLOBS = ["/v1/**", "/v1", "/v2/items/*", "/**", "/v*/x", "/v1/*/x", None]
PATHS = ["/v1", "/v1/", "/v1/a/x", "/v2/items/3", "/v2", "/v3/x", "/", "//v1/a", "/v1x/a", ""]


@pytest.mark.parametrize(
    ("glob", "segment"),
    [
        ("/v1/orders/**", "v1"),
        ("/v1", "v1"),
        ("/**", None),
        ("/v*/x", None),
        ("/v?/x", None),
        ("v1/x", None),
        ("//v1", None),
        (None, None),
    ],
)
def test_literal_first_segment(glob: str | None, segment: str | None) -> None:
    assert literal_first_segment(glob) == segment


def _config(tmp_path: Path) -> Classifier:
    rules: list[dict[str, Any]] = []
    for i, glob in enumerate(GLOBS * 2):
        match: dict[str, Any] = {"status": [400]}
        if glob is not None:
            match["path"] = glob
        if i < len(GLOBS):  # the first copies only match a body marker, so order is tested
            match["body"] = f"marker-{i}"
        rules.append(
            {
                "id": f"r{i}",
                "match": match,
                "error": {"code": f"C{i}", "category": "VALIDATION_ERROR"},
            }
        )
    config = {
        "routes": [{"name": "api", "prefix": "/", "upstream": "http://127.0.0.1:9"}],
        "defaults": False,
        "rules": rules,
    }
    path = tmp_path / "gw.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return Classifier(load_config(str(path)))


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("marker", [None, *range(len(GLOBS))])
def test_index_picks_the_same_rule_as_a_linear_scan(
    tmp_path: Path, path: str, marker: int | None
) -> None:
    classifier = _config(tmp_path)
    body = b"" if marker is None else f"marker-{marker}".encode()
    observation = Observation(
        route="api", method="GET", path=path, kind=ObservationKind.STATUS, status=400, body=body
    )
    linear = next(
        (r.id for r in classifier.rules if r.matches(observation, 1.0, float("inf")) is not None),
        None,
    )
    verdict = classifier.classify(observation, float("inf"))
    assert (verdict.rule.id if verdict else None) == linear
