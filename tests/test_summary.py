"""summary: one row per run, each row the run's own report's figures; runs paired by name or
by CT+IO; the keys that tell runs apart; sorting; memory that does not grow with the runs."""
import json
import re

import pytest

import decode_analyze
from helpers import (REAL_TRACES, ROOT, TOOL, another_run, report, report_with_warnings, run,
                     run_measured, scaled_trace)

SESSION = (ROOT / "examples" / "session-ct.csv", ROOT / "examples" / "session-io.csv")
QWEN = {name: REAL_TRACES[f"qwen3moe-l4-{name}.csv"]
        for name in ("ct-node", "ct-layers", "io-serial", "io-overlap")}


def rows_of(*argv):
    return report("summary", *argv)["runs"]


def test_each_row_is_the_runs_own_report():
    rows = rows_of(QWEN["ct-node"], QWEN["io-serial"], f"{SESSION[0]}+{SESSION[1]}")
    # an io trace is read as `io --what-if` reads it (adjacency and the cache too)
    compute, io = report("compute", QWEN["ct-node"]), report("io", QWEN["io-serial"], "--what-if")
    pair = report("report", *SESSION)
    by_name = {row["run"]: row for row in rows}
    assert set(by_name) == {"qwen3moe-l4-ct-node.csv", "qwen3moe-l4-io-serial.csv",
                            "session-ct.csv"}
    node = by_name["qwen3moe-l4-ct-node.csv"]
    assert (node["kind"], node["tokens"], node["decode_ms_per_token"], node["decode_ms_p50"],
            node["decode_ms_p99"], node["majflt_per_token"], node["io_ms_per_token"]) == (
        "compute", 128, compute["ms_per_token"], compute["token_ms"]["p50"],
        compute["token_ms"]["p99"], compute["majflt_per_token"], None)
    reads = by_name["qwen3moe-l4-io-serial.csv"]
    assert (reads["kind"], reads["io_ms_per_token"], reads["mib_per_token"]) == (
        "io", io["io_wall_ms_per_token"]["estimate"], io["mib_per_token"])
    assert reads["flagged"] == [v["id"] for v in io["verdicts"] if v["flagged"]]
    both = by_name["session-ct.csv"]
    assert (both["kind"], both["tokens"], both["decode_ms_per_token"], both["io_ms_per_token"],
            both["mib_per_token"], both["compute_ms_per_token"]) == (
        "report", pair["pair"]["tokens"], pair["pair"]["decode_ms_per_token"],
        pair["pair"]["io_wall_ms_per_token"]["estimate"], pair["pair"]["io_mib_per_token"],
        None)  # overlap=1: no split


def test_the_two_traces_of_a_run_pair_by_name(tmp_path):
    # ct -> io in the name (examples/), and -io before the ending (the shared session pair)
    appended = (tmp_path / "run-ct-node.csv", tmp_path / "run-ct-node-io.csv")
    for source, target in zip(SESSION, appended):
        another_run(source, target)
    rows = rows_of(*SESSION, *appended, "--no-group")
    assert [(row["run"], row["kind"], len(row["paths"])) for row in rows] == [
        ("session-ct.csv", "report", 2), ("run-ct-node.csv", "report", 2)]
    # grouped (the default): two copies of one run are repeats of one configuration
    (both,) = rows_of(*SESSION, *appended)
    assert (both["run"], both["n"], len(both["paths"])) == ("session-ct.csv, run-ct-node.csv",
                                                            2, 4)
    assert both["spread"]["decode_ms_per_token"] < 1e-6  # 1 ns apart
    # two compute traces and one io trace whose name pairs with neither: three runs
    assert len(rows_of(QWEN["ct-node"], QWEN["ct-layers"], QWEN["io-serial"])) == 3


def test_the_keys_that_differ_and_those_shared():
    r = report("summary", QWEN["io-serial"], QWEN["io-overlap"])
    assert r["keys"] == ["overlap"]
    assert r["common"]["io_threads"] == "4" and "overlap" not in r["common"]
    assert [row["settings"] for row in r["runs"]] == [{"overlap": "0"}, {"overlap": "1"}]
    out = run("summary", QWEN["io-serial"], QWEN["io-overlap"]).out
    # the keys that tell the runs apart first: a cut took them, so only --wide told them
    assert "  #1 overlap=0  qwen3moe-l4-io-serial.csv  FLAGGED: cache" in out
    assert "  #2 overlap=1  qwen3moe-l4-io-overlap.csv  FLAGGED: cache" in out
    assert "…" not in out


def test_names_are_the_shortest_ending_that_tells_them_apart(tmp_path):
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        another_run(QWEN["ct-layers"], tmp_path / folder / "ct.csv", nudge=ord(folder))
    rows = rows_of(tmp_path / "a" / "ct.csv", tmp_path / "b" / "ct.csv", QWEN["ct-node"],
                   "--no-group")
    assert [row["run"] for row in rows] == ["a/ct.csv", "b/ct.csv", "qwen3moe-l4-ct-node.csv"]


