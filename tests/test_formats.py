"""Formats: text and Markdown drawn from one layout per kind of report (the same sections,
no row twice, bars kept), Markdown that a real parser reads as intended, output fit for a
terminal and a bug report (100 columns, the header first, ASCII where the terminal needs it),
and untrusted strings escaped for each."""
import io
import json
import os
import re
import subprocess
import sys
import textwrap

import pytest
from hypothesis import given, settings, strategies as st

import decode_analyze as da
import tracegen
from helpers import (REAL_TRACES, ROOT, ct_text, io_text, markdown_parser, report,
                     report_with_warnings, run)
from test_golden import COMMANDS, GOLDEN


def golden(name, ending):
    return (GOLDEN / f"{name}.{ending}").read_text(encoding="utf-8")


def view_of(argv):
    top = int(argv[argv.index("--top") + 1]) if "--top" in argv else \
        8 if argv[0] == "report" else 12
    full = "--full" in argv
    return da.View(top, "--layers" in argv or full, False, False, "--explain" in argv, full)


def parse(text):
    return markdown_parser().parse(text)


def tables(tokens, heads=False):
    """{title: [rows of cell texts]} of every table, titled by the paragraph or summary
    before it; a folded "the other N rows" table continues the table before it; heads: with
    the header row first."""
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
            found[title] = found.get(title, []) + rows[0 if heads and title not in found else 1:]
    return found


HOSTILE = "a|b `c` <img src=x> **d** [e](http://x) _f_ &amp;"


def commands_for(name):
    if "-io" in name:
        return [("io", "--adjacent", "--cache"), ("io", "--layers")]
    return [("compute",), ("compute", "--layers"), ("compute", "--phase", "prefill")]


def package_version():
    text = (ROOT / "pyproject.toml").read_text()
    return re.search(r'^version = "([^"]+)"', text, re.M).group(1)


UNPRINTABLE = ["\x7f", "\x85", "\x9b", "\u2028", "\u2029", "\u202e", "\u200b", "\u200f",
               "\ufeff", "\u2066"]


@pytest.mark.parametrize("name", list(COMMANDS))
def test_text_and_markdown_carry_every_section_the_layout_draws(name):
    """On the golden outputs (test_golden holds them equal to what the commands write)."""
    argv = COMMANDS[name]
    report, text, markdown = (golden(name, ending) for ending in ("json", "txt", "md"))
    report = json.loads(report)
    flat = " ".join(text.split())  # a heading may be folded over lines
    drawn = 0
    for section, blocks in da.drawn_sections(report, view_of(argv)):
        for block in blocks:
            if block.heading:
                drawn += 1
                assert " ".join(block.heading.split()) in flat, block.heading
    for section, blocks in da.drawn_sections(report, view_of(argv)._replace(full=True)):
        for block in blocks:  # Markdown has every table whole (a long one folded)
            if block.heading:
                assert da.md(block.heading) in markdown, block.heading
    assert drawn >= 2


def test_every_layout_section_is_drawn_by_some_golden_command():
    """So that the test above covers every section of every layout."""
    seen = set()
    for name, argv in COMMANDS.items():
        report = json.loads(golden(name, "json"))
        seen |= {(report["kind"], section.draw)
                 for section, blocks in da.drawn_sections(report, view_of(argv)) if blocks}
    for kind, layout in ((kind, each.layout) for kind, each in da.KINDS.items()):
        for section in layout:
            assert (kind, section.draw) in seen, (kind, section.draw.__name__)


def test_markdown_shows_no_table_row_twice(monkeypatch):
    monkeypatch.chdir(ROOT)
    markdown = run("report", "examples/session-ct.csv", "examples/session-io.csv",
                   "--format", "markdown").out
    rows = [line for line in markdown.splitlines() if line.startswith("| ")
            and not line.startswith("| op |")]
    by_op = [row for row in rows if row.startswith("| MUL\\_MAT\\_ID |")]
    assert len(by_op) == 1
    # the text's short form first, the whole table folded below it (issue: first view = text's)
    assert "of 18, the slowest: MUL\\_MAT\\_ID 7.39 ms" in markdown
    assert "<details><summary>by op (8 of 18, slowest first; us = one node's wall time): 18 " \
        "rows</summary>" in markdown


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
    assert not any(title.startswith("re-reads: ") for title in found)  # cached: no curve
    serial = tables(parse(run("io", REAL_TRACES["qwen3moe-l4-io-serial.csv"], "--cache",
                              "--format", "markdown").out))
    assert len(titled(serial, "re-reads: ")) == 5
    pair = run("report", REAL_TRACES["qwen3moe-l4-session-ct-node.csv"],
               REAL_TRACES["qwen3moe-l4-session-ct-node-io.csv"], "--format", "markdown").out
    assert len(titled(tables(parse(pair)), "by layer (compute by inferred layer)")) == 5


