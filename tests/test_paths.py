"""One answer whatever the path the reader takes: the fast path or line by line, one process or
several (--jobs, a file cut at token boundaries), a file or stdin, a token in one piece or in
many; and the split's own rules (its cut points, the first error in file order, dead children)."""
import gzip
import io
import json
import os
import re
import shutil
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

import decode_analyze
import trace_io
import tracegen
from helpers import (CT_48_LAYERS, REAL_TRACES, assert_token_start, ct_text, difference, io_text,
                     report, run)


needs_fork = pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork")


OPTIONS = {"compute": ("--layers",), "io": ("--adjacent", "--cache", "--what-if")}


def kind_of(name):
    return "io" if "-io" in name else "compute"


def json_of(result):
    assert result.code == 0, result.err
    report = result.json
    report.pop("path")
    return report


def without_path(result):
    assert result.code == 0, result.err
    report = result.json
    report.pop("path")
    return report


@pytest.fixture
def small_parts(monkeypatch):
    monkeypatch.setattr(trace_io, "PARALLEL_MIN_BYTES", 2048)


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    folder = tmp_path_factory.mktemp("parallel")
    return {
        "ct": tracegen.write(folder / "ct.csv", tracegen.compute_lines(
            n_layer=3, decode_tokens=40, turns=2, seed=3)),
        "layers": tracegen.write(folder / "layers.csv", tracegen.compute_lines(
            n_layer=3, decode_tokens=40, layers=True, seed=4)),
        "io": tracegen.write(folder / "io.csv", tracegen.io_lines(
            n_layer=4, decode_tokens=60, reads_per_token=40, spec_share=0.2, seed=5)),
    }


@pytest.fixture
def child_marks(monkeypatch, tmp_path):
    """Each child that folds a part leaves its pid in a file; returns the list of pids."""
    real = trace_io._fold_part

    def marked(*args):
        (tmp_path / f"child-{trace_io.os.getpid()}").write_text("")
        return real(*args)
    monkeypatch.setattr(trace_io, "_fold_part", marked)
    return lambda: [int(p.name.split("-")[1]) for p in tmp_path.glob("child-*")]


class DiesWhilePickled:
    def __reduce__(self):
        trace_io.os._exit(3)


IO_ROWS = ["0,1,4,0,1,0,0,0,0,4096,4096,1000", "0,1,4,0,2,0,1,0,4096,4096,4096,1000",
           "0,1,4,0,3,0,0,0,8192,4096,4096,1000"]


def without_warnings(r):
    return {key: value for key, value in r.items() if key not in ("warnings", "path")}


# 13. one rule on every path: a quoted line anywhere in the batch changes nothing
PROBES = ["0,1,4,0, 1,0,0,0,0,4096,4096,1000", "0,1,4,0,1,0,00,0,0,4096,4096,1000",
          "0,1,4,0,1,0,0,0,0,4096,-4096,1000", "0,1,4,0,1,0,0,0,0,4096,4096,1e3",
          "0,1,4,0,1,0,0,0,0,4096,4096,1000,", "0,0,4,0,1,0,x,0,0,4096,4096,1000"]

IO_PREFETCH = REAL_TRACES["qwen3moe-l4-io-prefetch.csv"]
V2_CT = REAL_TRACES["qwen3moe-l4-ct-node.csv"].parent / "v2" / "ct.csv"
V2_IO = V2_CT.parent / "io.csv"


def repeated(source, target, copies):
    """A v2 trace of `copies` copies of the source run one after another (steps and times
    shifted), so that a split has tokens to cut between."""
    lines = source.read_text().splitlines(keepends=True)
    head = [line for line in lines if line.startswith("#")] + [
        next(line for line in lines if not line.startswith("#"))]
    header = head[-1].rstrip("\n").split(",")
    body = lines[len(head):]
    out = list(head)
    for copy in range(copies):
        for line in body:
            fields = line.rstrip("\n").split(",")
            fields[header.index("step")] = str(int(fields[header.index("step")]) + 3 * copy)
            for column in ("start_ns", "end_ns"):
                i = header.index(column)
                fields[i] = str(int(fields[i]) + 5_000_000 * copy)
            out.append(",".join(fields) + "\n")
    target.write_text("".join(out))
    return target


