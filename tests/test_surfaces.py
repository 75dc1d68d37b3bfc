"""The newest surfaces under adversarial input (issue 27): summary's inputs, pairing, --sort and
output paths; one escaping rule for every text cell in every format, CSV included; every unit
stated in CSV; the cache's integer sums exact at any size the reader accepts. A test per class
of defect found, each failing on the code before its fix, then the invariants as properties."""
import csv
import gzip
import io
import itertools
import json
import shutil

import pytest
from hypothesis import example, given, settings, strategies as st

import decode_analyze
from helpers import REAL_TRACES, ROOT, another_run, error_of, io_text, report, run

SERIAL = REAL_TRACES["qwen3moe-l4-io-serial.csv"]
OVERLAP = REAL_TRACES["qwen3moe-l4-io-overlap.csv"]
PREFETCH = REAL_TRACES["qwen3moe-l4-io-prefetch.csv"]
LAYERS = REAL_TRACES["qwen3moe-l4-ct-layers.csv"]
SAVED = ROOT / "tests" / "data" / "saved"
FORMATS = ("text", "markdown", "json", "csv")


def rows_of(*argv):
    return report("summary", *argv)["runs"]


def one_run(folder, compute_name, io_name, nudge=0):
    """A compute trace and an io trace of one run under the names given, in `folder` (another
    run of the same shape with a nudge: its last rows' times that many ns longer)."""
    folder.mkdir(exist_ok=True)
    another_run(LAYERS, folder / compute_name, nudge)
    another_run(SERIAL, folder / io_name.removesuffix(".gz"), nudge)
    if io_name.endswith(".gz"):
        plain = folder / io_name.removesuffix(".gz")
        (folder / io_name).write_bytes(gzip.compress(plain.read_bytes()))
        plain.unlink()
    return folder / compute_name, folder / io_name


def pairs_of(rows):
    return sorted((row["kind"], tuple(sorted(row["paths"]))) for row in rows)


# ── class 1: a pair whatever the order of its arguments (and its compression) ──
@pytest.mark.parametrize("names", [("x.csv", "x-io.csv"), ("ct.csv", "io.csv"),
                                   ("x-pair-ct.csv", "x-pair-io.csv.gz"),
                                   ("run-ct.csv.gz", "run-io.csv")])
def test_a_run_pairs_whatever_the_order_and_the_compression(tmp_path, names):
    compute, reads = one_run(tmp_path / "run1", *names)
    for order in ((compute, reads), (reads, compute)):
        (row,) = rows_of(*order)
        assert row["kind"] == "report" and row["paths"] == [str(compute), str(reads)]


def test_a_name_that_could_pair_two_ways_pairs_none(tmp_path):
    compute, reads = one_run(tmp_path, "x-ct.csv", "x-io.csv")
    another_run(reads, tmp_path / "x-io.csv.gz", 1)  # which is the run's? neither is taken
    rows = rows_of(compute, reads, tmp_path / "x-io.csv.gz", "--no-group")
    assert [row["kind"] for row in rows] == ["compute", "io", "io"]
    # grouped, the two io runs are repeats: one row of two runs
    assert [(row["kind"], row["n"]) for row in rows_of(compute, reads, tmp_path / "x-io.csv.gz")] \
        == [("compute", 1), ("io", 2)]
    # a plain copy of one io trace is that run again: one run, said
    shutil.copy(reads, tmp_path / "x-io.csv.gz")
    result = run("summary", compute, reads, tmp_path / "x-io.csv.gz", "--format", "json")
    assert [row["kind"] for row in result.json["runs"]] == ["compute", "io"]
    assert "x-io.csv.gz is x-io.csv again" in result.err


# ── class 2: no part of any argument is ever written over ──
@pytest.mark.parametrize("target", [0, 1])
def test_summary_never_writes_over_either_part_of_ct_plus_io(tmp_path, target):
    parts = one_run(tmp_path, "x-ct.csv", "x-io.csv")
    before = [part.read_bytes() for part in parts]
    message = error_of("summary", f"{parts[0]}+{parts[1]}", "-o", parts[target])
    assert "not writing over it" in message
    assert [part.read_bytes() for part in parts] == before


# ── classes 3 and 4: --sort by any preamble key, shared or not, numeric or not ──
def with_key(tmp_path, name, value):
    text = SERIAL.read_text().replace("overlap=0", f"overlap=0 weird={value}", 1)
    (tmp_path / name).write_text(text, encoding="utf-8")
    return tmp_path / name