def test_untrusted_names_show_as_themselves(write):
    rows = [f'0,1,{step},0,0,"{HOSTILE}","{HOSTILE}",1000000,0' for step in (4, 5)]
    out = run("compute", write(ct_text(rows)), "--format", "markdown").out
    tokens = parse(out)
    html = markdown_parser().render(out)
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
    diff = report_with_warnings("diff", base, new, "--test", "tokens")
    found = tables(parse(run("diff", base, new, "--format", "markdown", "--test",
                             "tokens").out), heads=True)
    out = run("diff", base, new, "--format", "markdown", "--test", "tokens").out
    for section in diff["sections"]:
        if section["title"] not in found:  # every row equal: named on the one unchanged line
            assert all(change["delta"] == 0 for row in section["rows"]
                       for change in row["changes"])
            assert section["title"] in out.split("no significant change")[1]
            continue
        head, *rows = found[section["title"]]
        ratio, p = head.index("ratio"), head.index("p") if "p" in head else None
        assert [row[0] for row in rows] == [str(r["name"]) for r in section["rows"]]
        for row, expected in zip(rows, section["rows"]):
            change = expected["changes"][0]
            assert row[ratio] == ("" if change["ratio"] is None else f"{change['ratio']:.2f}x")
            if change["p"] is not None:
                assert row[p].endswith("~") == (change["significant"] is False)


def test_untrusted_names_in_a_diff_show_as_themselves(write):
    rows = [f'0,1,{step},0,0,"{HOSTILE}","{HOSTILE}",1000000,0' for step in (4, 5)]
    trace = write(ct_text(rows))
    slower = write(ct_text([row.replace(",1000000,", ",2000000,") for row in rows]), "s.csv")
    out = run("diff", trace, slower, "--format", "markdown").out
    html = markdown_parser().render(out)
    assert "<img" not in html and "<strong>d" not in html and 'href="http://x"' not in html
    assert "&lt;img src=x&gt;" in html


def test_verdicts_come_right_after_the_header():
    out = run("compute", REAL_TRACES["qwen3moe-l4-ct-node.csv"]).out
    assert out.index("verdicts") < out.index("by op")


@pytest.mark.parametrize("name", sorted(REAL_TRACES))
def test_no_line_over_100_columns(name):
    for command, *options in commands_for(name):
        out = run(command, REAL_TRACES[name], *options).out
        assert max(map(len, out.splitlines())) <= 100, (command, options)
    partner = next(other for other in sorted(REAL_TRACES)
                   if ("-io" in other) == ("-io" in name) and other != name)
    out = run("diff", REAL_TRACES[name], REAL_TRACES[partner]).out  # one NEW: one column group
    assert max(map(len, out.splitlines())) <= 100, partner


def test_no_line_of_the_session_report_over_100_columns():
    """Once, not with every trace above: it does not depend on which."""
    out = run("report", REAL_TRACES["qwen3moe-l4-session-ct-node.csv"],
              REAL_TRACES["qwen3moe-l4-session-ct-node-io.csv"]).out
    assert max(map(len, out.splitlines())) <= 100


def test_a_long_path_is_shown_whole_on_lines_of_its_own(tmp_path):
    deep = tmp_path / ("d" * 90) / ("e" * 120)
    deep.mkdir(parents=True)
    path = deep / "ct.csv"
    path.write_text(ct_text(["0,1,4,0,0,MUL_MAT,Qcur-0,1000,0"]))
    lines = run("compute", path).out.splitlines()
    assert max(map(len, lines)) <= 100 and lines[1] == "  trace:"
    end = next(i for i, line in enumerate(lines) if line.startswith("model="))
    assert "".join(line.strip() for line in lines[2:end]) == str(path)


def test_many_layers_are_compact_by_default(tmp_path):
    ct = tracegen.write(tmp_path / "ct.csv", tracegen.compute_lines(n_layer=48, decode_tokens=6))
    io = tracegen.write(tmp_path / "io.csv", tracegen.io_lines(n_layer=48, decode_tokens=6))
    compact = run("report", ct, io).out
    full = run("report", ct, io, "--layers").out
    section = compact.split("by layer")[1].split("\n\n")[0].splitlines()
    assert len(section) < 20 and "49 layers, min/median/max:" in section[1]
    assert len(full.split("by layer")[1].split("\n\n")[0].splitlines()) == 1 + 1 + 49
    assert len(report("report", ct, io)["pair"]["by_layer"]) == 49


