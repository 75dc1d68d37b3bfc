"""Runs, not tokens, are the unit of a comparison (issue 25): diff's sides of repeated runs,
its test over them, the n=1+1 answer, the drift check, the regression gate, and summary's
groups of repeats. The runs are generated (tracegen), each with its own seed and a machine
state (its speed) drawn around its configuration's, so the answer is known."""
import csv
import json
import io
import random
import statistics
from itertools import combinations

import pytest

import tracegen
from helpers import REAL_TRACES, error_of, markdown_parser, report, report_with_warnings, run
from decode_analyze import mann_whitney_p

RUN_SPREAD = 0.03  # each run's speed within ±3% of its configuration's: run-to-run noise


def generated_runs(directory, name, count, slower=1.0, seed=0, kind="compute"):
    """`count` compute (or io) traces of one configuration: each its own seed, its speed
    drawn within RUN_SPREAD of 1/slower; [(path, speed)]."""
    rng = random.Random(f"{name}-{seed}")
    runs = []
    for i in range(count):
        speed = (1 + rng.uniform(-RUN_SPREAD, RUN_SPREAD)) / slower
        path = directory / f"{name}-{i + 1}.csv"
        if kind == "compute":
            lines = tracegen.compute_lines(n_layer=4, decode_tokens=40, faults=False,
                                           seed=rng.randrange(1 << 30), speed=speed)
        else:
            lines = tracegen.io_lines(n_layer=4, decode_tokens=40, reads_per_token=60,
                                      seed=rng.randrange(1 << 30), speed=speed)
        runs.append((tracegen.write(path, lines), speed))
    return runs


def headline_row(diff, label, part="compute"):
    section = next(s for s in diff["sections"] if s["title"] == f"{part} headline")
    return next(row for row in section["rows"] if row["name"] == label)


def every_change(diff):
    return [change for section in diff["sections"] for row in section["rows"]
            for change in row["changes"]]


def sides_argv(base, new):
    return [path for path, _ in base] + ["vs"] + [path for path, _ in new]


# ── one run a side: no claim over tokens ──
def test_two_runs_of_one_setting_mark_nothing_significant(tmp_path):
    # two runs of one configuration, 4% apart by the machine's state alone: over their tokens
    # the change is "significant" (the false speed-up); over runs it is not tested
    base, new = (tracegen.write(tmp_path / f"{name}.csv", tracegen.compute_lines(
        n_layer=4, decode_tokens=40, faults=False, seed=seed, speed=speed))
        for name, seed, speed in (("a", 11, 1.0), ("b", 12, 1 / 1.04)))
    diff = report("diff", base, new)
    assert diff["test"] == "runs" and diff["runs_to_decide"] == 4
    changes = every_change(diff)
    assert changes and all(c["significant"] is None and c["p"] is None for c in changes)
    tested = [c for c in changes if c["status"] == "both"]
    assert all(c["n"] == [1, 1] and c["test_unit"] == "runs" for c in tested)
    tokens = report("diff", base, new, "--test", "tokens")
    ms = headline_row(tokens, "ms per token")["changes"][0]
    assert ms["test_unit"] == "tokens" and ms["n"] == [40, 40] and ms["significant"] is True
    text = run("diff", base, new).out
    assert "n=1+1: run-to-run variation unknown" in text and "4 times at least" in text
    assert "tokens of one run each" in run("diff", base, new, "--test", "tokens").out


def test_one_run_a_side_shows_each_runs_token_spread(tmp_path):
    (base, _), = generated_runs(tmp_path, "a", 1, seed=1)
    (new, _), = generated_runs(tmp_path, "b", 1, seed=2)
    row = headline_row(report("diff", base, new), "ms per token")
    tokens = [t["ms"] for t in report("compute", base)["per_token"]]
    expected = statistics.stdev(tokens) / statistics.mean(tokens)
    assert row["base_side"]["within_run_share"] == pytest.approx(expected)
    assert row["base_side"]["spread_share"] is None and row["base_side"]["per_run"] == [row["base"]]