def test_sort_by_a_key_str_isdigit_takes_and_float_refuses(tmp_path):
    runs = [with_key(tmp_path, "a.csv", "\u00b2"), with_key(tmp_path, "b.csv", "10"),
            with_key(tmp_path, "c.csv", "\u2460"), with_key(tmp_path, "d.csv", "9")]
    rows = rows_of(*runs, "--sort", "weird")
    # numbers as numbers first (9 before 10), then the rest as text
    assert [row["settings"]["weird"] for row in rows] == ["9", "10", "\u00b2", "\u2460"]


def test_sort_by_a_key_every_run_shares_keeps_their_order():
    rows = rows_of(OVERLAP, SERIAL, "--sort", "io_threads")  # both say io_threads=4
    assert [row["run"] for row in rows] == [OVERLAP.name, SERIAL.name]
    (row,) = rows_of(SERIAL, "--sort", "io_threads")
    result = run("summary", SERIAL, "--sort", "nope")
    assert result.code == 2 and "io_threads" in result.err  # the shared keys are offered


# ── class 5: genuine saved reports of schemas 2 and 3 (written by those versions) ──
@pytest.mark.parametrize("kind", ["io", "report", "compute"])
@pytest.mark.parametrize("schema", [2, 3])
def test_a_saved_report_older_than_the_last_schema_is_refused(kind, schema):
    """summary and diff read this schema and the one before; an older report is refused in a
    line that says how to get a new one, not half read."""
    saved = SAVED / f"{kind}-schema{schema}.json"
    assert json.loads(saved.read_text())["schema"] == schema
    for argv in (("summary", saved), ("diff", saved, saved)):
        result = run(*argv)
        assert result.code == 1 and result.err.count("\n") == 1, result.err
        assert f"a schema {schema} report" in result.err
        assert "write it again from its traces" in result.err


# ── classes 6 and 7: numbering, and a key a run lacks ──
def test_the_same_path_twice_is_one_run_said(tmp_path):
    """A path given twice passed as two repeats (and diff A A A vs B B B as three a side)."""
    result = run("summary", SERIAL, SERIAL, OVERLAP, "--no-group")
    numbers = [line.split()[0] for line in result.out.splitlines()[-2:]]
    assert numbers == ["1", "2"]
    assert f"{SERIAL}: given again, the same run: counted once" in result.err


def test_a_key_a_run_lacks_shows_as_missing_not_none(tmp_path):
    keyed, other = with_key(tmp_path, "k.csv", "5"), with_key(tmp_path, "j.csv", "6")
    r = report("summary", keyed, other, OVERLAP)
    assert [row["settings"]["weird"] for row in r["runs"]] == ["5", "6", None]  # JSON: null
    for fmt in ("text", "markdown", "csv"):
        out = run("summary", keyed, other, OVERLAP, "--format", fmt).out
        assert "None" not in out
    assert "weird=-" in run("summary", keyed, other, OVERLAP).out
    # a key one run does not know is not shared: a column, '-' where unknown
    r = report("summary", keyed, OVERLAP)
    assert "weird" in r["keys"] and "weird" not in r["common"]


# ── classes 8, 9, 10 and 12: one escaping rule for every text cell, in every format ──
HOSTILE = "\x1b[31m=x\x07\u202e\u2028"
KEY = "@\x1b[31mk\x07\u202ey"  # a preamble key: no white space (it splits the preamble)


def hostile_runs(tmp_path):
    """Two io traces whose names and a preamble key carry control characters, a formula and
    a bidi override; and a compute trace whose op is a formula with the same."""
    made = []
    for name, value in ((f"a{HOSTILE}.csv", "1"), (f"b{HOSTILE}\udcff.csv", "2")):
        text = SERIAL.read_text().replace("overlap=0", f"overlap=0 {KEY}={value}", 1)
        path = tmp_path / name
        path.write_bytes(text.encode("utf-8"))
        made.append(path)
    ops = LAYERS.read_text().replace(",MUL_MAT,", f",{HOSTILE}op,")
    (tmp_path / "ops.csv").write_text(ops, encoding="utf-8")
    return made + [tmp_path / "ops.csv"]


def number(text):
    try:
        float(text)
    except ValueError:
        return False
    return True


def cells_of(fmt, out):
    if fmt == "csv":
        return [cell for line in csv.reader(io.StringIO(out, newline="")) for cell in line]
    return out.split("\n")