def test_sorting_by_a_column_and_by_a_preamble_key(capsys):
    runs = [QWEN["io-overlap"], QWEN["io-serial"], QWEN["ct-node"]]
    rows = rows_of(*runs, "--sort", "io_ms_per_token")
    assert [row["run"] for row in rows] == ["qwen3moe-l4-io-serial.csv",
                                            "qwen3moe-l4-io-overlap.csv",
                                            "qwen3moe-l4-ct-node.csv"]  # no I/O figure: last
    for head in ("I/O est", "i/o EST"):  # the head the table shows, as typed
        assert rows_of(*runs, "--sort", head) == rows
    rows = rows_of(*runs, "--sort", "overlap")
    assert [row["settings"]["overlap"] for row in rows] == ["0", "0", "1"]
    result = run("summary", *runs, "--sort", "nope")
    assert result.code == 2 and "--sort 'nope': not a column; one of run, n, tokens" in result.err
    assert run("summary", *runs, "--sort", "a;b").code == 2
    assert "expected a column or a preamble key" in capsys.readouterr().err


def test_a_saved_report_is_a_run(tmp_path):
    saved = tmp_path / "monday.json"
    saved.write_text(json.dumps(report("report", *SESSION)))
    (row,) = rows_of(saved)
    assert row["kind"] == "report" and row["paths"] == [str(saved)]
    assert row["decode_ms_per_token"] == report("report", *SESSION)["pair"]["decode_ms_per_token"]


def test_every_format_has_every_run():
    runs = [QWEN["io-serial"], QWEN["ct-node"], *SESSION]
    text = run("summary", *runs).out
    markdown = run("summary", *runs, "--format", "markdown").out
    rows = rows_of(*runs)
    flat = " ".join(text.split())
    for i, row in enumerate(rows, start=1):
        keys = "".join(f" {key}={'-' if value is None else value}"
                       for key, value in row["settings"].items())
        assert f"#{i}{keys}  {row['run']}" in text or f"#{i}{keys} {row['run']}" in flat
        assert f"\\#{i}" in markdown and row["run"].replace("_", "\\_") in markdown
    assert all(len(line) <= 100 for line in text.splitlines())
    assert markdown.count("\n| ") == len(rows) + 1  # the header, then a row per run


def test_a_hundred_runs_stay_small(tmp_path):
    """Rows stream: each run's report is let go once its row is made (peak RSS < 64 MiB)."""
    cts, ios = [], []
    alone = []
    for i in range(50):
        folder = tmp_path / f"run{i:02d}"
        folder.mkdir()
        for source, name, into in ((QWEN["ct-layers"], "ct.csv", cts),
                                   (QWEN["io-serial"], "io.csv", ios),
                                   (QWEN["ct-layers"], "alone.csv", alone)):
            into.append(another_run(source, folder / name, nudge=i + 1))
    status, out, err, peak_mib = run_measured(
        [*TOOL, "summary", *cts, *ios,
         *alone, "--format", "json", "--jobs", "1", "--no-group"],
        timeout=240)
    assert status == 0, err
    assert len(json.loads(out)["runs"]) == 100  # 50 pairs and 50 compute runs alone
    assert peak_mib < 64, peak_mib


def test_summary_of_many_real_runs_fits_and_says_what_wide_adds():
    """Ten and more real runs were 143 lines and 190 columns: a legend of a line a run, a table
    within the text width, and --wide for the rest (Markdown keeps every column)."""
    runs = sorted((ROOT / "tests" / "data" / "sweep").glob("*.csv")) + \
        sorted((ROOT / "tests" / "data").glob("*.csv"))
    result = run("summary", *runs)
    lines = result.out.splitlines()
    rows = report_with_warnings("summary", *runs)["runs"]
    assert len(rows) >= 10
    assert all(len(line) <= 100 for line in lines)
    legend = [line for line in lines if line.startswith("  #") and not line.startswith("  # ")]
    assert len(legend) == len(rows)  # a line a run
    assert "--wide adds: " in result.out and "p50" in result.out.split("--wide adds: ")[1]
    wide = run("summary", *runs, "--wide").out
    assert " p50 " in wide and "--wide adds" not in wide
    assert " p50 " in run("summary", *runs, "--format", "markdown").out.replace("|", " ")


