"""diff BASE NEW... (issue 10, part 2): the Mann-Whitney p-values against independent values,
every figure against the reports it compares, and the issue's done-when cases on real traces."""
import gzip
import json
import random
import re
import statistics
from itertools import combinations

import pytest

from helpers import (REAL_TRACES, ROOT, TRACES, another_run, ct_text, error_of, io_text, report,
                     report_with_warnings, run, scaled_trace)
import decode_analyze
from decode_analyze import mann_whitney_p, pair_name

CT_NODE = REAL_TRACES["qwen3moe-l4-ct-node.csv"]
IO_SERIAL = REAL_TRACES["qwen3moe-l4-io-serial.csv"]
IO_OVERLAP = REAL_TRACES["qwen3moe-l4-io-overlap.csv"]


# ── the test itself ──────────────────────────────────────────────────────────────────────────
def brute_force_p(base, new):
    """Two-sided exact p by enumerating every split of the pooled values into two groups of
    the samples' sizes: P(|U - mean| >= |u - mean|), counted, no formula."""
    pooled = base + new

    def u_of(chosen):  # pairs (one chosen, one not) where the chosen value is larger
        return sum((pooled[i] > pooled[j]) + 0.5 * (pooled[i] == pooled[j])
                   for i in chosen for j in range(len(pooled)) if j not in chosen)
    u = u_of(set(range(len(base))))
    centre = len(base) * len(new) / 2
    splits = [u_of(set(chosen)) for chosen in combinations(range(len(pooled)), len(base))]
    return sum(abs(s - centre) >= abs(u - centre) - 1e-9 for s in splits) / len(splits)


@pytest.mark.parametrize("seed", range(8))
def test_exact_p_matches_enumeration(seed):
    rng = random.Random(seed)
    n1, n2 = rng.randint(1, 7), rng.randint(1, 7)
    values = rng.sample(range(1000), n1 + n2)  # distinct: the exact test applies
    base, new = values[:n1], [v + rng.choice((0, 150)) for v in values[n1:]]
    if len(set(base + new)) < n1 + n2:
        new = values[n1:]
    assert mann_whitney_p(base, new) == pytest.approx(brute_force_p(base, new), abs=1e-12)


def test_known_p_values():
    # Values from scipy.stats.mannwhitneyu 1.17.1 (exact, and asymptotic with ties).
    assert mann_whitney_p([19, 22, 16, 29, 24], [20, 11, 17, 12]) == \
        pytest.approx(0.1111111111111111, rel=1e-12)
    x = [1.83, 0.50, 1.62, 2.48, 1.68, 1.88, 1.55, 3.06, 1.30]
    y = [0.878, 0.647, 0.598, 2.05, 1.06, 1.29, 1.06, 3.14, 1.29]
    # with ties (1.29, 1.06 twice) 9+9 runs are counted exactly: every one of the C(18, 9)
    # splits, as brute_force_p does (scipy's asymptotic answer was 0.1329)
    from test_statistics import brute_force_p
    assert mann_whitney_p(x, y) == pytest.approx(brute_force_p(x, y), rel=1e-12)
    rng = random.Random(7)
    big_x = [rng.randint(0, 40) for _ in range(150)]
    big_y = [rng.randint(3, 45) for _ in range(170)]
    assert big_x[:5] == [20, 9, 25, 3, 4]  # the same sample scipy was given
    assert mann_whitney_p(big_x, big_y) == pytest.approx(0.009984192724207041, rel=1e-9)
    # Fully separated small samples: U = 0, p = 2 / C(6, 3).
    assert mann_whitney_p([1, 2, 3], [4, 5, 6]) == pytest.approx(0.1)


def test_degenerate_samples():
    assert mann_whitney_p([], [1, 2]) is None
    assert mann_whitney_p([5] * 40, [5] * 60) == 1.0  # all tied: no evidence of a change
    same = [random.Random(1).random() for _ in range(300)]
    assert mann_whitney_p(same, list(same)) == 1.0


# ── helpers ──────────────────────────────────────────────────────────────────────────────────
def section(diff, title):
    return next(s for s in diff["sections"] if s["title"] == title)


def rows_by_name(section_):
    return {row["name"]: row for row in section_["rows"]}


# ── the done-when cases ──────────────────────────────────────────────────────────────────────
@pytest.mark.parametrize("test, least", [("runs", 0), ("tokens", 19)])
def test_a_trace_against_itself_changes_nothing(test, least):
    # over runs, one a side: nothing tested; over its tokens: ms and faults per token, and
    # each of the 18 ops, none significant
    diff = report("diff", CT_NODE, CT_NODE, "--test", test)
    assert diff["kind"] == "diff" and diff["compares"] == "compute"
    assert diff["preamble_changes"] == [[]]
    tested = 0
    for section_ in diff["sections"]:
        for row in section_["rows"]:
            (change,) = row["changes"]
            assert change["delta"] == 0 and change["status"] == "both"
            assert change["ratio"] in (1.0, None)  # None: base 0
            assert change["significant"] in (False, None)
            tested += change["p"] is not None
    assert tested >= least and (tested == 0) == (test == "runs")


