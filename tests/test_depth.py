"""Token distribution, speculative decoding, warm-up, verdicts, io depth and the LRU what-if,
each against a hand-computed or independently computed answer."""

import re
from array import array

import pytest
from hypothesis import given, settings, strategies as st

import decode_analyze
from helpers import ct_text, io_text, report, run

MIB = 1 << 20


def node_rows(tokens, turn=0):
    """One MUL_MAT_ID node per token: [(step, wall ms, majflt)]."""
    return [f"{turn},1,{step},0,0,MUL_MAT_ID,ffn_moe_up-0,{int(ms * 1e6)},{majflt}"
            for step, ms, majflt in tokens]


def test_speculative_decoding_positions(write):
    # decodes at steps 10, 13, 14 of turn 0 (verify batches of 3, 1) and 20 of turn 1
    rows = node_rows([(10, 6.0, 0), (13, 2.0, 0), (14, 2.0, 0)]) + node_rows([(20, 2.0, 0)], 1)
    r = report("compute", write(ct_text(rows)))
    assert r["decodes"] == {"decodes": 4, "positions": 6, "speculative": True,
                            "ms_per_decode": 3.0, "ms_per_position": 2.0}
    out = " ".join(run("compute", write(ct_text(rows), "b.csv")).out.split())
    assert "speculative decoding: 4 decodes generated 6 positions: 3.00 ms per decode, 2.00 ms " \
        "per generated position" in out


def test_plain_decoding_is_not_speculative(write):
    r = report("compute", write(ct_text(node_rows([(5, 1.0, 0), (6, 1.0, 0)]))))
    assert r["decodes"]["speculative"] is False and r["decodes"]["positions"] == 2


def test_warmup_verdict(write):
    slow = [(step, 4.0, 0) for step in range(8)]
    fast = [(step, 1.0, 0) for step in range(8, 12)]
    r = report("compute", write(ct_text(node_rows(slow + fast))))
    assert r["warmup"] == {"tokens": 8, "first_mean": 4.0, "rest_mean": 1.0, "ratio": 4.0}
    warm = [v for v in r["verdicts"] if v["id"] == "warmup"][0]
    assert warm["flagged"] and "4.00x the rest" in warm["text"]
    flat = report("compute", write(ct_text(node_rows([(s, 1.0, 0) for s in range(16)])),
                                   "flat.csv"))
    assert not [v for v in flat["verdicts"] if v["id"] == "warmup"][0]["flagged"]


def test_skip_drops_warmup(write):
    slow = [(step, 4.0, 0) for step in range(8)]
    fast = [(step, 1.0, 0) for step in range(8, 20)]
    r = report("compute", write(ct_text(node_rows(slow + fast))), "--skip", "8")
    assert r["tokens"] == 12 and r["ms_per_token"] == 1.0


def test_fault_bound_verdict(write):
    rows = node_rows([(1, 4.0, 9), (2, 6.0, 0)])  # faulting node: 4 of 10 ms = 40%
    verdict = report("compute", write(ct_text(rows)))["verdicts"][0]
    assert verdict["id"] == "fault_bound" and verdict["flagged"] and "40%" in verdict["text"]
    rows = node_rows([(1, 2.0, 9), (2, 8.0, 0)])  # 20%
    verdict = report("compute", write(ct_text(rows), "b.csv"))["verdicts"][0]
    assert verdict["id"] == "fault_bound" and not verdict["flagged"]


def test_router_verdict(write):
    rows = ["0,1,1,0,0,GET_ROWS,ffn_moe_weights-0,3000000,0",
            "0,1,1,1,0,MUL_MAT_ID,ffn_moe_up-0,7000000,0"]
    verdicts = {v["id"]: v for v in report("compute", write(ct_text(rows)))["verdicts"]}
    # the compute trace alone cannot tell routing from a wait for reads
    assert verdicts["router_wait"]["flagged"] is None
    assert verdicts["router_wait"]["text"].startswith(
        "router wait undetermined: routing nodes take 3.00 ms per token, 30% of compute (> 20%)")


