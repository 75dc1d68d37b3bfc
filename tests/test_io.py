"""Io: known answers on hand-written traces (worked out by hand), the latency histogram, layers
and experts, and the I/O range against the engine's own end-of-run figures."""
import re
from collections import defaultdict

import pytest
from hypothesis import given, settings, strategies as st

import decode_analyze
import trace_io
from helpers import ENGINE, REAL_TRACES, ROOT, io_text, report, run, trace_rows


MIB = 1 << 20


# turn,phase,step,layer,expert,proj,lane,spec,offset,req_bytes,read_bytes,latency_ns
ROWS = [
    "0,0,9,0,1,0,0,0,0,4096,4096,999000000",  # prefill: left out by default
    # token (0,1,10): extents [1000,2000) and [2000,3000) touch, [5000,5500) stands apart.
    # Judged on offset+read_bytes (the reference), all three would overlap: one run.
    "0,1,10,0,1,0,0,0,1000,1000,4096,100000",
    "0,1,10,0,2,0,0,0,2000,1000,4096,200000",
    "0,1,10,1,3,0,0,1,5000,500,4096,300000",
    # token (0,1,11): a 2 MiB read and a sub-KiB read inside it, zero latency
    "0,1,11,1,3,1,1,0,0,2097152,2097152,4000000",
    "0,1,11,1,4,0,1,0,0,512,512,0",
    # token (1,1,10): same step as turn 0's first token
    "1,1,10,0,1,0,1,0,10000000,65536,69632,1000000",
]


READ_BYTES = 3 * 4096 + 2097152 + 512 + 69632


REQ_BYTES = 1000 + 1000 + 500 + 2097152 + 512 + 65536


@pytest.fixture
def trace(write):
    return write(io_text(ROWS))


# ── io ──
# latencies 0.5, 1, 3, 1000, 1000, 1500 us; lanes 0,0,0,1,1,1 -> lane 1 busy 7x lane 0
# The engine's own end-of-run summary (tests/data/README.md): flash I/O s/token (rounded to
# ms) and MiB/s, per decoded token; every run decoded 128 tokens with 4 lanes.
DECODED = 128


def test_totals(trace):
    r = report("io", trace)
    assert r["tokens"] == 3 and r["reads"] == 6 and r["reads_per_token"] == 2
    assert r["read_bytes"] == READ_BYTES and r["req_bytes"] == REQ_BYTES
    assert r["mib_per_token"] == pytest.approx(READ_BYTES / MIB / 3)
    assert r["busy_ms_per_token"] == pytest.approx(5.6 / 3)
    assert r["busy_mib_per_s"] == pytest.approx(READ_BYTES / MIB / 0.0056)
    assert r["waste_pct"] == pytest.approx((READ_BYTES - REQ_BYTES) / READ_BYTES * 100)
    assert r["waste_mib_per_token"] == pytest.approx((READ_BYTES - REQ_BYTES) / MIB / 3)


def test_latency_nearest_rank(trace):
    # sorted: 0, 100, 200, 300, 1000, 4000 us; p50 = sorted[floor(6*0.5)] = 300
    latency = report("io", trace)["latency_us"]
    assert latency == pytest.approx({"min": 0, "mean": 5600 / 6, "p50": 300, "p90": 4000,
                                     "p99": 4000, "p999": 4000, "max": 4000})


def test_size_buckets(trace):
    rows = report("io", trace)["by_size"]
    assert [(r["kib"], r["label"], r["reads"]) for r in rows] == [
        (0, "<1 KiB", 1), (4, "4-7 KiB", 3), (64, "64-127 KiB", 1), (2048, "2048-4095 KiB", 1)]
    sub_kib, small, mid, big = rows
    assert sub_kib["mib_per_s"] is None and sub_kib["us_per_read"] == 0  # all-zero latency
    assert small["mib"] == pytest.approx(12288 / MIB)
    assert small["mib_per_s"] == pytest.approx(12288 / MIB / 0.0006)
    assert small["us_per_read"] == pytest.approx(200)
    assert mid["mib_per_s"] == pytest.approx(69632 / MIB / 0.001)
    assert big["mib_per_s"] == pytest.approx(500.0)
    assert "n/a" in run("io", trace).out