def test_one_op_scaled_by_one_and_a_half_comes_first_and_significant(tmp_path):
    scaled = scaled_trace(CT_NODE, tmp_path / "scaled.csv", 1.5, op="MUL_MAT_ID")
    diff = report("diff", CT_NODE, scaled, "--test", "tokens")
    first = section(diff, "ms per token by op")["rows"][0]
    change = first["changes"][0]
    assert first["name"] == "MUL_MAT_ID"
    assert change["ratio"] == pytest.approx(1.5, abs=1e-4)
    assert change["significant"] is True and change["p"] < 1e-6
    others = section(diff, "ms per token by op")["rows"][1:]
    assert all(row["changes"][0]["delta"] == 0 and not row["changes"][0]["significant"]
               for row in others)
    text = run("diff", CT_NODE, scaled, "--test", "tokens").out
    by_op = text.split("\nms per token by op\n")[1]
    assert re.match(r"  op +base +± +scaled\.csv +± +delta +ratio +p\n  MUL_MAT_ID +1\.973 +"
                    r"\(±\d+%\) +2\.960 +\(±\d+%\) +\+0\.98\d+ +1\.50x +<0\.001\n", by_op), \
        by_op[:300]


def test_every_op_one_percent_slower_on_a_noisy_trace_is_not_significant(tmp_path):
    scaled = scaled_trace(CT_NODE, tmp_path / "slower.csv", 1.01)
    diff = report("diff", CT_NODE, scaled, "--test", "tokens")
    ms = rows_by_name(section(diff, "compute headline"))["ms per token"]["changes"][0]
    assert ms["ratio"] == pytest.approx(1.01, abs=1e-3)
    assert ms["significant"] is False and ms["p"] > 0.5
    assert not any(row["changes"][0]["significant"]
                   for row in section(diff, "ms per token by op")["rows"])
    out = run("diff", CT_NODE, scaled, "--test", "tokens").out.splitlines()
    assert "  ms per token: base 20.25 -> new 20.45 (1.01x, p=0.785 ~)" in out
    assert any(line.startswith("  changed significantly: none of ") for line in out)
    line = next(l for l in run("diff", CT_NODE, scaled, "--test", "tokens", "--full").out
                .splitlines() if l.startswith("  ms per token "))
    assert line.endswith(" ~")


def test_serial_against_overlap_names_the_preamble_key():
    diff = report_with_warnings("diff", IO_SERIAL, IO_OVERLAP)
    assert diff["compares"] == "io"
    assert diff["preamble_changes"] == [[{"key": "overlap", "base": "0", "new": "1"}]]
    text = run("diff", IO_SERIAL, IO_OVERLAP).out
    assert "\n  settings that differ: overlap 0 -> 1\n" in text
    base, new = report("io", IO_SERIAL, "--adjacent"), report("io", IO_OVERLAP, "--adjacent")
    headline = rows_by_name(section(diff, "io headline"))
    for label, key in (("MiB per token", "mib_per_token"),
                       ("reads per token", "reads_per_token"),
                       ("lane-busy MiB/s", "busy_mib_per_s")):
        row = headline[label]
        assert row["base"] == base[key] and row["changes"][0]["new"] == new[key]
        assert row["changes"][0]["delta"] == new[key] - base[key]
    p50 = headline["read latency us, p50"]
    assert (p50["base"], p50["changes"][0]["new"]) == (base["latency_us"]["p50"],
                                                       new["latency_us"]["p50"])
    lanes = rows_by_name(section(diff, "lane-busy ms per token by lane"))
    for lane in base["by_lane"]:
        assert lanes[lane["lane"]]["base"] == lane["busy_ms_per_token"]


# ── the figures, against the reports compared ────────────────────────────────────────────────
def test_every_table_row_is_the_reports_figure(tmp_path):
    scaled = scaled_trace(CT_NODE, tmp_path / "scaled.csv", 1.2, op="ADD")
    diff = report("diff", CT_NODE, scaled)
    base, new = report("compute", CT_NODE), report("compute", scaled)
    for title, table, key in (("ms per token by op", "by_op", "op"),
                              ("ms per token by node category", "by_category", "category"),
                              ("ms per token by layer", "by_layer", "layer")):
        rows = rows_by_name(section(diff, title))
        assert len(rows) == len(base[table])
        new_rows = {r[key]: r for r in new[table]}
        for b in base[table]:
            row = rows[b[key]]
            expected = new_rows[b[key]]["ms_per_token"]
            assert row["base"] == b["ms_per_token"] and row["changes"][0]["new"] == expected
            assert row["changes"][0]["ratio"] == pytest.approx(expected / b["ms_per_token"])
        changes = [abs(row["changes"][0]["delta"]) for row in section(diff, title)["rows"]]
        assert changes == sorted(changes, reverse=True)


