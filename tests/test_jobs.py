"""--jobs N: a plain file cut at token boundaries into up to N parts, folded by N processes and
merged in file order, gives exactly the one-process report; report reads its files at once."""
import pytest

import trace_io
import tracegen
from helpers import REAL_TRACES, assert_token_start, ct_text, io_text, run

OPTIONS = {"compute": ("--layers",), "io": ("--adjacent", "--cache")}


def without_path(result):
    assert result.code == 0, result.err
    report = result.json
    report.pop("path")
    return report


@pytest.fixture
def small_parts(monkeypatch):
    monkeypatch.setattr(trace_io, "PARALLEL_MIN_BYTES", 2048)


@pytest.mark.parametrize("name", ["qwen3moe-l4-ct-node.csv", "gemma4-l4-ct-layers.csv",
                                  "qwen3moe-l4-io-prefetch.csv",
                                  "qwen3moe-l4-session-ct-node.csv"])
def test_every_jobs_count_gives_the_same_report(name, small_parts):
    kind = "io" if "-io" in name else "compute"
    path = REAL_TRACES[name]
    one = without_path(run(kind, path, *OPTIONS[kind], "--jobs", "1", "--format", "json"))
    for jobs in range(2, 9):
        many = run(kind, path, *OPTIONS[kind], "--jobs", str(jobs), "--format", "json")
        assert without_path(many) == one, jobs
        assert many.err == ""


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


@pytest.mark.parametrize("jobs", ["1", "2", "4"])
def test_report_reads_both_files_at_once_with_the_same_result(tmp_path, jobs, small_parts):
    ct = tracegen.write(tmp_path / "ct.csv", tracegen.compute_lines(n_layer=4, decode_tokens=30))
    io = tracegen.write(tmp_path / "io.csv", tracegen.io_lines(n_layer=4, decode_tokens=30))
    one = run("report", ct, io, "--jobs", "1", "--format", "json")
    many = run("report", ct, io, "--jobs", jobs, "--format", "json")
    assert many.json == one.json and many.err == one.err


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