@pytest.fixture(scope="module")
def every_command(traces, tmp_path_factory):
    """{command: its argv}, for every command of the registry, on inputs large enough to be
    cut into parts of a few KiB."""
    folder = tmp_path_factory.mktemp("every-command")
    v2_ct, v2_io = repeated(V2_CT, folder / "v2-ct.csv", 200), repeated(V2_IO, folder / "v2-io.csv",
                                                                       200)
    cases = {"compute": ["compute", traces["ct"], "--layers"],
             "io": ["io", traces["io"], "--adjacent", "--cache", "--what-if"],
             "report": ["report", traces["ct"], traces["io"]],
             "diff": ["diff", traces["ct"], traces["layers"]],
             "timeline": ["timeline", v2_ct, v2_io],
             "summary": ["summary", traces["layers"], traces["ct"], traces["io"]]}
    assert set(cases) == {name for name, command in decode_analyze.COMMANDS.items()
                          if command.inputs}, "a new command that reads traces needs its case here"
    for name, path in REAL_TRACES.items():
        kind = kind_of(name)
        cases[f"{kind} {name}"] = [kind, path, *OPTIONS[kind]]
    return cases


PATH_CASES = sorted(name for name, command in decode_analyze.COMMANDS.items()
                    if command.inputs) + [f"{kind_of(name)} {name}"
                                                for name in sorted(REAL_TRACES)]


def answer(argv, folder):
    """The JSON of a run (and its SVG, where the command draws one), with each input's name
    replaced by its position, so that runs on copies of the inputs compare."""
    command = decode_analyze.COMMANDS[argv[0]]
    svg = folder / "out.svg"
    extra = ["--svg", svg] if "svg" in command.pictures else []
    result = run(*argv, *extra, "--format", "json")
    assert result.code == 0, result.err
    text = result.out + (svg.read_text() if extra else "")
    text = re.sub(r'"log": "[^"]*"', '"log": "<the engine log>"', text)  # a copy's, or named
    inputs = [arg for arg in argv[1:] if isinstance(arg, Path) or arg == "-"]
    for i, path in enumerate(inputs):
        for name in (["<stdin>", "&lt;stdin&gt;"] if path == "-" else
                     [json.dumps(str(path))[1:-1]]):
            text = text.replace(name, f"<input {i}>")
        if path != "-":  # summary and the SVG's footer name an input by the end of its path
            text = re.sub(rf"(?<![\w.-]){re.escape(path.name)}(?![\w.])", f"<input {i}>", text)
    return text


def compressed(path, folder):
    """A gzip copy under the same name (the reader knows gzip by its magic bytes), so that
    the names the outputs show (summary's runs, the SVG's legends) are the same."""
    target = folder / "gzip" / path.name
    target.parent.mkdir(exist_ok=True)
    target.write_bytes(gzip.compress(path.read_bytes()))
    log = decode_analyze.log_beside([str(path)])
    if log:  # NAME.log is found beside NAME.csv.gz as beside NAME.csv
        shutil.copy(log, target.parent / os.path.basename(log))
    return target


