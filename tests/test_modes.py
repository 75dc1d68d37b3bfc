"""Verdicts and what-ifs that hold in every mode and granularity (issue 26): stakes in the run's
own terms (io alone, a pair, overlap, the page cache), the router under overlap, the I/O
verdict on node and layer traces alike, memory pressure, a contiguous slow stretch. Each case
is decided both ways (and undetermined where that applies) on traces built to its shape."""
import json
from pathlib import Path

import pytest

import decode_analyze
import tracegen
from helpers import REAL_TRACES, ct_text, io_text, report, report_with_warnings
from trace_io import Reading

N_LAYER, TOKENS = 4, 24


def generated(directory, speed=1.0, o_direct=1, overlap=0):
    """One generated run: a node trace, the layer trace the same nodes sum to (segment by
    segment), and its io trace (two experts a layer, no speculative read: no cache seen);
    speed divides every read's latency. [node, layer, io] paths."""
    directory = Path(directory)
    node = list(tracegen.compute_lines(n_layer=N_LAYER, decode_tokens=TOKENS, faults=False,
                                       seed=5))
    reads = list(tracegen.io_lines(n_layer=N_LAYER, decode_tokens=TOKENS, reads_per_token=48,
                                   spec_share=0, seed=6, speed=speed))
    settings = f"o_direct={o_direct} overlap={overlap}"
    paths = []
    for name, lines in (("node.csv", node), ("layer.csv", layer_lines(node)), ("io.csv", reads)):
        text = "".join(lines).replace("o_direct=1 overlap=0", settings)
        paths.append(directory / name)
        paths[-1].write_text(text)
    return paths


def layer_lines(node_lines):
    """The layer trace of a node trace: each token's rows summed into pre (layer -1 rows
    before its first layer), blk.N (layer N's rows and the -1 rows inside it) and post."""
    head, body = node_lines[:3], node_lines[3:]  # the preamble and header stay as they are
    tokens = {}
    for line in body:
        turn, phase, step, _, layer, _, _, wall, faults = line.rstrip("\n").split(",")
        tokens.setdefault((turn, phase, step), []).append((int(layer), int(wall), int(faults)))
    out = []
    for (turn, phase, step), rows in tokens.items():
        last = max(i for i, (layer, _, _) in enumerate(rows) if layer >= 0)
        segments, current = {}, "pre"
        for i, (layer, wall, faults) in enumerate(rows):
            current = f"blk.{layer}" if layer >= 0 else "post" if i > last else current
            wall_sum, fault_sum = segments.get(current, (0, 0))
            segments[current] = (wall_sum + wall, fault_sum + faults)
        for seq, (name, (wall, faults)) in enumerate(segments.items()):
            layer = name.partition(".")[2] or "-1"
            out.append(f"{turn},{phase},{step},{seq},{layer},LAYER,{name},{wall},{faults}\n")
    return head + out


def verdicts(r, ids):
    judged = {v["id"]: v for v in (r["pair"]["verdicts"] if r["kind"] == "report" else [])}
    own = {v["id"]: v for v in r["verdicts"]} if "verdicts" in r else {}
    return {key: (judged.get(key) or own.get(key)) for key in ids}


STAKED = ("io_bound", "lanes_unbalanced", "coalescing", "cache")


# ── the I/O verdict, on node and layer traces of one run ──
@pytest.mark.parametrize("speed, flagged", [(1.0, True), (3.0, False)])
def test_node_and_layer_traces_of_one_run_give_the_same_io_verdicts(tmp_path, speed, flagged):
    # speed 1: the reads cost 2.00 ms of the 5.38 ms decode (37% > 20%): I/O-bound, and
    # merging requests could save 0.68 ms (12.6% >= 5%); speed 3: 0.67 ms (12%) and 0.23 ms
    # (4.2%): neither. The layer trace sums the same nodes, so every figure is the same.
    node, layer, reads = generated(tmp_path, speed)
    by_node = report("report", node, reads)
    by_layer = report("report", layer, reads)
    assert by_layer["compute"]["granularity"] == "layer"
    assert by_node["pair"]["decode_ms_per_token"] == pytest.approx(
        by_layer["pair"]["decode_ms_per_token"])
    a, b = verdicts(by_node, STAKED), verdicts(by_layer, STAKED)
    assert a == b
    assert a["io_bound"]["flagged"] is flagged and a["coalescing"]["flagged"] is flagged
    estimate = by_node["pair"]["io_wall_ms_per_token"]["estimate"]
    share = estimate / by_node["pair"]["decode_ms_per_token"]
    assert (share > 0.20) is flagged
    assert f"{share:.0%}" in a["io_bound"]["text"]


