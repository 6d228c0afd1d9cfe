"""Rule scaling: the time to classify one error against 10, 1,000 and 10,000 custom rules.

The rule sets model a central gateway in front of many APIs: each API (a first path segment)
has its own rules, spread over the usual error statuses, with path and JSON conditions. The
rule that matches is the last custom rule, so a linear scan would pay for every rule before
it. A second, adversarial set puts every rule on the same status and path prefix (only the
JSON condition differs): the index cannot narrow that, and the report says so. A last pair
prices the shipped stack packs: a 400 none of them recognises (the fallback `http-400`
answers it), classified with the fallbacks alone and with every stack pack in front.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import fixtures
from gateway.classify import Classifier, Observation, ObservationKind
from gateway.config.loaded import SourcedRule
from gateway.config.loader import load_config
from gateway.config.rule_model import RuleSpec

COUNTS = (10, 1_000, 10_000)
SMOKE_COUNTS = (10, 100)
PER_API = 100
STATUSES = (400, 401, 403, 404, 409, 422, 429, 500, 502, 503)


def filler(i: int, same_prefix: bool) -> dict[str, Any]:
    """One realistic non-matching rule: its API, a status, a path glob and a JSON regex."""
    api = "v1" if same_prefix else f"api-{i // PER_API}"
    status = 400 if same_prefix else STATUSES[i % len(STATUSES)]
    path = f"/{api}/csv/**" if same_prefix else f"/{api}/resource-{i % 17}/**"
    return {
        "id": f"rule-{i}",
        "match": {
            "status": [status],
            "path": path,
            "json": {"path": "error", "regex": f"(?i)^failure number {i} "},
        },
        "error": {"code": f"FAILURE_{i}", "category": "VALIDATION_ERROR"},
    }


def rules(count: int, same_prefix: bool) -> list[dict[str, Any]]:
    out = [filler(i, same_prefix) for i in range(count - 1)]
    out.append(fixtures.custom_rules()[fixtures.MATCHING_RULE_INDEX])
    return out


def classifier(count: int, same_prefix: bool, root: Path) -> Classifier:
    """The shipped defaults plus `count` custom rules, the matching one last.

    The config file holds only the matching rule; the fillers are validated as rule models
    and put in front of it directly, because parsing 10,000 rules of YAML takes minutes and
    is not what is measured here.
    """
    config = {
        "include": ["builtin:http-defaults"],
        "routes": [{"name": "api", "prefix": "/", "upstream": "http://127.0.0.1:9"}],
        "rules": rules(1, same_prefix),
    }
    path = root / f"rules-{same_prefix}.yaml"
    path.write_text(json.dumps(config))
    loaded = load_config(str(path))
    source = loaded.rules[0].source
    loaded.rules[0:0] = [
        SourcedRule(RuleSpec.model_validate(filler(i, same_prefix)), source, is_default=False)
        for i in range(count - 1)
    ]
    return Classifier(loaded)


GENERIC_400 = '{"error":"Bad Request","message":"quantity must be a positive integer"}'
PACK_CONFIGS = {
    "fallbacks": "defaults: false\ninclude: [builtin:http-defaults, builtin:mcp-defaults]\n",
    "with_stack_packs": "",
}


def observation(body: str = fixtures.ERROR_BODY) -> Observation:
    return Observation(
        route="api",
        method="POST",
        path=fixtures.ERROR_PATH,
        kind=ObservationKind.STATUS,
        status=fixtures.ERROR_STATUS,
        headers={"content-type": "application/json"},
        body=body.encode(),
        content_type="application/json",
    )


def stack_pack_cost(seconds: float, rounds: int, root: Path) -> dict[str, float]:
    """Median µs for a 400 no stack pack recognises: the fallbacks alone, then all packs."""
    out: dict[str, float] = {}
    for label, head in PACK_CONFIGS.items():
        path = root / f"packs-{label}.yaml"
        path.write_text(head + "routes: [{name: api, upstream: 'http://127.0.0.1:9'}]\n")
        engine = Classifier(load_config(str(path)))
        out[label] = time_classify(engine, seconds, rounds, GENERIC_400, "http-400")
    return out


def time_classify(
    engine: Classifier,
    seconds: float,
    rounds: int,
    body: str = fixtures.ERROR_BODY,
    rule: str = "csv-malformed",
) -> float:
    """Median microseconds per classification (a fresh Observation each time, as per request).

    Each round runs for about `seconds / rounds`, so a slow (linear) case stays bounded.
    """
    begun = time.perf_counter()
    verdict = engine.classify(observation(body))
    assert verdict is not None and verdict.rule.id == rule, verdict
    first = time.perf_counter() - begun
    loops = max(1, min(5000, int(seconds / rounds / max(first, 1e-6))))
    per_call: list[float] = []
    for _ in range(rounds):
        begun = time.perf_counter()
        for _ in range(loops):
            engine.classify(observation(body))
        per_call.append((time.perf_counter() - begun) / loops * 1e6)
    return statistics.median(per_call)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    seconds, rounds = (0.3, 3) if args.smoke else (3.0, 9)
    counts = SMOKE_COUNTS if args.smoke else COUNTS
    result: dict[str, Any] = {"median_us": {}, "same_prefix_median_us": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for count in counts:
            engine = classifier(count, False, Path(tmp))
            result["median_us"][str(count)] = time_classify(engine, seconds, rounds)
        for count in (counts[0], counts[-1]):
            engine = classifier(count, True, Path(tmp))
            result["same_prefix_median_us"][str(count)] = time_classify(engine, seconds, rounds)
        result["stack_packs_us"] = stack_pack_cost(seconds, rounds, Path(tmp))
    if not args.smoke:
        medians, same = result["median_us"], result["same_prefix_median_us"]
        result["ratio_10000_to_10"] = medians["10000"] / medians["10"]
        result["same_prefix_ratio_10000_to_10"] = same["10000"] / same["10"]
    json.dump(result, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
