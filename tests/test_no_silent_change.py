"""Issue 8, wrong figures given silently: a skipped row, a split into processes and the read
path change nothing; `spec` is 0 or 1 everywhere."""
import pytest
from hypothesis import given, settings, strategies as st

import trace_io
from helpers import assert_token_start, ct_text, error_of, io_text, report, run

# Two decode tokens; a layer -1 view between two layer-0 nodes is re-attributed to layer 0.
CT_ROWS = ["0,1,4,0,0,MUL_MAT,Qcur-0,1000000,0", "0,1,4,1,-1,VIEW,Kcur-0 (view),500000,0",
           "0,1,4,2,0,ADD,l_out-0,3000000,0",
           "0,1,5,0,0,MUL_MAT,Qcur-0,2000000,0", "0,1,5,1,-1,VIEW,Kcur-0 (view),500000,0",
           "0,1,5,2,0,ADD,l_out-0,3000000,0"]
IO_ROWS = ["0,1,4,0,1,0,0,0,0,4096,4096,1000", "0,1,4,0,2,0,1,0,4096,4096,4096,1000",
           "0,1,4,0,3,0,0,0,8192,4096,4096,1000"]


def without_warnings(r):
    return {key: value for key, value in r.items() if key not in ("warnings", "path")}


# 9. a skipped row with bad token columns does not split its token
@pytest.mark.parametrize("bad", ["x,1,4,1,-1,VIEW,Kcur-0 (view),7,0", "0,9,4,1,0,ADD,a,7,0",
                                 "0,1,,1,0,ADD,a,7,0", "0,1,4,1,0,ADD,a,7"])
def test_a_skipped_row_changes_nothing_around_it(write, bad):
    clean = report("compute", write(ct_text(CT_ROWS), "clean.csv"), "--layers")
    rows = CT_ROWS[:1] + [bad] + CT_ROWS[1:]
    result = run("compute", write(ct_text(rows), "dirty.csv"), "--skip-bad-rows", "--format",
                 "json")
    assert result.code == 0 and "skipped 1 bad row(s) (first: line 5:" in result.err
    assert without_warnings(result.json) == without_warnings(clean)
    assert clean["reattributed_ms_per_token"] == 0.5


def test_a_skipped_io_row_does_not_double_adjacency_runs(write):
    clean = report("io", write(io_text(IO_ROWS), "clean.csv"), "--adjacent")
    rows = IO_ROWS[:2] + ["0,1,x,0,3,0,0,0,8192,4096,4096,1000"] + IO_ROWS[2:]
    result = run("io", write(io_text(rows), "dirty.csv"), "--adjacent", "--skip-bad-rows",
                 "--format", "json")
    assert result.json["adjacency"] == clean["adjacency"]
    assert clean["adjacency"]["runs_per_token"] == 1.0


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


# 12. spec is 0 or 1, once, everywhere
@pytest.mark.parametrize("spec", ["01", "2", "", "1 "])
def test_spec_other_than_0_or_1_is_a_bad_value(write, spec):
    rows = IO_ROWS + [f"0,1,5,0,3,0,0,{spec},8192,4096,4096,1000"]
    assert error_of("io", write(io_text(rows))).endswith(
        f"t.csv:7: column spec: {spec!r} is not 0 or 1")
    result = run("io", write(io_text(rows)), "--skip-bad-rows", "--format", "json")
    assert result.json["reads"] == 3
    demand, speculative = result.json["demand_vs_spec"]
    assert demand["reads"] + speculative["reads"] == result.json["reads"]


# 13. one rule on every path: a quoted line anywhere in the batch changes nothing
PROBES = ["0,1,4,0, 1,0,0,0,0,4096,4096,1000", "0,1,4,0,1,0,00,0,0,4096,4096,1000",
          "0,1,4,0,1,0,0,0,0,4096,-4096,1000", "0,1,4,0,1,0,0,0,0,4096,4096,1e3",
          "0,1,4,0,1,0,0,0,0,4096,4096,1000,", "0,0,4,0,1,0,x,0,0,4096,4096,1000"]


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


# 14. the whole-column integer conversion is a shortcut, never a second rule
INTEGER_TEXTS = st.one_of(
    st.integers(0, 2 ** 66).map(str),
    st.sampled_from(["", "0", "00", "007", "-0", "-1", "+5", " 5", "5 ", "1.5", "1e3", "1E3",
                     "true", "false", "null", "NaN", "Infinity", "-Infinity", "[5]", "{}",
                     '"5"', "0x10", "١٢", "\t5", "5\r", "18446744073709551615",
                     "18446744073709551616"]),
    st.text(alphabet="0123456789eE.-+ [{\"nNIl", max_size=6))


@settings(max_examples=400, deadline=None)
@given(st.lists(INTEGER_TEXTS, min_size=1, max_size=12), st.booleans())
def test_bulk_integers_are_the_rule_or_nothing(plain, last_column):
    # A line's last field is handed over with its newline; no other field holds one.
    texts = [text + "\n" for text in plain] if last_column else plain
    values = trace_io._bulk_integers(texts, last_column)
    valid = all(trace_io.integer_problem("wall_ns", text) is None for text in plain)
    if values is not None:  # what it converts is exactly what the rule accepts
        assert valid and values == [int(text) for text in plain]
    elif valid:  # it may give up, only on what is not written the one plain way
        assert any(text != str(int(text)) for text in plain)