# ── stakes in io alone: the I/O time ──
def test_io_alone_weighs_a_remedy_against_the_io_time(tmp_path):
    # 2.62x fewer requests; the reads' fixed cost (the intercept of latency against size, here
    # the 90 us of tracegen's model) makes merging save 34% of the I/O time: >= 10%, flagged
    _, _, reads = generated(tmp_path)
    r = report("io", reads, "--adjacent", "--cache")
    coalescing = verdicts(r, ["coalescing"])["coalescing"]
    assert coalescing["flagged"] is True and "of I/O per read-token" in coalescing["text"]
    assert "(>= 10%" not in coalescing["text"] and ">= 10%)" in coalescing["text"]


def size_class_rows(fixed_us, per_kib_us):
    """One token: three touching requests of 64 KiB and three of 256 KiB, each latency
    fixed_us + per_kib_us x KiB: the fixed cost is what merging saves."""
    rows, offset = [], 0
    for proj, size in enumerate((65536,) * 3 + (262144,) * 3):
        latency = round((fixed_us + per_kib_us * size / 1024) * 1000)
        rows.append(f"0,1,5,0,1,{proj},{proj % 2},0,{offset},{size},{size},{latency}")
        offset += size
    return rows


@pytest.mark.parametrize("fixed_us, per_kib_us, flagged", [(900, 0.1, True), (0, 4, False)])
def test_merging_saves_the_requests_fixed_cost(write, fixed_us, per_kib_us, flagged):
    # six requests touching: one run, 6x fewer requests. 900 us fixed a read: merging saves
    # 5/6 of nearly all of the I/O time; latency proportional to size: the intercept is 0,
    # nothing to save (not at stake, 0.0% < 10%)
    r = report("io", write(io_text(size_class_rows(fixed_us, per_kib_us))), "--adjacent")
    coalescing = verdicts(r, ["coalescing"])["coalescing"]
    assert coalescing["flagged"] is flagged
    assert r["adjacency"]["coalesce_factor"] == 6
    if not flagged:
        assert "could save at most 0.00 ms" in coalescing["text"]


@pytest.mark.parametrize("o_direct, moot", [(0, True), (1, False)])
def test_reads_from_the_page_cache_flag_none_of_lanes_cache_coalescing(tmp_path, o_direct,
                                                                       moot):
    # speed 10: a median read of 9.9 us. Buffered (o_direct=0), that is the page cache: none
    # of lanes, cache or coalescing is at stake; with O_DIRECT it is the drive, and merging
    # the 2.62x requests would save 34% of the I/O time (flagged)
    _, _, reads = generated(tmp_path, speed=10.0, o_direct=o_direct)
    r = report("io", reads, "--adjacent", "--cache")
    assert r["latency_us"]["p50"] < 50
    found = verdicts(r, ["lanes_unbalanced", "coalescing", "cache"])
    assert not any(v and v["flagged"] for v in found.values()) if moot else \
        found["coalescing"]["flagged"] is True
    if moot:
        assert "came from the page cache" in found["coalescing"]["text"]


# ── overlap: at most what the overlap left, the stall ──
def overlap_log(path, stall_s):
    path.write_text(f"moe-overlap: stall {stall_s:.3f} s/token (flash reads overlapped with FFN "
                    f"compute)\n")
    return path


