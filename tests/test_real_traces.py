"""The real engine traces in ../shared/traces: each analyses with no warning, and the session
pair's figures equal an independent computation with the csv module."""
import csv
from collections import defaultdict

import pytest

from helpers import REAL_TRACES, ROOT, report, shared_trace

REAL = sorted(REAL_TRACES)
EXAMPLES = sorted(p.name for p in (ROOT / "examples").glob("*.csv"))


def kind_of(name):
    return "io" if "-io" in name else "compute"


def independent(path):
    """Decode tokens and their summed time by the csv module, with no code of the tool."""
    with open(path, newline="") as f:
        rows = csv.DictReader(line for line in f if not line.startswith("#"))
        per_token = defaultdict(int)
        for row in rows:
            if row["phase"] == "1":
                value = int(row.get("wall_ns") or row.get("read_bytes"))
                per_token[int(row["turn"]), int(row["step"])] += value
    return per_token


@pytest.mark.parametrize("name", REAL)
def test_real_trace_analyses_cleanly(name):
    r = report(kind_of(name), shared_trace(name), *(("--adjacent",) if "-io" in name else ()))
    assert r["tokens"] > 0 and r["warnings"] == []
    if r["kind"] == "compute":
        assert r["ms_per_token"] > 0
        assert sum(op["share"] for op in r["by_op"]) == pytest.approx(1.0)
    else:
        assert r["reads"] > 0 and 1.0 <= r["adjacency"]["coalesce_factor"] < 10


@pytest.mark.parametrize("name", EXAMPLES)
def test_examples_match_an_independent_count(name):
    path = ROOT / "examples" / name
    expected = independent(path)
    r = report(kind_of(name), path)
    assert r["tokens"] == len(expected) and r["warnings"] == []
    if r["kind"] == "compute":
        assert r["ms_per_token"] == pytest.approx(sum(expected.values()) / 1e6 / len(expected))
    else:
        assert r["read_bytes"] == sum(expected.values())


def test_session_pair_compute():
    path = shared_trace("qwen3moe-l4-session-ct-node.csv")
    expected = independent(path)
    r = report("compute", path)
    assert r["tokens"] == len(expected) == 208
    assert r["ms_per_token"] == pytest.approx(sum(expected.values()) / 1e6 / 208)
    for turn, tokens in enumerate((64, 48, 64, 32)):
        per_turn = report("compute", path, "--turn", turn)
        mine = {k: v for k, v in expected.items() if k[0] == turn}
        assert per_turn["tokens"] == len(mine) == tokens
        assert per_turn["ms_per_token"] == pytest.approx(sum(mine.values()) / 1e6 / tokens)
        assert [t["ms"] for t in per_turn["per_token"]] == pytest.approx(
            [v / 1e6 for _, v in sorted(mine.items())])


def test_session_pair_io():
    path = shared_trace("qwen3moe-l4-session-ct-node-io.csv")
    expected = independent(path)
    r = report("io", path)
    assert r["tokens"] == len(expected)
    assert r["read_bytes"] == sum(expected.values())
    assert r["mib_per_token"] == pytest.approx(sum(expected.values()) / 2**20 / len(expected))


def test_layer_trace_segments_in_order():
    r = report("compute", shared_trace("qwen3moe-l4-ct-layers.csv"))
    assert r["granularity"] == "layer"
    assert [s["name"] for s in r["segments"]] == ["pre", "blk.0", "blk.1", "blk.2", "blk.3",
                                                  "post"]
    assert sum(s["share"] for s in r["segments"]) == pytest.approx(1.0)


def test_o_direct_waste_on_real_io():
    r = report("io", shared_trace("qwen3moe-l4-io-serial.csv"))
    # 65536 wanted, 69632 read: 1 - 65536/69632 = 5.88%, a little less where the window is short
    assert 5.0 < r["waste_pct"] < 5.9
