"""Pair (`report CT IO`): I/O per decoded token, the two files side by side, the pair's warnings."""
import os
import threading

import pytest

import decode_analyze
from helpers import ROOT, ct_text, io_text, report, report_with_warnings, run, shared_trace


MIB = 1 << 20


CT = ct_text([
    "0,1,5,0,0,MUL_MAT_ID,ffn_moe_up-0,4000000,0",
    "0,1,5,1,0,GET_ROWS,ffn_moe_weights-0,6000000,3",
    "0,1,6,0,0,MUL_MAT_ID,ffn_moe_up-0,2000000,0",
    "0,1,6,1,0,GET_ROWS,ffn_moe_weights-0,4000000,0",
    "0,1,7,0,0,MUL_MAT_ID,ffn_moe_up-0,2000000,0",
    "0,1,7,1,0,GET_ROWS,ffn_moe_weights-0,2000000,0",
], preamble="# compute_trace v2\n# model=m.gguf arch=qwen3moe n_layer=1 trace_id=7\n",
    header="turn,phase,step,seq,layer,op,name,wall_ns,majflt")


IO = io_text([  # token 7 was served from cache: no rows
    "0,1,5,0,1,0,0,0,0,1048576,1048576,2000000",
    "0,1,5,0,2,0,1,0,2097152,1048576,1048576,2000000",
    "0,1,6,0,1,0,0,0,0,1048576,1048576,2000000",
], preamble="# io_trace v2\n# model=m.gguf arch=qwen3moe n_layer=1 trace_id=7 io_threads=2\n")


@pytest.fixture
def pair(write):
    return write(CT, "ct.csv"), write(IO, "io.csv")


def test_per_decoded_token(pair):
    r = report("report", *pair)
    assert r["kind"] == "report" and r["schema"] == decode_analyze.SCHEMA
    p = r["pair"]
    assert p["tokens"] == 3 and p["tokens_without_reads"] == 1
    assert p["io_reads_per_token"] == 1.0 and p["io_mib_per_token"] == 1.0
    assert p["io_busy_ms_per_token"] == pytest.approx(2.0)  # 6 ms over 3 tokens
    # token 5: two reads of 2 ms on two lanes, one layer: 2 ms; token 6: 2 ms; over 3 tokens
    assert p["io_wall_ms_per_token"] == pytest.approx({"min": 1.0, "max": 2.0,
                                                       "estimate": 4 / 3})
    assert p["decode_ms_per_token"] == pytest.approx(20 / 3)
    assert p["compute_ms_per_token"] == pytest.approx(20 / 3 - 4 / 3)  # serial: decode - I/O
    assert p["experts_ms_per_token"] == pytest.approx(8 / 3)
    assert p["router_ms_per_token"] == pytest.approx(12 / 3)
    assert p["faulting_ms_per_token"] == pytest.approx(2.0)
    assert r["io"]["mib_per_token"] == 1.5  # the io trace alone: per read-token
    assert p["warnings"] == []


def test_a_pair_divides_the_io_totals_once(write):
    """The io trace's figures per read-token, made per decoded token from their totals: 2 ms
    of reads over 5 decoded tokens is 0.4 exactly, where (2 / 3 read-tokens) x (3 / 5) was
    0.39999999999999997."""
    ct = write(ct_text([f"0,1,{step},0,0,MUL_MAT_ID,ffn_moe_up-0,1000000,0"
                        for step in range(1, 6)]), "ct.csv")
    io = write(io_text([f"0,1,{step},0,{step},0,0,0,0,4096,4096,{latency}"
                        for step, latency in ((1, 500000), (2, 500000), (3, 1000000))]), "io.csv")
    r = report("report", ct, io)
    p = r["pair"]
    lane = next(row for row in p["by_lane"] if row["lane"] == 0)  # lane 1 never read
    assert (r["io"]["tokens"], p["tokens"]) == (3, 5)
    assert p["io_busy_ms_per_token"] == lane["busy_ms_per_token"] == 2 / 5
    assert p["io_wall_ms_per_token"]["estimate"] == 2 / 5  # each token's reads: one layer
    assert p["adjacency"]["reads_per_token"] == 3 / 5


def test_layers_side_by_side(pair):
    (layer,) = report("report", *pair)["pair"]["by_layer"]
    assert layer == pytest.approx({"layer": 0, "compute_ms_per_token": 20 / 3,
                                   "majflt_per_token": 1.0, "reads_per_token": 1.0,
                                   "mib_per_token": 1.0})