def test_under_overlap_without_a_stall_the_stakes_are_undetermined(tmp_path):
    node, _, reads = generated(tmp_path, overlap=1)
    r = report("report", node, reads, "--no-engine-log")
    found = verdicts(r, ["io_bound", "router_wait", "coalescing"])
    assert all(v["flagged"] is None for v in found.values())
    assert "the stall" in found["io_bound"]["text"]
    assert "routing time is not read wait" in found["router_wait"]["text"]


@pytest.mark.parametrize("stall_s, flagged", [(0.003, True), (0.001, False)])
def test_under_overlap_the_stall_is_what_the_reads_cost(tmp_path, stall_s, flagged):
    # the reads' 2.00 ms ran beside compute; what they cost the 5.38 ms decode is the stall:
    # 3 ms is 56% (> 20%), I/O-bound; 1 ms is 19%, not
    node, _, reads = generated(tmp_path, overlap=1)
    log = overlap_log(tmp_path / "run.log", stall_s)
    r = report("report", node, reads, "--engine-log", log)
    found = verdicts(r, ["io_bound", "router_wait"])
    assert found["io_bound"]["flagged"] is flagged
    assert f"{stall_s * 1000:.2f} ms (the overlap's stall)" in found["io_bound"]["text"]
    assert found["router_wait"]["flagged"] is False  # 0.55 ms of routing, at most the stall


def test_under_overlap_a_remedy_saves_at_most_the_stall(tmp_path):
    # reads twice as slow: merging would save 1.36 ms of the reads' fixed cost, but a 1 ms
    # stall is all the reads cost: 1.00 ms of the 5.38 ms decode (18.6%, still >= 5%); a
    # stall the log rounds to 0.000 s leaves nothing at stake (0.0%)
    node, _, reads = generated(tmp_path, speed=0.5, overlap=1)
    for stall_s, flagged, said in ((0.001, True, "1.00 ms (the overlap's stall)"),
                                   (0.0, False, "0.00 ms (the overlap's stall)")):
        r = report("report", node, reads, "--engine-log",
                   overlap_log(tmp_path / "s.log", stall_s))
        capped = verdicts(r, ["coalescing"])["coalescing"]
        assert capped["flagged"] is flagged and said in capped["text"]
    serial_dir = tmp_path / "serial"
    serial_dir.mkdir()
    serial_node, _, serial_reads = generated(serial_dir, speed=0.5)
    serial = verdicts(report("report", serial_node, serial_reads), ["coalescing"])["coalescing"]
    assert serial["flagged"] is True and "1.36 ms of the 5.38 ms" in serial["text"]


def test_the_router_under_overlap_waits_at_most_the_stall(tmp_path):
    # routing nodes 6 ms a token of a 10 ms decode; serial, the 8 ms of reads account for
    # them: ROUTER WAITS. Under overlap the stall bounds the wait: 1 ms (10%) is not much
    compute = ct_text([f"0,1,{step},{seq},0,{op},{name},{ms * 1_000_000},0"
                       for step in range(1, 5) for seq, (op, name, ms) in enumerate(
                           [("GET_ROWS", "ffn_moe_weights-0", 6), ("MUL_MAT_ID",
                                                                   "ffn_moe_up-0", 4)])])
    reads = io_text([f"0,1,{step},0,1,0,0,0,0,1048576,1048576,8000000" for step in range(1, 5)])
    for overlap, stall, flagged in (("0", None, True), ("1", 0.001, False), ("1", None, None)):
        ct, io = tmp_path / f"ct{overlap}{stall}.csv", tmp_path / f"io{overlap}{stall}.csv"
        ct.write_text(compute.replace("n_threads=4", f"n_threads=4 overlap={overlap}"))
        io.write_text(reads.replace("overlap=0", f"overlap={overlap}"))
        logs = ["--engine-log", overlap_log(tmp_path / "s.log", stall)] if stall else \
            ["--no-engine-log"]
        r = report("report", ct, io, *logs)
        assert verdicts(r, ["router_wait"])["router_wait"]["flagged"] is flagged, overlap