def test_lanes(trace):
    lanes = report("io", trace)["by_lane"]
    assert [lane["lane"] for lane in lanes] == [0, 1]
    assert lanes[0]["mib_per_token"] == pytest.approx(12288 / MIB / 3)
    assert lanes[0]["busy_ms_per_token"] == pytest.approx(0.6 / 3)
    assert lanes[1]["mib_per_s"] == pytest.approx((READ_BYTES - 12288) / MIB / 0.005)
    assert lanes[1]["reads_per_token"] == pytest.approx(1.0)


def test_speculative(trace):
    spec = report("io", trace)["spec"]
    assert spec["reads"] == 1
    assert spec["mib_per_token"] == pytest.approx(4096 / MIB / 3)
    assert spec["share_of_bytes"] == pytest.approx(4096 / READ_BYTES)
    assert "speculative: 1 reads" in run("io", trace).out


def test_adjacency_on_requested_extents(trace):
    r = report("io", trace, "--adjacent")
    # runs: token (0,1,10) 2, token (0,1,11) 1 (overlap), token (1,1,10) 1
    assert r["adjacency"] == pytest.approx(
        {"reads_per_token": 2.0, "runs_per_token": 4 / 3, "coalesce_factor": 1.5})
    assert "coalescing factor 1.50" in run("io", trace, "--adjacent").out


def test_adjacency_key_present_without_the_flag(trace):
    adjacency = report("io", trace)["adjacency"]
    assert adjacency == {"reads_per_token": 2.0, "runs_per_token": None,
                         "coalesce_factor": None}
    assert "adjacency:" not in run("io", trace).out


def test_no_spec_reads_gives_zeros(write):
    r = report("io", write(io_text(["0,1,1,0,0,0,0,0,0,4096,4096,1000"])))
    assert r["spec"] == {"reads": 0, "mib_per_token": 0.0, "share_of_bytes": 0.0}


def test_all_zero_latency_and_bytes_are_undefined_not_a_crash(write):
    r = report("io", write(io_text(["0,1,1,0,0,0,0,0,0,0,0,0"])))
    assert r["busy_mib_per_s"] is None and r["waste_pct"] is None
    assert r["spec"]["share_of_bytes"] is None
    assert "n/a" in run("io", write(io_text(["0,1,1,0,0,0,0,0,0,0,0,0"]), "z.csv")).out


def test_per_read_token_wording(trace):
    out = run("io", trace).out
    assert "per read-token" in out and "served entirely from cache" in out


def test_prefill_selected_explicitly(trace):
    r = report("io", trace, "--phase", "prefill")
    assert r["tokens"] == 1 and r["latency_us"]["max"] == pytest.approx(999000)


def test_u64_values_are_exact(write):
    top = 2 ** 64 - 1
    r = report("io", write(io_text([f"0,1,1,0,0,0,0,0,{top},{top},{top},{top}"])))
    assert r["read_bytes"] == top and r["req_bytes"] == top
    assert r["latency_us"]["max"] == top / 1e3
    r = report("io", write(io_text([f"0,1,1,0,0,0,0,0,{top},{top},{top},{top}"]), "b.csv"),
               "--adjacent")
    assert r["adjacency"]["coalesce_factor"] == 1.0