def test_sparkline():
    assert decode_analyze.sparkline([0, 1, 2, 4]) == "▁▃▅█"
    assert decode_analyze.sparkline([0, 1, 2, 4], ascii_only=True) == "_-+@"
    assert decode_analyze.sparkline(list(range(200)), width=50) == \
        decode_analyze.sparkline([max(range(i, i + 4)) for i in range(0, 200, 4)], width=50)


def test_ascii_flag(write):
    path = write(ct_text(node_rows([(1, 1.0, 0), (2, 3.0, 0)])))
    assert "▁" not in run("compute", path, "--ascii").out
    assert "  run |-@|" in run("compute", path, "--ascii").out


# ── io ──
# latencies 0.5, 1, 3, 1000, 1000, 1500 us; lanes 0,0,0,1,1,1 -> lane 1 busy 7x lane 0
IO_ROWS = [
    "0,1,1,0,1,0,0,0,0,65536,65536,500",
    "0,1,1,0,2,0,0,0,65536,65536,65536,1000",
    "0,1,1,1,1,0,0,1,1048576,65536,65536,3000",
    "0,1,2,1,1,0,1,0,1048576,65536,65536,1000000",
    "0,1,2,1,1,1,1,1,1114112,65536,65536,1000000",
    "0,1,2,2,7,0,1,0,9000000,1048576,1048576,1500000",
]


@pytest.fixture
def reads(write):
    return write(io_text(IO_ROWS))


def test_latency_histogram_and_ladder(reads):
    r = report("io", reads)
    assert r["latency_hist"] == [
        {"lo_us": 0, "hi_us": 1, "count": 1}, {"lo_us": 1, "hi_us": 2, "count": 1},
        {"lo_us": 2, "hi_us": 4, "count": 1}, {"lo_us": 512, "hi_us": 1024, "count": 2},
        {"lo_us": 1024, "hi_us": 2048, "count": 1}]
    assert r["latency_us"] == pytest.approx({"min": 0.5, "mean": 3504.5 / 6, "p50": 1000,
                                             "p90": 1500, "p99": 1500, "p999": 1500,
                                             "max": 1500})
    out = run("io", reads).out
    assert re.search(r"^ +512 -> 1023 +2 +\|#+ *\|$", out, re.M)
    header, values = out.split("per-read latency (us)\n")[1].splitlines()[:2]
    assert header.split() == ["min", "mean", "p50", "p90", "p99", "p99.9", "max"]
    assert values.split() == ["0.5", "584.1", "1000.0", "1500.0", "1500.0", "1500.0", "1500.0"]


def test_demand_vs_speculative(reads):
    demand, spec = report("io", reads)["demand_vs_spec"]
    assert demand == pytest.approx({"kind": "demand", "reads": 4,
                                    "mib_per_token": (3 * 65536 + MIB) / MIB / 2,
                                    "share_of_bytes": (3 * 65536 + MIB) / (5 * 65536 + MIB),
                                    "p50_us": 1000, "p99_us": 1500})
    assert spec["reads"] == 2 and spec["p50_us"] == 1000 and spec["p99_us"] == 1000


def test_io_layers_and_hot_experts(reads):
    r = report("io", reads)
    layers = {row["layer"]: row for row in r["by_layer"]}
    assert layers[1]["reads_per_token"] == 1.5
    assert layers[1]["mean_latency_us"] == pytest.approx(2003000 / 3 / 1e3)
    assert r["hot_experts"][0] == {"layer": 2, "expert": 7, "reads": 1, "mib": 1.0}
    assert r["hot_experts"][1] == {"layer": 1, "expert": 1, "reads": 3, "mib": 0.1875}


def test_io_per_token_view(reads):
    r = report("io", reads)
    assert [(t["step"], t["reads"]) for t in r["per_token"]] == [(1, 3), (2, 3)]
    assert r["token_mib"]["max"] == pytest.approx((2 * 65536 + MIB) / MIB)
    assert r["heaviest"][0]["step"] == 2 and r["token_reads"]["p50"] == 3
    out = run("io", reads).out
    assert "per token (reads): p50 3  p90 3  p99 3  max 3" in out
    assert "heaviest: turn 0 step 2 1.12, turn 0 step 1 0.19" in out