@pytest.mark.parametrize("case", PATH_CASES)
def test_every_command_gives_one_answer_whatever_the_path(case, every_command, monkeypatch,
                                                          tmp_path):
    """Every command, and compute and io on every real trace: one process, parts of a few KiB
    read by 2 (line by line), 3 and 8 processes, the line-by-line path for every line, gzip,
    and stdin give byte for byte the same report (and the same SVG, where the command draws
    one)."""
    argv = every_command[case]
    command = argv[0]
    inputs = [arg for arg in argv[1:] if isinstance(arg, Path)]
    monkeypatch.setattr(trace_io, "PARALLEL_MIN_BYTES", 1 << 60)
    one = answer(argv + ["--jobs", "1"], tmp_path)
    monkeypatch.setattr(trace_io, "PARALLEL_MIN_BYTES", 2048)
    for jobs in (3, 8):  # 2 processes: the line-by-line run below
        assert difference(answer(argv + ["--jobs", str(jobs)], tmp_path), one) is None, jobs
    monkeypatch.setattr(trace_io.Trace, "_fast_batch", lambda self, *args, **kwargs: None)
    assert difference(answer(argv + ["--jobs", "2"], tmp_path), one) is None, "line by line"
    monkeypatch.undo()
    gzipped = [compressed(path, tmp_path) if isinstance(path, Path) else path for path in argv]
    assert difference(answer(gzipped, tmp_path), one) is None, "gzip"
    if command != "timeline":  # timeline's second input is not read from stdin here
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(inputs[0].read_bytes())))
        log = decode_analyze.log_beside([str(inputs[0])])  # stdin has no folder: its log is named
        named = ["--engine-log", log] if log and command in ("compute", "io") else []
        assert difference(answer([argv[0], "-", *argv[2:], *named], tmp_path), one) is None, \
            "stdin"


def test_the_parts_are_cut_at_token_starts(small_parts):
    path = REAL_TRACES["qwen3moe-l4-ct-node.csv"]
    with trace_io.Trace(str(path)) as trace:
        points = trace_io.split_points(trace, 8)
    assert len(points) == 7 and points == sorted(set(points))
    for point in points:
        assert_token_start(path.read_bytes(), point)


def test_the_first_error_in_file_order_wins_across_parts(write, small_parts):
    rows = [f"0,1,{step},0,0,MUL_MAT,Qcur-0,1000,0" for step in range(2000)]
    rows[900] = "0,1,900,0,0,MUL_MAT,Qcur-0,bad,0"
    rows[1900] = "0,1,1900,0,0,MUL_MAT,Qcur-0,worse,0"
    result = run("compute", write(ct_text(rows)), "--jobs", "6")
    assert result.code == 1 and result.err.strip().endswith(
        "t.csv:904: column wall_ns: 'bad' is not a non-negative integer")


def test_report_errors_and_warnings_keep_their_order(write):
    ct = write(ct_text(["0,1,4,0,0,MUL_MAT,Qcur-0,1000,0"]).replace("v1", "v7"), "ct.csv")
    io = write(io_text(["0,1,4,0,1,0,0,0,0,4096,4096,1000"]).replace("v1", "v8"), "io.csv")
    for jobs in ("1", "2"):
        result = run("report", ct, io, "--jobs", jobs)
        lines = result.err.splitlines()
        assert "unknown compute_trace version v7" in lines[0]
        assert "unknown io_trace version v8" in lines[1]
    bad_ct = write(ct_text(["0,1,4,0,0,MUL_MAT,Qcur-0,x,0"]), "bad-ct.csv")
    bad_io = write(io_text(["0,1,4,0,1,0,0,0,0,4096,x,1000"]), "bad-io.csv")
    for jobs in ("1", "2"):
        result = run("report", bad_ct, bad_io, "--jobs", jobs)
        assert result.code == 1 and "bad-ct.csv:4: column wall_ns" in result.err


def test_jobs_must_be_positive():
    assert run("compute", "x", "--jobs", "0").code == 2


@needs_fork
def test_split_lands_on_a_token_boundary(traces):
    from trace_io import Trace
    trace_io.PARALLEL_MIN_BYTES, saved = 1024, trace_io.PARALLEL_MIN_BYTES
    try:
        with Trace(str(traces["ct"])) as trace:
            (split,) = trace_io.split_points(trace, 2)
    finally:
        trace_io.PARALLEL_MIN_BYTES = saved
    assert_token_start(traces["ct"].read_bytes(), split)