def test_latencies_past_32_bits_among_small_ones_stay_exact(write):
    # Latencies are kept 4 bytes wide until one needs 8: the switch keeps every value.
    latencies = [1000, 2000, 2 ** 32, 3000, 2 ** 64 - 1, 4000]
    rows = [f"0,1,{step},0,0,0,{step % 2},0,{step * 4096},4096,4096,{latency}"
            for step, latency in enumerate(latencies)]
    r = report("io", write(io_text(rows)))
    ordered = sorted(latencies)
    assert r["latency_us"]["max"] == ordered[-1] / 1e3
    assert r["latency_us"]["p50"] == ordered[len(ordered) // 2] / 1e3
    assert r["latency_us"]["min"] == ordered[0] / 1e3


def test_latency_histogram_and_ladder(reads):
    r = report("io", reads)
    assert r["latency_hist"] == [
        {"lo_us": 0, "hi_us": 1, "count": 1}, {"lo_us": 1, "hi_us": 2, "count": 1},
        {"lo_us": 2, "hi_us": 4, "count": 1}, {"lo_us": 512, "hi_us": 1024, "count": 2},
        {"lo_us": 1024, "hi_us": 2048, "count": 1}]
    assert r["latency_us"] == pytest.approx({"min": 0.5, "mean": 3504.5 / 6, "p50": 1000,
                                             "p90": 1500, "p99": 1500, "p999": 1500,
                                             "max": 1500})
    out = run("io", reads, "--full").out
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
    # its lanes' summed latency (2003000 ns over its 3 reads), per token of the 2
    assert layers[1]["busy_ms_per_token"] == pytest.approx(2003000 / 2 / 1e6)
    assert sum(row["busy_ms_per_token"] for row in r["by_layer"]) == \
        pytest.approx(r["busy_ms_per_token"])
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


@pytest.mark.parametrize("name", sorted(ENGINE))
def test_the_io_range_holds_the_engines_own_figures(name):
    r = report("io", REAL_TRACES[name])
    assert r["lanes"] == 4 and r["tokens"] == DECODED  # every token read: per read-token = decoded
    wall, rate = r["io_wall_ms_per_token"], r["throughput_mib_per_s"]
    seconds, mib_per_s = ENGINE[name]
    assert wall["min"] - 0.5 <= seconds * 1e3 <= wall["max"] + 0.5  # the engine rounds to ms
    assert rate["min"] <= mib_per_s <= rate["max"]
    # the bounds by definition: lane-busy over the lanes, and all of it
    assert wall["max"] == pytest.approx(r["busy_ms_per_token"])
    assert wall["min"] == pytest.approx(r["busy_ms_per_token"] / 4)
    assert rate["min"] == pytest.approx(r["mib_per_token"] / (wall["max"] / 1e3))


def test_io_text_leads_with_the_range():
    out = run("io", REAL_TRACES["qwen3moe-l4-io-serial.csv"]).out
    text = " ".join(out.split())
    assert text.index("I/O per read-token: 4.30 ms estimated (per layer, its busiest lane), "
                      "within 3.57 (4 lanes at once) and 14.27 ms (one at a time); throughput "
                      "371 MiB/s (between 112 and 447)") < \
        text.index("lanes busy 14.27 ms per read-token summed over lanes") < text.index("verdicts")


def test_lane_bytes_are_counted_only_for_the_svg():
    """Each token's bytes by lane cost a pass over every read: only --svg, which draws them,
    asks for them (tests/test_paths.py checks they merge exactly between processes)."""
    path = REAL_TRACES["qwen3moe-l4-io-prefetch.csv"]
    assert report("io", path)["lane_bytes_by_token"] is None


@pytest.mark.parametrize("name", sorted(ENGINE))
def test_the_io_estimate_is_the_engines_flash_io(name):
    """The engine's own flash I/O per token (read MiB / its MiB/s / 128 tokens, from its
    end-of-run summary) against the busiest-lane estimate: within -10%..+3% on the serial runs;
    under overlap=1 the engine sums its readers' time, which lane-busy time is to be held
    against."""
    mib_per_s = ENGINE[name][1]
    r = report("io", REAL_TRACES[name])
    engine_ms = r["read_bytes"] / (1 << 20) / mib_per_s / 128 * 1e3
    if r["meta"]["overlap"] == "1":
        assert 0.95 < r["busy_ms_per_token"] / engine_ms < 1.05
    else:
        assert 0.90 <= r["io_wall_ms_per_token"]["estimate"] / engine_ms <= 1.03


def test_the_estimate_is_each_layers_busiest_lane(write):
    """Token 1: layer 0 reads 3 ms on lane 0 and 1+1 ms on lane 1, layer 1 reads 4 ms on lane 1:
    3 + 4 = 7 ms; split over two batches it is the same."""
    rows = ["0,1,1,0,1,0,0,0,0,4096,4096,3000000", "0,1,1,0,2,0,1,0,4096,4096,4096,1000000",
            "0,1,1,0,3,0,1,0,8192,4096,4096,1000000", "0,1,1,1,1,0,1,0,12288,4096,4096,4000000"]
    r = report("io", write(io_text(rows)))
    assert r["io_wall_ms_per_token"]["estimate"] == pytest.approx(7.0)
    assert r["per_token"][0]["io_ms"] == pytest.approx(7.0)
    assert r["per_token"][0]["busy_ms"] == pytest.approx(9.0)
    token = decode_analyze.IoToken(0)
    token.add_layers(["0", "0"], ["0", "1"], [3000000, 1000000])
    token.add_layers(["0", "1"], ["1", "1"], [1000000, 4000000])
    assert token.io_ns == 7000000  # layer 0 went on in the second run


def busiest_lanes_by_row(runs):
    """The estimate of one token's runs written the plain way, row by row: a run's rows into
    {layer: {lane: ns}} (a layer met again in the run is one layer), the layer it ends on
    going on into the next run; a layer costs its busiest lane."""
    closed_ns, open_layer, open_lanes = 0, None, {}
    for layers, lanes, latencies in runs:
        by_layer = defaultdict(lambda: defaultdict(int))
        if open_layer is not None:
            by_layer[open_layer].update(open_lanes)
        for layer, lane, latency_ns in zip(layers, lanes, latencies):
            by_layer[layer][lane] += latency_ns
        open_layer, open_lanes = layers[-1], by_layer.pop(layers[-1])
        closed_ns += sum(max(lane_ns.values()) for lane_ns in by_layer.values())
    return closed_ns + max(open_lanes.values())


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.tuples(st.sampled_from("0123"), st.sampled_from(
    ["0", "1", "2", "3", "10", "7", "x"]), st.integers(0, 10 ** 7)), min_size=1, max_size=40),
    min_size=1, max_size=4), st.booleans())