# ── memory pressure ──
def faulting_trace(write, faults_per_token):
    rows = [f"0,1,{step},{seq},0,{op},{name},{ms * 1_000_000},{faults}"
            for step in range(20) for seq, (op, name, ms, faults) in enumerate(
                [("MUL_MAT", "attn_out-0", 2, 0), ("MUL_MAT_ID", "ffn_moe_up-0", 3,
                                                   faults_per_token)])]
    return write(ct_text(rows), f"faults{faults_per_token}.csv")


@pytest.mark.parametrize("faults", [150, 50])
def test_faults_on_every_token_are_memory_pressure_whatever_their_count(write, faults):
    # 150 faults a token >= 100; 50, but on every one of the 12 tokens past the warm-up (a
    # 64 MiB limit gave 48 a token and a 19x slower run): pressure, the faulting nodes' 3 ms
    # a token (60%) a lower bound of what it costs
    r = report("compute", faulting_trace(write, faults))
    found = verdicts(r, ["memory_pressure"])["memory_pressure"]
    assert found["flagged"] is True
    assert f"MEMORY PRESSURE: {faults:.1f} major faults per token, on 12 of the 12 decode " \
           f"tokens past the warm-up" in found["text"]
    assert "at least 3.00 ms per token" in found["text"] and "60% of compute" in found["text"]
    assert "--moe-stream" in found["text"] and "more memory" in found["text"]


def test_faults_in_the_warm_up_alone_are_no_pressure(write):
    rows = [f"0,1,{step},0,0,MUL_MAT_ID,ffn_moe_up-0,3000000,{50 if step < 8 else 0}"
            for step in range(20)]
    found = verdicts(report("compute", write(ct_text(rows))), ["memory_pressure"])
    assert found["memory_pressure"]["flagged"] is False


@pytest.mark.parametrize("declared, remedy", [
    ("cache_mb=256", "a smaller expert cache (cache_mb=256"),
    ("moe_stream=1", "no expert cache"), ("mem_limit_mb=64", "a larger memory limit (it had 64")])
def test_memory_pressures_remedies_follow_the_runs_mode(write, declared, remedy):
    """An mmap run (no expert cache) was told to shrink a cache it did not have."""
    r = report("compute", faulting_trace(write, 50), "--set", declared)
    text = verdicts(r, ["memory_pressure"])["memory_pressure"]["text"]
    assert remedy in text
    assert ("smaller expert cache" in text) == declared.startswith("cache_mb")


def test_under_memory_pressure_a_small_stake_is_undetermined(tmp_path):
    # the same run's nodes fault 150 times a token: the decode is inflated, so the reads'
    # 0.67 ms (12%) and merging's 0.23 ms (4.2% < 5%) are no answer: undetermined
    node, _, reads = generated(tmp_path, speed=3.0)
    lines = node.read_text().splitlines(keepends=True)
    node.write_text("".join(lines[:3] + [line.rpartition(",")[0] + ",150\n"
                                         if ",MUL_MAT_ID," in line else line
                                         for line in lines[3:]]))
    r = report("report", node, reads)
    assert r["compute"]["majflt_per_token"] >= 100
    assert verdicts(r, ["coalescing"])["coalescing"]["flagged"] is None


def test_cache_sizes_a_memory_limit_cannot_hold_are_not_proposed():
    # the serial qwen3moe trace's default sizes are 2, 3 and 6 MiB; under a 4 MiB limit, 6
    # is not proposed
    serial = REAL_TRACES["qwen3moe-l4-io-serial.csv"]
    sizes = [s["value"] for s in report("io", serial, "--what-if")["what_if"]["settings"]
             if s["setting"] == "cache_mb"]
    limited = [s["value"] for s in report("io", serial, "--what-if", "--set",
                                          "mem_limit_mb=4")["what_if"]["settings"]
               if s["setting"] == "cache_mb"]
    assert sorted(sizes) == [2, 3, 6] and sorted(limited) == [2, 3]


# ── a bimodal run is one stretch, not outliers ──
def timed_trace(write, slow_steps, name):
    rows = [f"0,1,{step},{seq},{layer},{op},{label},{(40 if step in slow_steps else 1) * ms}000000,0"
            for step in range(40) for seq, (layer, op, label, ms) in enumerate(
                [(0, "MUL_MAT", "attn_out-0", 2), (0, "MUL_MAT_ID", "ffn_moe_up-0", 3)])]
    return write(ct_text(rows), name)


