"""Which runs are repeats of one configuration (issue 37, items 3-5): a key one run lacks is
unknown there, not a difference; a run's name (a v2 trace_id) is no setting; runs of one
configuration whose figures are further apart than repeats spread are listed apart; one
run given twice (the same file, a copy, or a saved report beside its trace) is counted once."""
import pytest

import decode_analyze
import tracegen
from helpers import REAL_TRACES, ROOT, another_run, report, report_with_warnings, run

SERIAL = REAL_TRACES["qwen3moe-l4-io-serial.csv"]
V2 = ROOT / "tests" / "data" / "v2"


def test_a_saved_report_and_its_own_trace_are_one_run(tmp_path):
    saved = tmp_path / "serial-io.json"
    assert run("io", SERIAL, "--format", "json", "-o", saved).code == 0
    r = report_with_warnings("summary", saved, SERIAL)
    warnings = r["warnings"]
    assert len(r["runs"]) == 1 and r["runs"][0]["n"] == 1  # was cache=- against cache=0
    assert any("again" in warning and "counted once" in warning for warning in warnings)
    diff = report_with_warnings("diff", saved, SERIAL, "vs", SERIAL)
    assert diff["sides"][0]["runs"] == 1
    assert all(change["key"] != "cache" for found in diff["preamble_changes"] for change in found)


def v2_run(folder, name, trace_id, nudge):
    """A v2 io run of its own: tests/data/v2/io.csv under another trace_id, its last read
    `nudge` ns longer."""
    path = another_run(V2 / "io.csv", folder / name, nudge)
    path.write_text(path.read_text().replace("trace_id=42", f"trace_id={trace_id}"))
    return path


def test_a_v2_runs_trace_id_names_it_and_sets_nothing(tmp_path):
    first, second = v2_run(tmp_path, "r1.csv", 7, 1), v2_run(tmp_path, "r2.csv", 8, 2)
    r = report("summary", first, second)
    assert len(r["runs"]) == 1 and r["runs"][0]["n"] == 2 and "trace_id" not in r["keys"]
    diff = report_with_warnings("diff", first, second, "vs", first, second)
    assert not [w for w in diff["warnings"] if "not repeats" in w]
    assert diff["preamble_changes"] == [[]]


def compute_run(path, speed, tokens=40, seed=1):
    return tracegen.write(path, tracegen.compute_lines(n_layer=4, decode_tokens=tokens,
                                                       faults=False, seed=seed, speed=speed))


def test_runs_of_one_configuration_far_apart_are_not_repeats(tmp_path):
    """A 48-layer run and the same command under a 64 MiB memory limit (248 against 4818 ms
    per token) made one group of n=2 at 2533 ms, without a word."""
    quick = compute_run(tmp_path / "quick.csv", 1.0)
    noisy = compute_run(tmp_path / "noisy.csv", 1 / 1.4, seed=2)  # as far as real repeats go
    starved = compute_run(tmp_path / "starved.csv", 1 / 19.5, seed=3)
    short = compute_run(tmp_path / "short.csv", 1.0, tokens=8, seed=4)
    r = report_with_warnings("summary", quick, noisy, starved, short)
    warnings = r["warnings"]
    assert [row["n"] for row in r["runs"]] == [2, 1, 1]
    assert r["runs"][0]["run"] == "quick.csv, noisy.csv"
    said = " ".join(warnings)
    assert "starved.csv: one configuration, but decode_ms_per_token" in said
    assert "short.csv: one configuration, but tokens 40 against 8" in said
    assert said.count("not repeats, listed apart") == 2


@pytest.mark.parametrize("copies", ["same path", "copied file"])
def test_one_run_given_three_times_is_one_run_a_side(tmp_path, copies):
    """diff A A A vs B B B passed as three repeats a side (p = 0.013, the gate FAILED)."""
    base = compute_run(tmp_path / "a.csv", 1.0)
    new = compute_run(tmp_path / "b.csv", 1 / 1.5, seed=2)
    if copies == "same path":
        bases, news = [base] * 3, [new] * 3
    else:
        bases = [base] + [tmp_path / f"a{i}.csv" for i in (2, 3)]
        news = [new] + [tmp_path / f"b{i}.csv" for i in (2, 3)]
        for copy in bases[1:]:
            copy.write_bytes(base.read_bytes())
        for copy in news[1:]:
            copy.write_bytes(new.read_bytes())
    result = run("diff", *bases, "vs", *news, "--fail-if-worse", "ms_per_token=5%",
                 "--format", "json")
    assert result.code == 0, result.err  # one run a side: nothing can fail the gate
    assert [side["runs"] for side in result.json["sides"]] == [1, 1]
    assert result.err.count("counted once") == (2 if copies == "same path" else 4)  # once each
    gate, = result.json["gate"]
    assert gate["n"] == [1, 1] and not gate["decided"]


