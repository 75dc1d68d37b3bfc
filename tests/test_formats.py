"""Formats: text and Markdown are drawn from one layout per kind of report, so that they carry
the same sections; Markdown shows no row twice and keeps its bars."""
import io
import json
import re

import pytest

import decode_analyze as da
from helpers import ROOT, run
from test_golden import COMMANDS


def view_of(argv):
    top = int(argv[argv.index("--top") + 1]) if "--top" in argv else \
        8 if argv[0] == "report" else 12
    return da.View(top, "--layers" in argv, False)


@pytest.mark.parametrize("name", list(COMMANDS))
def test_text_and_markdown_carry_every_section_the_layout_draws(name, monkeypatch):
    monkeypatch.chdir(ROOT)
    argv = COMMANDS[name]
    report = json.loads(run(*argv, "--format", "json").out)
    text = run(*argv).out
    markdown = run(*argv, "--format", "markdown").out
    flat = " ".join(text.split())  # a heading may be folded over lines
    drawn = 0
    for section, blocks in da.drawn_sections(report, view_of(argv)):
        if section.title is not None and blocks:
            assert section.title in text, section.title
            assert da.md(section.title) in markdown, section.title
        for block in blocks:
            if block.heading:
                drawn += 1
                assert " ".join(block.heading.split()) in flat, block.heading
                assert da.md(block.heading) in markdown, block.heading
    assert drawn >= 2


def test_every_layout_section_is_drawn_by_some_golden_command(monkeypatch):
    """So that the test above covers every titled section of every layout."""
    monkeypatch.chdir(ROOT)
    seen = set()
    for argv in list(COMMANDS.values()) + [["compute", "examples/session-ct.csv", "--layers"]]:
        report = json.loads(run(*argv, "--format", "json").out)
        seen |= {(report["kind"], section.title)
                 for section, blocks in da.drawn_sections(report, view_of(argv)) if blocks}
    for kind, layout in da.LAYOUTS.items():
        for section in layout:
            assert section.title is None or (kind, section.title) in seen, (kind, section.title)


def test_markdown_shows_no_table_row_twice(monkeypatch):
    monkeypatch.chdir(ROOT)
    markdown = run("report", "examples/session-ct.csv", "examples/session-io.csv",
                   "--format", "markdown").out
    rows = [line for line in markdown.splitlines() if line.startswith("| ")
            and not line.startswith("| op |")]
    by_op = [row for row in rows if row.startswith("| MUL\\_MAT\\_ID |")]
    assert len(by_op) == 1
    assert "<details><summary>the other 10 rows</summary>" in markdown


def test_markdown_bars_are_code_spans_that_keep_every_character(monkeypatch):
    monkeypatch.chdir(ROOT)
    markdown = run("io", "examples/session-io.csv", "--format", "markdown").out
    histogram = [line for line in markdown.splitlines() if re.match(r"\| \d+ -&gt; \d+ \|", line)]
    assert histogram
    for line in histogram:
        spans = re.findall(r"`([^`]*)`", line)
        assert len(spans) == 1 and len(spans[0]) == da.HIST_WIDTH
        assert set(spans[0]) <= {"#", "."}
    # the bucket of 4 reads in 4290 is an empty bar, not a cell that collapses to nothing
    assert "| 4096 -&gt; 8191 | 4 | `" + "." * da.HIST_WIDTH + "` |" in markdown


@pytest.mark.parametrize("argv,caveat", [
    (["report", "examples/session-ct.csv", "examples/session-io.csv"], da.NODE_CAVEAT),
    (["compute", "tests/data/qwen3moe-l4-ct-layers.csv"], da.LAYER_CAVEAT)])
def test_the_compute_caveat_is_in_every_format_that_reads(argv, caveat, monkeypatch):
    monkeypatch.chdir(ROOT)
    text = run(*argv).out
    assert " ".join(text.split()).count(caveat) == 1
    assert run(*argv, "--format", "markdown").out.count(da.md(caveat)) == 1


def test_a_pair_in_markdown_has_the_fault_table_and_the_text_header_keys(monkeypatch):
    monkeypatch.chdir(ROOT)
    markdown = run("report", "tests/data/gemma4-l4-ct-node.csv",
                   "tests/data/gemma4-l4-io-serial.csv", "--format", "markdown").out
    text = run("report", "tests/data/gemma4-l4-ct-node.csv",
               "tests/data/gemma4-l4-io-serial.csv").out
    assert "n\\_threads=" in markdown and "n_threads=" in text
    assert ("fault attribution" in text) == ("fault attribution" in markdown)


def test_text_falls_back_to_ascii_where_the_terminal_cannot_encode(monkeypatch):
    monkeypatch.chdir(ROOT)
    out = io.TextIOWrapper(io.BytesIO(), encoding="cp1252")
    assert da.main(["compute", "examples/session-ct.csv"], out=out, err=io.StringIO()) == 0
    out.seek(0)
    text = out.read()
    assert "run |" in text and "▁" not in text
    assert text.isascii()