def test_a_contiguous_slow_stretch_is_said_as_one(write):
    # steps 10-25 run 40x slower (200 ms against 5): one stretch of 16 tokens, 89% of the
    # time, in which every category slowed 40x
    r = report("compute", timed_trace(write, range(10, 26), "stretch.csv"))
    stretch = r["slow_stretch"]
    assert (stretch["first_step"], stretch["last_step"], stretch["tokens"]) == (10, 25, 16)
    assert stretch["ms_per_token"] == pytest.approx(200) and \
        stretch["others_ms_per_token"] == pytest.approx(5)
    assert stretch["share"] == pytest.approx(16 * 200 / (16 * 200 + 24 * 5))
    assert {g["name"]: round(g["ratio"]) for g in stretch["slowed"]} == {
        "attention": 40, "experts": 40}
    said = verdicts(r, ["slow_stretch", "outliers"])
    assert said["outliers"] is None and said["slow_stretch"]["flagged"] is True
    assert "steps 10-25 (16 tokens in a row)" in said["slow_stretch"]["text"]
    assert "every category" in said["slow_stretch"]["text"]


def test_scattered_slow_tokens_are_outliers_not_a_stretch(write):
    # every fifth token 40x slower: 8 tokens, none next to another: outliers (89% of the time
    # is theirs), no stretch
    r = report("compute", timed_trace(write, range(0, 40, 5), "scattered.csv"))
    assert r["slow_stretch"] is None
    said = verdicts(r, ["slow_stretch", "outliers"])
    assert said["slow_stretch"] is None and said["outliers"]["flagged"] is True


def test_a_stretch_in_a_layer_trace_names_its_segments():
    # the real qwen3moe layer trace: steps 69-106 run 10.7x the others, every segment slowed
    r = report("compute", REAL_TRACES["qwen3moe-l4-ct-layers.csv"])
    stretch = r["slow_stretch"]
    assert (stretch["first_step"], stretch["last_step"]) == (69, 106)
    assert {g["name"] for g in stretch["slowed"]} == {"pre", "blk.0", "blk.1", "blk.2",
                                                      "blk.3", "post"}
    # its verdict names five, and says that one more slowed (it read as if five were all six)
    text = next(v["text"] for v in r["verdicts"] if v["id"] == "slow_stretch")
    named = ", ".join(f"{g['name']} {g['ratio']:.0f}x" for g in stretch["slowed"][:5])
    assert text.endswith(f"slowed in it: every segment ({named} and 1 more)")


def test_diff_bounds_the_routers_wait_under_overlap_by_the_serial_run(tmp_path):
    # one generated model, serial and overlapped: routing takes 0.55 ms in both, so under
    # overlap its wait is at most what the serial run's could be, min(0.55, its 2.00 ms I/O
    # estimate); against another model, nothing is said
    serial_dir, overlap_dir = tmp_path / "serial", tmp_path / "overlap"
    serial_dir.mkdir()
    overlap_dir.mkdir()
    serial = generated(serial_dir)
    overlapped = generated(overlap_dir, overlap=1)
    saved = []
    for name, (node, _, reads) in (("s.json", serial), ("o.json", overlapped)):
        saved.append(tmp_path / name)
        saved[-1].write_text(json.dumps(report("report", node, reads, "--no-engine-log")))
    diff = report_with_warnings("diff", *saved)
    pair = json.loads(saved[0].read_text())
    router = next(c["ms_per_token"] for c in pair["compute"]["by_category"]
                  if c["category"] == "router")
    bound = min(router, pair["io"]["io_wall_ms_per_token"]["estimate"])
    (note,) = diff["notes"]
    assert f"at most {bound:.2f} ms" in note and f"{router:.2f} serial" in note
    other = overlapped[0].read_text().replace("model=bench-moe.gguf", "model=other.gguf")
    overlapped[0].write_text(other)
    assert report_with_warnings("diff", serial[0], overlapped[0])["notes"] == []