def test_io_verdicts(reads):
    verdicts = {v["id"]: v for v in report("io", reads, "--adjacent", "--cache")["verdicts"]}
    assert verdicts["lanes_unbalanced"]["flagged"]  # lane 1: 3500 us vs lane 0: 4.5 us
    assert "latency_bound" in verdicts and "coalescing" in verdicts and "cache" in verdicts


def test_latency_bound_verdict(write):
    rows = [f"0,1,1,0,{i},0,0,0,{i * MIB},4096,4096,1000000" for i in range(5)]
    rows += ["0,1,1,0,9,0,0,0,99999999,4194304,4194304,1000000"]
    verdicts = {v["id"]: v for v in report("io", write(io_text(rows)))["verdicts"]}
    # median read 4 KiB moves 3.9 MiB/s; the 4096 KiB class moves 4000
    assert verdicts["latency_bound"]["flagged"]
    assert "median read is 4 KiB" in verdicts["latency_bound"]["text"]


def test_idle_lane_counts_as_unbalanced(write):
    # io_threads=2 in the preamble, but only lane 0 read
    r = report("io", write(io_text(["0,1,1,0,0,0,0,0,0,4096,4096,1000"])))
    assert [row["lane"] for row in r["by_lane"]] == [0, 1]
    assert {v["id"]: v for v in r["verdicts"]}["lanes_unbalanced"]["flagged"]


# ── re-reads and the LRU curve ──
def test_reuse_known_answer(write):
    # items A(1 MiB) B(1 MiB) C(2 MiB): A B A C A B; footprint 4 MiB, total 7 MiB, rereads 3
    extent = {"A": (0, MIB), "B": (MIB, MIB), "C": (2 * MIB, 2 * MIB)}
    rows = [f"0,1,{i},0,0,0,0,0,{extent[x][0]},{extent[x][1]},{extent[x][1]},1000"
            for i, x in enumerate("ABACAB")]
    r = report("io", write(io_text(rows)), "--cache")["reuse"]
    assert r["unique_mib"] == 4 and r["reread_mib"] == 3
    # stack distances of the re-reads: A@2: B+A = 2 MiB; A@4: C+A = 3; B@5: A+C+B = 4
    shares = {point["fraction"]: point["hit_share"] for point in r["lru"]}
    assert shares == {1 / 16: 0.0, 1 / 8: 0.0, 1 / 4: 0.0, 1 / 2: 1 / 7, 1: 3 / 7}
    assert [p["cache_mib"] for p in r["lru"]] == [0.25, 0.5, 1.0, 2.0, 4.0]


def test_reuse_is_null_without_cache_flag(reads):
    assert report("io", reads)["reuse"] is None


def stack_distance_hits(items, sizes, capacity):
    """The definition, directly: O(n^2), for small inputs."""
    last = {}
    hits = 0
    for t, (item, size) in enumerate(zip(items, sizes)):
        if item in last:
            others = {items[u]: sizes[u] for u in range(last[item] + 1, t) if items[u] != item}
            if sum(others.values()) + size <= capacity:
                hits += size
        last[item] = t
    return hits


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=60), st.integers(1, 40),
       st.randoms(use_true_random=False))
def test_lru_simulation_equals_stack_distance(items, capacity, rng):
    size_of = {item: rng.randint(1, 12) for item in set(items)}
    sizes = [size_of[item] for item in items]
    assert decode_analyze.lru_hit_bytes(items, size_of, capacity) == \
        stack_distance_hits(items, sizes, capacity)


def test_lru_handles_an_item_larger_than_the_cache():
    assert decode_analyze.lru_hit_bytes([1, 1, 2, 2], {1: 10, 2: 1}, 5) == 1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(0, 2**64 - 1), max_size=30), max_size=4),
       st.sampled_from(sorted(decode_analyze.PERCENTILES)))