@needs_fork
def test_error_in_the_second_half_names_its_line(write, small_split):
    rows = [f"0,1,{step},0,0,MUL_MAT,Qcur-0,1000,0" for step in range(400)]
    rows[350] = "0,1,350,0,0,MUL_MAT,Qcur-0,12x,0"
    single, parallel = small_split("compute", write(ct_text(rows)))
    assert single.code == parallel.code == 1
    assert single.err == parallel.err
    assert "t.csv:354: column wall_ns: '12x'" in parallel.err


@needs_fork
def test_error_in_both_halves_reports_the_first(write, small_split):
    rows = [f"0,1,{step},0,0,MUL_MAT,Qcur-0,1000,0" for step in range(400)]
    rows[10] = "0,1,10,0,0,MUL_MAT,Qcur-0,bad,0"
    rows[350] = "0,1,350,0,0,MUL_MAT,Qcur-0,12x,0"
    _, parallel = small_split("compute", write(ct_text(rows)))
    assert "t.csv:14: column wall_ns: 'bad'" in parallel.err


@needs_fork
def test_skipped_rows_and_truncated_tail_add_up(write, small_split):
    rows = [f"0,1,{step},0,0,MUL_MAT,Qcur-0,1000,0" for step in range(400)]
    rows[20] = rows[380] = "0,1,1,0,0,MUL_MAT,Qcur-0,x,0"
    text = ct_text(rows) + "0,1,400,0,0,MUL"
    single, parallel = small_split("compute", write(text), "--skip-bad-rows", "--format", "json")
    assert single.json == parallel.json and single.err == parallel.err
    assert "skipped 2 bad row(s) (first: line 24" in parallel.err
    assert "t.csv:404: last line has no newline at the end" in parallel.err


@needs_fork
def test_io_key_error_in_the_second_half(write, small_split):
    rows = [f"0,1,{step},0,1,0,0,0,0,4096,4096,1000" for step in range(300)]
    rows[250] = "0,1,250,0,1,0,zz,0,0,4096,4096,1000"
    single, parallel = small_split("io", write(io_text(rows)))
    assert single.err == parallel.err and "t.csv:254: column lane: 'zz'" in parallel.err


@needs_fork
def test_skip_reads_in_one_piece(traces, small_split):
    single, parallel = small_split("compute", traces["ct"], "--skip", "3", "--format", "json")
    assert single.json == parallel.json and single.json["tokens"] == 2 * 37


@needs_fork
def test_the_child_folds_its_part_and_the_parent_does_not_refold_it(traces, small_split,
                                                                   child_marks, monkeypatch):
    def refold(*args):
        raise AssertionError("the child's part was folded again in the parent")
    monkeypatch.setattr(trace_io, "_refold", refold)
    single, parallel = small_split("io", traces["io"], "--adjacent", "--cache", "--format",
                                   "json")
    pids = child_marks()
    assert len(pids) == 1 and pids[0] != trace_io.os.getpid()
    assert single.json == parallel.json and parallel.err == ""


@needs_fork
def test_a_dead_child_is_said_and_its_part_read_again(traces, small_split, monkeypatch):
    monkeypatch.setattr(trace_io, "_fold_part", lambda *args: trace_io.os._exit(3))
    single, parallel = small_split("compute", traces["ct"], "--format", "json")
    assert parallel.code == 0
    assert single.json["per_token"] == parallel.json["per_token"]
    assert single.json["by_op"] == parallel.json["by_op"]
    assert "of the file died; that part was read again here" in parallel.err


