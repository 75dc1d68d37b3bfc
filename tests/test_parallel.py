"""A large plain file is folded by two processes, split at a token boundary; the report must
be exactly the one a single pass gives, errors and warnings included."""
import pytest

import decode_analyze
import trace_io
import tracegen
from helpers import assert_token_start, ct_text, io_text, run

pytestmark = pytest.mark.skipif(not hasattr(decode_analyze.os, "fork"), reason="no fork")


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


@pytest.mark.parametrize("argv", [
    ("compute", "ct"), ("compute", "ct", "--turn", "1"), ("compute", "ct", "--phase", "all"),
    ("compute", "layers"), ("io", "io", "--adjacent", "--cache"), ("io", "io", "--steps", "70:"),
])
def test_two_processes_give_the_single_pass_report(traces, small_split, argv):
    command, name, *options = argv
    single, parallel = small_split(command, traces[name], *options, "--format", "json")
    assert single.code == parallel.code == 0
    assert single.json == parallel.json
    assert single.err == parallel.err == ""


def test_pair_report_in_two_processes(traces, small_split):
    single, parallel = small_split("report", traces["ct"], traces["io"], "--format", "json")
    assert single.json == parallel.json


def test_split_lands_on_a_token_boundary(traces):
    from trace_io import Trace
    trace_io.PARALLEL_MIN_BYTES, saved = 1024, trace_io.PARALLEL_MIN_BYTES
    try:
        with Trace(str(traces["ct"])) as trace:
            (split,) = trace_io.split_points(trace, 2)
    finally:
        trace_io.PARALLEL_MIN_BYTES = saved
    assert_token_start(traces["ct"].read_bytes(), split)


def test_error_in_the_second_half_names_its_line(write, small_split):
    rows = [f"0,1,{step},0,0,MUL_MAT,Qcur-0,1000,0" for step in range(400)]
    rows[350] = "0,1,350,0,0,MUL_MAT,Qcur-0,12x,0"
    single, parallel = small_split("compute", write(ct_text(rows)))
    assert single.code == parallel.code == 1
    assert single.err == parallel.err
    assert "t.csv:354: column wall_ns: '12x'" in parallel.err


def test_error_in_both_halves_reports_the_first(write, small_split):
    rows = [f"0,1,{step},0,0,MUL_MAT,Qcur-0,1000,0" for step in range(400)]
    rows[10] = "0,1,10,0,0,MUL_MAT,Qcur-0,bad,0"
    rows[350] = "0,1,350,0,0,MUL_MAT,Qcur-0,12x,0"
    _, parallel = small_split("compute", write(ct_text(rows)))
    assert "t.csv:14: column wall_ns: 'bad'" in parallel.err


def test_skipped_rows_and_truncated_tail_add_up(write, small_split):
    rows = [f"0,1,{step},0,0,MUL_MAT,Qcur-0,1000,0" for step in range(400)]
    rows[20] = rows[380] = "0,1,1,0,0,MUL_MAT,Qcur-0,x,0"
    text = ct_text(rows) + "0,1,400,0,0,MUL"
    single, parallel = small_split("compute", write(text), "--skip-bad-rows", "--format", "json")
    assert single.json == parallel.json and single.err == parallel.err
    assert "skipped 2 bad row(s) (first: line 24" in parallel.err
    assert "t.csv:404: last line has no newline at the end" in parallel.err


def test_io_key_error_in_the_second_half(write, small_split):
    rows = [f"0,1,{step},0,1,0,0,0,0,4096,4096,1000" for step in range(300)]
    rows[250] = "0,1,250,0,1,0,zz,0,0,4096,4096,1000"
    single, parallel = small_split("io", write(io_text(rows)))
    assert single.err == parallel.err and "t.csv:254: column lane: 'zz'" in parallel.err


def test_skip_reads_in_one_piece(traces, small_split):
    single, parallel = small_split("compute", traces["ct"], "--skip", "3", "--format", "json")
    assert single.json == parallel.json and single.json["tokens"] == 2 * 37


def test_lru_curve_in_two_processes(traces, monkeypatch):
    monkeypatch.setattr(trace_io, "PARALLEL_MIN_BYTES", 1 << 60)
    single = run("io", traces["io"], "--cache", "--format", "json")
    monkeypatch.setattr(decode_analyze, "PARALLEL_MIN_READS", 10)
    parallel = run("io", traces["io"], "--cache", "--format", "json")
    assert single.json["reuse"] == parallel.json["reuse"]
    assert parallel.json["reuse"]["lru"][3]["hit_share"] > 0


@pytest.fixture
def child_marks(monkeypatch, tmp_path):
    """Each child that folds a part leaves its pid in a file; returns the list of pids."""
    real = trace_io._fold_part

    def marked(*args):
        (tmp_path / f"child-{trace_io.os.getpid()}").write_text("")
        return real(*args)
    monkeypatch.setattr(trace_io, "_fold_part", marked)
    return lambda: [int(p.name.split("-")[1]) for p in tmp_path.glob("child-*")]


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


def test_a_dead_child_is_said_and_its_part_read_again(traces, small_split, monkeypatch):
    monkeypatch.setattr(trace_io, "_fold_part", lambda *args: trace_io.os._exit(3))
    single, parallel = small_split("compute", traces["ct"], "--format", "json")
    assert parallel.code == 0
    assert single.json["per_token"] == parallel.json["per_token"]
    assert single.json["by_op"] == parallel.json["by_op"]
    assert "of the file died; that part was read again here" in parallel.err


class DiesWhilePickled:
    def __reduce__(self):
        trace_io.os._exit(3)


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