def test_router_against_the_io_range(pair):
    """Router 4 ms per decoded token against reads estimated at 4/3 ms: at most a third of it
    can be read wait, though it is 29% of the decode outside faulting nodes (14/3 ms)."""
    verdicts = {v["id"]: v for v in report("report", *pair)["pair"]["verdicts"]}
    assert verdicts["router_wait"]["flagged"] is False
    assert verdicts["router_wait"]["text"] == (
        "router time is mostly not read wait: routing nodes take 4.00 ms per decoded token; the "
        "reads, estimated at 1.33 ms (each layer's busiest lane), can account for 1.33 of them "
        "(33% of the router's time, < 50%)")


def test_the_cache_and_the_what_if_are_always_in_the_pair(pair):
    r = report("report", *pair)
    assert r["io"]["reuse"]["unique_mib"] == 2.0
    assert r["what_if"]["baseline"]["tokens"] == r["pair"]["tokens"]


def test_text_report(pair):
    out = " ".join(run("report", *pair).out.split())
    assert "tokens=3 (from the compute trace; phase decode), 1 of them read nothing" in out
    assert "reads 1.0, 1.00 MiB; lanes busy 2.00 ms summed over lanes" in out
    assert "decode 6.67 ms = compute 5.33 + flash I/O 1.33 (the I/O estimate); in the decode" in out
    assert ("I/O: 1.33 ms estimated (per layer, its busiest lane), within 1.00 (2 lanes at "
            "once) and 2.00 ms (one at a time)") in out
    assert "verdicts" in out


def test_mismatched_pair_warns(write):
    ct = write(CT, "ct.csv")
    io = write(IO.replace("trace_id=7", "trace_id=8").replace("model=m.gguf", "model=x.gguf")
               .replace("0,1,6,", "3,1,6,"), "io.csv")
    result = run("report", ct, io, "--format", "json")
    assert result.code == 0
    assert "model differs: 'm.gguf' in the compute trace, 'x.gguf' in the io trace" in result.err
    assert "trace_id differs: 7 in " in result.err and "the files may be from two runs" in result.err
    assert "1 token(s) of the io trace are not among the compute trace's" in result.err
    assert len(result.json["pair"]["warnings"]) == 3


def test_a_setting_the_two_preambles_disagree_on_is_a_warning():
    """Bug: a serial run's compute trace beside an overlapped run's io trace (overlap=0 and
    overlap=1 in their preambles) read as one run without a word: only model, arch and
    n_layer were compared, though one process writes both preambles with one set of settings."""
    result = run("report", shared_trace("qwen3moe-l4-ct-node.csv"),
                 shared_trace("qwen3moe-l4-io-overlap.csv"), "--no-engine-log")
    assert result.code == 0
    assert result.err == ("decode-analyze: warning: overlap differs: '0' in the compute trace, "
                          "'1' in the io trace: the io trace's stands\n")
    same = run("report", shared_trace("qwen3moe-l4-ct-node.csv"),
               shared_trace("qwen3moe-l4-io-serial.csv"))
    assert same.code == 0 and same.err == ""  # settings joined from a log are not compared


def test_two_stdins_refused(pair):
    result = run("report", "-", "-")
    assert result.code == 1 and "stdin can carry only one" in result.err


@pytest.mark.parametrize("command", ["report", "timeline"])
def test_io_trace_given_first_is_read_as_the_io_trace_with_a_note(command):
    """Bug: `report io.csv ct.csv` refused the run ("an io trace, not a compute trace")
    though each preamble says what it is."""
    ct, io = ROOT / "tests/data/v2/ct.csv", ROOT / "tests/data/v2/io.csv"
    straight, swapped = (run(command, *paths, "--format", "json") for paths in ((ct, io),
                                                                            (io, ct)))
    assert straight.code == swapped.code == 0 and straight.err == ""
    note = (f"{io} is the io trace and {ct} the compute trace: read as the run's compute trace "
            f"and its io trace, in that order")
    assert swapped.err == f"decode-analyze: warning: {note}\n"
    swapped_report, straight_report = swapped.json, straight.json
    assert swapped_report.pop("warnings") == [note] and straight_report.pop("warnings") == []
    assert swapped_report == straight_report


@pytest.mark.parametrize("command", ["summary", "diff"])
def test_a_run_given_as_io_plus_ct_is_read_as_ct_plus_io(command):
    ct, io = ROOT / "examples/session-ct.csv", ROOT / "examples/session-io.csv"
    argv = [f"{ct}+{io}"] * (2 if command == "diff" else 1)
    swapped = [f"{io}+{ct}"] + argv[1:]
    straight, turned = (run(command, *given, "--format", "json") for given in (argv, swapped))
    assert straight.code == turned.code == 0
    assert turned.err.count("is the io trace and") == 1 and "is the io trace" not in straight.err
    turned_report, straight_report = turned.json, straight.json
    turned_report.pop("warnings"), straight_report.pop("warnings")
    assert turned_report == straight_report