@needs_fork
def test_a_child_that_dies_half_way_through_its_answer_is_read_again(traces, small_split,
                                                                     monkeypatch):
    # The parent unpickles as the bytes arrive: a message cut short is a dead child, not a
    # traceback, even with megabytes of it already read.
    monkeypatch.setattr(trace_io, "_fold_part",
                        lambda *args: ("ok", [b"x" * (4 << 20), DiesWhilePickled()]))
    single, parallel = small_split("compute", traces["ct"], "--format", "json")
    assert parallel.code == 0
    assert single.json["per_token"] == parallel.json["per_token"]
    assert "of the file died; that part was read again here" in parallel.err


# 10. a split into two processes never divides a token, quoted rows or not
def test_a_token_whose_first_rows_are_quoted_is_not_split(write, small_split):
    rows = []
    for step in range(4, 44):
        rows += [f'0,1,{step},0,0,MUL_MAT,"Qcur-0, part 0",1000000,0',
                 f'0,1,{step},1,0,MUL_MAT,"Qcur-0, part 1",1000000,0',
                 f"0,1,{step},2,0,ADD,l_out-0,{step * 1000},0"]
    path = write(ct_text(rows))
    single, parallel = small_split("compute", path, "--format", "json")
    assert single.json == parallel.json and parallel.err == ""
    assert parallel.json["tokens"] == 40 and len({tuple(g["op"] for g in parallel.json["by_op"])}) == 1
    with trace_io.Trace(str(path)) as trace:  # the second run did read it in two parts
        assert len(trace_io.split_points(trace, 2)) == 1


def test_the_split_point_is_a_token_boundary_with_quoted_lines(write, monkeypatch):
    rows = [f'0,1,{step},{i},0,MUL_MAT,"a, {i}",1000,0' for step in range(4, 200)
            for i in range(3)]
    path = write(ct_text(rows))
    monkeypatch.setattr(trace_io, "PARALLEL_MIN_BYTES", 256)
    with trace_io.Trace(str(path)) as trace:
        (split,) = trace_io.split_points(trace, 2)
    assert_token_start(path.read_bytes(), split)
    assert path.read_bytes()[split:].split(b",")[3] == b"0"  # the new token's first row


@pytest.mark.parametrize("probe", PROBES)
@pytest.mark.parametrize("skip", [False, True])
def test_fast_and_line_by_line_paths_agree(write, probe, skip):
    rows = IO_ROWS + [probe] + [f"0,1,{s},0,1,0,0,0,0,4096,4096,1000" for s in range(6, 40)]
    quoted = rows + ['0,1,99,"0",1,0,0,0,0,4096,4096,1000']  # a quoted field: legal CSV
    plain = rows + ["0,1,99,0,1,0,0,0,0,4096,4096,1000"]
    options = ("--skip-bad-rows",) if skip else ()
    fast = run("io", write(io_text(plain), "plain.csv"), *options, "--format", "json")
    slow = run("io", write(io_text(quoted), "quoted.csv"), *options, "--format", "json")
    assert fast.code == slow.code
    assert fast.err.replace("plain.csv", "X") == slow.err.replace("quoted.csv", "X")
    if fast.code == 0:
        assert without_warnings(fast.json) == without_warnings(slow.json)


def test_one_long_token_keeps_its_figures(long_token):
    from helpers import report
    assert 64_000 > 3 * trace_io.HOLD_ROWS  # the token is handed out in pieces
    single = report("compute", long_token / "single.csv", "--layers")
    many = report("compute", long_token / "many.csv", "--layers")
    assert single["tokens"] == 1 and many["tokens"] == 400
    assert single["rows"] == many["rows"] == 64_000
    for table, key in (("by_op", "op"), ("by_category", "category")):
        totals = {row[key]: row["ms_per_token"] for row in single[table]}
        assert totals == pytest.approx({row[key]: row["ms_per_token"] * 400
                                        for row in many[table]})
    assert {(r["op"], r["p50_us"], r["p99_us"], r["max_us"]) for r in single["by_op"]} == \
        {(r["op"], r["p50_us"], r["p99_us"], r["max_us"]) for r in many["by_op"]}


