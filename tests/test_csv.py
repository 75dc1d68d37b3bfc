"""--format csv: read back with the csv module, every line is one value of the JSON report of the
same run, found again by its section, row and field, and every value of the JSON has its line;
docs/csv.md's queries run on it in SQLite and in DuckDB (a test-only dependency)."""
import csv
import io
import os
import re

import pytest

import decode_analyze

from helpers import REAL_TRACES, ROOT, ct_text, needed_package, report_with_warnings, run

# The naming fields a table row may be named by (docs/csv.md).
NAMES = ("op", "name", "category", "layer", "lane", "kind", "label", "figure", "key")
V2 = ROOT / "tests" / "data" / "v2"
RUNS = {
    "compute": ["compute", REAL_TRACES["gemma4-l4-ct-node.csv"]],
    "compute layers": ["compute", REAL_TRACES["qwen3moe-l4-ct-layers.csv"]],
    "io": ["io", REAL_TRACES["qwen3moe-l4-io-prefetch.csv"], "--adjacent", "--cache",
           "--what-if"],
    "report": ["report", REAL_TRACES["qwen3moe-l4-session-ct-node.csv"],
               REAL_TRACES["qwen3moe-l4-session-ct-node-io.csv"]],
    "diff": ["diff", REAL_TRACES["qwen3moe-l4-io-serial.csv"],
             REAL_TRACES["qwen3moe-l4-io-overlap.csv"]],
    "timeline": ["timeline", V2 / "ct.csv", V2 / "io.csv"],
    "summary": ["summary", *REAL_TRACES.values()],
    **{name: ["io" if "-io" in name else "compute", path] for name, path in REAL_TRACES.items()},
}


def leaves(value):
    """How many values (numbers, strings, booleans, nulls) the JSON holds."""
    if isinstance(value, dict):
        return sum(leaves(item) for item in value.values())
    if isinstance(value, list):
        return sum(leaves(item) for item in value)
    return 1


def find_row(rows, name):
    """The row a CSV `row` names: the one whose naming field says so, else by index."""
    named = [] if "/" in name else row_names(rows).get(name, [])
    return rows[named[0]] if len(named) == 1 else rows[int(name)]


_NAMED_ROWS = {}  # id of a table -> (the table, {a naming field's text: its rows' indexes})


def row_names(rows):
    """{text: the indexes of the rows a naming field of which says it}, once per table: a
    table is looked up for each of its CSV lines (looking through it each time was quadratic,
    a tenth of the suite)."""
    held = _NAMED_ROWS.get(id(rows))
    if held is None or held[0] is not rows:
        index = {}
        for position, row in enumerate(rows):
            if isinstance(row, dict):
                for text in {text_of(row[field]) for field in NAMES if field in row}:
                    index.setdefault(text, []).append(position)
        if len(_NAMED_ROWS) > 4096:
            _NAMED_ROWS.clear()
        held = _NAMED_ROWS[id(rows)] = (rows, index)
    return held[1]


def text_of(value):
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return "'" + value if value[:1] in ("=", "+", "-", "@", "\t", "\r") else value
    return repr(value) if isinstance(value, float) else str(value)


def value_at(data, section, row, column):
    """Walk the report: the section's objects, then a row at each table and a column key at
    each object."""
    node = data
    if section != "report":
        for key in section.split("."):
            node = node[key]
    if isinstance(node, dict) and column in node and isinstance(node[column], list) \
            and all(not isinstance(v, (dict, list)) for v in node[column]):
        return node[column][int(row)]  # a map of per-token samples: row the token, column the key
    rows = row.split("/") if row else []
    columns = column.split(".") if column else []
    while isinstance(node, (dict, list)):
        if isinstance(node, list):
            node = find_row(node, rows.pop(0))
        elif not rows and column in node:  # a key of a map may hold a dot
            node, columns = node[column], []
        else:
            node = node[columns.pop(0)]
    assert not rows and not columns
    return node


@pytest.mark.parametrize("case", sorted(RUNS))
def test_every_line_is_a_value_of_the_json(case):
    # the report read once, as JSON; its CSV is drawn from it as --format csv draws it (the
    # command line's own CSV is held to this below)
    data = report_with_warnings(*RUNS[case])
    written = decode_analyze.csv_of(data)
    assert "\r\n" in written  # RFC 4180 line ends
    lines = list(csv.reader(io.StringIO(written, newline="")))
    header, *rows = lines
    assert header == ["section", "row", "field", "number", "text", "unit"]
    for section, row, field, number, text, unit in rows:
        value = value_at(data, section, row, field)
        is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
        assert (number if is_number else text) == text_of(value), (section, row, field)
        assert "" == (text if is_number else number)  # the other cell is empty
    assert len(rows) == leaves(data)


def test_the_command_lines_csv_is_drawn_from_its_json():
    result = run(*RUNS["report"], "--format", "csv")
    assert result.code == 0, result.err
    assert result.out == decode_analyze.csv_of(report_with_warnings(*RUNS["report"]))