def test_real_runs_of_one_setting_are_not_a_speed_up():
    # the two real qwen3moe runs without a cache (serial, overlap differ: a setting) and the
    # serial one against the prefetch run's own ms: nothing claimed over one run a side
    diff = report("diff", REAL_TRACES["qwen3moe-l4-io-serial.csv"],
                  REAL_TRACES["qwen3moe-l4-io-prefetch.csv"])
    assert all(c["significant"] is None for c in every_change(diff))


# ── several runs a side ──
def test_five_runs_ten_percent_slower_are_significant_over_runs(tmp_path):
    base = generated_runs(tmp_path, "base", 5, seed=3)
    new = generated_runs(tmp_path, "new", 5, slower=1.10, seed=4)
    diff = report("diff", *sides_argv(base, new))
    assert [side["runs"] for side in diff["sides"]] == [5, 5]
    assert [i["side"] for i in diff["inputs"]] == [0] * 5 + [1] * 5
    row = headline_row(diff, "ms per token")
    each = [report("compute", path)["ms_per_token"] for path, _ in base + new]
    assert row["base_side"]["per_run"] == pytest.approx(each[:5])
    assert row["base"] == pytest.approx(statistics.mean(each[:5]))
    change = row["changes"][0]
    assert change["new"] == pytest.approx(statistics.mean(each[5:]))
    assert change["new_side"]["spread_share"] == pytest.approx(
        statistics.stdev(each[5:]) / statistics.mean(each[5:]))
    # every new run slower than every base run: the most extreme ordering, p = 2 / C(10, 5)
    assert min(each[5:]) > max(each[:5])
    assert change["p"] == pytest.approx(2 / 252) and change["significant"] is True
    assert change["n"] == [5, 5] and change["test_unit"] == "runs"
    assert change["ratio"] == pytest.approx(1.10, abs=0.03)
    text = run("diff", *sides_argv(base, new)).out
    assert "diff (compute, n=5+5)" in text and "over the runs' figures (n=5+5)" in text


def test_five_runs_of_one_configuration_against_five_are_not_significant(tmp_path):
    base = generated_runs(tmp_path, "base", 5, seed=5)
    new = generated_runs(tmp_path, "new", 5, seed=6)
    diff = report("diff", *sides_argv(base, new))
    change = headline_row(diff, "ms per token")["changes"][0]
    each = [report("compute", path)["ms_per_token"] for path, _ in base + new]
    assert change["p"] == pytest.approx(exact_two_sided(each[:5], each[5:]))
    assert change["p"] >= 0.05 and change["significant"] is False
    assert "~" in run("diff", *sides_argv(base, new)).out


def exact_two_sided(base, new):
    """Enumerated: the share of splits of the pooled runs whose U is as far from its mean."""
    pooled = base + new

    def u_of(chosen):
        return sum(pooled[i] > pooled[j] for i in chosen for j in range(len(pooled))
                   if j not in chosen)
    centre = len(base) * len(new) / 2
    u = u_of(set(range(len(base))))
    splits = [u_of(set(c)) for c in combinations(range(len(pooled)), len(base))]
    return sum(abs(s - centre) >= abs(u - centre) for s in splits) / len(splits)


def test_every_table_row_is_tested_over_the_runs(tmp_path):
    base = generated_runs(tmp_path, "base", 4, seed=7)
    new = generated_runs(tmp_path, "new", 4, slower=1.2, seed=8)
    diff = report("diff", *sides_argv(base, new))
    by_op = next(s for s in diff["sections"] if s["title"] == "ms per token by op")
    reports = [report("compute", path) for path, _ in base + new]
    for row in by_op["rows"][:5]:
        runs = [next((r["ms_per_token"] for r in rep["by_op"] if r["op"] == row["name"]), None)
                for rep in reports]
        change = row["changes"][0]
        assert change["p"] == pytest.approx(mann_whitney_p(runs[:4], runs[4:]))
        assert change["n"] == [4, 4]