AWKWARD = ["", " ", "\t", "\r", '"', ",", "a", "1", "0", "01", "5 ", " 5", "x y", "é", "\x1b",
           "-1", "1\r", "MUL_MAT ", '""', "a,b"]
HEADERS = ["turn,phase,step,seq,layer,op,name,wall_ns,majflt",   # an integer column last
           "turn,phase,step,seq,layer,wall_ns,majflt,op,name",   # a string column last
           "turn,phase,step,layer,op,name,wall_ns,majflt,seq"]   # an unread column last


def csv_field(value):
    return '"' + value.replace('"', '""') + '"' if any(c in value for c in ',"\r') else value


def read_both_ways(text, skip):
    """(columns of every batch, or the error) of a compute trace read on the fast path where it
    can, and on the line-by-line path only."""
    import tempfile
    outcomes = []
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "t.csv"
        path.write_bytes(text.encode("utf-8"))
        for slow in (False, True):
            original = trace_io.Trace._fast_batch
            if slow:
                trace_io.Trace._fast_batch = lambda self, *args, **kwargs: None
            try:
                with trace_io.Trace(str(path), skip) as trace:
                    outcomes.append(([dict(batch) for batch in
                                      trace.batches(decode_analyze.COMPUTE_READ)], trace.skipped))
            except trace_io.TraceError as problem:
                outcomes.append(str(problem))
            finally:
                trace_io.Trace._fast_batch = original
    return outcomes


@settings(max_examples=150, deadline=None)
@given(header=st.sampled_from(HEADERS), edits=st.lists(st.tuples(
    st.integers(0, 8), st.sampled_from(AWKWARD)), min_size=1, max_size=3),
    row=st.integers(0, 2), skip=st.booleans(), crlf=st.booleans())
def test_both_paths_read_every_awkward_line_alike(header, edits, row, skip, crlf):
    """Whitespace, carriage returns, quotes, commas and bad numbers in any field, first,
    middle or last column, read or not: the fast path gives what the line-by-line path gives,
    whatever the rows around it (it used to strip the last column's white space, and take a
    lone CR the other path refuses)."""
    names = header.split(",")
    values = {"turn": "0", "phase": "1", "seq": "0", "layer": "0", "op": "MUL_MAT",
              "name": "ffn_up-0", "wall_ns": "1000", "majflt": "0"}
    rows = [[values.get(name, str(step)) for name in names] for step in (4, 5, 6)]
    for position, value in edits:
        rows[row][position] = value
    end = "\r\n" if crlf else "\n"
    text = "# compute_trace v1\n# model=m\n" + header + end + "".join(
        ",".join(map(csv_field, fields)) + end for fields in rows)
    fast, slow = read_both_ways(text, skip)
    assert fast == slow


def test_a_bad_step_inside_a_token_does_not_cut_it_in_two(write, monkeypatch):
    """With --skip-bad-rows the reader keeps a token whole around a row whose step is bad; the
    splitter cut there, and each part classified its half alone (the unnamed node after the
    cut lost the category of the named node before it)."""
    rows = [f"0,1,{step},{seq},0,{op},{name},1000,0" for step in range(4, 204)
            for seq, (op, name) in enumerate([("MUL_MAT_ID", "ffn_moe_up-0"),
                                               ("ADD", "node_7")] * 20)]
    data = ct_text(rows)
    monkeypatch.setattr(trace_io, "PARALLEL_MIN_BYTES", 2048)
    path = write(data)
    with trace_io.Trace(str(path)) as trace:
        start = trace.body_start + (len(data.encode()) - trace.body_start) // 2
    # the first whole named row after the middle: its step made bad
    at = data.index("\n", start) + 1
    at = data.index("MUL_MAT_ID", at)
    at = data.rindex("\n", 0, at) + 1
    fields = data[at:data.index("\n", at)].split(",")
    fields[2] = "x"
    corrupt = data[:at] + ",".join(fields) + data[data.index("\n", at):]
    path = write(corrupt)
    one = run("compute", path, "--skip-bad-rows", "--jobs", "1", "--format", "json")
    two = run("compute", path, "--skip-bad-rows", "--jobs", "2", "--format", "json")
    assert one.code == two.code == 0
    assert one.json["by_category"] == two.json["by_category"]
    assert difference(one.out, two.out) is None


