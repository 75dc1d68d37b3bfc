"""Reading: every input the engine writes, and every bad one, is read on purpose: a clear one-line
message (file, line, what is wrong) and exit 1, never a traceback; a skipped row changes
nothing around it; the integer rule is the same on every path."""
import bz2
import gc
import gzip
import lzma
import os
import subprocess
import sys
import zipfile

import pytest
from hypothesis import example, given, settings, strategies as st

import decode_analyze
import trace_io
from helpers import (CT_HEADER, IO_HEADER, REAL_TRACES, ROOT, TOOL, TOOL_SHELL, ct_text, error_of,
                     io_text, report, run)


GOOD = ["0,1,4,0,0,MUL_MAT,Qcur-0,1000000,0", "0,1,4,1,0,ADD,l_out-0,3000000,2"]


HOSTILE = [
    '0,1,4,0,0,MUL_MAT,"ffn_moe_out, part 0-3",1000000,0',
    '0,1,4,1,0,ADD,"say ""hi"" (view)",1000000,0',
    "0,1,4,2,0,\x1b[31mRED,\x1b[2Jkqv_out-0 é,1000000,0",
]


GOOD_CT = ["0,1,4,0,0,MUL_MAT,Qcur-0,1000000,0", "0,1,4,1,0,ADD,l_out-0,3000000,2"]


GOOD_IO = ["0,1,4,0,3,0,0,0,0,65536,69632,400000", "0,1,4,0,5,0,1,1,69632,65536,69632,600000"]




# 5. closed and full streams
def shell(command):
    return subprocess.run(["bash", "-c", command], capture_output=True, timeout=30)


@pytest.fixture
def ct_file(tmp_path):
    path = tmp_path / "ct.csv"
    path.write_text(ct_text(GOOD_CT))
    return path


# Two decode tokens; a layer -1 view between two layer-0 nodes is re-attributed to layer 0.
CT_ROWS = ["0,1,4,0,0,MUL_MAT,Qcur-0,1000000,0", "0,1,4,1,-1,VIEW,Kcur-0 (view),500000,0",
           "0,1,4,2,0,ADD,l_out-0,3000000,0",
           "0,1,5,0,0,MUL_MAT,Qcur-0,2000000,0", "0,1,5,1,-1,VIEW,Kcur-0 (view),500000,0",
           "0,1,5,2,0,ADD,l_out-0,3000000,0"]


IO_ROWS = ["0,1,4,0,1,0,0,0,0,4096,4096,1000", "0,1,4,0,2,0,1,0,4096,4096,4096,1000",
           "0,1,4,0,3,0,0,0,8192,4096,4096,1000"]


def without_warnings(r):
    return {key: value for key, value in r.items() if key not in ("warnings", "path")}


# 14. the whole-column integer conversion is a shortcut, never a second rule
INTEGER_TEXTS = st.one_of(
    st.integers(0, 2 ** 66).map(str),
    st.sampled_from(["", "0", "00", "007", "-0", "-1", "+5", " 5", "5 ", "1.5", "1e3", "1E3",
                     "true", "false", "null", "NaN", "Infinity", "-Infinity", "[5]", "{}",
                     '"5"', "0x10", "١٢", "\t5", "5\r", "18446744073709551615",
                     "18446744073709551616"]),
    st.text(alphabet="0123456789eE.-+ [{\"nNIl", max_size=6))


def test_missing_file(tmp_path):
    assert error_of("compute", tmp_path / "nope.csv").endswith("nope.csv: no such file")


def test_directory(tmp_path):
    assert "is a directory" in error_of("compute", tmp_path)


def test_unreadable_file(write, monkeypatch):
    path = write(ct_text(GOOD))

    def denied(*args, **kwargs):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(trace_io, "open", denied, raising=False)
    assert error_of("compute", path).endswith("t.csv: permission denied")


def test_empty_file(write):
    assert "t.csv: empty file" in error_of("compute", write(""))


def test_preamble_only(write):
    assert "no header line after the preamble" in error_of("io", write("# io_trace v1\n# a=b\n"))