def test_the_diff_svgs_title_names_the_sides_not_every_run(tmp_path):
    """The title joined every run with "vs": `a vs a vs c vs c`."""
    runs = [compute_run(tmp_path / f"{name}.csv", speed, seed=seed)
            for name, speed, seed in (("a1", 1.0, 1), ("a2", 1.02, 2), ("c1", 0.7, 3),
                                      ("c2", 0.71, 4))]
    svg = tmp_path / "diff.svg"
    assert run("diff", runs[0], runs[1], "vs", runs[2], runs[3], "--svg", svg).code == 0
    text = svg.read_text()
    assert "base (2 runs) vs new (2 runs)" in text and "a1.csv vs a2.csv" not in text


def test_summarys_engine_column_says_how_many_runs_it_is_the_mean_of(tmp_path):
    """A mean over fewer runs than the row's n, not said: 2 of 3 repeats had a log."""
    serial = REAL_TRACES["qwen3moe-l4-io-serial.csv"]
    log = ROOT / "tests" / "data" / "qwen3moe-l4-io-serial.log"
    runs = []
    for i in (1, 2, 3):
        path = another_run(serial, tmp_path / f"r{i}.csv", nudge=i)
        if i < 3:
            (tmp_path / f"r{i}.log").write_bytes(log.read_bytes())
        runs.append(path)
    r = report("summary", *runs)
    row, = r["runs"]
    assert row["n"] == 3 and row["figure_runs"] == {"engine_ms_per_token": 2}
    assert row["engine_ms_per_token"] == 39.0
    line = run("summary", *runs).out.splitlines()[-1]
    assert "39.00 ±0.00 (2/3)" in line, line


def test_a_path_given_again_is_read_once(tmp_path, monkeypatch):
    """diff A A A vs B B B analysed each file three times before counting it once."""
    import decode_analyze
    base = compute_run(tmp_path / "a.csv", 1.0)
    new = compute_run(tmp_path / "b.csv", 1 / 1.5, seed=2)
    read = []
    analyze = decode_analyze.analyze_input
    monkeypatch.setattr(decode_analyze, "analyze_input",
                        lambda readable, name, *rest: read.append(name) or
                        analyze(readable, name, *rest))
    result = run("diff", base, base, base, "vs", new, new, new)
    assert result.code == 0 and sorted(read) == sorted([str(base), str(new)])
    read.clear()
    assert run("summary", base, base, new).code == 0 and sorted(read) == sorted(
        [str(base), str(new)])


def entry(name, decode, column="compute", **config):
    """A run as the table of runs sees it: its decode as its telling figure."""
    return decode_analyze.RunEntry(name, {"decode_ms_per_token": decode}, config, column)


def table(entries, group):
    """(configuration, names) of each row run_table builds, and what it said."""
    said = []
    rows = decode_analyze.run_table(entries, lambda one: one, said.append, group)
    return [(row.config, [one.name for one in row.runs]) for row in rows], said


@pytest.mark.parametrize("group, rows", [
    # the repeats' rule: the 3x-slower run is listed apart, said; a's copy is dropped, said
    (decode_analyze.GROUP_REPEATS, [({"cache": "0", "lanes": "4"}, ["a", "b"]),
                                    ({"cache": "0"}, ["slow"]), ({"cache": "1"}, ["c"]),
                                    ({"cache": "0"}, ["other"])]),
    # the fit's: one configuration, however far apart (its outliers are found within)
    (decode_analyze.GROUP_CONFIGURATION, [({"cache": "0", "lanes": "4"}, ["a", "b", "slow"]),
                                          ({"cache": "1"}, ["c"]), ({"cache": "0"}, ["other"])]),
    # a diff side: its column alone, whatever the configurations
    (decode_analyze.GROUP_COLUMN, [({"cache": "1", "lanes": "4"}, ["a", "b", "slow", "c"]),
                                   ({"cache": "0"}, ["other"])]),
    (None, [({"cache": "0"}, ["a"]), ({"cache": "0", "lanes": "4"}, ["b"]),
            ({"cache": "0"}, ["slow"]), ({"cache": "1"}, ["c"]), ({"cache": "0"}, ["other"])]),
])
def test_one_table_of_runs_groups_as_each_reader_asks(group, rows):
    entries = [entry("a", 10.0, cache="0"), entry("b", 11.0, cache="0", lanes="4"),
               entry("a copy", 10.0, cache="0"), entry("slow", 30.0, cache="0"),
               entry("c", 10.5, cache="1"), entry("other", 10.0, "io", cache="0")]
    found, said = table(entries, group)
    assert found == rows
    assert said[0] == "a copy is a again (the same figures, to the last digit): counted once"
    # a key one run lacks (b's lanes, a's) is unknown there: the row holds every key it knows
    apart = [line for line in said if "listed apart" in line]
    assert apart == (["a and slow: one configuration, but decode_ms_per_token 10 against 30 "
                      "(repeats stay within 2x): not repeats, listed apart"]
                     if group == decode_analyze.GROUP_REPEATS else [])


def test_the_table_of_runs_keeps_one_run_given_on_two_sides():
    found, said = table([entry("a", 10.0, "base"), entry("a", 10.0, "new")],
                        decode_analyze.GROUP_COLUMN)
    assert found == [({}, ["a"]), ({}, ["a"])] and said == []