@pytest.mark.parametrize("command", ["report", "timeline", "summary"])
def test_two_traces_of_one_kind_are_refused_before_either_is_read(command):
    """'report ct.csv ct.csv' said 'read it with decode-analyze compute' of the second, after
    reading the first whole."""
    ct = ROOT / "tests/data/v2/ct.csv"
    other = ROOT / "examples/session-ct.csv"
    argv = [f"{ct}+{other}"] if command == "summary" else [ct, other]
    result = run(command, *argv)
    assert result.code == 1
    assert result.err == (f"decode-analyze: {other}:1: a compute trace, as {ct} is: a run's "
                          f"pair is its compute trace and its io trace\n")


def test_a_pipe_is_not_sniffed_for_the_order(pair, tmp_path):
    """A pipe is read once: given io first it is refused as before, not half-read."""
    ct, io = pair
    fifo = tmp_path / "io-pipe"
    os.mkfifo(fifo)
    writer = threading.Thread(target=lambda: fifo.write_bytes(io.read_bytes()))
    writer.start()
    result = run("report", fifo, ct)
    writer.join()
    assert result.code == 1 and "an io trace (# io_trace v2), not a compute trace" in result.err


@pytest.mark.parametrize("phase, unit", [("decode", "decoded token"),
                                         ("prefill", "prefill batch"),
                                         ("all", "token (a prefill batch counts as one)")])
def test_a_pairs_figures_say_what_they_are_per(phase, unit):
    """Bug: with --phase all the prefill batch is among the tokens, and the report still said
    'every figure below is per decoded token'."""
    ct, io = (shared_trace(name) for name in ("qwen3moe-l4-ct-node.csv",
                                              "qwen3moe-l4-io-serial.csv"))
    result = run("report", ct, io, "--phase", phase)
    assert result.code == 0
    said = " ".join(result.out.split())
    assert f"every figure below is per {unit}" in said and f"\n\nper {unit}\n" in result.out
    tokens = report_with_warnings("report", ct, io, "--phase", phase)["pair"]["tokens"]
    assert tokens == {"decode": 128, "prefill": 1, "all": 129}[phase]


def test_real_session_pair():
    ct = shared_trace("qwen3moe-l4-session-ct-node.csv")
    io = shared_trace("qwen3moe-l4-session-ct-node-io.csv")
    r = report("report", ct, io)
    assert r["pair"]["tokens"] == 208 and r["pair"]["warnings"] == []
    assert r["pair"]["io_mib_per_token"] == pytest.approx(r["io"]["read_bytes"] / MIB / 208)
    assert report("report", ROOT / "examples/session-ct.csv",
                  ROOT / "examples/session-io.csv")["pair"]["tokens"] == 208


def test_layer_granularity_pair_has_no_categories(write):
    rows = [f"0,1,{step},0,-1,LAYER,pre,3000000,0" for step in (5, 6)]
    ct = write(ct_text(rows, preamble="# compute_trace v1\n# model=m.gguf n_layer=1\n"), "ct.csv")
    io = write(IO, "io.csv")
    r = report("report", ct, io)
    assert r["pair"]["experts_ms_per_token"] is None and r["pair"]["router_ms_per_token"] is None
    assert "routed experts and router n/a" in run("report", ct, io).out


def test_every_report_io_figure_is_per_decoded_token(half_read):
    r = report("report", *half_read)
    p = r["pair"]
    assert p["tokens"] == 4 and p["tokens_without_reads"] == 2
    assert p["io_mib_per_token"] == 1.0  # 4 MiB over 4 decoded tokens
    assert sum(row["mib_per_token"] for row in p["demand_vs_spec"]) == pytest.approx(1.0)
    assert sum(row["mib_per_token"] for row in p["by_lane"]) == pytest.approx(1.0)
    # 32 ms of reads on 2 lanes over 4 tokens; each reading token's 16 ms capped by its 10 ms
    # decode; per reading token its busiest lane, 8 ms
    assert p["io_wall_ms_per_token"] == pytest.approx({"min": 4.0, "max": 5.0, "estimate": 4.0})
    assert p["adjacency"]["reads_per_token"] == 1.0
    assert r["io"]["mib_per_token"] == 2.0  # the io report keeps its own: per read-token
    text = " ".join(run("report", *half_read).out.split())
    assert "MiB/tok is per decoded token" in text and "per read-token" not in text