def test_the_estimate_is_the_sum_row_by_row(runs, one_character):
    """Whatever the order of the layers, the lanes' names and however the token's rows are
    cut into runs, the estimate (looking a layer's lanes up only where the layer changes) is
    the one summed row by row."""
    runs = [([layer for layer, _, _ in rows],
             [lane[:1] if one_character else lane for _, lane, _ in rows],
             [latency_ns for _, _, latency_ns in rows]) for rows in runs]
    token = decode_analyze.IoToken(0)
    for layers, lanes, latencies in runs:
        token.add_layers(layers, lanes, latencies)
    assert token.io_ns == busiest_lanes_by_row(runs)


def test_reads_that_asked_for_more_than_they_read_are_a_warning(write):
    """req_bytes > read_bytes gave waste_pct -100.0 and said nothing."""
    result = run("io", write(io_text(["0,1,1,0,1,0,0,0,0,8192,4096,1000"])), "--format", "json")
    assert result.code == 0 and result.json["waste_pct"] == -100.0
    assert "asked for more bytes (8192) than they read (4096)" in result.err
    assert any("short reads" in w for w in result.json["warnings"])


def test_key_columns_of_many_values_are_held_bounded_and_read_the_same(write, monkeypatch):
    """A key column (expert, req_bytes, ...) is expected to take few values; a trace where it
    takes many has the reader's set of valid values and the fold's text -> int cache start
    over at KEPT_VALUES, not grow with the trace. Held to 8 values, 300 rows of 300 experts
    and 150 request sizes give the report they give unbounded (bytes asked for: the sum of
    the rows' req_bytes, counted here by the csv module)."""
    rows = [f"0,1,{row // 30 + 1},{row % 3},{row},0,{row % 2},0,{row * 8192},{4096 + row % 150},"
            f"8192,{1000 + row}" for row in range(300)]
    path = write(io_text(rows))
    unbounded = report("io", path)
    monkeypatch.setattr(trace_io, "KEPT_VALUES", 8)
    monkeypatch.setattr(decode_analyze, "KEPT_VALUES", 8)
    assert report("io", path) == unbounded
    assert unbounded["req_bytes"] == sum(int(row["req_bytes"]) for row in trace_rows(path))
    valid, cache = set(), decode_analyze.IntCache()
    for start in range(0, 300, 30):
        column = [str(value) for value in range(start, start + 30)]
        assert trace_io.Trace._keys_valid("expert", valid, column)
        assert list(map(cache.__getitem__, column)) == list(range(start, start + 30))
        assert len(valid) <= 8 + 30 and len(cache) <= 8
    assert not trace_io.Trace._keys_valid("expert", valid, ["1", "-2"])