def test_op_samples_add_up_to_the_by_op_figures():
    r = report("compute", CT_NODE)
    samples = r["op_us_by_token"]
    assert set(samples) == {row["op"] for row in r["by_op"]}
    for row in r["by_op"]:
        assert len(samples[row["op"]]) == r["tokens"]
        # whole microseconds: each token's value is off by at most 0.5 us
        assert sum(samples[row["op"]]) / 1e3 / r["tokens"] == pytest.approx(
            row["ms_per_token"], abs=0.5e-3)
    for i, token in enumerate(r["per_token"]):
        total_us = sum(values[i] for values in samples.values())
        assert abs(total_us - token["ms"] * 1e3) <= 0.5 * len(samples)


def test_per_token_normalisation_compares_runs_of_different_lengths(tmp_path):
    lines = CT_NODE.read_text().splitlines(keepends=True)
    steps = sorted({int(l.split(",")[2]) for l in lines[3:]})
    half = tmp_path / "half.csv"
    keep = set(steps[: len(steps) // 2])
    half.write_text("".join(lines[:3] + [l for l in lines[3:] if int(l.split(",")[2]) in keep]))
    diff = report("diff", half, CT_NODE)
    short, full = report("compute", half), report("compute", CT_NODE)
    row = rows_by_name(section(diff, "compute headline"))["ms per token"]
    assert diff["inputs"][0]["tokens"] == {"compute": short["tokens"]}
    assert row["base"] == short["ms_per_token"] and row["changes"][0]["new"] == \
        full["ms_per_token"]
    assert short["tokens"] < full["tokens"]


def test_rows_on_one_side_only_are_added_or_removed(write):
    rows = ["0,1,{s},0,0,{op},n-0,{w},0".format(s=s, op=op, w=w)
            for s in range(4) for op, w in (("MUL_MAT", 1000 + s), ("ADD", 500))]
    base = write(ct_text(rows), "base.csv")
    new = write(ct_text([r.replace("ADD", "SCALE") for r in rows]), "new.csv")
    rows_ = rows_by_name(section(report("diff", base, new), "ms per token by op"))
    assert rows_["ADD"]["changes"][0]["status"] == "removed"
    assert rows_["ADD"]["changes"][0]["new"] is None and rows_["ADD"]["base"] == 0.0005
    assert rows_["SCALE"]["changes"][0]["status"] == "added"
    assert rows_["SCALE"]["base"] is None
    assert rows_["MUL_MAT"]["changes"][0]["delta"] == 0
    text = run("diff", base, new).out
    assert re.search(r"\n  ADD +0\.0005 +- +removed", text)
    assert re.search(r"\n  SCALE +- +0\.0005 +added", text)


def test_several_new_runs_one_column_group_each(tmp_path):
    slower = scaled_trace(CT_NODE, tmp_path / "slower.csv", 1.5, op="MUL_MAT_ID")
    faster = scaled_trace(CT_NODE, tmp_path / "faster.csv", 0.5, op="GET_ROWS")
    diff = report("diff", CT_NODE, slower, faster)
    by_op = rows_by_name(section(diff, "ms per token by op"))
    assert len(by_op["MUL_MAT_ID"]["changes"]) == 2
    assert by_op["MUL_MAT_ID"]["changes"][0]["ratio"] == pytest.approx(1.5, abs=1e-4)
    assert by_op["GET_ROWS"]["changes"][1]["ratio"] == pytest.approx(0.5, abs=1e-4)
    assert section(diff, "ms per token by op")["rows"][0]["name"] == "GET_ROWS"  # -2.25 ms
    header = run("diff", CT_NODE, slower, faster, "--full").out.split(
        "\nms per token by op\n")[1]
    # the columns are headed by each input's name; the base's (23 characters) by "base"; each
    # with its tokens' spread, one run a side: no p
    assert re.match(r"  op +base +± +slower\.csv +± +delta +ratio\n", header)
    assert re.search(r"^  op +base +± +faster\.csv +± +delta +ratio\n", header, re.M)


# ── saved reports ────────────────────────────────────────────────────────────────────────────
def test_saved_reports_compare_as_their_traces(tmp_path):
    scaled = scaled_trace(CT_NODE, tmp_path / "scaled.csv", 1.5, op="MUL_MAT_ID")
    saved = tmp_path / "base.json"
    assert run("compute", CT_NODE, "--format", "json", "-o", saved).code == 0
    pair = tmp_path / "pair.json.gz"
    with gzip.open(pair, "wt") as f:
        f.write(run("report", CT_NODE, IO_SERIAL, "--format", "json").out)
    from_traces = report("diff", CT_NODE, scaled)
    for base in (saved, pair):
        from_saved = report("diff", base, scaled)
        assert from_saved["sections"] == from_traces["sections"]
        assert from_saved["inputs"][0]["source"] == "saved report"


def test_two_saved_pair_reports_compare_both_halves(tmp_path):
    paths = []
    for name, io in (("serial", IO_SERIAL), ("overlap", IO_OVERLAP)):
        paths.append(tmp_path / f"{name}.json")
        assert run("report", CT_NODE, io, "--format", "json", "-o", paths[-1]).code == 0
    diff = report_with_warnings("diff", *paths)
    assert diff["compares"] == "report"
    assert {s["part"] for s in diff["sections"]} == {"compute", "io", "pair"}
    assert diff["preamble_changes"] == [[{"key": "overlap", "base": "0", "new": "1"}]]
    assert [len(hist) > 0 for hist in diff["latency_hist"]] == [True, True]


def test_the_engines_split_is_compared_between_pair_reports(tmp_path):
    """The pair headline: each report's own decode, compute (decode - I/O estimate - cache
    mgmt), I/O estimate and MiB per decoded token; per generated position on
    the speculative side only."""
    synthetic = ROOT / "tests" / "data" / "synthetic"
    runs = [(CT_NODE, IO_SERIAL),
            (synthetic / "speculative-ct.csv", synthetic / "speculative-io.csv")]
    pairs = [report("report", *paths) for paths in runs]
    saved = []
    for i, pair in enumerate(pairs):
        saved.append(tmp_path / f"{i}.json")
        saved[-1].write_text(json.dumps(pair))
    result = run("diff", *saved, "--format", "json", "--test", "tokens")
    assert result.code == 0
    rows = rows_by_name(section(result.json, "pair headline"))
    for label, path in (("decode ms per decoded token", ("decode_ms_per_token",)),
                        ("compute ms (decode - flash I/O - cache mgmt)",
                         ("compute_ms_per_token",)),
                        ("I/O estimate ms per decoded token",
                         ("io_wall_ms_per_token", "estimate")),
                        ("MiB per decoded token", ("io_mib_per_token",))):
        base, new = (pair["pair"][path[0]] if len(path) == 1 else pair["pair"][path[0]][path[1]]
                     for pair in pairs)
        assert rows[label]["base"] == base and rows[label]["changes"][0]["new"] == new, label
    positions = rows["decode ms per generated position"]
    assert positions["base"] is None
    assert positions["changes"][0]["new"] == pairs[1]["pair"]["per_position"]["decode_ms"]
    assert rows["decode ms per decoded token"]["changes"][0]["p"] is not None  # sampled


def test_a_saved_report_of_the_last_schema_is_read_and_an_older_one_refused(tmp_path):
    """Saved reports of this schema and the one before it compare; older ones (a tool whose
    whole history is days) are refused with what to do, not half read."""
    saved = json.loads(run("compute", CT_NODE, "--format", "json").out)
    for schema, readable in ((decode_analyze.SCHEMA - 1, True), (decode_analyze.SCHEMA - 2, False)):
        old = tmp_path / f"schema{schema}.json"
        old.write_text(json.dumps({**saved, "schema": schema}))
        if readable:
            diff = report("diff", old, CT_NODE)
            ms = rows_by_name(section(diff, "compute headline"))["ms per token"]
            assert ms["base"] == ms["changes"][0]["new"] == saved["ms_per_token"]
        else:
            assert f"a schema {schema} report" in error_of("diff", old, CT_NODE)
            assert "write it again from its traces" in error_of("summary", old)


@pytest.mark.parametrize("content, expected", [
    ('{"schema": 1, "kind": "compute"}', "a schema 1 report (decode-analyze ?); this version "
                                         "reads schemas 6, 7"),
    ('{"schema": 7, "kind": "diff"}', "a diff report cannot be compared again"),
    ('{"schema": 7, "kind": "pie"}', "not a decode-analyze report (kind pie)"),
    ('{"schema": 7, "kind": "compute", "tokens": 5}', "not a report this tool wrote (KeyError: "
                                                      "'per_token')"),
    ('{"schema": 7,\n "kind": NaN}', "NaN is not a number a report holds"),
    ('{"schema": 7,\n "kind": [', ":2: not valid JSON: Expecting value"),
    ('[1, 2]', ":1: not a saved report: the JSON is not an object"),
])
def test_a_bad_saved_report_is_one_line(write, content, expected):
    line = error_of("diff", write(content, "saved.json"), CT_NODE)
    assert expected in line


def test_a_hand_edited_report_with_bad_values_is_one_line(tmp_path):
    saved = json.loads(run("compute", CT_NODE, "--format", "json").out)
    saved["by_op"][0]["ms_per_token"] = "fast"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(saved))
    assert "not a report this tool wrote (ValueError: 'fast' is not a number)" in \
        error_of("diff", bad, CT_NODE)


def test_kinds_that_do_not_compare(write):
    line = error_of("diff", CT_NODE, IO_SERIAL)
    assert f"{CT_NODE} is compute, {IO_SERIAL} is io" in line
    assert "stdin can carry only one" in error_of("diff", "-", "-")


def test_stdin_and_pipes_are_read_once(tmp_path, monkeypatch):
    import io
    import sys
    data = CT_NODE.read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    diff = report("diff", CT_NODE, "-")
    assert diff["inputs"][1]["path"] == "<stdin>"
    assert section(diff, "compute headline")["rows"][0]["changes"][0]["delta"] == 0


def test_a_different_model_is_a_warning(write):
    rows = [f"0,1,{s},0,0,MUL_MAT,n-0,1000,0" for s in range(3)]
    base = write(ct_text(rows), "a.csv")
    other = write(ct_text(rows, preamble="# compute_trace v1\n# model=big.gguf arch=gemma4\n"),
                  "b.csv")
    result = run("diff", base, other)
    assert result.code == 0
    assert f"warning: {other}: model big.gguf is not the base's m.gguf" in result.err
    assert "settings that differ: model m.gguf -> big.gguf, arch qwen3moe -> gemma4\n" in \
        result.out
    # b.csv's preamble does not say its n_threads: unknown there, not a change
    assert "n_threads" not in result.out.split("settings that differ: ")[1].splitlines()[0]


def test_alpha_decides_what_is_significant(tmp_path):
    scaled = scaled_trace(CT_NODE, tmp_path / "slower.csv", 1.01)
    p = rows_by_name(section(report("diff", CT_NODE, scaled, "--test", "tokens"),
                             "compute headline"))["ms per token"]["changes"][0]["p"]
    loose = report("diff", CT_NODE, scaled, "--alpha", str(min(0.999, p + 0.01)), "--test",
                   "tokens")
    assert rows_by_name(section(loose, "compute headline"))["ms per token"]["changes"][0][
        "significant"] is True
    assert run("diff", CT_NODE, CT_NODE, "--alpha", "1.5").code == 2


def test_a_token_count_that_is_not_the_per_token_list_is_refused(tmp_path):
    saved = json.loads(run("compute", CT_NODE, "--format", "json").out)
    saved["tokens"] = 2**70
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(saved))
    assert "tokens is not the number of per_token entries" in error_of("diff", bad, CT_NODE)