def test_a_layer_traces_stretch_segments_are_the_same_read_in_parts(small_split):
    # the real layer trace's stretch (steps 69-106, every segment slower) read by one process
    # and by several: each keeps its slowest tokens' segments, merged
    layers = REAL_TRACES["qwen3moe-l4-ct-layers.csv"]
    single, split = small_split("compute", layers, "--format", "json", "--jobs", "2")
    assert single.json["slow_stretch"] == split.json["slow_stretch"]
    assert len(split.json["slow_stretch"]["slowed"]) == 6


def test_a_stretch_past_the_kept_slow_tokens_says_its_segments_are_unknown(monkeypatch):
    # only 8 slow tokens' segments kept: the 38-token stretch's are not all known
    import decode_analyze
    monkeypatch.setattr(decode_analyze, "KEPT_SLOW_TOKENS", 8)
    r = report("compute", REAL_TRACES["qwen3moe-l4-ct-layers.csv"])
    assert r["slow_stretch"]["slowed"] is None
    said = verdicts(r, ["slow_stretch"])["slow_stretch"]["text"]
    assert "its segments unknown (kept for the 8 slowest tokens only)" in said


def v2_pair(directory, wait_ms, steps_read=(1, 2, 3, 4)):
    """The router's run above under overlap=1, its io trace v2: 8 ms of reads for each step in
    steps_read, and a compute thread's wait of wait_ms for each of them (no wait row at 0)."""
    compute = ct_text([f"0,1,{step},{seq},0,{op},{name},{ms * 1_000_000},0"
                       for step in range(1, 5) for seq, (op, name, ms) in enumerate(
                           [("GET_ROWS", "ffn_moe_weights-0", 6), ("MUL_MAT_ID",
                                                                   "ffn_moe_up-0", 4)])])
    rows = []
    for step in steps_read:
        rows.append(f"0,1,{step},0,1,0,0,0,0,1048576,1048576,8000000,0,8000000,read,7")
        if wait_ms:
            rows.append(f"0,1,{step},0,1,0,0,0,0,0,0,{wait_ms * 1_000_000},0,0,wait,2")
    io = io_text(rows, preamble="# io_trace v2\n# model=m.gguf io_threads=2 o_direct=1 "
                                "overlap=1\n# clock=steady_ns trace_id=1\n",
                 header="turn,phase,step,layer,expert,proj,lane,spec,offset,req_bytes,"
                        "read_bytes,latency_ns,start_ns,end_ns,kind,thread_id")
    (directory / "ct.csv").write_text(compute.replace("n_threads=4", "n_threads=4 overlap=1"))
    (directory / "io.csv").write_text(io)
    return directory / "ct.csv", directory / "io.csv"


@pytest.mark.parametrize("wait_ms, steps_read, stall, flagged", [
    (1, (1, 2, 3, 4), "1.00", False),  # 1 ms of a 10 ms decode: 10%, not I/O-bound
    (4, (1, 2, 3, 4), "4.00", True),  # 40%
    (4, (1, 2), "2.00", False),  # 2 x 4 ms spread over the 4 decoded tokens: 2 ms, 20%
    (0, (1, 2, 3, 4), None, None)])  # a v2 trace without wait rows has not measured it
def test_a_v2_traces_wait_rows_are_the_stall_a_log_would_give(tmp_path, wait_ms, steps_read,
                                                              stall, flagged):
    """Under overlap the reads cost the decode the stall: a v2 io trace's `wait` rows (a
    compute thread waiting for an expert) measure it, per decoded token, where no engine log
    gives it; the router's wait is then at most it too."""
    ct, io = v2_pair(tmp_path, wait_ms, steps_read)
    found = verdicts(report("report", ct, io, "--no-engine-log"), ["io_bound", "router_wait"])
    assert found["io_bound"]["flagged"] is flagged
    if stall is None:
        assert found["router_wait"]["flagged"] is None
        return
    assert f"the reads cost {stall} ms (the overlap's stall)" in found["io_bound"]["text"]
    assert f"the overlap's stall, {stall} ms" in found["router_wait"]["text"]