def test_sorted_parts_percentile_is_that_of_the_whole(parts, name):
    merged = sorted(v for part in parts for v in part)
    sorted_parts = decode_analyze.SortedParts([sorted(part) for part in parts])
    num, den = decode_analyze.PERCENTILES[name]
    expected = merged[min(len(merged) - 1, len(merged) * num // den)] if merged else None
    assert sorted_parts.percentile(name) == expected
    if merged:
        assert sorted_parts.kth(0) == merged[0] and sorted_parts.kth(len(merged) - 1) == merged[-1]
    assert sorted_parts.count_below(2**63) == sum(v < 2**63 for v in merged)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(0, 2**64 - 1), max_size=300), st.integers(1, 64))
def test_sorted_parts_of_an_array_empties_it_into_the_same_order(values, chunk):
    wide = array("Q", values)
    original = decode_analyze.SORT_CHUNK
    decode_analyze.SORT_CHUNK = chunk  # several parts even from a few values
    try:
        parts = decode_analyze.sorted_parts(wide)
    finally:
        decode_analyze.SORT_CHUNK = original
    assert len(wide) == 0  # its memory went to the parts, not beside them
    assert sorted(v for part in parts.parts for v in part) == sorted(values)
    assert all(list(part) == sorted(part) for part in parts.parts)


@given(st.lists(st.integers(0, 2**64 - 1), max_size=40), st.lists(st.integers(0, 2**64 - 1),
                                                                   max_size=40))
def test_extend_wide_keeps_every_value_and_widens_only_when_needed(first, then):
    values = decode_analyze.extend_wide(array(decode_analyze.WALL_32), first)
    values = decode_analyze.extend_wide(values, array("Q", then))
    assert list(values) == first + then
    assert values.itemsize == (4 if max(first + then, default=0) < 2**32 else 8)


def expected_reuse(reads):
    """The cache what-if of reads [(offset, size)], from the definitions."""
    footprint = sum(size for _, size in set(reads))  # distinct (offset, read_bytes) extents
    total = sum(size for _, size in reads)
    curve = {}
    for fraction in decode_analyze.CACHE_FRACTIONS:
        hits = stack_distance_hits(reads, [size for _, size in reads], footprint * fraction)
        curve[fraction] = hits / total
    return footprint / MIB, (total - footprint) / MIB, curve


@pytest.mark.parametrize("phase", [None, "all", "prefill", "decode"])
@pytest.mark.parametrize("jobs", ["1", "8"])
def test_reuse_covers_the_reads_of_the_phases_reported(write, small_split, phase, jobs):
    # Two turns, each a chunked prefill of 4 tokens of 10 reads then 3 decode tokens of 10
    # reads, over 12 extents; cut into up to 8 parts, some of which hold prefill reads only,
    # before and after parts with decode reads.
    rows, reads = [], {0: [], 1: []}
    for turn in range(2):
        for phase_value, steps, per_step in ((0, [0, 1, 2, 3], 10), (1, [4, 5, 6], 10)):
            for step in steps:
                for i in range(per_step):
                    extent = ((7 * i + 3 * step + turn) % 12) * MIB, (1 + i % 3) * MIB
                    reads[phase_value].append(extent)
                    rows.append(f"{turn},{phase_value},{step},0,{i},0,{i % 2},0,{extent[0]},"
                                f"{extent[1]},{extent[1]},1000")
    options = ["--phase", phase] if phase else []
    single, split = small_split("io", write(io_text(rows)), "--cache", "--jobs", jobs,
                                *options, "--format", "json")
    assert single.json["reuse"] == split.json["reuse"]
    if phase in (None, "decode"):
        chosen = [r for turn in range(2) for r in reads[1][turn * 30:(turn + 1) * 30]]
    elif phase == "prefill":
        chosen = reads[0]
    else:  # trace order: each turn's prefill, then its decode
        chosen = [r for turn in range(2) for r in reads[0][turn * 40:(turn + 1) * 40]
                  + reads[1][turn * 30:(turn + 1) * 30]]
    unique_mib, reread_mib, curve = expected_reuse(chosen)
    reuse = split.json["reuse"]
    assert reuse["unique_mib"] == unique_mib and reuse["reread_mib"] == reread_mib
    assert {p["fraction"]: p["hit_share"] for p in reuse["lru"]} == pytest.approx(curve)
