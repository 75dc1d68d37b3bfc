"""Pictures: --svg whose bars are the report's figures, a Perfetto file whose slices add up to
the report, and v2 timelines with hand-computed answers."""
import itertools
import json
import math
import xml.etree.ElementTree as ET

import pytest

import tracegen
from helpers import REAL_TRACES, ROOT, ct_text, error_of, io_text, report, run


SVG = "{http://www.w3.org/2000/svg}"


CT_NODE = REAL_TRACES["qwen3moe-l4-ct-node.csv"]


IO_PREFETCH = REAL_TRACES["qwen3moe-l4-io-prefetch.csv"]
IO_SERIAL = REAL_TRACES["qwen3moe-l4-io-serial.csv"]


SESSION_CT = REAL_TRACES["qwen3moe-l4-session-ct-node.csv"]


SESSION_IO = REAL_TRACES["qwen3moe-l4-session-ct-node-io.csv"]


V2_CT = REAL_TRACES["qwen3moe-l4-ct-node.csv"].parent / "v2" / "ct.csv"


V2_IO = V2_CT.parent / "io.csv"


def svg_of(tmp_path, *argv):
    target = tmp_path / "out.svg"
    result = run(*argv, "--svg", target)
    assert result.code == 0, result.err
    return ET.parse(target).getroot(), target


def panels(root):
    return {g.get("data-title"): g for g in root.iter(f"{SVG}g") if g.get("class") == "panel"}


def bars(panel, css="bar"):
    """[(data-total, [rect heights])] of the panel's bars, in order."""
    found = []
    for g in panel.iter(f"{SVG}g"):
        if g.get("class") == css:
            found.append((float(g.get("data-total")),
                          [float(r.get("height")) for r in g.iter(f"{SVG}rect")]))
    return found


# ── Perfetto ─────────────────────────────────────────────────────────────────────────────────
def perfetto_of(tmp_path, *argv):
    target = tmp_path / "trace.json"
    result = run(*argv, "--perfetto", target)
    assert result.code == 0, result.err
    return json.loads(target.read_text())