def test_identical_layers_fold_into_one_line(write):
    rows = [f"0,1,4,{i},{layer},MUL_MAT,Qcur-{layer},{1000000 if layer != 20 else 5000000},0"
            for i, layer in enumerate(range(40))]
    io_rows = [f"0,1,4,{layer},1,0,0,0,{layer << 20},65536,65536,1000" for layer in range(40)]
    out = run("io", write(io_text(io_rows), "io.csv")).out
    assert "no layer stands out" in out
    compact = run("report", write(ct_text(rows), "ct.csv"), write(io_text(io_rows), "io.csv")).out
    table = compact.split("layers that stand out")[1].split("\n\n")[0]
    assert re.search(r"^ +20 +5\.00", table, re.M) and table.count("\n") < 6


def test_version():
    """One version everywhere: the package's, --version's, the report's and the header's."""
    version = package_version()
    done = subprocess.run([sys.executable, str(ROOT / "decode_analyze.py"), "--version"],
                          capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith(f"decode-analyze {version} ")
    r = report("compute", REAL_TRACES["qwen3moe-l4-ct-layers.csv"])
    assert r["tool_version"] == version and r["schema"] == da.SCHEMA
    assert run("compute", REAL_TRACES["qwen3moe-l4-ct-layers.csv"]).out.startswith(
        f"decode-analyze {version} compute")


@pytest.mark.parametrize("command", ["compute", "report"])
def test_cp1252_output_falls_back_to_ascii(command):
    paths = [REAL_TRACES["qwen3moe-l4-session-ct-node.csv"]]
    if command == "report":
        paths.append(REAL_TRACES["qwen3moe-l4-session-ct-node-io.csv"])
    done = subprocess.run([sys.executable, str(ROOT / "decode_analyze.py"), command, *paths],
                          capture_output=True, env={**os.environ, "PYTHONIOENCODING": "cp1252"})
    assert done.returncode == 0, done.stderr
    assert done.stderr == b"" and done.stdout.isascii() and b"  run |" in done.stdout
    # nothing written before the retry
    assert done.stdout.count(f"decode-analyze {package_version()}".encode()) == 1


def test_json_on_cp1252_stays_json(write):
    path = write(ct_text(["0,1,4,0,0,MUL_MAT,Qcur-0 é\u2192,1000,0"]).encode())
    done = subprocess.run([sys.executable, str(ROOT / "decode_analyze.py"), "compute", str(path),
                           "--format", "json"], capture_output=True,
                          env={**os.environ, "PYTHONIOENCODING": "cp1252"})
    assert done.returncode == 0
    assert json.loads(done.stdout.decode("cp1252"))["unclassified"][0]["name"] == "Qcur-0 é\u2192"


def test_json_escapes_every_unprintable_character(write):
    name = "evil" + "".join(UNPRINTABLE) + "-0"
    preamble = f"# compute_trace v1\n# model=m{UNPRINTABLE[2]}{UNPRINTABLE[5]}.gguf\n"
    path = write(ct_text([f"0,1,4,0,0,MUL_MAT,{name},1000,0"], preamble=preamble).encode())
    result = run("compute", path, "--format", "json")
    assert result.code == 0
    assert not any(ch in result.out for ch in UNPRINTABLE)
    parsed = json.loads(result.out)
    assert parsed["meta"]["model"] == f"m{UNPRINTABLE[2]}{UNPRINTABLE[5]}.gguf"
    assert parsed["unclassified"][0]["name"] == "evil" + "".join(UNPRINTABLE)
    text = run("compute", path).out
    assert not any(ch in text for ch in UNPRINTABLE) and "\\u202e" in text


def test_printable_non_ascii_stays_as_it_is(write):
    path = write(ct_text(["0,1,4,0,0,MUL_MAT,Qcur-0 é→ü,1000,0"]).encode())
    assert "é→ü" in run("compute", path, "--format", "json").out


def test_markdown_that_cannot_be_folded_under_the_limit_still_ends_and_fits(write):
    """One op name of 70,000 characters: no table can be folded enough; it used to loop for
    ever. Now cut at the limit, with a line that says so."""
    rows = [f"0,1,{step},0,0,{'X' * 70_000},n,1000,0" for step in (4, 5)]
    out = run("compute", write(ct_text(rows)), "--format", "markdown").out
    assert len(out) <= 65536
    assert out.rstrip().endswith("`--format json` has the whole report.*")


def test_cutting_a_long_markdown_table_ends(write):
    """A folded table of 400,000 rows (5 MB) is cut to one comment: a hang guard, not a timing
    (the cut was quadratic in the rows: this took hours)."""
    import signal

    def hang(signum, frame):
        raise TimeoutError("fit_comment did not end within 60 s")
    parts = ["**by op**\n\n<details><summary>x</summary>\n\n| a |\n|---|\n"
             + "\n".join(f"| row {i} |" for i in range(400_000)) + "\n\n</details>"]
    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(60)
    try:
        text = da.fit_comment(parts)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert len(text) <= 65536 and "rows left out to fit one comment" in text


def test_a_long_op_name_is_elided_to_keep_the_table_in_100_columns(write):
    """A 37-character op name made the by-op table 121 columns wide."""
    op = "MUL_MAT_ID_WITH_A_VERY_LONG_NAME_XXXX"
    rows = [f"0,1,{step},0,0,{op},ffn_up-0,1000,0" for step in (4, 5)]
    result = run("compute", write(ct_text(rows)))
    assert max(map(len, result.out.splitlines())) <= 100
    assert "…" in result.out and op[:7] in result.out
    assert run("compute", write(ct_text(rows)), "--format", "json").json["by_op"][0]["op"] == op


def test_a_long_preamble_value_stays_within_100_columns(write):
    rows = [f"0,1,{step},0,0,MUL_MAT,ffn_up-0,1000,0" for step in (4, 5)]
    long_model = "m" * 300 + ".gguf"
    preamble = f"# compute_trace v1\n# model={long_model}\n"
    out = run("compute", write(ct_text(rows, preamble=preamble))).out
    assert max(map(len, out.splitlines())) <= 100 and "model=mmm" in out


def test_every_line_fits_100_columns_on_a_48_layer_fault_trace(tmp_path):
    """The longest op and node names of a 48-layer graph, faults on, every command's text."""
    ct = tracegen.write(tmp_path / "ct.csv", tracegen.compute_lines(n_layer=48, decode_tokens=6))
    io = tracegen.write(tmp_path / "io.csv", tracegen.io_lines(n_layer=48, decode_tokens=6))
    layers = REAL_TRACES["qwen3moe-l4-ct-layers.csv"]
    assert report("compute", ct)["faults"]["majflt_per_token"] > 0
    for argv in (["compute", ct, "--layers", "--top", "100"], ["report", ct, io, "--layers"],
                 ["io", io, "--what-if", "--layers"], ["diff", ct, layers],
                 ["summary", ct, io, layers, REAL_TRACES["qwen3moe-l4-io-serial.csv"]]):
        result = run(*argv)
        assert result.code == 0, result.err
        long = [line for line in result.out.splitlines() if len(line) > 100]
        assert not long, (argv[0], long[:2])


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=" ab\u00e9-\t\u3000x", max_size=130))
def test_a_line_that_fits_is_folded_as_textwrap_folds_it(text):
    """wrap() keeps a line that fits as it is: the answer textwrap would give."""
    line = da.safe(text)
    assert da.wrap(line) == (textwrap.wrap(line, da.TEXT_WIDTH, subsequent_indent="    ",
                                           break_on_hyphens=False) or [""])