def test_the_engine_logs_stall_wins_over_the_wait_rows(tmp_path):
    ct, io = v2_pair(tmp_path, 4)
    r = report("report", ct, io, "--engine-log", overlap_log(tmp_path / "s.log", 0.001))
    assert "the reads cost 1.00 ms (the overlap's stall)" in \
        verdicts(r, ["io_bound"])["io_bound"]["text"]


def test_the_wait_rows_pass_says_nothing_the_reads_pass_says(tmp_path):
    """The wait rows are read in a pass of their own: a cut-short last line is said once to
    the run's warnings (summary and diff keep each run's list as said), not once a pass."""
    _, io = v2_pair(tmp_path, 4)
    io.write_text(io.read_text() + "0,1,4,0,1,0,0,0,0,1048576,1048576,8000000,0,80")
    said = []
    r = decode_analyze.analyze_io(io, Reading(decode_analyze.Selection(), warn=said.append))
    assert sum("last line has no newline" in message for message in said) == 1, said
    assert r["tokens"] == 4  # the cut line left out, by both passes


def test_a_pair_reads_the_wait_rows_once(tmp_path, monkeypatch):
    """The io half's pass over the waits serves the pair's verdicts too (they spread the same
    waits over the decoded tokens): one pass, not one for each."""
    passes = []
    original = decode_analyze.WaitFold.__init__
    monkeypatch.setattr(decode_analyze.WaitFold, "__init__",
                        lambda fold, selection: passes.append(1) or original(fold, selection))
    ct, io = v2_pair(tmp_path, 4, (1, 2))
    r = report("report", ct, io, "--no-engine-log", "--jobs", "1")
    assert "the reads cost 2.00 ms (the overlap's stall)" in \
        verdicts(r, ["io_bound"])["io_bound"]["text"]
    assert len(passes) == 1


def test_the_what_if_spreads_a_traces_waits_over_its_read_tokens_as_the_verdicts_do(tmp_path):
    """5 tokens waited 4 ms each, 4 of them read (4 x 8 ms, 4 experts, 1 MiB each): the stall
    is 20 ms over 4 read-tokens, 5 ms each, for the what-if's cap as for io's stakes (the cap
    took the 4 ms per waiting token: overlap_cap scales it now, not two of its callers)."""
    rows = [f"0,1,{step},0,{expert},0,{expert % 2},0,{expert * 2097152},1048576,1048576,"
            f"8000000,0,8000000,read,7" for step in range(1, 5) for expert in range(4)]
    rows += [f"0,1,{step},0,1,0,0,0,0,0,0,4000000,0,0,wait,2" for step in range(1, 6)]
    io = tmp_path / "io.csv"
    io.write_text(io_text(rows, preamble="# io_trace v2\n# model=m.gguf io_threads=2 "
                                         "o_direct=1 overlap=1\n# clock=steady_ns trace_id=1\n",
                          header="turn,phase,step,layer,expert,proj,lane,spec,offset,req_bytes,"
                                 "read_bytes,latency_ns,start_ns,end_ns,kind,thread_id"))
    r = report("io", io, "--what-if", "--no-engine-log")
    assert r["tokens"] == 4
    every_expert = next(setting for setting in r["what_if"]["settings"]
                        if setting["setting"] == "cache_mb" and setting["value"] == 4)
    assert every_expert["ms_per_token_saved"]["max"] == 5.0  # all 16 ms of reads, at most 5


@pytest.mark.parametrize("logged,stall", [(128, 20.0), (32, 10.0), (None, 10.0)])
def test_a_logs_stall_is_spread_by_its_tokens_only_where_they_are_this_runs(logged, stall):
    """The log's stall is per token it generated: 10 ms over its 128 tokens is 20 ms over the
    64 a report read on (a cached run's last tokens read nothing). A count below the tokens
    the trace read on is another run's (logged_tokens, the rule every reader of the log's
    count takes; this one took it as it was, 5 ms): the stall stands per token as it is."""
    measured = {"stall_ms_per_token": 10.0, "tokens": logged}
    assert decode_analyze.overlap_cap({"overlap": "1"}, measured, 64) == stall