def test_header_only(write):
    message = error_of("compute", write(ct_text([])))
    assert "no tokens match" in message and "the file has: no rows" in message


@pytest.mark.parametrize("command, text, says", [
    ("compute", io_text(["0,1,1,0,0,0,0,0,0,1,1,1"]), "t.csv:1: this is an io trace "
                                                       "(# io_trace v1), not a compute trace; "
                                                       "read it with 'decode-analyze io'"),
    ("io", ct_text(GOOD), "t.csv:1: this is a compute trace (# compute_trace v1), not an io "
                          "trace; read it with 'decode-analyze compute'"),
    ("io", ct_text(GOOD, preamble=""), "t.csv:1: this is a compute trace (recognised by its "
                                       "columns), not an io trace"),
])
def test_wrong_kind(write, command, text, says):
    assert says in error_of(command, write(text))


def test_no_kind_line_is_recognised_by_columns(write):
    assert report("compute", write(ct_text(GOOD, preamble="")))["tokens"] == 1


def test_not_a_trace(write):
    assert "not a decode trace" in error_of("compute", write("a,b,c\n1,2,3\n"))


@pytest.mark.parametrize("command", ["compute", "io"])
def test_a_saved_report_given_as_a_trace_says_what_reads_it(write, command):
    """It said 'not a decode trace: no # compute_trace line and the header has neither
    wall_ns nor latency_ns' of a report saved with --format json."""
    saved = write(run("compute", ROOT / "examples/session-ct.csv", "--format", "json").out,
                  "monday.json")
    assert error_of(command, saved) == (f"decode-analyze: {saved}:1: a JSON file (a report "
                                        f"saved with --format json?), not a trace: diff and "
                                        f"summary read saved reports")


def test_unknown_version_warns_once_and_reads(write):
    rows = GOOD * 1 + ["0,1,5,0,0,MUL_MAT,Qcur-0,1000000,0"]
    result = run("compute", write(ct_text(rows, preamble="# compute_trace v9\n")),
                 "--format", "json")
    assert result.code == 0
    assert result.err.count("warning") == 1
    assert "t.csv:1: unknown compute_trace version v9; reading columns by name" in result.err
    assert result.json["tokens"] == 2 and result.json["warnings"]


def test_missing_columns_are_named(write):
    text = "# compute_trace v1\nturn,phase,step,op,name\n0,1,4,ADD,x\n"
    message = error_of("compute", write(text))
    assert "t.csv:2: missing required columns: layer, wall_ns, majflt" in message


def test_columns_are_found_by_name_in_any_order(write):
    text = ("# compute_trace v1\nmajflt,name,wall_ns,op,layer,seq,step,phase,turn,extra\n"
            "2,l_out-0,3000000,ADD,0,1,4,1,0,zzz\n")
    r = report("compute", write(text))
    assert r["ms_per_token"] == 3.0 and r["majflt_per_token"] == 2


def test_v2_extra_columns_and_synthetic_rows(write):
    header = CT_HEADER + ",start_ns,end_ns"
    rows = ["0,1,4,0,-1,BMOE_DECODE,decode,9000000,5,0,9000000",
            "0,1,4,1,0,MUL_MAT,Qcur-0,1000000,0,10,1000010",
            "0,1,4,2,-1,BMOE_CALLBACK,cache,7000000,0,20,7000020",
            "0,1,4,3,0,ADD,l_out-0,3000000,2,30,3000030"]
    preamble = "# compute_trace v2\n# model=m clock=steady_ns trace_id=7\n"
    r = report("compute", write(ct_text(rows, preamble=preamble, header=header)))
    assert r["ms_per_token"] == 4.0 and r["majflt_per_token"] == 2 and r["rows"] == 2
    assert {op["op"] for op in r["by_op"]} == {"MUL_MAT", "ADD"}
    assert r["meta"]["trace_id"] == "7"


