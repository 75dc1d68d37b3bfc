"""Bad and unusual input: a clear one-line message (file, line, what), never a traceback."""
import gzip
import subprocess
import sys

import pytest

import decode_analyze
import trace_io
from helpers import CT_HEADER, IO_HEADER, ROOT, ct_text, error_of, io_text, report, run

GOOD = ["0,1,4,0,0,MUL_MAT,Qcur-0,1000000,0", "0,1,4,1,0,ADD,l_out-0,3000000,2"]


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


def test_gzip_by_magic_bytes(write):
    path = write(gzip.compress(ct_text(GOOD).encode()), name="trace.csv")
    assert report("compute", path)["ms_per_token"] == 4.0


def test_corrupt_gzip(write):
    path = write(gzip.compress(ct_text(GOOD * 200).encode())[:60], name="cut.csv.gz")
    assert "cut.csv.gz" in error_of("compute", path)


def test_stdin():
    result = subprocess.run([sys.executable, str(ROOT / "decode_analyze.py"), "compute", "-",
                             "--format", "json"], input=ct_text(GOOD).encode(),
                            capture_output=True, check=False)
    assert result.returncode == 0, result.stderr
    assert b'"path": "<stdin>"' in result.stdout and b'"ms_per_token": 4.0' in result.stdout


HOSTILE = [
    '0,1,4,0,0,MUL_MAT,"ffn_moe_out, part 0-3",1000000,0',
    '0,1,4,1,0,ADD,"say ""hi"" (view)",1000000,0',
    "0,1,4,2,0,\x1b[31mRED,\x1b[2Jkqv_out-0 é,1000000,0",
]


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
    script = (f"'{sys.executable}' '{ROOT / 'decode_analyze.py'}' compute '{path}' "
              f"--format json | head -n 1")
    result = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False)
    assert result.stdout == "{\n" and result.stderr == ""


def test_interrupt_exits_130_quietly(write, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(decode_analyze, "read_compute", interrupted)
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