def test_stdin_with_no_room_for_its_copy_is_one_line(monkeypatch, tmp_path):
    import io
    import sys
    import errno
    import os
    import tempfile

    def no_room(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(tempfile, "mkstemp", no_room)
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(CT_NODE.read_bytes())))
    line = error_of("diff", CT_NODE, "-")
    assert "<stdin>: cannot copy to a temporary file" in line


def test_a_saved_report_after_much_leading_white_space_is_still_a_report(tmp_path):
    """The sniffer looked at 64 bytes: a report after 100 KB of blank lines was 'not a trace'."""
    trace = REAL_TRACES["qwen3moe-l4-io-serial.csv"]
    saved = tmp_path / "saved.json"
    saved.write_text("\n" * 100_000 + run("io", trace, "--format", "json").out)
    assert run("diff", saved, trace).code == 0
    assert run("diff", saved, trace, "--format", "json").json["inputs"][0]["source"] == \
        "saved report"


def test_traces_with_values_past_1e15_compare(write):
    """Legal values (below 2^64) give figures past the bound that tells an edited saved report:
    a trace is not a saved report ('not a report this tool wrote' was said of it)."""
    huge = str(2 ** 63)
    base = write(ct_text([f"0,1,{s},0,0,MUL_MAT,ffn_up-0,{huge},0" for s in (4, 5)]), "a.csv")
    new = write(ct_text([f"0,1,{s},0,0,MUL_MAT,ffn_up-0,1000,0" for s in (4, 5)]), "b.csv")
    result = run("diff", base, new, "--format", "json")
    assert result.code == 0, result.err
    headline = result.json["sections"][0]["rows"]
    assert next(row for row in headline if row["name"] == "ms per token")["base"] == 2 ** 63 / 1e6