def test_v2_io_wait_rows_left_out(write):
    header = IO_HEADER + ",start_ns,end_ns,kind,thread_id"
    rows = ["0,1,4,0,1,0,0,0,0,4096,4096,1000,0,1000,read,11",
            "0,1,4,0,1,0,0,0,0,0,0,500000,0,500000,wait,12"]
    r = report("io", write(io_text(rows, preamble="# io_trace v2\n", header=header)))
    assert r["reads"] == 1 and r["latency_us"]["max"] == 1.0


@pytest.mark.parametrize("row, says", [
    ("0,1,4,1,0,ADD,l_out-0,3000000", "t.csv:5: expected 9 fields, found 8"),
    ("0,1,4,1,0,ADD,l_out-0,3000000,2,7", "t.csv:5: expected 9 fields, found 10"),
    ("0,1,4,1,0,ADD,l_out-0,3ms,2", "t.csv:5: column wall_ns: '3ms' is not a non-negative integer"),
    ("0,1,4,1,0,ADD,l_out-0,-5,2", "t.csv:5: column wall_ns: '-5' is not a non-negative integer"),
    ("0,1,4,1,-2,ADD,l_out-0,5,2", "t.csv:5: column layer: '-2' is not an integer >= -1"),
    ("0,1,x,1,0,ADD,l_out-0,5,2", "t.csv:5: column step: 'x' is not a non-negative integer"),
    ("0,1,4,1,0,ADD,l_out-0,,2", "t.csv:5: column wall_ns: '' is not a non-negative integer"),
])
def test_malformed_row(write, row, says):
    path = write(ct_text([GOOD[0], row, GOOD[1]]))
    assert error_of("compute", path).endswith(says)


def test_skip_bad_rows(write):
    rows = [GOOD[0], "0,1,4,1,0,ADD,l_out-0,3ms,2", "0,1,x,1,0,ADD,l_out-0,5,2", GOOD[1]]
    result = run("compute", write(ct_text(rows)), "--skip-bad-rows", "--format", "json")
    assert result.code == 0
    assert "skipped 2 bad row(s) (first: line 5: column wall_ns: '3ms'" in result.err
    assert result.json["ms_per_token"] == 4.0


def test_bad_rows_in_a_large_file_name_the_right_line(write):
    rows = [f"0,1,{step},0,0,MUL_MAT,Qcur-0,1000,0" for step in range(20000)]
    rows[15000] = "0,1,15000,0,0,MUL_MAT,Qcur-0,1e3,0"
    assert error_of("compute", write(ct_text(rows))).endswith(
        "t.csv:15004: column wall_ns: '1e3' is not a non-negative integer")


@pytest.mark.parametrize("was_enabled", [True, False])
@pytest.mark.parametrize("rows, code", [
    (GOOD, 0),
    ([f"0,1,{step},0,0,ADD,l_out-0,5,0" for step in range(20000)] + ["0,1,x,0,0,ADD,l,5,0"], 1)])
def test_a_fold_runs_without_the_cyclic_collector_and_gives_it_back(write, monkeypatch,
                                                                     was_enabled, rows, code):
    """The collector is off while batches are folded (each collection it sets off walks the
    batches' young objects, and the whole heap of a process that holds many reports); as it was
    after, the run good or stopped by a bad row in a batch after the first."""
    seen, batches = [], trace_io.Trace.batches

    def watched(trace, columns):
        for batch in batches(trace, columns):
            seen.append(gc.isenabled())
            yield batch
    monkeypatch.setattr(trace_io.Trace, "batches", watched)
    (gc.enable if was_enabled else gc.disable)()
    try:
        assert run("compute", write(ct_text(rows))).code == code
        assert gc.isenabled() == was_enabled
    finally:
        gc.enable()
    assert seen and not any(seen)


def test_truncated_last_line_is_ignored_with_a_warning(write):
    text = ct_text(GOOD) + "0,1,5,0,0,MUL_MAT,Qc"
    result = run("compute", write(text), "--format", "json")
    assert result.code == 0
    assert "t.csv:6: last line has no newline at the end (a run cut short?): ignored, " \
           "'0,1,5,0,0,MUL_MAT,Qc'" in result.err
    assert result.json["tokens"] == 1