def test_three_runs_a_side_say_they_cannot_decide(tmp_path):
    base = generated_runs(tmp_path, "base", 3, seed=9)
    new = generated_runs(tmp_path, "new", 3, slower=1.3, seed=10)
    result = run("diff", *sides_argv(base, new))
    # every new run slower, but 3+3 cannot go below p = 2 / C(6, 3) = 0.1
    assert "with 3 run(s) a side p cannot go below 0.05: 4 at least" in result.out
    change = headline_row(report("diff", *sides_argv(base, new)), "ms per token")["changes"][0]
    assert change["p"] == pytest.approx(0.1) and change["significant"] is False


def test_io_runs_compare_as_compute_runs_do(tmp_path):
    base = generated_runs(tmp_path, "base", 4, seed=11, kind="io")
    new = generated_runs(tmp_path, "new", 4, slower=1.25, seed=12, kind="io")
    diff = report("diff", *sides_argv(base, new))
    change = headline_row(diff, "I/O wall ms per token, estimated", "io")["changes"][0]
    assert change["n"] == [4, 4] and change["significant"] is True
    assert change["p"] == pytest.approx(2 / 70)
    # the reads are the same size whatever the speed: MiB per token does not move
    mib = headline_row(diff, "MiB per token", "io")["changes"][0]
    assert mib["significant"] is not True
    hist = diff["latency_hist"]
    assert len(hist) == 2 and sum(row["count"] for row in hist[0]) == sum(
        report("io", path)["reads"] for path, _ in base)


def test_sides_are_split_at_vs_and_need_a_run_each(tmp_path):
    (one, _), = generated_runs(tmp_path, "a", 1)
    assert run("diff", one, "vs").code == 2
    assert "every side needs a run" in run("diff", one, "vs", "vs", one).err
    result = run("diff", one, one, "vs", one, "--test", "tokens")
    assert result.code == 2 and "one run a side" in result.err


def test_runs_of_one_side_that_differ_in_a_setting_are_said(tmp_path):
    (one, _), = generated_runs(tmp_path, "a", 1)
    other = tmp_path / "other.csv"
    other.write_text(one.read_text().replace("overlap=0", "overlap=1"))
    diff = report_with_warnings("diff", one, other, "vs", one, one)
    assert any("its runs differ in overlap (0|1)" in w for w in diff["warnings"])