def test_warning_lines_of_a_diff_escape_what_a_trace_holds(write):
    """A model value with ESC, BEL and U+202E reaches diff's warning line: escaped, as every
    other line (it went to the terminal raw)."""
    rows = [f"0,1,{step},0,0,MUL_MAT,ffn_up-0,1000,0" for step in (4, 5)]
    base = write(ct_text(rows, preamble="# compute_trace v1\n# model=a\x1b]0;x\x07\u202e.gguf\n"),
                 "a.csv")
    new = write(ct_text(rows, preamble="# compute_trace v1\n# model=b.gguf\n"), "b.csv")
    result = run("diff", base, new)
    assert result.code == 0
    warning = next(line for line in result.out.splitlines() if "warning:" in line)
    assert "different models" in " ".join(result.out.split())
    for raw in ("\x1b", "\x07", "\u202e"):
        assert raw not in result.out and raw not in result.err
    assert "\\x1b" in warning or "\\x1b" in result.out


def test_many_new_runs_wrap_into_tables_that_fit_100_columns():
    """Three NEWs made 121-column lines, seven 250: the NEW column groups go into tables of as
    many as fit, the name and base columns repeated, every row in each."""
    base = REAL_TRACES["qwen3moe-l4-io-serial.csv"]
    news = [REAL_TRACES["qwen3moe-l4-io-overlap.csv"], REAL_TRACES["qwen3moe-l4-io-prefetch.csv"]]
    news = news * 4  # seven NEWs, and one more
    result = run("diff", base, *news[:7])
    assert result.code == 0 and max(map(len, result.out.splitlines())) <= 100
    report_ = run("diff", base, *news[:7], "--format", "json").json
    headline_rows = len(report_["sections"][0]["rows"])
    text = result.out.split("\nio headline\n", 1)[1].split("\n\n", 1)[0].splitlines()
    for i in range(1, 8):
        assert sum(f"new #{i}" in line for line in text) == 1
    tables = sum(line.startswith("  figure") for line in text)
    assert 2 <= tables <= 7 and len(text) == tables * (headline_rows + 1)  # header + every row