def test_a_last_line_cut_inside_its_last_field_is_not_counted(write):
    """The cut line still parses ('416800' cut to '416'): it must not be counted silently."""
    rows = ["0,1,1,0,0,0,0,0,0,65536,65536,1000", "0,1,1,0,1,0,1,0,0,65536,65536,416800"]
    whole = report("io", write(io_text(rows), "whole.csv"))
    result = run("io", write(io_text(rows)[:-4], "cut.csv"), "--format", "json")
    assert result.code == 0 and "cut.csv:5: last line has no newline" in result.err
    assert whole["latency_us"]["max"] == 416.8 and result.json["reads"] == 1
    assert result.json["latency_us"]["max"] == 1.0


def test_a_complete_last_line_without_newline_is_said_and_left_out(write):
    result = run("compute", write(ct_text(GOOD)[:-1]), "--format", "json")
    assert result.code == 0 and "t.csv:5: last line has no newline" in result.err
    assert result.json["rows"] == 1


def test_crlf_bom_and_spaces_in_preamble_values(write):
    text = "\ufeff" + ct_text(GOOD, preamble="# compute_trace v1\n# model=tiny moe q3.gguf "
                                            "arch=qwen3moe n_layer=2\n").replace("\n", "\r\n")
    r = report("compute", write(text.encode("utf-8")))
    assert r["meta"]["model"] == "tiny moe q3.gguf" and r["meta"]["arch"] == "qwen3moe"
    assert r["ms_per_token"] == 4.0 and {op["op"] for op in r["by_op"]} == {"MUL_MAT", "ADD"}


def test_a_preamble_key_named_twice_with_two_values_is_said_and_the_last_stands(write):
    """One key given two values, on one preamble line or two, was taken silently (the last):
    a header that names a column twice is refused, a setting said twice is a contradiction."""
    preamble = "# compute_trace v1\n# model=m n_layer=4 io_threads=2\n# n_layer=8 \x1b[2J=9\n" \
               "# \x1b[2J=7 model=m io_threads=4 io_threads=4\n"
    path = write(ct_text(GOOD, preamble=preamble))
    result = run("compute", path, "--format", "json")
    assert result.code == 0
    assert result.json["meta"]["n_layer"] == "8" and result.json["meta"]["io_threads"] == "4"
    assert [warning.replace(str(path), "t.csv") for warning in result.json["warnings"]] == [
        "t.csv:3: the preamble names n_layer again: '4', then '8': the last stands",
        "t.csv:4: the preamble names '\\x1b[2J' again: '9', then '7': the last stands",
        "t.csv:4: the preamble names io_threads again: '2', then '4': the last stands"]


def test_gzip_by_magic_bytes(write):
    path = write(gzip.compress(ct_text(GOOD).encode()), name="trace.csv")
    assert report("compute", path)["ms_per_token"] == 4.0


def test_corrupt_gzip(write):
    path = write(gzip.compress(ct_text(GOOD * 200).encode())[:60], name="cut.csv.gz")
    assert "cut.csv.gz" in error_of("compute", path)


def test_stdin():
    result = subprocess.run([*TOOL, "compute", "-",
                             "--format", "json"], input=ct_text(GOOD).encode(),
                            capture_output=True, check=False)
    assert result.returncode == 0, result.stderr
    assert b'"path": "<stdin>"' in result.stdout and b'"ms_per_token": 4.0' in result.stdout


def test_hostile_names_parse_and_print_escaped(write):
    path = write(ct_text(HOSTILE))
    r = report("compute", path)
    assert r["tokens"] == 1 and r["rows"] == 3
    assert {op["op"] for op in r["by_op"]} == {"MUL_MAT", "ADD", "\x1b[31mRED"}
    out = run("compute", path).out
    assert "\x1b" not in out and "\\x1b[31mRED" in out
    assert "\x1b" not in run("compute", path, "--format", "json").out  # JSON escapes it too