def check_events(data):
    """Every event well formed, in whole ns (3 decimals of µs, no float noise), and every
    declared track holding events."""
    used = set()
    for event in data["traceEvents"]:
        assert {"ph", "ts", "pid", "tid"} <= set(event)
        if event["ph"] == "X":
            assert event["dur"] >= 0
            for field in ("ts", "dur"):
                assert round(event[field], 3) == event[field] and len(
                    repr(event[field]).partition(".")[2]) <= 3, event
            used.add((event["pid"], event["tid"]))
    named = {(e["pid"], e["tid"]) for e in data["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    assert named <= used, named - used
    processes = {e["pid"] for e in data["traceEvents"]
                 if e["ph"] == "M" and e["name"] == "process_name"}
    assert processes <= {pid for pid, _ in used} | {1}


def token_slices(data):
    return [e for e in data["traceEvents"] if e.get("cat") == "token"]


# ── SVG ──────────────────────────────────────────────────────────────────────────────────────
def test_compute_bars_are_the_per_token_figures(tmp_path):
    r = report("compute", CT_NODE)
    root, _ = svg_of(tmp_path, "compute", CT_NODE)
    panel = panels(root)["compute ms per token, by node category"]
    per_px = float(panel.get("data-per-px"))
    drawn = bars(panel)
    assert len(drawn) == r["tokens"] == 128  # one bar a token below 160 tokens
    for (total, heights), token in zip(drawn, r["per_token"]):
        # categories are kept in whole µs: 7 of them are off by 3.5 µs at most
        assert total == pytest.approx(token["ms"], abs=0.004)
        assert sum(heights) * per_px == pytest.approx(token["ms"], abs=0.004 + 0.01 * per_px * 7)
    layers = bars(panels(root)["compute ms per token, by layer (inferred)"], "layer")
    assert [total for total, _ in layers] == pytest.approx(
        [row["ms_per_token"] for row in r["by_layer"]])


def test_many_tokens_are_binned_with_their_mean_and_max(tmp_path):
    path = tracegen.write(tmp_path / "ct.csv", tracegen.compute_lines(n_layer=1,
                                                                      decode_tokens=400))
    r = report("compute", path)
    root, target = svg_of(tmp_path, "compute", path)
    (panel,) = [p for title, p in panels(root).items()
                if title.startswith("compute ms per token") and "by layer" not in title]
    drawn = bars(panel)
    size = math.ceil(r["tokens"] / 160)
    assert len(drawn) == math.ceil(r["tokens"] / size)
    ms = [t["ms"] for t in r["per_token"]]
    for i, (total, _) in enumerate(drawn):
        group = ms[i * size:(i + 1) * size]
        assert total == pytest.approx(sum(group) / len(group), abs=0.004)
    ticks = [line for line in panel.iter(f"{SVG}line") if line.get("class") == "max"]
    per_px = float(panel.get("data-per-px"))
    bottom = max(float(line.get("y1")) for line in panel.iter(f"{SVG}line")
                 if line.get("class") == "grid")
    for i, tick in enumerate(ticks):
        group = ms[i * size:(i + 1) * size]
        assert (bottom - float(tick.get("y1"))) * per_px == pytest.approx(max(group),
                                                                         abs=0.004 + per_px * 0.06)
    assert len(ticks) == len(drawn)


def test_io_lanes_histogram_and_cache_curve(tmp_path):
    r = report("io", IO_SERIAL, "--cache")
    root, _ = svg_of(tmp_path, "io", IO_SERIAL, "--cache")
    found = panels(root)
    lanes = bars(found["MiB read per token, by lane"])
    assert len(lanes) == r["tokens"]
    for (total, heights), token in zip(lanes, r["per_token"]):
        assert total == pytest.approx(token["mib"])
    hist = bars(found["read latency, log2 buckets"], "hist")
    assert [total for total, _ in hist] == [row["count"] for row in r["latency_hist"]]
    (curve,) = found["expert cache what-if: share of lookups served"].iter(f"{SVG}polyline")
    assert len(curve.get("points").split()) == len(r["reuse"]["lru"])


def test_report_shares_the_token_axis(tmp_path):
    r = report("report", SESSION_CT, SESSION_IO)
    root, target = svg_of(tmp_path, "report", SESSION_CT, SESSION_IO)
    found = panels(root)
    compute = bars(found["compute ms per token, by node category"])
    reads = bars(found["MiB read per token, by lane"])
    assert len(compute) == len(reads) == math.ceil(r["pair"]["tokens"] / 2)  # 208 in pairs
    turns = [t for t in root.iter(f"{SVG}rect") if t.get("class") == "turn"]
    # 4 turns: 3 boundaries, on each token-axis panel (compute, MiB by lane, I/O estimate)
    assert len(turns) == 3 * 3
    io_ms = {(t["turn"], t["phase"], t["step"]): t["io_ms"] for t in r["io"]["per_token"]}
    estimate = bars(found["I/O estimate ms per token (each layer's busiest lane, summed)"])
    expected = [io_ms.get((t["turn"], t["phase"], t["step"]), 0.0)
                for t in r["compute"]["per_token"]]
    for i, (total, _) in enumerate(estimate):  # groups of 2 decoded tokens: their mean
        assert total == pytest.approx(sum(expected[2 * i:2 * i + 2]) / 2, abs=1e-6)
    assert target.stat().st_size < 200_000


RUNS_PANEL = "{}: each run's figure over the base's mean (points: runs; bars: each side's mean)"


def test_diff_draws_each_run_of_each_side_as_a_point(tmp_path):
    root, _ = svg_of(tmp_path, "diff", CT_NODE, CT_NODE, CT_NODE)
    found = panels(root)
    runs = [c for c in found[RUNS_PANEL.format("compute")].iter(f"{SVG}circle")
            if "run" in c.get("class", "")]
    figures = [row for row in report("diff", CT_NODE, CT_NODE, CT_NODE)["sections"][0]["rows"]
               if row["base"]]
    assert len(runs) == len(figures) * 3  # one run a side, three sides
    assert {c.find(f"{SVG}title").text.rpartition(" ")[2] for c in runs} == {"1"}
    side = [r for r in found["ms per token by op: the 12 largest changes"].iter(f"{SVG}rect")
            if r.get("class", "").startswith("c") and r.find(f"{SVG}title") is not None]
    assert len(side) == 12 * 3


def test_untrusted_strings_are_escaped_in_svg(tmp_path, write):
    hostile = '<script>alert(1)</script> & "x"'
    rows = [row for step in (4, 5) for row in (  # two ops: diff draws a table of two rows up
        f'0,1,{step},0,0,"{hostile}\x1b[2J\x01","{hostile}",1000000,0',
        f"0,1,{step},1,0,MUL_MAT,ffn_moe_up-0,2000000,0")]
    trace = write(ct_text(rows), "a<b>&c.csv")
    root, target = svg_of(tmp_path, "diff", trace, trace)
    text = target.read_text()
    assert "<script" not in text and "&lt;script&gt;alert(1)&lt;/script&gt; &amp;" in text
    assert not [e for e in root.iter() if e.tag.endswith("script")]
    assert any(hostile[:14] in "".join(e.itertext()) for e in root.iter(f"{SVG}title"))
    assert "a&lt;b&gt;&amp;c.csv" in text
    assert "\\x1b[2J\\x01" in text and "\x1b" not in text  # XML forbids it: an escape


def test_svg_is_never_written_over_an_input(write):
    trace = write(ct_text(["0,1,4,0,0,MUL_MAT,n-0,1000,0"]))
    assert "is the input" in error_of("compute", trace, "--svg", trace)


def test_compute_nodes_add_up_to_the_token(tmp_path):
    data = perfetto_of(tmp_path, "compute", CT_NODE)
    check_events(data)
    r = report("compute", CT_NODE)
    tokens = token_slices(data)
    assert len(tokens) == 64  # the default window: the first 64 decode tokens
    assert data["otherData"]["reconstructed"] is True
    nodes = [e for e in data["traceEvents"] if e["ph"] == "X" and e.get("cat") != "token"
             and e["pid"] == 1]
    for token, expected in zip(tokens, r["per_token"]):
        end = round(token["ts"] + token["dur"], 3)  # whole ns, as Perfetto reads them
        inside = [e for e in nodes if token["ts"] <= e["ts"] < end]
        assert token["args"]["step"] == expected["step"]
        assert sum(e["dur"] for e in inside) == pytest.approx(expected["ms"] * 1e3)
        assert token["dur"] == pytest.approx(expected["ms"] * 1e3)
        assert len(inside) == r["nodes_per_token"]
        ends = [e["ts"] + e["dur"] for e in inside]
        assert [e["ts"] for e in inside[1:]] == pytest.approx(ends[:-1])  # end to end


def test_tokens_window(tmp_path):
    data = perfetto_of(tmp_path, "compute", CT_NODE, "--tokens", "10:13")
    steps = [t["args"]["step"] for t in token_slices(data)]
    r = report("compute", CT_NODE)
    assert steps == [t["step"] for t in r["per_token"][10:13]]
    assert run("compute", CT_NODE, "--tokens", "5:5").code == 2


def test_io_reads_end_to_end_per_lane(tmp_path):
    data = perfetto_of(tmp_path, "io", IO_PREFETCH, "--tokens", "0:3")
    check_events(data)
    reads = [e for e in data["traceEvents"] if e["pid"] == 2 and e["ph"] == "X"]
    r = report("io", IO_PREFETCH)
    assert len(reads) == sum(t["reads"] for t in r["per_token"][:3])
    assert sum(e["args"]["read_bytes"] for e in reads) / 2**20 == pytest.approx(
        sum(t["mib"] for t in r["per_token"][:3]))


def test_pair_shares_one_axis(tmp_path):
    data = perfetto_of(tmp_path, "report", SESSION_CT, SESSION_IO, "--tokens", "0:4")
    check_events(data)
    tokens = token_slices(data)
    reads = [e for e in data["traceEvents"] if e["pid"] == 2 and e["ph"] == "X"]
    for token, following in zip(tokens, tokens[1:] + [None]):
        mine = [e for e in reads if token["ts"] <= e["ts"] and
                (following is None or e["ts"] < following["ts"])]
        assert mine and all(e["ts"] + e["dur"] <= (following or {"ts": math.inf})["ts"] + 1e-6
                            for e in mine)


def test_v2_uses_its_own_clock(tmp_path):
    data = perfetto_of(tmp_path, "timeline", V2_CT, V2_IO)
    check_events(data)
    assert data["otherData"]["reconstructed"] is False
    events = data["traceEvents"]
    decodes = token_slices(data)
    assert [(e["ts"], e["dur"]) for e in decodes] == [(0.0, 1000.0), (1500.0, 1000.0),
                                                      (3000.0, 500.0)]
    crossing = next(e for e in events if e["name"] == "read L0 E5")
    assert (crossing["ts"], crossing["dur"]) == (900.0, 800.0)  # 1.9 ms to 2.7 ms, origin 1 ms
    waits = [e for e in events if e.get("cat") == "wait"]
    assert [(e["pid"], e["ts"], e["dur"]) for e in waits] == [(3, 300.0, 150.0),
                                                              (3, 2050.0, 150.0)]
    callbacks = [e for e in events if e["name"] == "callback"]
    assert [(e["ts"], e["dur"], e["tid"]) for e in callbacks] == [(950.0, 40.0, 1)]


def test_perfetto_needs_files_it_can_read_again():
    assert "--perfetto reads its traces a second time" in error_of(
        "compute", "-", "--perfetto", "/tmp/never-written.json")


def test_node_names_stay_json(tmp_path, write):
    rows = [f'0,1,{step},0,0,MUL_MAT,"a ""quoted"" name\u202e, x",1000,0' for step in (4, 5)]
    data = perfetto_of(tmp_path, "compute", write(ct_text(rows)))
    assert [e["name"] for e in data["traceEvents"] if e.get("cat") == "other"] == \
        ['a "quoted" name\u202e, x'] * 2


# ── timeline (v2) ────────────────────────────────────────────────────────────────────────────
def test_timeline_hand_computed():
    r = report("timeline", V2_CT, V2_IO)
    rows = [(d["step"], d["span_from"], d["decode_ms"], d["graph_ms"], d["read_busy_ms"],
             d["read_share"], d["wait_ms"], d["overlap_ms"], d["callback_ms"])
            for d in r["decodes"]]
    # Step 10: reads on two lanes overlap (1.1-1.4, 1.2-1.6 ms: union 0.5 ms), a wait inside
    # them (1.3-1.45), and a read from 1.9 ms that runs on to 2.7 ms: 0.1 ms of it is step
    # 10's (its decode ends at 2.0), 0.2 ms step 11's (which starts at 2.5), 0.5 ms between.
    expected = [(10, "BMOE_DECODE", 1.0, 0.8, 0.6, 0.6, 0.15, 0.45, 0.04),
                (11, "BMOE_DECODE", 1.0, 0.8, 0.3, 0.3, 0.15, 0.25, 0.0),
                (12, "graph", 0.5, 0.5, 0.1, 0.2, 0.0, 0.1, 0.0)]
    # Row by row: pytest 9.2's approx refuses nested sequences.
    assert [row[:2] for row in rows] == [row[:2] for row in expected]
    for row, want in zip(rows, expected):
        assert row[2:] == pytest.approx(want[2:]), row[:2]
    assert r["outside_decodes"]["read_busy_ms"] == pytest.approx(0.7)
    summary = r["summary"]
    assert summary["decode_ms"] == pytest.approx({"p50": 1.0, "p99": 1.0, "total": 2.5})
    assert summary["read_share"]["total"] == pytest.approx(1.0 / 2.5)
    assert summary["overlap_ms"]["total"] == pytest.approx(0.8)


def test_timeline_of_compute_alone():
    r = report("timeline", V2_CT)
    assert [d["read_busy_ms"] for d in r["decodes"]] == [None] * 3
    assert r["outside_decodes"] is None
    text = run("timeline", V2_CT).out
    assert "no io trace: read busy, wait and overlap need one" in text


def test_timeline_refuses_v1():
    line = error_of("timeline", CT_NODE)
    assert line.endswith(f"{CT_NODE}:1: a v1 trace has no start_ns/end_ns timestamps to measure "
                         f"a timeline with; for v1 traces, 'decode-analyze report CT IO' gives "
                         f"each token's I/O time as a range")


def test_timeline_names_both_trace_ids(tmp_path):
    other = tmp_path / "io.csv"
    other.write_text(V2_IO.read_text().replace("trace_id=42", "trace_id=43"))
    result = run("timeline", V2_CT, other)
    assert result.code == 0
    assert f"trace_id differs: 42 in {V2_CT}, 43 in {other}" in result.err


def test_v1_paths_ignore_synthetic_and_wait_rows():
    compute = report("compute", V2_CT)
    assert compute["ms_per_token"] == pytest.approx(2.0 / 3)  # 0.7 + 0.8 + 0.5 ms of nodes
    assert {row["op"] for row in compute["by_op"]} == {"MUL_MAT", "MUL_MAT_ID"}
    io = report("io", V2_IO)
    assert io["reads"] == 5 and io["tokens"] == 3


def test_timeline_text_and_markdown():
    text = run("timeline", V2_CT, V2_IO).out
    assert "  read busy / decode wall                         30.0%  60.0%  40.0%" in text
    assert "read busy outside every selected decode: 0.700 ms" in text
    markdown = run("timeline", V2_CT, V2_IO, "--format", "markdown").out
    assert "| reads while compute was not waiting | 0.250 | 0.450 | 0.800 |" in markdown


def test_a_v1_partner_makes_the_pair_reconstructed_without_waits(tmp_path, write):
    ct = write(ct_text([f"0,1,{step},0,0,MUL_MAT,n-0,100000,0" for step in (10, 11, 12)]))
    data = perfetto_of(tmp_path, "report", ct, V2_IO)
    assert data["otherData"]["reconstructed"] is True
    events = [e for e in data["traceEvents"] if e["ph"] == "X"]
    assert not [e for e in events if e.get("cat") == "wait"]
    assert len([e for e in events if e["pid"] == 2]) == 5
    alone = perfetto_of(tmp_path, "io", V2_IO)
    assert alone["otherData"]["reconstructed"] is False
    assert len([e for e in alone["traceEvents"] if e.get("cat") == "wait"]) == 2


def test_a_row_that_ends_before_it_starts_is_an_empty_interval(tmp_path):
    text = V2_CT.read_text().replace("0,1,11,0,-1,BMOE_DECODE,decode,1000000,0,2500000,3500000",
                                     "0,1,11,0,-1,BMOE_DECODE,decode,1000000,0,3500000,2500000")
    ct = tmp_path / "ct.csv"
    ct.write_text(text)
    result = run("timeline", ct, V2_IO, "--format", "json")
    assert result.code == 0
    assert "1 row(s) end before they start: counted as empty intervals" in result.err
    decode = json.loads(result.out)["decodes"][1]
    assert decode["decode_ms"] == 0 and decode["read_share"] is None


def test_a_decode_of_callbacks_only_spans_its_callbacks(tmp_path):
    ct = tmp_path / "ct.csv"
    ct.write_text(V2_CT.read_text() + "0,1,13,0,-1,BMOE_CALLBACK,callback,50000,0,"
                                      "5000000,5050000\n")
    last = report("timeline", ct)["decodes"][-1]
    assert (last["step"], last["span_from"], last["decode_ms"], last["graph_ms"],
            last["callback_ms"]) == (13, "callbacks", 0.05, None, 0.05)


@pytest.mark.parametrize("column", ["turn", "phase", "step"])
def test_timeline_io_without_a_token_column_is_one_line(tmp_path, column):
    # timeline's io side needs only start_ns, end_ns and kind, but rows are read by token.
    other = tmp_path / "io.csv"
    text = V2_IO.read_text()
    header = next(line for line in text.splitlines() if not line.startswith("#"))
    other.write_text(text.replace(header, header.replace(column, "other", 1)))
    result = run("timeline", V2_CT, other)
    assert result.code == 1 and "Traceback" not in result.err
    assert f"missing required column: {column}" in result.err


def test_speculative_reads_alone_draw_an_undefined_cache_curve(write, tmp_path):
    """Every hit share is undefined (no expert lookups: every read speculative, of zero
    bytes): the cache panel says so instead of a traceback, in io and report alike."""
    reads = write(io_text([f"0,1,{step},0,1,0,0,1,0,0,0,500" for step in (1, 2)]), "io.csv")
    target = tmp_path / "io.svg"
    assert run("io", reads, "--cache", "--svg", target).code == 0
    assert "hit share: undefined (nothing to share)" in target.read_text()
    ct = write(ct_text([f"0,1,{step},0,0,MUL_MAT,ffn_up-0,1000,0" for step in (1, 2)]), "ct.csv")
    assert run("report", ct, reads, "--svg", target).code == 0
    ET.parse(target)


def test_v2_perfetto_has_no_negative_time_and_says_what_ran_backwards(tmp_path):
    """The file's first token starts later than the next one (times moved back 5 ms), and one
    read ends before it starts: every ts and dur is >= 0, and a warning says so (the origin was
    the first token in file order, not the earliest row)."""
    ct = tmp_path / "ct.csv"
    lines = V2_CT.read_text().splitlines(keepends=True)
    shifted = []
    for line in lines:
        fields = line.rstrip("\n").split(",")
        if not line.startswith(("#", "turn")) and fields[2] == "10":
            fields[-2:] = [str(int(fields[-2]) + 5_000_000), str(int(fields[-1]) + 5_000_000)]
        shifted.append(",".join(fields) + "\n")
    ct.write_text("".join(shifted))
    io = tmp_path / "io.csv"
    io.write_text(V2_IO.read_text().replace(",1100000,1400000,read,", ",1400000,1100000,read,"))
    target = tmp_path / "p.json"
    result = run("report", ct, io, "--perfetto", target, "--format", "json")
    assert result.code == 0
    events = [e for e in json.loads(target.read_text())["traceEvents"] if e["ph"] == "X"]
    assert events and min(e["ts"] for e in events) >= 0 and min(e["dur"] for e in events) >= 0
    assert "1 row(s) end before they start: drawn as empty intervals" in result.err


def test_v1_reads_are_laid_after_their_layers_routing_node(tmp_path):
    """A v1 pair has no clock: each layer's reads start no earlier than the routing node that
    waits for them (ffn_moe_weights-N), end to end per lane, and the tracks say reconstructed;
    nodes nest in their token exactly."""
    ct, io = REAL_TRACES["qwen3moe-l4-ct-node.csv"], REAL_TRACES["qwen3moe-l4-io-serial.csv"]
    data = perfetto_of(tmp_path, "report", ct, io, "--tokens", "0:3")
    check_events(data)
    events = data["traceEvents"]
    tokens = token_slices(data)
    for token in tokens:
        end = round(token["ts"] + token["dur"], 3)  # whole ns, as Perfetto reads them
        inside = [e for e in events if e["ph"] == "X" and token["ts"] <= e["ts"] < end]
        anchors = {int(e["name"].split("-")[-1]): e["ts"] for e in inside
                   if e["pid"] == 1 and e["name"].startswith("ffn_moe_weights-")
                   and e["name"][16:].isdigit()}
        assert sorted(anchors) == [0, 1, 2, 3]
        reads = [e for e in inside if e["pid"] == 2]
        assert reads and all(e["ts"] >= anchors[e["args"]["layer"]] for e in reads)
        assert min(e["ts"] for e in reads if e["args"]["layer"] == 1) == anchors[1]
        nodes = [e for e in inside if e["pid"] == 1 and e is not token]
        assert all(round(e["ts"] + e["dur"], 3) <= end for e in nodes)
    names = [e["args"]["name"] for e in events if e["ph"] == "M"]
    assert "lane 0 (reconstructed)" in names and "reads by lane (reconstructed)" in names
    assert not any("callbacks" in name or "waits" in name for name in names)


# ── pictures that do not mislead ──
def note_boxes(panel):
    return [(text.text, tuple(map(float, text.get("data-box").split())))
            for text in panel.iter(f"{SVG}text") if text.get("data-box")]


def test_outlier_labels_are_few_and_never_overlap(tmp_path):
    """The real layer trace has 18 tokens >= 10x the median: five labels at most, slowest
    first, no two label boxes (nor the warm-up's) overlapping, and the rest counted."""
    root, _ = svg_of(tmp_path, "compute", REAL_TRACES["qwen3moe-l4-ct-layers.csv"])
    (panel,) = [p for title, p in panels(root).items() if title.startswith("compute ms per tok")
                and "layer" in title and "by layer" not in title]
    boxes = note_boxes(panel)
    steps = [text for text, _ in boxes if text.startswith("step ")]
    assert 1 <= len(steps) <= 5 and steps[0] == "step 102"  # the slowest, 191.81 ms
    more = [text for text, _ in boxes if "more token(s)" in text]
    assert more == [f"{18 - len(steps)} more token(s) >= 10x the median"]
    for (_, a), (_, b) in itertools.combinations(boxes, 2):
        assert a[2] <= b[0] or b[2] <= a[0] or a[3] <= b[1] or b[3] <= a[1], (a, b)
    width = float(root.get("width"))
    assert all(box[2] <= width for _, box in boxes)


def test_a_layer_trace_is_titled_for_its_one_series(tmp_path):
    root, _ = svg_of(tmp_path, "compute", REAL_TRACES["qwen3moe-l4-ct-layers.csv"])
    assert "compute ms per token (a layer trace: no node categories)" in panels(root)


def test_faulting_nodes_have_their_own_band(tmp_path):
    ct = ROOT / "tests" / "data" / "synthetic" / "faults-ct.csv"
    r = report("compute", ct, "--phase", "all")
    root, _ = svg_of(tmp_path, "compute", ct, "--phase", "all")
    title = "compute ms per token: faulting nodes, then categories (the rest, in proportion)"
    panel = panels(root)[title]
    legend = [t.text for t in panel.iter(f"{SVG}text") if "legend" in (t.get("class") or "")]
    assert "faulting nodes" in legend
    per_px = float(panel.get("data-per-px"))
    for (total, heights), token in zip(bars(panel), r["per_token"]):
        assert total == pytest.approx(token["ms"], rel=1e-3)  # the stack is still the token
        assert heights[0] * per_px == pytest.approx(token["faulting_ms"], abs=per_px * 0.01)


def test_the_cache_panel_marks_its_points_on_a_log2_axis(tmp_path, write):
    rows = [f"0,1,{step},0,{expert},0,0,0,{expert * 65536},65536,65536,1000"
            for step, expert in enumerate(list(range(16)) * 3)]
    path = write(io_text(rows, "# io_trace v1\n# model=m io_threads=1 o_direct=0 overlap=0 "
                               "cache_mb=1\n"), "io.csv")
    root, _ = svg_of(tmp_path, "io", path, "--cache")
    panel = panels(root)["expert cache what-if: share of lookups served"]
    circles = [c for c in panel.iter(f"{SVG}circle")]
    assert len(circles) == 5  # the five sizes simulated, and nothing between them
    xs = [float(c.get("cx")) for c in circles]
    steps = [b - a for a, b in zip(xs, xs[1:])]
    assert steps == pytest.approx([steps[0]] * 4, abs=0.2)  # doublings: equal steps on log2
    labels = [t.text for t in panel.iter(f"{SVG}text") if t.get("class") == "tick"]
    assert {"0.0625", "0.125", "0.25", "0.5", "1"} <= set(labels)  # to the precision needed
    assert any("log2" in (t.text or "") for t in panel.iter(f"{SVG}text"))
    assert any(text == "--cache-mb 1" for text, _ in note_boxes(panel))


def test_y_axes_step_by_round_numbers(tmp_path):
    root, _ = svg_of(tmp_path, "report", SESSION_CT, SESSION_IO)
    for title, panel in panels(root).items():
        ticks = [float(t.text) for t in panel.iter(f"{SVG}text")  # the y axis's, at its left
                 if t.get("text-anchor") == "end" and t.get("class") == "tick"
                 and float(t.get("x")) < 100]
        step = ticks[1] - ticks[0]
        mantissa = step / 10 ** math.floor(math.log10(step))
        assert round(mantissa, 6) in (1, 2, 2.5, 5), (title, ticks)
        assert ticks == pytest.approx([i * step for i in range(len(ticks))]), title


def test_the_footer_fits_the_picture(tmp_path):
    deep = tmp_path / ("a-long-folder-name-" * 8)
    deep.mkdir()
    path = deep / "ct.csv"
    path.write_bytes(REAL_TRACES["qwen3moe-l4-ct-layers.csv"].read_bytes())
    root, _ = svg_of(tmp_path, "compute", path)
    (footer,) = [t for t in root.iter(f"{SVG}text") if "footer" in (t.get("class") or "")]
    assert float(footer.get("x")) + 6.0 * len(footer.text) <= float(root.get("width"))
    assert str(path) in root.find(f"{SVG}title").text  # whole in the picture's title


def test_a_layer_traces_diff_draws_its_segments_not_its_one_op(tmp_path):
    """Bug: a layer trace's ops are one, LAYER: diff's SVG drew 'ms per token by op: the 1
    largest changes', a single bar a side; its segments are what differ."""
    base, new = (ROOT / "tests/data/runs" / f"{side}-1-ct.csv" for side in ("base", "new"))
    root, _ = svg_of(tmp_path, "diff", base, new)
    found = panels(root)
    assert not [title for title in found if title.startswith("ms per token by op")]
    segments = found["ms per token by segment: every segment"]
    bars = [rect for rect in segments.iter(f"{SVG}rect") if rect.find(f"{SVG}title") is not None]
    sides = report("diff", base, new)
    table = next(s for s in sides["sections"] if s["title"] == "ms per token by segment")
    assert len(bars) == 2 * len(table["rows"]) > 2  # base and new, a bar each, every segment


def test_diff_draws_what_changed_and_lanes_in_order(tmp_path):
    serial, overlap = REAL_TRACES["qwen3moe-l4-io-serial.csv"], REAL_TRACES[
        "qwen3moe-l4-io-overlap.csv"]
    root, _ = svg_of(tmp_path, "diff", serial, overlap)
    found = panels(root)
    assert RUNS_PANEL.format("io") in found
    hist = found["read latency, log2 buckets: every input's share of its reads"]
    assert len([l for l in hist.iter(f"{SVG}polyline")]) == 2
    lanes = found["MiB per token by lane: every lane"]
    names = [t.text for t in lanes.iter(f"{SVG}text") if t.get("class") == "tick"
             and t.get("text-anchor") == "middle" and (t.text or "").isdigit()]
    assert names == ["0", "1", "2", "3"]


def test_the_timeline_and_perfetto_read_a_backwards_row_alike(tmp_path):
    """One reader (Clock) gives both their intervals: a wait that ends before it starts is
    counted once by each and is empty to each. Decode 11's wait (3.05-3.20 ms) turned around
    leaves its wait 0 ms in the timeline and its wait slice 0 µs long in Perfetto, where the
    other wait keeps its 150 µs."""
    io = tmp_path / "io.csv"
    io.write_text(V2_IO.read_text().replace(",3050000,3200000,wait,", ",3200000,3050000,wait,"))
    timeline = run("timeline", V2_CT, io, "--format", "json")
    assert "1 row(s) end before they start: counted as empty intervals" in timeline.err
    waits = {row["step"]: row["wait_ms"] for row in json.loads(timeline.out)["decodes"]}
    assert waits[10] == 0.15 and waits[11] == 0
    target = tmp_path / "p.json"
    exported = run("report", V2_CT, io, "--perfetto", target, "--format", "json")
    assert "1 row(s) end before they start: drawn as empty intervals" in exported.err
    slices = sorted(e["dur"] for e in json.loads(target.read_text())["traceEvents"]
                    if e.get("cat") == "wait")
    assert slices == [0, 150]
