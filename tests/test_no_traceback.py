"""Issue 8, tracebacks: each reproducer gives exit 1 and one line naming the file, the line and
what is wrong (or, for streams and compressions it can read, the right report)."""
import bz2
import gzip
import lzma
import os
import subprocess
import sys
import zipfile

import pytest

from helpers import ROOT, ct_text, error_of, io_text, report, run

GOOD_CT = ["0,1,4,0,0,MUL_MAT,Qcur-0,1000000,0", "0,1,4,1,0,ADD,l_out-0,3000000,2"]
GOOD_IO = ["0,1,4,0,3,0,0,0,0,65536,69632,400000", "0,1,4,0,5,0,1,1,69632,65536,69632,600000"]
TOOL = str(ROOT / "decode_analyze.py")


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
    reader = subprocess.Popen([sys.executable, TOOL, "compute", str(fifo), "--format", "json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    writer.communicate(ct_text(GOOD_CT).encode())
    out, err = reader.communicate(timeout=30)
    assert reader.returncode == 0, err
    assert b'"ms_per_token": 4.0' in out


def test_process_substitution(tmp_path):
    path = tmp_path / "ct.csv"
    path.write_text(ct_text(GOOD_CT))
    done = subprocess.run(["bash", "-c", f"'{sys.executable}' '{TOOL}' compute <(cat '{path}') "
                                         "--format json"], capture_output=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert b'"ms_per_token": 4.0' in done.stdout


# 5. closed and full streams
def shell(command):
    return subprocess.run(["bash", "-c", command], capture_output=True, timeout=30)


@pytest.fixture
def ct_file(tmp_path):
    path = tmp_path / "ct.csv"
    path.write_text(ct_text(GOOD_CT))
    return path


def test_stdout_closed(ct_file):
    done = shell(f"'{sys.executable}' '{TOOL}' compute '{ct_file}' >&-")
    assert done.returncode == 1
    assert done.stderr == b"decode-analyze: standard output is closed: nowhere to write the " \
                          b"report\n"


def test_stdin_closed():
    done = shell(f"'{sys.executable}' '{TOOL}' compute - <&-")
    assert done.returncode == 1
    assert done.stderr == b"decode-analyze: <stdin>: standard input is closed\n"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
def test_stdout_on_a_full_disk(ct_file):
    done = shell(f"'{sys.executable}' '{TOOL}' compute '{ct_file}' > /dev/full")
    assert done.returncode == 1
    assert done.stderr == b"decode-analyze: cannot write the output: No space left on device\n"


def test_stderr_closed_loses_the_warning_not_the_run(tmp_path):
    path = tmp_path / "ct.csv"
    path.write_text(ct_text(GOOD_CT).replace("v1", "v9"))  # an unknown version: a warning
    done = shell(f"'{sys.executable}' '{TOOL}' compute '{path}' --format json 2>&-")
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
    done = subprocess.run(["bash", "-c", f"cat '{path}' | '{sys.executable}' '{TOOL}' compute "
                                         "/dev/stdin --format json"], capture_output=True,
                          timeout=30)
    assert done.returncode == 0, done.stderr
    assert b'"ms_per_token": 4.0' in done.stdout