def test_control_characters_in_errors_are_escaped(write):
    path = write(ct_text(["0,1,4,0,0,ADD,x,\x1b[2J,0"]))
    message = error_of("compute", path)
    assert "\x1b" not in message and "\\x1b[2J" in message


def test_pipe_into_head_is_quiet(write):
    rows = [f"0,1,{step},0,0,MUL_MAT,Qcur-0,1000,0" for step in range(3000)]
    path = write(ct_text(rows))
    script = (f"{TOOL_SHELL} compute '{path}' "
              f"--format json | head -n 1")
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False)
    assert result.stdout == "{\n" and result.stderr == ""


def test_interrupt_exits_130_quietly(write, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(decode_analyze, "fold_file", interrupted)
    result = run("compute", write(ct_text(GOOD)))
    assert result.code == 130 and result.out == "" and result.err == ""


@pytest.mark.parametrize("argv", [("compute",), ("nope", "x"), ("compute", "x", "--top", "-1"),
                                  ("compute", "x", "--steps", "5"), ("io", "x", "--top", "3")])
def test_usage_errors_exit_2(argv):
    assert run(*argv).code == 2


def test_bad_key_columns_in_io_name_the_line(write):
    rows = ["0,1,4,0,1,0,0,0,0,4096,4096,1000", "0,1,4,0,1,0,x1,0,4096,4096,4096,1000"]
    assert error_of("io", write(io_text(rows))).endswith(
        "t.csv:5: column lane: 'x1' is not a non-negative integer")
    result = run("io", write(io_text(rows), "s.csv"), "--skip-bad-rows", "--format", "json")
    assert result.code == 0 and "skipped 1 bad row(s)" in result.err
    assert result.json["reads"] == 1


def test_bad_layer_is_skipped_row_by_row(write):
    rows = [GOOD[0], "0,1,4,1,zz,ADD,l_out-0,3000000,2", GOOD[1]]
    assert error_of("compute", write(ct_text(rows))).endswith(
        "t.csv:5: column layer: 'zz' is not an integer >= -1")
    result = run("compute", write(ct_text(rows), "s.csv"), "--skip-bad-rows", "--format", "json")
    assert result.code == 0 and "skipped 1 bad row(s)" in result.err
    assert result.json["rows"] == 2 and result.json["ms_per_token"] == 4.0


def test_bad_layer_in_fast_path_without_skip(write):
    rows = [f"0,1,{step},0,0,MUL_MAT,Qcur-0,1000,0" for step in range(3000)]
    rows[2000] = "0,1,2000,0,-7,MUL_MAT,Qcur-0,1000,0"
    assert error_of("compute", write(ct_text(rows))).endswith(
        "t.csv:2004: column layer: '-7' is not an integer >= -1")


@pytest.mark.parametrize("value", ["null", "true", "false", "NaN", "Infinity", "1.5", "1e3", "1E3",
                                   "[5]", "{}", "-0", "007", "+5", " 5", "0x10"])
def test_integers_are_plain_digits(write, value):
    rows = [f"0,1,{step},0,0,MUL_MAT,Qcur-0,1000,0" for step in range(50)]
    rows[20] = f"0,1,20,0,0,MUL_MAT,Qcur-0,{value},0"
    result = run("compute", write(ct_text(rows)), "--format", "json")
    if value == "007":  # leading zeros: still digits
        assert result.code == 0 and result.json["tokens"] == 50
    else:
        assert result.code == 1
        assert f"t.csv:24: column wall_ns: {value!r} is not a non-negative integer" in result.err


@pytest.mark.parametrize("command, row, says", [
    ("compute", "0,1,4,0,0,MUL,a,,0", "column wall_ns: '' is not a non-negative integer"),
    ("compute", "0,1,4,0,0,MUL,a,5,", "column majflt: '' is not a non-negative integer"),
    ("io", "0,1,4,0,3,0,1,0,0,4096,4096,", "column latency_ns: '' is not a non-negative integer"),
])
def test_an_empty_value_in_a_file_of_one_row_is_named(write, command, row, says):
    # One empty field alone once read as an empty column: the row's time silently lost.
    text = ct_text([row]) if command == "compute" else io_text([row])
    assert error_of(command, write(text)).endswith(f"t.csv:4: {says}")


# 1. a non-integer read_bytes, even on a row outside the selection
@pytest.mark.parametrize("value", ["abc", "", "1e3"])
@pytest.mark.parametrize("phase", ["0", "1"])
def test_non_integer_read_bytes(write, value, phase):
    rows = GOOD_IO + [f"0,{phase},9,0,3,0,0,0,0,65536,{value},1000"]
    line = error_of("io", write(io_text(rows)))
    assert line.endswith(f"t.csv:6: column read_bytes: {value!r} is not a non-negative integer")


# 2. the integer contract: non-negative, below 2^64, on every path
@pytest.mark.parametrize("command,rows,column,value,says", [
    ("compute", GOOD_CT, "wall_ns", str(2**64), "is too large (the largest is 2^64-1)"),
    ("io", GOOD_IO, "latency_ns", str(2**64), "is too large"),
    ("compute", GOOD_CT, "wall_ns", "9" * 5000, "... (5000 characters) is too large"),
    ("compute", GOOD_CT, "majflt", "7" * 400, "is too large"),
    ("io", GOOD_IO, "phase", "128", "is not 0 or 1"),
    ("io", GOOD_IO, "read_bytes", "-4096", "is not a non-negative integer"),
    ("io", GOOD_IO, "layer", "9" * 4400, "is too large"),
])
@pytest.mark.parametrize("options", [(), ("--cache",), ("--skip-bad-rows",)])
def test_integers_outside_the_contract(write, command, rows, column, value, says, options):
    header = (ct_text if command == "compute" else io_text)([]).splitlines()[-1].split(",")
    fields = rows[1].split(",")
    fields[header.index(column)] = value
    path = write((ct_text if command == "compute" else io_text)(rows + [",".join(fields)]))
    if command == "compute" and options == ("--cache",):
        options = ()
    if options == ("--skip-bad-rows",):
        result = run(command, path, *options, "--format", "json")
        assert result.code == 0 and "skipped 1 bad row(s) (first: line 6: column " \
            f"{column}:" in result.err
        assert result.json["tokens"] == 1
    else:
        line = error_of(command, path, *options)
        assert f"t.csv:6: column {column}: " in line and says in line
        assert len(line) < 300


def test_the_largest_integer_is_exact(write):
    rows = ["0,1,4,0,0,MUL_MAT,Qcur-0,18446744073709551615,18446744073709551615"]
    r = report("compute", write(ct_text(rows)))
    assert r["by_op"][0]["max_us"] == (2**64 - 1) / 1e3
    assert r["majflt_per_token"] == (2**64 - 1) / 1 and r["per_token"][0]["majflt"] == 2**64 - 1


# 3. csv errors
def test_lone_cr_in_a_quoted_line(write):
    rows = GOOD_CT + ['0,1,5,0,0,MUL_MAT,"Qcur\r-0",1000,0']
    assert "t.csv:6: a carriage return inside a line" in error_of("compute", write(ct_text(rows)))


def test_cr_only_file(write):
    text = "turn,phase,step,seq,layer,op,name,wall_ns,majflt\r0,1,4,0,0,MUL_MAT,Q,1,0\r"
    assert "t.csv:1: a carriage return inside a line" in error_of("compute", write(text))


@pytest.mark.parametrize("where", ["field", "header"])
def test_a_field_over_128_kib(write, where):
    big = "n" * (200 << 10)
    if where == "field":
        text = ct_text(GOOD_CT + [f'0,1,5,0,0,MUL_MAT,"{big}",1000,0'])
        result = run("compute", write(text), "--format", "json")
        assert result.code == 0 and result.json["tokens"] == 2  # a legal, if silly, name
    else:
        text = f'# compute_trace v1\nturn,phase,step,seq,layer,op,"{big}",wall_ns,majflt\n'
        assert "missing required column" in error_of("compute", write(text))


# 4. named pipes and process substitution are streams
def test_named_pipe(tmp_path):
    fifo = tmp_path / "ct.fifo"
    os.mkfifo(fifo)
    writer = subprocess.Popen(["sh", "-c", f"cat > '{fifo}'"], stdin=subprocess.PIPE)
    reader = subprocess.Popen([*TOOL, "compute", str(fifo), "--format", "json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    writer.communicate(ct_text(GOOD_CT).encode())
    out, err = reader.communicate(timeout=30)
    assert reader.returncode == 0, err
    assert b'"ms_per_token": 4.0' in out


def test_process_substitution(tmp_path):
    path = tmp_path / "ct.csv"
    path.write_text(ct_text(GOOD_CT))
    done = subprocess.run(["bash", "-c", f"{TOOL_SHELL} compute <(cat '{path}') "
                                         "--format json"], capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert b'"ms_per_token": 4.0' in done.stdout


def test_stdout_closed(ct_file):
    done = shell(f"{TOOL_SHELL} compute '{ct_file}' >&-")
    assert done.returncode == 1
    assert done.stderr == b"decode-analyze: standard output is closed: nowhere to write the " \
                          b"report\n"


def test_stdin_closed():
    done = shell(f"{TOOL_SHELL} compute - <&-")
    assert done.returncode == 1
    assert done.stderr == b"decode-analyze: <stdin>: standard input is closed\n"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_stdout_on_a_full_disk(ct_file):
    done = shell(f"{TOOL_SHELL} compute '{ct_file}' > /dev/full")
    assert done.returncode == 1
    assert done.stderr == b"decode-analyze: cannot write the output: No space left on device\n"


def test_stderr_closed_loses_the_warning_not_the_run(tmp_path):
    path = tmp_path / "ct.csv"
    path.write_text(ct_text(GOOD_CT).replace("v1", "v9"))  # an unknown version: a warning
    done = shell(f"{TOOL_SHELL} compute '{path}' --format json 2>&-")
    assert done.returncode == 0 and b'"ms_per_token": 4.0' in done.stdout


# 6. compressions and binary input
@pytest.mark.parametrize("compress", [gzip.compress, bz2.compress, lzma.compress])
def test_compressions_the_standard_library_reads(write, compress):
    r = report("compute", write(compress(ct_text(GOOD_CT).encode()), "t.csv.z"))
    assert r["ms_per_token"] == 4.0


def test_a_zip_holding_one_trace(tmp_path):
    path = tmp_path / "ct.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("ct.csv", ct_text(GOOD_CT))
    assert report("compute", path)["ms_per_token"] == 4.0


def test_a_zip_holding_two_files(tmp_path):
    path = tmp_path / "ct.zip"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("a.csv", ct_text(GOOD_CT))
        archive.writestr("b.csv", ct_text(GOOD_CT))
    assert error_of("compute", path).endswith("the zip archive holds 2 files, not one trace: "
                                              "unzip it first")


@pytest.mark.parametrize("magic,name", [(b"\x28\xb5\x2f\xfd", "zstd"), (b"\x04\x22\x4d\x18", "lz4")])
def test_other_compressions_are_named(write, magic, name):
    line = error_of("compute", write(magic + b"\x00" * 64))
    assert line.endswith(f"t.csv: {name}-compressed: decompress it first")


def test_random_binary(write):
    data = bytes(range(256)) * 64
    assert error_of("compute", write(data)).endswith(
        "t.csv: not a text trace: binary data (NUL bytes) at the start")


def test_an_executable():
    assert error_of("compute", sys.executable).endswith(
        "not a text trace: binary data (NUL bytes) at the start")


def test_dev_stdin_from_a_pipe(tmp_path):
    path = tmp_path / "ct.csv"
    path.write_text(ct_text(GOOD_CT))
    done = subprocess.run(["bash", "-c", f"cat '{path}' | {TOOL_SHELL} compute "
                                         "/dev/stdin --format json"], capture_output=True,
                          timeout=30)
    assert done.returncode == 0, done.stderr
    assert b'"ms_per_token": 4.0' in done.stdout


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


@settings(max_examples=200, deadline=None)
@given(st.lists(INTEGER_TEXTS, min_size=1, max_size=12), st.booleans())
@example(["0", "0", "18446744073709551615"], False)  # a mostly-zero column gave 2^64-1 up
def test_bulk_integers_are_the_rule_or_nothing(plain, last_column):
    # A line's last field is handed over with its newline; no other field holds one.
    texts = [text + "\n" for text in plain] if last_column else plain
    values = trace_io._bulk_integers(texts, last_column)
    valid = all(trace_io.integer_problem("wall_ns", text) is None for text in plain)
    if values is not None:  # what it converts is exactly what the rule accepts
        assert valid and values == [int(text) for text in plain]
    elif valid:  # it may give up, only on what is not written the one plain way
        assert any(text != str(int(text)) for text in plain)


def test_a_header_that_names_a_column_twice_is_refused(write):
    """Ambiguous: the reader read one `step` column and the splitter another, so --jobs gave
    another answer than one process."""
    path = write(ct_text(["0,1,4,0,0,MUL,a,1000,0,9"],
                         header="turn,phase,step,seq,layer,op,name,wall_ns,majflt,step"))
    assert error_of("compute", path).endswith(":3: the header names 'step' twice: which column "
                                               "is it?")


@pytest.mark.skipif(not os.path.exists("/bin/bash"), reason="process substitution needs bash")
def test_a_pipe_is_read_once_by_io_and_report(tmp_path):
    """io <(zcat run-io.csv.gz) and report ct.csv <(cat io.csv) failed with "not a decode
    trace" (or waited for a writer): the v2 waits' pass looked at the pipe's head first, and
    the reads' pass found it gone."""
    import json
    v2 = ROOT / "tests" / "data" / "v2"
    from_file = json.loads(shell(f"{TOOL_SHELL} io '{v2}/io.csv' --format json "
                                 f"--no-engine-log").stdout)
    gzip_path = tmp_path / "io.csv.gz"
    gzip_path.write_bytes(gzip.compress((v2 / "io.csv").read_bytes()))
    piped = shell(f"{TOOL_SHELL} io <(zcat '{gzip_path}') --format json")
    assert piped.returncode == 0, piped.stderr
    assert b"give a file, not a pipe or stdin, for the stall" in piped.stderr
    assert json.loads(piped.stdout)["read_bytes"] == from_file["read_bytes"]
    pair = shell(f"{TOOL_SHELL} report '{v2}/ct.csv' <(cat '{v2}/io.csv') "
                 f"--format json")
    assert pair.returncode == 0, pair.stderr
    assert json.loads(pair.stdout)["io"]["reads"] == from_file["reads"]


@pytest.mark.parametrize("command", ["compute", "io"])
def test_a_layer_past_the_preambles_n_layer_is_said(write, command):
    """Bug: a preamble saying n_layer=2 over rows of layer 3 stood unsaid: the header named two
    layers, the tables showed four. The tables are the trace's, and the difference is said."""
    source = REAL_TRACES["qwen3moe-l4-ct-node.csv" if command == "compute" else
                         "qwen3moe-l4-io-serial.csv"]
    text = source.read_text()
    path = write(text.replace("n_layer=4", "n_layer=2", 1))
    result = run(command, path, "--no-engine-log", "--format", "json")
    assert result.code == 0 and result.json["warnings"] == [
        f"{path}: the preamble says n_layer=2, but the trace holds layer 3: the tables show the "
        f"trace's layers"]
    assert max(row["layer"] for row in result.json["by_layer"]) == 3
    same = run(command, write(text, name="same.csv"), "--no-engine-log", "--format", "json")
    assert same.code == 0 and same.json["warnings"] == []