def test_a_run_whose_compute_a_load_inflated_is_flagged_loaded(tmp_path):
    """Bug: summary showed a loaded run (compute 8-11 ms quiet, 85-185 loaded) with nothing
    said. Two runs of one configuration, one with every node 3x slower (its reads the same):
    listed apart, the slow one flagged `loaded` first, in the default text too."""
    ct, io = REAL_TRACES["qwen3moe-l4-ct-layers.csv"], REAL_TRACES["qwen3moe-l4-io-serial.csv"]
    quiet, busy = tmp_path / "quiet", tmp_path / "busy"
    for folder in (quiet, busy):
        folder.mkdir()
        another_run(io, folder / "io.csv", nudge=1 if folder is quiet else 2)
    (quiet / "ct.csv").write_bytes(ct.read_bytes())
    scaled_trace(ct, busy / "ct.csv", 3)
    runs = [f"{folder}/ct.csv+{folder}/io.csv" for folder in (quiet, busy)]
    result = run("summary", *runs, "--no-engine-log", "--format", "json")
    rows = {row["run"]: row for row in result.json["runs"]}
    loaded = [name for name, row in rows.items() if "loaded" in row["flagged"]]
    assert len(rows) == 2 and len(loaded) == 1 and "busy" in loaded[0]
    assert rows[loaded[0]]["flagged"][0] == "loaded"
    assert "FLAGGED: loaded" in run("summary", *runs, "--no-engine-log").out


@pytest.mark.parametrize("node_ms,layer_ms,loaded", [
    (17.0, 10.7, []),  # the 48-layer sweep's node run beside its layer repeats: its barriers
    (10.0, 16.0, ["layer"]),  # a layer run above a node run's compute is slower than the run
    (10.0, 20.0, ["layer"]),
])
def test_a_node_trace_is_weighed_for_load_against_node_traces_alone(node_ms, layer_ms, loaded):
    """Bug: the 48-layer sweep's node-granularity serial run was flagged `loaded` beside the
    layer repeats of its configuration: its compute 17 ms against their 10.7, which a barrier
    a node inflates on a quiet machine."""
    rows = [{"kind": "report", "granularity": granularity, "meta": {"io_threads": "4"},
             "compute_ms_per_token": ms, "flagged": []}
            for granularity, ms in (("node", node_ms), ("layer", layer_ms))]
    flagged = decode_analyze.flagged_loaded(rows)
    assert [row["granularity"] for row in flagged if "loaded" in row["flagged"]] == loaded


def test_a_cached_runs_compute_and_management_are_its_logs():
    """The engine's split in summary: compute and cache management apart, each within 10% or
    the log's rounding of the log's, on the real cached runs: the 4-layer sweep's caches and a
    48-layer run with 256 MiB. The log prints s/token to 3 decimals (+-0.5 ms a figure); its
    compute is the remainder of three printed figures (decode less management and flash I/O),
    so its rounding is theirs together, 1.5 ms."""
    sweep = ROOT / "tests" / "data" / "sweep"
    l48 = ROOT / "tests" / "data" / "l48-sweep" / "qwen3moe-l48-e128-cache256-rep1"
    bases = [sweep / f"qwen3moe-l4-greedy-cache{mb}mb" for mb in (1, 2, 4)] + [l48]
    rows = rows_of("--no-group", *(f"{base}-ct.csv+{base}-io.csv" + ("" if base.parent == sweep
                                                                      else ".gz")
                                   for base in bases))  # as given
    assert len(rows) == len(bases)
    for base, row in zip(bases, rows):
        assert row["paths"][0].endswith(f"{base.name}-ct.csv")
        line = next(line for line in base.with_suffix(".log").read_text().splitlines()
                    if "moe-stream:" in line)
        compute, managed = (float(re.search(rf"{name} ([0-9.]+)", line).group(1)) * 1000
                            for name in (r"\(compute", "cache mgmt"))
        for tool, engine, rounding in ((row["compute_ms_per_token"], compute, 1.5),
                                       (row["cache_mgmt_ms_per_token"], managed, 0.5)):
            assert abs(tool - engine) <= max(0.10 * engine, rounding), (base.name, tool, engine)


def test_a_speculative_runs_row_is_the_same_from_its_traces_and_its_saved_report(tmp_path):
    """A speculative run's row is per generated position, 13 of 7 decodes here: made from its
    traces and from its saved report, every figure the same to the last digit (a fresh run's
    totals divided again and a saved one's figures multiplied differed in 293 of 1,000)."""
    paths = []
    for part in ("ct", "io"):
        source = ROOT / "tests" / "data" / "synthetic" / f"speculative-{part}.csv"
        path = tmp_path / f"run-{part}.csv"
        path.write_text(source.read_text().replace("0,1,23,", "0,1,22,"))
        paths.append(path)
    saved = tmp_path / "saved.json"
    assert run("report", *paths, "--format", "json", "-o", saved).code == 0
    fresh, = report("summary", f"{paths[0]}+{paths[1]}")["runs"]
    again, = report("summary", saved)["runs"]
    assert fresh["positions_per_decode"] == 13 / 7
    for name, value in fresh.items():
        if name not in ("run", "paths"):
            assert again[name] == value, name