def test_a_long_node_name_is_cut_in_text_and_whole_in_json(write):
    """Bug: a 70,000-character node name was printed whole in text (the unclassified names'
    line); now every line of text fits 100 columns, and the JSON has the name whole."""
    name = "Y" * 70_000
    rows = [f"0,1,{step},0,0,MUL_MAT,{name},1000,0" for step in (4, 5)]
    path = write(ct_text(rows))
    assert max(map(len, run("compute", path).out.splitlines())) <= 100
    # Markdown's tables are as wide as their columns (GitHub scrolls them): bounded, not 70,000
    assert max(map(len, run("compute", path, "--format", "markdown").out.splitlines())) <= 300
    assert run("compute", path, "--format", "json").json["unclassified"][0]["name"] == name


def test_a_48_layer_markdown_report_is_the_answer_then_the_what_if_then_the_tables():
    """Bug: the Markdown of one 48-layer run was 245 lines, about 116 of them outside <details>:
    after the answer, per-layer and per-segment tables of nearly identical rows and the same
    note about layer 47 twice; the what-if came last. Now: at most 80 lines show (blank lines
    are not shown), the what-if before any per-layer table, alike rows one line (the table
    folded), the note once."""
    base = ROOT / "tests" / "data" / "l48-repeats" / "qwen3moe-l48-e128-serial-rep9"
    markdown = run("report", f"{base}-ct.csv", f"{base}-io.csv.gz", "--format", "markdown").out
    shown, depth = [], 0
    for line in markdown.splitlines():
        depth += line.startswith("<details")
        if depth == 0 and line.strip():
            shown.append(line)
        depth -= line.startswith("</details>")
    assert len(shown) <= 80, len(shown)
    heads = [line for line in shown if line.startswith("**")]
    what_if = next(i for i, head in enumerate(heads) if head.startswith("**what would it buy"))
    assert what_if < next(i for i, head in enumerate(heads) if head.startswith("**by layer"))
    assert "compute ms within 10% of their median, 2.01, in 48 of 49 rows; the others: 47 " \
           "0.07" in shown
    assert markdown.count("holds layer 47's MoE tail") == 1