# ── the drift check ──
def test_a_run_whose_second_half_slowed_is_said_unstable(tmp_path):
    lines = list(tracegen.compute_lines(n_layer=4, decode_tokens=40, faults=False, seed=3))
    tokens = {}
    for line in lines[3:]:
        step = int(line.split(",")[2])
        tokens.setdefault(step, []).append(line)
    steps = sorted(tokens)
    drifting = tmp_path / "drift.csv"
    slow = set(steps[len(steps) // 2 + 1:])  # the second half of the decode tokens, 1.5x
    body = []
    for step in steps:
        for line in tokens[step]:
            fields = line.rstrip("\n").split(",")
            if step in slow:
                fields[7] = str(int(int(fields[7]) * 1.5))
            body.append(",".join(fields) + "\n")
    drifting.write_text("".join(lines[:3] + body))
    (steady, _), = generated_runs(tmp_path, "a", 1)
    diff = report("diff", steady, drifting)
    found = {d["input"]: d for d in diff["drift"]}
    assert found["drift.csv"]["unstable"] is True and found["a-1.csv"]["unstable"] is False
    per_token = [t["ms"] for t in report("compute", drifting)["per_token"]]
    half = len(per_token) // 2
    assert found["drift.csv"]["first_half_ms"] == pytest.approx(statistics.mean(per_token[:half]))
    assert found["drift.csv"]["ratio"] == pytest.approx(1.5, abs=0.1)
    assert "drift: 1 run drifted" in " ".join(run("diff", steady, drifting).out.split())
    assert "new ms per token" in run("diff", steady, drifting, "--full").out


# ── the regression gate ──
def test_the_gate_fails_a_significant_regression_and_passes_noise(tmp_path):
    base = generated_runs(tmp_path, "base", 5, seed=3)
    slower = generated_runs(tmp_path, "slow", 5, slower=1.10, seed=4)
    same = generated_runs(tmp_path, "same", 5, seed=6)
    failed = run("diff", *sides_argv(base, slower), "--fail-if-worse", "ms_per_token=5%")
    assert failed.code == 1 and "regression: new: ms_per_token worse by" in failed.err
    assert "FAILED" in failed.out
    passed = run("diff", *sides_argv(base, same), "--fail-if-worse", "ms_per_token=5%")
    assert passed.code == 0 and "passed" in passed.out
    # 10% slower, allowed 20%: passes though significant
    allowed = run("diff", *sides_argv(base, slower), "--fail-if-worse", "ms_per_token=0.2")
    assert allowed.code == 0


def test_the_gate_in_json_and_with_one_run_a_side(tmp_path):
    base = generated_runs(tmp_path, "base", 5, seed=3)
    slower = generated_runs(tmp_path, "slow", 5, slower=1.10, seed=4)
    argv = ["diff", *sides_argv(base, slower), "--fail-if-worse", "ms_per_token=5%",
            "--format", "json"]
    result = run(*argv)
    gate, = result.json["gate"]
    assert result.code == 1 and gate["failed"] is True and gate["decided"] is True
    assert gate["worse_share"] == pytest.approx(
        headline_row(result.json, "ms per token")["changes"][0]["ratio"] - 1)
    assert gate["limit_share"] == 0.05 and gate["n"] == [5, 5]
    single = run("diff", base[0][0], slower[0][0], "--fail-if-worse", "ms_per_token=5%")
    assert single.code == 0 and "not decided" in single.out  # n=1+1 cannot fail it


@pytest.mark.parametrize("asked, said", [
    ("speed=5%", "not a headline figure"), ("ms_per_token=fast", "not a share"),
    ("ms_per_token=-1", "not a share")])
def test_a_bad_gate_is_a_usage_error(tmp_path, capsys, asked, said):
    (one, _), = generated_runs(tmp_path, "a", 1)
    result = run("diff", one, one, "--fail-if-worse", asked)
    assert result.code == 2 and said in capsys.readouterr().err  # argparse's own stderr


def test_a_gate_on_a_figure_the_inputs_lack_is_a_usage_error(tmp_path):
    (one, _), = generated_runs(tmp_path, "a", 1)
    result = run("diff", one, one, "--fail-if-worse", "mib_per_token=5%")
    assert result.code == 2 and "no 'MiB per token'" in result.err


# ── the picture ──
def test_the_svg_draws_each_sides_runs_as_points(tmp_path):
    base = generated_runs(tmp_path, "base", 3, seed=3)
    new = generated_runs(tmp_path, "new", 4, slower=1.1, seed=4)
    target = tmp_path / "diff.svg"
    run("diff", *sides_argv(base, new), "--svg", target)
    svg = target.read_text()
    diff = report("diff", *sides_argv(base, new))
    row = headline_row(diff, "ms per token")
    drawn = [line for line in svg.splitlines() if 'class="c0 run"' in line
             and "<title>ms per token: " in line]
    assert len(drawn) == 3
    assert len([line for line in svg.splitlines() if 'class="c1 run"' in line
                and "<title>ms per token: " in line]) == 4
    expected = sorted(f"{value / row['base']:.4g}" for value in row["base_side"]["per_run"])
    assert sorted(line.rpartition(" ")[2].split("<")[0] for line in drawn) == expected


# ── summary groups repeats ──
def test_summary_groups_three_repeats_of_two_configurations(tmp_path):
    fast = generated_runs(tmp_path, "fast", 3, seed=13)
    slow = generated_runs(tmp_path, "slow", 3, slower=1.2, seed=14)
    for path, _ in slow:  # another configuration: the header says so
        path.write_text(path.read_text().replace("n_threads=4", "n_threads=2"))
    paths = [path for path, _ in fast + slow]
    summary = report("summary", *paths)
    rows = summary["runs"]
    assert [row["n"] for row in rows] == [3, 3]
    for row, group in zip(rows, (fast, slow)):
        each = [report("compute", path)["ms_per_token"] for path, _ in group]
        assert row["decode_ms_per_token"] == pytest.approx(statistics.mean(each))
        assert row["spread"]["decode_ms_per_token"] == pytest.approx(statistics.stdev(each))
        assert row["paths"] == [str(path) for path, _ in group]
    assert rows[1]["settings"] == {"n_threads": "2"}
    text = run("summary", *paths).out
    assert "±" in text and " 3 " in text
    ungrouped = report("summary", "--no-group", *paths)["runs"]
    assert len(ungrouped) == 6 and all(row["n"] == 1 for row in ungrouped)
    assert all(value is None for row in ungrouped for value in row["spread"].values())


def test_summary_groups_in_markdown_and_csv(tmp_path):
    runs = generated_runs(tmp_path, "fast", 3, seed=13)
    paths = [path for path, _ in runs]
    markdown = run("summary", *paths, "--format", "markdown").out
    tokens = markdown_parser().parse(markdown)
    assert any(t.type == "table_open" for t in tokens)
    assert "±" in markdown
    rows = list(csv.reader(io.StringIO(run("summary", *paths, "--format", "csv").out)))
    found = {(r[0], r[2]): r for r in rows[1:]}
    assert found[("runs", "n")][3] == "3"
    each = [report("compute", path)["ms_per_token"] for path in paths]
    assert float(found[("runs", "spread.decode_ms_per_token")][3]) == pytest.approx(
        statistics.stdev(each))
    assert found[("runs", "spread.decode_ms_per_token")][5] == "ms"


def test_a_saved_report_whose_granularity_is_not_a_name_is_one_line(tmp_path):
    # the fuzzer's: a hand-edited granularity ({}) keyed summary's groups, a traceback before
    saved = report("compute", REAL_TRACES["qwen3moe-l4-ct-node.csv"])
    saved["granularity"] = {"node": 1}
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(saved))
    message = error_of("summary", path, REAL_TRACES["qwen3moe-l4-ct-node.csv"])
    assert "edited.json" in message and "granularity is not a name" in message
    assert "granularity is not a name" in error_of("diff", path, path)


def test_diff_csv_gives_each_run_its_figures_unit_and_the_spread_a_fraction():
    runs = [str(p) for p in sorted((REAL_TRACES["qwen3moe-l4-ct-node.csv"].parent / "runs")
                                   .glob("*.csv"))]
    base, new = [p for p in runs if "base-" in p], [p for p in runs if "new-" in p]
    out = run("diff", *base, "vs", *new, "--format", "csv").out
    units = {}
    for section, row, field, number, _, unit in list(csv.reader(io.StringIO(out)))[1:]:
        if section == "sections" and row.startswith("0/ms per token"):
            units[field] = unit
    assert units["rows.base_side.per_run"] == "ms" and units["rows.changes.new"] == "ms"
    assert units["rows.base_side.spread_share"] == "fraction"
    assert units["rows.changes.ratio"] == "x" and units["rows.changes.n"] == ""
    summary = list(csv.reader(io.StringIO(run("summary", *runs, "--format", "csv").out)))
    assert {r[5] for r in summary if r[0] == "runs" and r[2] == "n"} == {"runs"}


def test_the_gate_over_tokens_is_not_decided_and_a_gain_is_said_as_better(tmp_path):
    """--test tokens with one run a side failed the gate, though its help says it takes the
    test over runs; a 20% gain was printed "worse by -20.2%"."""
    base = generated_runs(tmp_path, "base", 1, seed=3)
    slower = generated_runs(tmp_path, "slow", 1, slower=1.5, seed=4)
    tokens = run("diff", base[0][0], slower[0][0], "--test", "tokens", "--fail-if-worse",
                 "ms_per_token=5%")
    assert tokens.code == 0 and \
        "not decided (the gate takes the test over runs" in " ".join(tokens.out.split())
    faster = generated_runs(tmp_path, "fast", 5, slower=1 / 1.25, seed=5)
    five = generated_runs(tmp_path, "five", 5, seed=3)
    gained = run("diff", *sides_argv(five, faster), "--fail-if-worse", "ms_per_token=5%")
    line = next(line for line in gained.out.splitlines() if line.startswith("gate:"))
    assert gained.code == 0 and "better by 2" in line and "worse by" not in line, line