def test_node_against_layer_names_the_last_layers_tail_in_post():
    result = run("diff", CT_NODE, REAL_TRACES["qwen3moe-l4-ct-layers.csv"], "--format", "json")
    assert result.code == 0
    assert any("puts layer 3's MoE tail into post (layer -1): compare layers 3 and -1 together"
               in warning for warning in result.json["warnings"])


def test_a_row_on_one_side_only_has_no_test(write):
    base = write(ct_text([f"0,1,{s},0,0,MUL_MAT,ffn_up-0,{1000000 + s},0" for s in range(8)]),
                 "base.csv")
    new = write(ct_text([f"0,1,{s},{i},0,{op},ffn_up-0,{1000000 + s},0" for s in range(8)
                         for i, op in enumerate(["MUL_MAT", "ADD"])]), "new.csv")
    diff = report("diff", base, new, "--test", "tokens")
    rows = rows_by_name(section(diff, "ms per token by op"))
    (added,) = rows["ADD"]["changes"]
    assert added["status"] == "added" and added["p"] is None and added["significant"] is None
    assert rows["MUL_MAT"]["changes"][0]["p"] is not None


def test_node_against_layer_compares_only_what_both_have_untested():
    diff = report_with_warnings("diff", CT_NODE, REAL_TRACES["qwen3moe-l4-ct-layers.csv"])
    titles = [s["title"] for s in diff["sections"]]
    assert titles == ["compute headline", "ms per token by layer"]
    headline = rows_by_name(section(diff, "compute headline"))
    assert "nodes per token" not in headline
    assert all(change["p"] is None for row in headline.values() for change in row["changes"])
    assert any("only what both have is compared" in w for w in diff["warnings"])


def test_the_latency_change_is_tested_on_each_tokens_mean_and_p99():
    """Serial against overlapped: each read-token's mean and p99 read latency are the samples;
    the I/O estimate and lanes busy sit side by side, and the warning says which one the
    engine reports in each mode."""
    result = run("diff", IO_SERIAL, IO_OVERLAP, "--format", "json", "--test", "tokens")
    diff = result.json
    tokens = [report("io", path)["per_token"] for path in (IO_SERIAL, IO_OVERLAP)]
    rows = rows_by_name(section(diff, "io headline"))
    for label, field in (("read latency us, mean", "latency_mean_us"),
                         ("read latency us, p99", "latency_p99_us"),
                         ("I/O wall ms per token, estimated", "io_ms"),
                         ("lanes busy ms per token (summed over lanes)", "busy_ms")):
        base, new = ([t[field] for t in side] for side in tokens)
        assert rows[label]["changes"][0]["p"] == mann_whitney_p(base, new), label
    names = [row["name"] for row in section(diff, "io headline")["rows"]]
    estimate = names.index("I/O wall ms per token, estimated")
    assert names[estimate + 1] == "lanes busy ms per token (summed over lanes)"
    assert any("the engine's own flash I/O figure is the I/O estimate when serial and lanes busy "
               "when overlapped (4.30 -> 17.01 ms here)" in w for w in diff["warnings"])


def test_each_tokens_latency_figures_are_its_reads(write):
    # one token: latencies 1..100 us (p99 at index 99 of 100: 100 us), mean 50.5 us
    rows = [f"0,1,5,0,{i},0,0,0,{i * 65536},65536,65536,{(i + 1) * 1000}" for i in range(100)]
    (token,) = report("io", write(io_text(rows)))["per_token"]
    assert token["latency_mean_us"] == 50.5 and token["latency_p99_us"] == 100.0


def test_inputs_are_named_by_the_shortest_end_of_their_path_and_shown_whole(tmp_path):
    deep = tmp_path / ("a-rather-long-directory-name-for-a-sweep-of-lanes-" * 2) / "run"
    deep.mkdir(parents=True)
    (deep / "io.csv").write_bytes(IO_SERIAL.read_bytes())
    other = tmp_path / "io8.csv"
    other.write_bytes(IO_SERIAL.read_bytes())
    result = run("diff", deep / "io.csv", other, "--format", "json")
    assert [i["name"] for i in result.json["inputs"]] == ["io.csv", "io8.csv"]
    text = run("diff", deep / "io.csv", other, "--full").out
    lines = text.splitlines()
    assert all(len(line) <= 100 for line in lines)
    head = "".join(line.strip() for line in lines[1:lines.index(
        next(line for line in lines if line.startswith("  new:")))])
    assert str(deep / "io.csv") in head and "…" not in text.split("headline")[0]
    assert re.search(r"^  figure +io\.csv +± +io8\.csv +± +delta", text, re.M)