def test_the_help_names_the_header_the_csv_has(capsys):
    """Bug: --help promised 'section,row,column,value,unit'; the file's header differs."""
    header = run(*RUNS["compute"], "--format", "csv").out.splitlines()[0]
    capsys.readouterr()
    assert run("compute", "--help").code == 0
    assert f"tidy CSV ({header}:" in " ".join(capsys.readouterr().out.split())


def test_units_are_named_from_the_columns():
    data = run(*RUNS["io"], "--format", "csv").out
    units = {(s, f): u for s, _, f, _, _, u in csv.reader(io.StringIO(data, newline=""))}
    assert units["report", "mib_per_token"] == "MiB"
    assert units["io_wall_ms_per_token", "min"] == "ms"
    assert units["throughput_mib_per_s", "max"] == "MiB/s"
    assert units["latency_us", "p99"] == "us"
    assert units["report", "waste_pct"] == "%"
    assert units["report", "reads"] == "reads"  # a count's unit is what it counts
    assert units["by_lane", "lane"] == ""  # a column that names a row is no figure


def test_a_formula_in_a_node_name_is_defused_and_quotes_are_doubled(write):
    hostile = '=HYPERLINK("http://x"),"a'
    rows = [f'0,1,{step},0,0,MUL_MAT,"{hostile.replace(chr(34), chr(34) * 2)}",1000000,0'
            for step in (1, 2)]
    out = run("compute", write(ct_text(rows)), "--format", "csv").out
    assert '"\'=HYPERLINK(""http://x""),""a"' in out
    lines = list(csv.reader(io.StringIO(out, newline="")))
    names = [text for section, _, field, _, text, _ in lines
             if section == "by_op" and field == "op"]
    assert names == ["MUL_MAT"]
    cells = [text for _, _, field, _, text, _ in lines if field == "name"]
    assert cells and all(cell == "'" + hostile for cell in cells)


def readme_query(engine):
    """docs/csv.md's example query for `engine` (sqlite or duckdb), as it is written there."""
    text = (ROOT / "docs" / "csv.md").read_text(encoding="utf-8")
    return re.search(rf"\n-- {engine}\n(.*?)(?=\n-- |```)", text, re.S).group(1)


def readme_block(language):
    """docs/csv.md's one ```language block, as printed."""
    text = (ROOT / "docs" / "csv.md").read_text(encoding="utf-8")
    return re.search(rf"```{language}\n(.*?)```", text, re.S).group(1)


@pytest.fixture(scope="module")
def readme_loop_folder(tmp_path_factory):
    """runs/a and runs/b, each a real pair, turned into runs/a.csv and runs/b.csv by the
    docs/csv.md's own loop (decode-analyze being this checkout's script): run once for the
    queries that read them."""
    import shutil
    import subprocess
    import sys
    tmp_path = tmp_path_factory.mktemp("readme-loop")
    for name in ("a", "b"):
        (tmp_path / "runs" / name).mkdir(parents=True)
        for part, source in zip(("ct", "io"), RUNS["report"][1:]):
            shutil.copy(source, tmp_path / "runs" / name / f"{part}.csv")
    shim = tmp_path / "bin" / "decode-analyze"
    shim.parent.mkdir()
    shim.write_text(f"#!/bin/sh\nexec '{sys.executable}' '{ROOT / 'decode_analyze.py'}' \"$@\"\n")
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{shim.parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-c", readme_block("sh")], cwd=tmp_path, env=env,
                          capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return tmp_path


@pytest.fixture
def report_csvs(readme_loop_folder, monkeypatch):
    """docs/csv.md's loop's runs/a.csv and runs/b.csv, with their folder the working one."""
    monkeypatch.chdir(readme_loop_folder)
    return [readme_loop_folder / "runs" / "a.csv", readme_loop_folder / "runs" / "b.csv"]


def by_op_slowest_first():
    ops = report_with_warnings(*RUNS["report"])["compute"]["by_op"]
    return sorted(ops, key=lambda op: -op["ms_per_token"])


def test_the_readmes_sqlite_recipe_and_query_run_as_printed(report_csvs):
    """The query read a `report` table and a `file` column nothing created, and `.import`
    loaded numbers as text (9.98 above 80.4); its section was `by_op`, not `compute.by_op`."""
    import sqlite3
    exec(readme_block("python"), {})  # noqa: S102 - the README's own recipe, as printed
    found = sqlite3.connect("runs.db").execute(readme_query("sqlite")).fetchall()
    expected = [(op["op"], pytest.approx(op["ms_per_token"])) for op in by_op_slowest_first()]
    assert [(row, number) for _, row, number in found] == expected * 2
    assert [file for file, _, _ in found] == ["runs/a.csv"] * len(expected) + \
        ["runs/b.csv"] * len(expected)
    assert all(isinstance(number, float) for _, _, number in found)


def test_the_readmes_duckdb_query_runs_as_printed(report_csvs):
    duckdb = needed_package("duckdb")
    found = duckdb.sql(readme_query("duckdb")).fetchall()
    slowest, *_ = by_op_slowest_first()
    assert len(found) == 2 * len(by_op_slowest_first())
    assert found[0][1:] == (slowest["op"], pytest.approx(slowest["ms_per_token"]))