def test_one_lane_is_one_lane_not_1_lanes(tmp_path):
    """Issue 50's words: a trace read on one lane said '1 lanes, each busy ...'."""
    import decode_analyze
    rows = "".join(f"0,1,{64 + step},0,0,0,0,0,0,65536,65536,100000\n" for step in range(4))
    path = tmp_path / "one-io.csv"
    path.write_text("# io_trace v1\n# model=m io_threads=1 o_direct=1 overlap=0\n"
                    "turn,phase,step,layer,expert,proj,lane,spec,offset,req_bytes,read_bytes,"
                    "latency_ns\n" + rows)
    from helpers import run
    out = run("io", str(path)).out
    assert "1 lanes" not in out and "1 lane, each busy" in " ".join(out.split())
    assert decode_analyze.counted(1, "lane") == "1 lane"
    assert decode_analyze.counted(4, "lane") == "4 lanes"


def test_a_token_read_again_after_another_keeps_every_read(write):
    """Token 1 reads layer 0 on lanes 0 (3 ms) and 1 (1 ms), token 2 reads, then token 1 reads
    layer 0 again on lane 1 (4 ms). Its second stretch starts a new layer (the file is cut
    between tokens for --jobs, so no process could go on with the first): 3 + 4 = 7 ms, not
    max(3, 1 + 4) = 5. Its reads, bytes, busy time and p99 hold all three reads."""
    rows = ["0,1,1,0,1,0,0,0,0,4096,4096,3000000", "0,1,1,0,2,0,1,0,4096,4096,4096,1000000",
            "0,1,2,0,1,0,0,0,0,4096,4096,2000000",
            "0,1,1,0,3,0,1,0,8192,4096,4096,4000000"]
    path = write(io_text(rows))
    for jobs in ("1", "2"):
        first, second = report("io", path, "--jobs", jobs)["per_token"]
        assert (first["step"], first["reads"], first["mib"]) == (1, 3, 3 * 4096 / (1 << 20))
        assert first["io_ms"] == pytest.approx(7.0) and first["busy_ms"] == pytest.approx(8.0)
        assert first["latency_p99_us"] == pytest.approx(4000.0)  # the largest of 3
        assert (second["step"], second["reads"], second["io_ms"]) == (2, 1, 2.0)


def test_read_latencies_are_each_tokens_across_stretches_and_processes():
    """ReadLatencies gives a token all of its latencies, however they were split, and a merge
    of a later fold's (its rows remapped) gives the same as one fold of everything."""
    whole, head, tail = (decode_analyze.ReadLatencies() for _ in range(3))
    for latencies, row in ((whole, 0), (head, 0)):
        latencies.add(row, [5, 6])
    whole.add(1, [7])
    whole.add(0, [8])
    tail.add(0, [7])  # the tail's row 0 is the head's row 1 ...
    tail.add(1, [8])  # ... and its row 1 the head's row 0
    head.merge(tail, [1, 0])
    for latencies in (whole, head):
        assert sorted(latencies.of(0)) == [5, 6, 8] and list(latencies.of(1)) == [7]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.booleans()), max_size=60),
       st.integers(0, 2**33))