@pytest.mark.parametrize("fmt", FORMATS)
def test_no_control_character_reaches_any_format(tmp_path, fmt):
    first, second, ops = hostile_runs(tmp_path)
    for argv in (("summary", first, second), ("diff", first, second), ("io", second),
                 ("compute", ops), ("diff", ops, ops)):
        out_file = tmp_path / f"out.{fmt}"
        result = run(*argv, "--format", fmt, "-o", out_file)  # a non-UTF-8 name, to a file
        assert result.code == 0, result.err
        out = out_file.read_text(encoding="utf-8")
        for piece in cells_of(fmt, out):
            assert piece.isprintable(), (argv, piece[:200])
        if fmt == "csv":  # and no cell a spreadsheet would run
            assert not [cell for cell in cells_of(fmt, out) if not number(cell)
                        and cell.startswith(decode_analyze.SPREADSHEET_FORMULA)]


def test_every_format_escapes_a_string_the_same_way(tmp_path):
    first, second, _ = hostile_runs(tmp_path)
    shown = decode_analyze.safe(KEY)
    text = run("summary", first, second).out
    csv_out = run("summary", first, second, "--format", "csv").out
    assert shown in text
    assert "'" + shown in cells_of("csv", csv_out)  # escaped as in text, then defused
    keys = report("summary", first, second)["keys"]
    assert keys == [KEY]  # JSON keeps the string, written as \u escapes


def test_text_heads_are_escaped_like_cells(tmp_path):
    first, second, _ = hostile_runs(tmp_path)
    for argv in (("summary", first, second), ("diff", first, second)):
        out = run(*argv).out
        assert "\x1b" not in out and "\\x1b" in out


# ── class 11, and every figure's unit ──
IDENTIFIERS = {"layer", "lane", "expert", "turn", "step", "phase", "schema", "skip", "value",
               "tool_version", "trace_id", "io_threads", "o_direct", "overlap",  # no figures
               "p", "alpha", "side", "n",  # a probability, a significance level; a side,
# and the samples of its test (runs or tokens, as test_unit says); a stretch's ends
               "first_step", "last_step"}


@pytest.mark.parametrize("argv", [("io", SERIAL, "--what-if"),
                                  ("report", LAYERS, SERIAL),
                                  ("compute", REAL_TRACES["qwen3moe-l4-ct-node.csv"]),
                                  ("summary", LAYERS, SERIAL),
                                  ("diff", SERIAL, OVERLAP),
                                  ("diff", REAL_TRACES["qwen3moe-l4-ct-node.csv"], LAYERS),
                                  ("timeline", ROOT / "tests" / "data" / "v2" / "ct.csv",
                                   ROOT / "tests" / "data" / "v2" / "io.csv")])
def test_every_figure_in_csv_has_its_unit(argv):
    out = run(*argv, "--format", "csv").out
    missing = set()
    for section, _, column, value, _, unit in list(csv.reader(io.StringIO(out, newline="")))[1:]:
        if not value:
            continue  # text or null: no unit
        innermost = column.rpartition(".")[2]
        named = section.rpartition(".")[2] in ("meta", "common", "settings", "selection",
                                               "preamble_changes") \
            or ".settings." in f".{column}." or innermost in IDENTIFIERS
        if not unit and not named:
            missing.add((section, column))
    assert not missing


def test_what_if_figures_have_units():
    out = run("io", SERIAL, "--what-if", "--format", "csv").out
    units = {(column, unit) for section, _, column, _, _, unit
             in csv.reader(io.StringIO(out, newline="")) if section == "what_if.settings"}
    assert ("ms_per_token_saved.point", "ms") in units
    assert ("figures.hit_share.point", "fraction") in units
    assert ("figures.mib_per_token.max", "MiB") in units
    assert ("figures.evictions.min", "experts") in units


# ── class 13: an expert read only speculatively is no looked-up expert ──
def test_speculative_only_experts_are_not_looked_up(write):
    # experts 1 and 2 demanded (3 lookups), expert 6 and 7 only ever read speculatively
    rows = [f"0,1,{step},0,{expert},0,0,{spec},{expert * 65536},65536,65536,1000"
            for step, expert, spec in ((1, 1, 0), (1, 6, 1), (2, 2, 0), (2, 7, 1), (3, 1, 0))]
    r = report("io", write(io_text(rows)), "--cache-mb", "1")
    assert (r["reuse"]["lookups"], r["reuse"]["experts"]) == (3, 2)
    for each in r["what_if"]["settings"]:
        figures = each["figures"]
        for name in ("evictions", "rereads"):
            if name in figures:
                assert figures[name]["min"] >= 0, (name, figures[name])


# ── class 14: sums past 2^64 ──
HUGE = 2 ** 64 - 1  # the largest value the reader accepts