def test_a_runs_two_traces_are_one_run_on_each_side():
    """diff A-ct.csv A-io.csv vs B-ct.csv B-io.csv was refused ("diff compares compute with
    compute"), though summary pairs them; CT+IO too."""
    sweep = ROOT / "tests" / "data" / "sweep"
    a, b = (sweep / f"qwen3moe-l4-greedy-{name}" for name in ("serial-rep1", "cache2mb"))
    paired = report_with_warnings("diff", f"{a}-ct.csv", f"{a}-io.csv", "vs", f"{b}-ct.csv",
                                  f"{b}-io.csv")
    joined = report_with_warnings("diff", f"{a}-ct.csv+{a}-io.csv", f"{b}-ct.csv+{b}-io.csv")
    for diff in (paired, joined):
        assert [side["runs"] for side in diff["sides"]] == [1, 1]
        assert diff["compares"] == "report" and "pair headline" in [
            s["title"] for s in diff["sections"]]
        assert [source["path"] for source in diff["inputs"]] == [
            f"{a}-{{ct,io}}.csv", f"{b}-{{ct,io}}.csv"]
    assert {(c["key"], c["base"], c["new"]) for found in paired["preamble_changes"]
            for c in found} >= {("cache", "0", "1")}


@pytest.mark.parametrize("compute, io, named", [
    ("x/a-ct.csv", "x/a-io.csv", "x/a-{ct,io}.csv"), ("ct.csv", "io.csv", "{ct,io}.csv"),
    ("x/a.csv", "x/a-io.csv", "x/a.csv+a-io.csv"), ("x/a-ct.csv", "y/a-io.csv",
                                                    "x/a-ct.csv+y/a-io.csv"),
    ("x/ct,1.csv", "x/io,2.csv", "x/ct,1.csv+io,2.csv")])
def test_a_runs_two_traces_are_named_once(compute, io, named):
    assert pair_name(compute, io) == named


def test_unchanged_tables_are_one_line():
    """diff listed a dozen tables whose rows were all unchanged."""
    serial = REAL_TRACES["qwen3moe-l4-io-serial.csv"]
    overlap = REAL_TRACES["qwen3moe-l4-io-overlap.csv"]
    diff = report_with_warnings("diff", serial, overlap)
    same = [s["title"] for s in diff["sections"] if not s["title"].endswith("headline") and
            all(c["delta"] == 0 for row in s["rows"] for c in row["changes"])]
    assert same  # the same reads: the layers' and sizes' reads and MiB
    out = run("diff", serial, overlap).out
    line = " ".join(out.split("not tested, one run a side (--full: each table): ")[1].split())
    for title in same:
        assert f"\n{title}\n" not in out and title in line


@pytest.mark.parametrize("bases", [["serial-rep1"], ["serial-rep1", "serial-rep2", "serial-rep3"]])
def test_the_headline_is_on_the_first_screen_with_both_sides_engine_split(bases):
    """A diff of real pairs with their logs was 211-325 lines, its headline at line 315, and it
    never showed the engine's split. Now: decode, each side's split as its log(s) give it (the
    mean of the runs'), what changed significantly and the settings that differ, in 25 lines;
    the whole under 120."""
    sweep = ROOT / "tests" / "data" / "sweep"
    runs = [f"{sweep}/qwen3moe-l4-greedy-{name}-{part}.csv" for name in bases
            for part in ("ct", "io")]
    new = [f"{sweep}/qwen3moe-l4-greedy-cache2mb-{part}.csv" for part in ("ct", "io")]
    lines = run("diff", *runs, "vs", *new).out.splitlines()
    assert len(lines) < 120
    first = lines[:25]

    def split(names):
        found = [re.search(r"decode ([0-9.]+) s/token \(compute ([0-9.]+) \+ cache mgmt ([0-9.]+)"
                           r" \+ flash I/O [0-9.]+ s/token, ([0-9.]+) MiB/s", (
                               sweep / f"qwen3moe-l4-greedy-{name}.log").read_text())
                 for name in names]
        mib = [float(re.search(r"read ([0-9.]+) MiB", (sweep / f"qwen3moe-l4-greedy-{name}.log")
                               .read_text()).group(1)) / 128 for name in names]
        decode, compute, managing = (statistics.mean(float(one.group(i)) * 1e3 for one in found)
                                     for i in (1, 2, 3))
        flash = statistics.mean(m / float(one.group(4)) * 1e3 for m, one in zip(mib, found))
        if len(names) > 1:  # the means of whole ms: to 0.01
            return (f"decode {decode:.2f} = compute {compute:.2f} + cache mgmt {managing:.2f} + "
                    f"flash I/O {flash:.2f} ms (means of the logs' figures)")
        return (f"decode {decode:.0f} = compute {compute:.0f} + cache mgmt {managing:.0f} + "
                f"flash I/O {round(flash)} ms (whole ms, as printed; flash I/O {flash:.2f} from "
                f"MiB/s)")
    several = "s" if len(bases) > 1 else ""
    screen = " ".join(" ".join(first).split())
    assert f"base, its log{several}: {split(bases)}" in screen
    assert f"new, its log: {split(['cache2mb'])}" in screen
    # the cache's size too, which the prediction check names (bug: a key the base lacked was
    # never said, though a cache_mb unnamed is no cache)
    assert "  settings that differ: cache 0 -> 1, cache_mb (none) -> 1.9" in first
    said = next(line for line in first if line.startswith("  changed significantly: "))
    assert said.startswith("  changed significantly: not tested" if len(bases) == 1 else
                           "  changed significantly: none of ")
    decode = next(line for line in first if line.startswith("  decode ms per decoded token: "))
    diff = report_with_warnings("diff", *runs, "vs", *new)
    row = rows_by_name(section(diff, "pair headline"))["decode ms per decoded token"]
    base, new, ratio = map(float, re.match(
        r"  decode ms per decoded token: base ([0-9.]+) -> new ([0-9.]+) \(([0-9.]+)x", decode)
        .groups())
    change, = row["changes"]
    assert (base, new, ratio) == pytest.approx((row["base"], change["new"], change["ratio"]),
                                               rel=0.005)


