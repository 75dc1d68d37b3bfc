"""--format markdown (issue 10, part 1): parsed by a real Markdown parser (markdown-it-py, with
tables), every table has the rows the JSON has, untrusted strings never become markup."""
import re

import pytest

import tracegen
from helpers import REAL_TRACES, ct_text, report, run

markdown_it = pytest.importorskip("markdown_it")


def parse(text):
    return markdown_it.MarkdownIt("commonmark", {"html": True}).enable("table").parse(text)


def tables(tokens):
    """{title: [rows of cell texts]} of every table, titled by the paragraph or summary
    before it; a folded "the other N rows" table continues the table before it."""
    found, title, rows, row, in_cell = {}, None, None, None, False
    shown = None  # the title of the last table shown unfolded
    for token in tokens:
        if token.type == "inline" and not in_cell:
            title = shown = token.content.strip("*")
        if token.type == "html_block" and "<summary>" in token.content:
            title = re.sub(r"<[^>]+>", "", token.content).strip()
            if title.startswith("the other "):
                title = shown
        if token.type == "table_open":
            rows = []
        elif token.type == "tr_open":
            row = []
        elif token.type in ("td_open", "th_open"):
            in_cell = True
        elif token.type == "inline" and in_cell:
            row.append(token.content)
        elif token.type in ("td_close", "th_close"):
            in_cell = False
        elif token.type == "tr_close":
            rows.append(row)
        elif token.type == "table_close":
            found[title] = found.get(title, []) + rows[1:]  # without the header
    return found


def test_compute_tables_have_the_json_rows():
    path = REAL_TRACES["qwen3moe-l4-ct-node.csv"]
    r = report("compute", path)
    found = tables(parse(run("compute", path, "--format", "markdown").out))
    ops = found[f"by op (12 of {len(r['by_op'])}, slowest first; us = one node's wall time)"]
    assert [row[0] for row in ops] == [o["op"].replace("_", "\\_") for o in r["by_op"]]
    categories = next(rows for title, rows in found.items()
                      if title.startswith("by node category"))
    assert [row[0] for row in categories] == [c["category"] for c in r["by_category"]]
    assert [row[1] for row in categories] == [f"{c['ms_per_token']:.2f}"
                                              for c in r["by_category"]]


def test_io_and_report_parse_with_their_tables():
    io_path = REAL_TRACES["qwen3moe-l4-io-prefetch.csv"]
    r = report("io", io_path, "--cache")
    found = tables(parse(run("io", io_path, "--cache", "--format", "markdown").out))
    def titled(found, start):
        return next(rows for title, rows in found.items() if title.startswith(start))
    assert len(titled(found, "by lane")) == len(r["by_lane"]) == 4
    assert len(titled(found, "speculative:")) == 2
    assert len(titled(found, "re-reads: footprint")) == 5
    pair = run("report", REAL_TRACES["qwen3moe-l4-session-ct-node.csv"],
               REAL_TRACES["qwen3moe-l4-session-ct-node-io.csv"], "--format", "markdown").out
    assert len(titled(tables(parse(pair)), "by layer (compute by inferred layer)")) == 5


HOSTILE = "a|b `c` <img src=x> **d** [e](http://x) _f_ &amp;"


def test_untrusted_names_show_as_themselves(write):
    rows = [f'0,1,{step},0,0,"{HOSTILE}","{HOSTILE}",1000000,0' for step in (4, 5)]
    out = run("compute", write(ct_text(rows)), "--format", "markdown").out
    tokens = parse(out)
    html = markdown_it.MarkdownIt("commonmark", {"html": True}).enable("table").render(out)
    assert "<img" not in html and "<strong>d" not in html and 'href="http://x"' not in html
    kinds = {child.type for token in tokens if token.children for child in token.children}
    assert "html_inline" not in kinds and "link_open" not in kinds
    assert "&lt;img src=x&gt;" in html  # shown as text
    text = " ".join(child.content for token in tokens if token.children
                    for child in token.children if child.type == "text")
    assert HOSTILE.replace("&amp;", "&") in text.replace("&amp;", "&")


def test_a_long_report_fits_one_github_comment(write):
    # 3000 distinct ops: a by-op table of some 300 KB, cut to fit
    rows = [f"0,1,{step},{i},0,OP{i},n{i},1000,0" for step in (4, 5) for i in range(3000)]
    out = run("compute", write(ct_text(rows)), "--format", "markdown").out
    assert len(out) <= 65536
    assert re.search(r"\*\d+ rows left out to fit one comment; `--format json` has them all\.\*",
                     out)
    parse(out)


def test_diff_tables_have_the_json_rows(tmp_path):
    base, new = REAL_TRACES["qwen3moe-l4-io-serial.csv"], REAL_TRACES["qwen3moe-l4-io-overlap.csv"]
    diff = report("diff", base, new)
    found = tables(parse(run("diff", base, new, "--format", "markdown").out))
    for section in diff["sections"]:
        rows = found[section["title"]]
        assert [row[0] for row in rows] == [str(r["name"]) for r in section["rows"]]
        for row, expected in zip(rows, section["rows"]):
            change = expected["changes"][0]
            assert row[4] == ("" if change["ratio"] is None else f"{change['ratio']:.2f}x")
            if change["p"] is not None:
                assert row[5].endswith("~") == (change["significant"] is False)


def test_untrusted_names_in_a_diff_show_as_themselves(write):
    rows = [f'0,1,{step},0,0,"{HOSTILE}","{HOSTILE}",1000000,0' for step in (4, 5)]
    trace = write(ct_text(rows))
    out = run("diff", trace, trace, "--format", "markdown").out
    html = markdown_it.MarkdownIt("commonmark", {"html": True}).enable("table").render(out)
    assert "<img" not in html and "<strong>d" not in html and 'href="http://x"' not in html
    assert "&lt;img src=x&gt;" in html