def test_speculative_decoding_is_also_given_per_generated_position(write):
    """Decodes at steps 10, 13 and 14 verify 3, 1 and 1 positions: 5 generated positions for
    3 decodes of 6 ms, each reading 1 MiB in 1 ms. Per position: decode 18/5 ms = compute
    3.00 + flash I/O 0.60, 0.60 MiB (the engine counts per generated token)."""
    ct = ct_text([f"0,1,{step},{seq},0,{op},{name},{ms * 1000000},0" for step in (10, 13, 14)
                  for seq, (op, name, ms) in enumerate([("GET_ROWS", "ffn_moe_weights-0", 2),
                                                        ("MUL_MAT_ID", "ffn_moe_up-0", 4)])])
    io = io_text([f"0,1,{step},0,1,0,0,0,0,1048576,1048576,1000000" for step in (10, 13, 14)])
    paths = write(ct, "ct.csv"), write(io, "io.csv")
    position = report("report", *paths)["pair"]["per_position"]
    assert position == pytest.approx({"positions": 5, "decode_ms": 3.6, "compute_ms": 3.0,
                                      "io_ms": 0.6, "mib": 0.6})
    text = " ".join(run("report", *paths).out.split())
    assert ("speculative decoding: 3 decodes generated 5 positions; per generated position, "
            "decode 3.60 ms = compute 3.00 + flash I/O 0.60 ms, 0.60 MiB read") in text
    markdown = run("report", *paths, "--format", "markdown").out
    assert "per generated position, decode 3.60 ms" in markdown


def test_plain_decoding_has_no_per_position_figures(pair):
    assert report("report", *pair)["pair"]["per_position"] is None


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_a_pair_whose_io_has_no_decode_row_charges_decode_nothing(tmp_path, jobs):
    """A cache that held every expert after prefill: the io trace has prefill rows only. The
    io side fell back to all rows and charged prefill's reads to decode ("reads 4.1, 0.27
    MiB" beside "19 of them read nothing", coalescing WORTHWHILE, "the traces share no token").
    The pair's phase applies to both files, on every --jobs and on one process as on two."""
    sweep = ROOT / "tests" / "data" / "sweep"
    ct, io = (sweep / f"qwen3moe-l4-greedy-cache4mb-{part}.csv" for part in ("ct", "io"))
    lines = io.read_text().splitlines(keepends=True)
    prefill = [line for line in lines if line.startswith("#") or line.startswith("turn")
               or line.split(",")[1] == "0"]
    assert len(prefill) < len(lines)
    io_only = tmp_path / "run-io.csv"
    io_only.write_text("".join(prefill))
    r = report_with_warnings("report", ct, io_only, "--no-engine-log", "--jobs", jobs)
    pair = r["pair"]
    assert r["io"]["phase"] == "decode" and r["io"]["tokens"] == 0
    assert pair["tokens_without_reads"] == pair["tokens"] == 128
    assert pair["io_reads_per_token"] == pair["io_mib_per_token"] == 0
    assert pair["io_wall_ms_per_token"]["estimate"] == 0
    assert pair["compute_ms_per_token"] == pytest.approx(r["compute"]["ms_per_token"])
    assert not r["warnings"] and not r["io"]["verdicts"]
    assert not [v for v in pair["verdicts"] if v["flagged"]]
    text = run("report", ct, io_only, "--no-engine-log").out
    assert "the io trace holds no read of phase decode" in text and "WORTHWHILE" not in text
    # the io trace alone still reads its prefill, as ever
    assert report("io", io_only, "--no-engine-log")["phase"] == "all"


def test_reads_that_outlast_a_serial_decode_split_nothing(write):
    """A serial pair whose reads take longer than its decode printed "decode 2.65 = compute
    -214.77 + flash I/O 217.42", bounds "within 184.71 and 2.65", and a saving 80x the
    decode. Now: a warning, no compute, bounds in order, I/O share undetermined, no saving
    past the decode."""
    ct = ct_text([f"0,1,{step},0,0,MUL_MAT_ID,ffn_moe_up-0,2650000,0" for step in range(1, 6)])
    io = io_text([f"0,1,{step},0,{expert},0,{expert % 2},0,{expert << 20},1048576,1048576,"
                  f"100000000" for step in range(1, 6) for expert in range(4)])
    r = report_with_warnings("report", write(ct, "ct.csv"), write(io, "io.csv"))
    pair = r["pair"]
    wall = pair["io_wall_ms_per_token"]
    assert wall["estimate"] == pytest.approx(200.0) and pair["decode_ms_per_token"] == 2.65
    assert pair["compute_ms_per_token"] is None
    assert wall["min"] <= wall["estimate"] <= wall["max"]
    assert [w for w in r["warnings"] if "outlast its 2.65 ms decode" in w]
    found = {v["id"]: v for v in pair["verdicts"]}
    assert found["io_bound"]["flagged"] is None
    assert "could save at most 2.65 ms of the 2.65 ms decode" in found["coalescing"]["text"]
    for setting in r["what_if"]["settings"]:
        saved = setting["ms_per_token_saved"]["max"]
        assert saved is None or saved <= 2.65 + 1e-9, setting
    text = run("report", write(ct, "ct.csv"), write(io, "io.csv")).out
    assert "no split: the reads' 200.00 ms estimated outlast it" in " ".join(text.split())
    assert "compute -" not in text