def test_a_reading_warning_is_in_the_diffs_report_too(tmp_path):
    """Bug: a run cut short was said on stderr, but the diff's JSON `warnings` (and its text)
    held only the diff's own: a report saved or pasted without stderr lost it. Every command's
    report holds every warning the run said."""
    cut = tmp_path / "cut-io.csv"
    cut.write_bytes(IO_SERIAL.read_bytes()[:-7])  # the last line loses its newline and more
    result = run("diff", IO_SERIAL, cut, "--format", "json", "--no-engine-log")
    assert result.code == 0
    said = [line.removeprefix("decode-analyze: warning: ") for line in result.err.splitlines()]
    assert any("last line has no newline" in line for line in said)
    assert result.json["warnings"] == said
    text = " ".join(run("diff", IO_SERIAL, cut, "--no-engine-log").out.split())  # unwrapped
    assert "warning: " + next(line for line in said if "no newline" in line) in text


def test_a_48_layer_diff_is_the_answer_first_and_a_screen_long(tmp_path, monkeypatch):
    """Bug: diff of four serial repeats against four 256 MiB-cache repeats of the 48-layer model
    was 196 lines, about 100 of them per-layer rows all near 0.8x, and 'did the prediction
    hold?' began near line 180. On the shared sweep it is now 60 lines, the prediction at line
    22. Here each side is one real run four times, a nanosecond apart, so that every figure
    that differs is significant (harsher than real repeats): the prediction still comes within
    the first 40 lines, the layers that moved together are a line each, and the default view is
    under half of --full's."""
    import gzip
    sides = []
    for folder, name in (("l48-repeats", "serial-rep9"), ("l48-sweep", "cache256-rep1")):
        base = TRACES / folder / f"qwen3moe-l48-e128-{name}"
        plain = {}
        for part, source in (("ct", base.with_name(base.name + "-ct.csv")),
                             ("io", base.with_name(base.name + "-io.csv.gz"))):
            plain[part] = tmp_path / f"{name}-{part}.csv"  # decompressed once, copied four times
            plain[part].write_bytes(gzip.decompress(source.read_bytes())
                                    if source.suffix == ".gz" else source.read_bytes())
        runs = []
        for copy in range(4):
            target = tmp_path / f"{name}-{copy}"
            target.mkdir()
            for part in ("ct", "io"):
                another_run(plain[part], target / f"run-{part}.csv", nudge=copy + 1)
            (target / "run.log").write_bytes(base.with_name(base.name + ".log").read_bytes())
            runs.append(f"{target.name}/run-ct.csv+{target.name}/run-io.csv")
        sides.append(runs)
    monkeypatch.chdir(tmp_path)  # short paths, as a user's in their runs' folder
    # one diff (a 48-layer one is slow), drawn both ways
    report = run("diff", *sides[0], "vs", *sides[1], "--format", "json").json
    lines = decode_analyze.text_of(report, decode_analyze.View()).splitlines()
    full = decode_analyze.text_of(report, decode_analyze.View(layers=True, full=True)).splitlines()
    assert any(line.startswith("did the prediction hold?") for line in lines[:40])
    assert any(line.startswith("  reads per token by layer: 48 layers, ") for line in lines)
    assert "reads per token by layer" in full and len(lines) < len(full) / 2


def test_a_figure_that_was_zero_is_named_first_among_the_changes():
    """Cache management went from 0 to 19 ms a token between the shared 48-layer serial repeats
    and their 256 MiB repeats (p 0.029): a change from 0 has no ratio, and was sorted as no
    change at all, 105th of the significant ones, so the headline named neither it nor
    compute. It is the largest, shown as base -> new."""
    def row(name, base, new, ratio, p):
        return {"name": name, "base": base, "changes": [
            {"new": new, "ratio": ratio, "p": p, "significant": p < 0.05}]}
    report = {"runs_to_decide": 4, "sections": [{"title": "pair headline", "rows": [
        row("compute ms", 8.54, 10.54, 1.23, 0.2),
        row("MiB per decoded token", 76.5, 60.5, 0.79, 0.029),
        row("cache management ms per decoded token", 0.0, 19.25, None, 0.029)]}]}
    line, = decode_analyze.changed_lines(report, ["base", "new"])
    assert line == ("  changed significantly: cache management ms per decoded token 0.000 -> "
                    "19.25; MiB per decoded token 0.79x")