def test_sums_past_two_to_the_64_are_exact(write):
    rows = [f"0,1,{step},0,{expert},{proj},0,{spec},{proj * 4096},{HUGE},{HUGE},{HUGE}"
            for step in (1, 2) for expert, spec in ((1, 0), (2, 1)) for proj in (0, 1)]
    path = write(io_text(rows))
    for argv in (("io", path, "--cache"), ("io", path, "--what-if"), ("summary", path),
                 ("io", path, "--cache-mb", "1,99999")):
        for fmt in ("text", "csv"):
            result = run(*argv, "--format", fmt)
            assert result.code == 0, (argv, result.err)
    lookups = decode_analyze.ExpertLookups()
    token = (0, 1, 0)  # turn, phase, step
    lookups.add(token, ["0", "0"], ["1", "1"], ["0", "0"], [HUGE, HUGE], [HUGE, 7])
    lookups.flush()
    assert list(lookups.read_bytes) == [2 * HUGE] and list(lookups.req_bytes) == [HUGE + 7]


@settings(max_examples=40, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2),
                          st.sampled_from([1, 65536, 2 ** 32, 2 ** 63, HUGE])),
                min_size=1, max_size=40))
def test_every_cache_sum_is_exact(reads):
    """Each read: (token, expert, bytes). The summed bytes per lookup, and the bytes a cache
    of every size serves, equal Python's own integer sums."""
    lookups = decode_analyze.ExpertLookups()
    tokens = {}
    expected = {}  # (token, expert) -> bytes, in first-read order within a token
    for step, expert, size in sorted(reads, key=lambda read: read[0]):
        token = tokens.setdefault(step, (0, 1, step))  # turn, phase, step
        lookups.add(token, ["0"], [str(expert)], ["0"], [size], [size])
        expected[step, expert] = expected.get((step, expert), 0) + size
    lookups.flush()
    assert list(lookups.read_bytes) == list(expected.values())
    cache = decode_analyze.ExpertCache(lookups, {1})
    everything = cache.at(cache.distinct)
    firsts = {}
    for (step, expert), size in expected.items():
        firsts.setdefault(expert, (step, size))
    served = sum(size for key, size in expected.items() if firsts[key[1]][0] != key[0])
    assert everything.saved_bytes == served


# ── class 15: the README's width of a diff column's head is the code's ──
def test_diff_heads_columns_with_names_up_to_the_stated_width(tmp_path):
    width = decode_analyze.GROUP_NAME_WIDTH
    fits, too_long = "a" * (width - 4) + ".csv", "b" * (width - 3) + ".csv"
    for name in (fits, too_long):
        shutil.copy(SERIAL, tmp_path / name)
    out = run("diff", tmp_path / fits, tmp_path / too_long, "--full").out
    head = next(line for line in out.splitlines() if line.lstrip().startswith("figure"))
    assert fits in head and too_long not in head and " new " in f"{head} "
    reference = (ROOT / "docs" / "json.md").read_text()  # the JSON reference says the same
    assert f"when at most {width} characters" in " ".join(reference.split())


# ── invariants over summary's arguments ──
@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """Two runs of two traces each (one compressed), a trace alone and a saved report."""
    folder = tmp_path_factory.mktemp("sweep")
    first = one_run(folder / "run1", "ct.csv", "io.csv")
    second = one_run(folder, "b-ct.csv", "b-io.csv.gz", nudge=1)
    alone = folder / "alone.csv"
    shutil.copy(OVERLAP, alone)
    saved = folder / "saved-io.json"
    assert run("io", PREFETCH, "--format", "json", "-o", saved).code == 0
    return [*first, *second, alone, saved]


@pytest.fixture(scope="module")
def sweep_in_order(sweep):
    """The runs summary finds among the sweep's inputs given in order: read once, not again
    for every order hypothesis draws."""
    return pairs_of(rows_of(*sweep, "--no-group"))


@settings(max_examples=12, deadline=None, derandomize=True)
@given(st.permutations(range(6)))
@example(list(range(6)))
def test_summary_gives_the_same_runs_in_every_order(sweep, sweep_in_order, order):
    rows = rows_of(*[sweep[i] for i in order], "--no-group")
    assert pairs_of(rows) == sweep_in_order
    assert sorted(row["kind"] for row in rows) == ["io", "io", "report", "report"]


def test_summary_never_writes_over_any_input(sweep, tmp_path):
    arguments = [f"{sweep[0]}+{sweep[1]}", *sweep[2:]]
    for target in itertools.chain(sweep):
        before = target.read_bytes()
        result = run("summary", *arguments, "-o", target)
        assert result.code == 1 and "not writing over it" in result.err
        assert target.read_bytes() == before