def test_a_step_index_finds_every_step_as_a_dict_would(steps, base):
    """The book's index: ranges while steps and rows run on by one, arrays after; whichever
    it holds, each step seen is found with its row, and a step never seen is not."""
    index, rows, next_row = decode_analyze.StepIndex(), {}, 0
    for offset, selected in steps:
        step = base + offset
        at, row = index.find(step)
        assert row == rows.get(step)
        if row is None:
            rows[step] = next_row if selected else -1
            next_row += selected
            index.insert(at, step, rows[step])
    assert list(index.steps) == sorted(rows)
    assert list(index.rows) == [rows[step] for step in sorted(rows)]
    for step in range(base, base + 42):
        assert index.find(step)[1] == rows.get(step)


def test_a_decode_as_the_engine_writes_it_is_indexed_by_ranges():
    """Steps and rows one after another cost no bytes a token; a gap turns them into arrays
    that still answer."""
    index = decode_analyze.StepIndex()
    for row, step in enumerate(range(64, 100_064)):
        index.insert(len(index.steps), step, row)
    assert index.steps == range(64, 100_064) and index.rows == range(0, 100_000)
    index.insert(len(index.steps), 100_070, 100_000)  # a gap: a verify batch's positions
    assert isinstance(index.steps, decode_analyze.array)
    assert index.find(100_070) == (100_000, 100_000) and index.find(70) == (6, 6)


@pytest.mark.parametrize("command, path, figure", [
    ("compute", "examples/session-ct.csv", "ms"), ("compute", "examples/session-ct.csv", "majflt"), ("io", "examples/session-io.csv", "mib"),
    ("io", "examples/session-io.csv", "busy_ms"), ("io", "examples/session-io.csv", "io_ms")])
def test_a_tokens_figure_read_from_its_column_is_its_dicts(command, path, figure):
    """The sparkline, the outliers, memory pressure and the pair's joins read a figure of
    every token from its column, not from a dict made a token: the same numbers, to the bit,
    in the same order."""
    analyze = {"compute": decode_analyze.analyze_compute, "io": decode_analyze.analyze_io}
    reading = trace_io.Reading(decode_analyze.Selection(), warn=lambda message: None)
    rows = analyze[command](str(ROOT / path), reading)["per_token"]
    from_columns = decode_analyze.token_figure(rows, figure)
    assert isinstance(rows, decode_analyze.TokenRows) and len(from_columns) > 100
    assert list(from_columns) == [token[figure] for token in rows]
    assert decode_analyze.token_figure(list(rows), figure) == list(from_columns)


@pytest.mark.parametrize("lanes,named,rows", [((0, 7), 2, [0, 7]), ((5, 6), 4, [0, 1, 5, 6]),
                                              ((0, 2), 4, [0, 1, 2, 3])])
def test_the_by_lane_table_holds_as_many_lanes_as_the_estimate(write, lanes, named, rows):
    """Bug: a trace that read on lanes 0 and 7 under io_threads=2 drew three lanes (0, 7 and
    the named lane 1, which never read) beside an estimate of two lanes at once, and called
    them unbalanced. The table holds the lanes the estimate counts: those read on, and, where
    fewer than named, the least numbers unread (a lane that never read is the most idle)."""
    reads = "".join(f"0,1,{64 + step},0,{step},0,{lanes[step % 2]},0,0,65536,65536,100000\n"
                    for step in range(4))
    result = run("io", write(io_text([], preamble=f"# io_trace v1\n# model=m io_threads={named} "
                                                  f"o_direct=1 overlap=0\n") + reads),
                 "--format", "json")
    assert result.code == 0
    assert [row["lane"] for row in result.json["by_lane"]] == rows
    assert result.json["lanes"] == len(rows) == named
    unbalanced = [v for v in result.json["verdicts"] if v["id"] == "lanes_unbalanced"]
    assert (unbalanced[0]["flagged"] if unbalanced else False) == (len(rows) > len(lanes))