def test_a_giant_token_classifies_its_layers_as_ordinary_tokens_do(write):
    """A token of 34,560 rows is read in pieces of about 16,384, which end inside a layer: its layer
    -1 nodes (a view, an unnamed ADD) and its shared expert at a piece boundary kept their
    inferred layer and category (7,694 ns had moved from layer 0 to -1)."""
    # Most places a piece can end in are inside a run of layer -1 rows, or between the shared
    # expert's ffn_up and the router that makes it the shared expert, not a dense FFN.
    layer_rows = ([("RMS_NORM", "attn_norm-{L}", "{L}", 1000)]
                  + [("VIEW", "Qcur-{L} (view)", "-1", 30)] * 10
                  + [("MUL_MAT", "ffn_up-{L}", "{L}", 500)] + [("ADD", "node_5", "-1", 70)] * 10
                  + [("MUL_MAT", "ffn_moe_logits-{L}", "{L}", 200),
                     ("MUL_MAT_ID", "ffn_moe_up-{L}", "{L}", 900)])
    graph = [(op, name.format(L=layer), lay.format(L=layer), ns)
             for layer in range(48) for op, name, lay, ns in layer_rows]
    copies = 30  # 34,560 rows

    def rows(step_of):
        return [f"0,1,{step_of(copy)},{seq},{lay},{op},{name},{ns},0"
                for copy in range(copies) for seq, (op, name, lay, ns) in enumerate(graph)]
    giant = report("compute", write(ct_text(rows(lambda copy: 7), CT_48_LAYERS), "giant.csv"),
                   "--layers")
    many = report("compute", write(ct_text(rows(lambda copy: 7 + copy), CT_48_LAYERS),
                                   "many.csv"), "--layers")
    assert giant["tokens"] == 1 and many["tokens"] == copies
    for table, key in (("by_layer", "layer"), ("by_category", "category"), ("by_op", "op")):
        assert {row[key]: round(row["ms_per_token"], 9) for row in giant[table]} == \
            {row[key]: round(row["ms_per_token"] * copies, 9) for row in many[table]}, table
    assert giant["unclassified"] == many["unclassified"] == []


NAMES = ["attn_norm-0", "ffn_moe_up-0", "node_3", "Qcur-0 (view)", "a,b", ' x "y" ', "é-1",
         "ffn_up-1", "ffn_moe_logits-1"]
BAD = ["x", "-2", "", "1 ", "\r", "9" * 25]


@settings(max_examples=10, deadline=None, derandomize=True)  # the same cases on every machine
@given(tokens=st.integers(2, 30), nodes=st.integers(3, 40), seed=st.integers(0, 10 ** 6),
       bad=st.lists(st.tuples(st.integers(0, 10 ** 6), st.integers(0, 8),
                              st.sampled_from(BAD)), max_size=5))
def test_one_answer_for_every_jobs_and_path_on_generated_traces(tokens, nodes, seed, bad):
    """Generated compute traces with duplicated and awkward names (quoted, commas, spaces) and
    bad rows (--skip-bad-rows; never all of them): --jobs 1, 2, 3 and 8 over parts of a few
    hundred bytes, the line-by-line path and gzip give one report."""
    import random
    import tempfile
    rng = random.Random(seed)
    rows = []
    for token in range(tokens):
        for seq in range(nodes):
            fields = ["0", "1", str(10 + token), str(seq), str(rng.choice([-1, 0, 1])),
                      rng.choice(["MUL_MAT", "ADD", "MUL_MAT_ID"]), rng.choice(NAMES),
                      str(rng.randrange(1, 10 ** 6)), str(rng.choice([0, 0, 3]))]
            rows.append(fields)
    for where, column, value in bad:
        rows[where % len(rows)][column] = value
    text = ct_text([",".join(csv_field(field) for field in fields) for fields in rows])
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "t.csv"
        path.write_text(text, newline="")
        original_min, original_fast = trace_io.PARALLEL_MIN_BYTES, trace_io.Trace._fast_batch
        try:
            trace_io.PARALLEL_MIN_BYTES = 1 << 60
            one = answer(["compute", path, "--skip-bad-rows", "--layers", "--jobs", "1"],
                         Path(folder))
            trace_io.PARALLEL_MIN_BYTES = 512
            for jobs in (2, 3, 8):  # two parts, an odd count, more parts than rows allow
                argv = ["compute", path, "--skip-bad-rows", "--layers", "--jobs", str(jobs)]
                assert difference(answer(argv, Path(folder)), one) is None, jobs
            trace_io.Trace._fast_batch = lambda self, *args, **kwargs: None
            assert difference(answer(["compute", path, "--skip-bad-rows", "--layers"],
                                     Path(folder)), one) is None, "line by line"
        finally:
            trace_io.PARALLEL_MIN_BYTES, trace_io.Trace._fast_batch = original_min, original_fast
        gzipped = compressed(path, Path(folder))
        assert difference(answer(["compute", gzipped, "--skip-bad-rows", "--layers"],
                                 Path(folder)), one) is None, "gzip"


def test_the_default_jobs_are_the_usable_cores(monkeypatch, tmp_path):
    """Without --jobs: one for small inputs, else the usable cores (at most 8). Two processes
    won on wall even with the other of 2 cores busy (0.85 s against 0.98 on a 499k-read io
    trace); a default of the idle cores ran one there, 1.39x the release's wall (issue 51)."""
    monkeypatch.setattr(trace_io, "usable_cores", lambda: 3)
    small, large = tmp_path / "small.csv", tmp_path / "large.csv"
    small.write_bytes(b"x")
    with open(large, "wb") as f:
        f.truncate(trace_io.PARALLEL_MIN_BYTES)

    assert trace_io.default_jobs([str(small), "-"], 8) == 1
    assert trace_io.default_jobs([str(small), str(large)], 8) == 3
    assert trace_io.default_jobs([str(large)], 2) == 2


def test_the_jobs_help_says_the_default_the_code_takes():
    """--help once said the default was the cores idle now, sampled for 50 ms: the code had
    stopped sampling them (the test above), and the help had not followed."""
    parser = decode_analyze.parser_of(tuple(decode_analyze.COMMANDS.values()))
    words = " ".join(parser._subparsers._group_actions[0].choices["io"].format_help().split())
    assert f"default: 1 when no input is over {trace_io.PARALLEL_MIN_BYTES >> 20} MiB, else " \
           f"the usable cores, at most {decode_analyze.MAX_JOBS}" in words
    assert "idle" not in words


def test_report_reads_each_file_with_every_job(monkeypatch):
    """report once read its two files at once, each with its share of the jobs: a large io
    trace beside a small compute trace was read in one process (1.41x the two commands in
    turn, issue 51). One after the other, each gets them all."""
    jobs = []

    def recorded(path, columns, make_fold, reading, check=None):
        jobs.append((columns.kind, reading.jobs))
        return trace_io.fold_file(path, columns, make_fold, reading, check)
    monkeypatch.setattr(decode_analyze, "fold_file", recorded)
    ct, io_trace = (REAL_TRACES[name] for name in ("qwen3moe-l4-ct-node.csv",
                                                   "qwen3moe-l4-io-serial.csv"))
    assert run("report", ct, io_trace, "--jobs", "2", "--no-engine-log").code == 0
    assert ("compute", 2) in jobs and ("io", 2) in jobs
