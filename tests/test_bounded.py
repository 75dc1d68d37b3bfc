"""Issue 8, hangs and memory: whatever the input, time stays linear and memory bounded. Each
case runs as its own process (memory is its peak RSS) under a generous time limit that only a
hang or a quadratic path would meet."""
import gzip
import sys

import pytest

from conftest import REAL_TRACES, ROOT, ct_text, run_measured

TOOL = str(ROOT / "decode_analyze.py")
MEMORY_LIMIT_MIB = 200


def run_process(*argv, timeout=60):
    """(exit status, stderr, peak RSS in MiB) of the tool run as its own process."""
    status, _, err, peak = run_measured([sys.executable, TOOL, *argv], timeout)
    return status, err, peak


def test_a_long_body_line_without_newline(tmp_path):
    path = tmp_path / "long.csv"
    path.write_bytes(ct_text(["0,1,4,0,0,MUL_MAT,Qcur-0,1000,0"]).encode() + b"7" * (40 << 20))
    status, err, peak = run_process("compute", path, timeout=30)
    assert status == 1
    assert err == f"decode-analyze: {path}:5: line longer than 1 MiB: not a trace line (a real " \
                  "row is under 1 KiB)\n"
    assert peak < MEMORY_LIMIT_MIB


def test_a_gzip_that_expands_to_one_long_line(tmp_path):
    path = tmp_path / "bomb.csv.gz"
    path.write_bytes(gzip.compress(ct_text([]).encode() + b"0," * (100 << 20)))
    assert path.stat().st_size < 1 << 20
    status, err, peak = run_process("compute", path, timeout=30)
    assert status == 1 and "bomb.csv.gz:4: line longer than 1 MiB" in err
    assert peak < MEMORY_LIMIT_MIB


def test_a_file_of_zeros_has_no_header(tmp_path):
    path = tmp_path / "zeros.csv"
    with open(path, "wb") as f:
        f.truncate(200 << 20)  # sparse: 200 MB of NUL bytes
    status, err, peak = run_process("compute", path, timeout=30)
    assert status == 1 and "not a text trace: binary data (NUL bytes) at the start" in err
    path.write_bytes(b"0" * (50 << 20))
    status, err, peak = run_process("compute", path, timeout=30)
    assert status == 1 and "zeros.csv:1: line longer than 1 MiB" in err
    assert peak < MEMORY_LIMIT_MIB


@pytest.fixture(scope="module")
def one_token(tmp_path_factory):
    """A 16 MB compute trace whose rows all share one (turn, phase, step), and the same rows
    as ordinary 160-row tokens."""
    folder = tmp_path_factory.mktemp("one-token")
    rows = [f"{layer % 48},{('MUL_MAT', 'ADD', 'RMS_NORM')[i % 3]},blk-{layer % 48}-{i % 7},"
            f"{1000 + i % 977},{i % 5 == 0 and 2 or 0}" for i, layer in
            ((i, i // 7) for i in range(320_000))]
    single = ct_text([f"0,1,7,{i},{row}" for i, row in enumerate(rows)])
    many = ct_text([f"0,1,{7 + i // 160},{i % 160},{row}" for i, row in enumerate(rows)])
    (folder / "single.csv").write_text(single)
    (folder / "many.csv").write_text(many)
    return folder


def test_one_token_spanning_many_batches_is_linear_and_bounded(one_token):
    status, err, peak = run_process("compute", one_token / "single.csv", "--format", "json",
                                    timeout=120)
    assert status == 0, err
    assert peak < MEMORY_LIMIT_MIB


def test_one_long_token_keeps_its_figures(one_token):
    from conftest import report
    single = report("compute", one_token / "single.csv", "--layers")
    many = report("compute", one_token / "many.csv", "--layers")
    assert single["tokens"] == 1 and many["tokens"] == 2000
    assert single["rows"] == many["rows"] == 320_000
    for table, key in (("by_op", "op"), ("by_category", "category")):
        totals = {row[key]: row["ms_per_token"] for row in single[table]}
        assert totals == pytest.approx({row[key]: row["ms_per_token"] * 2000
                                        for row in many[table]})
    assert {(r["op"], r["p50_us"], r["p99_us"], r["max_us"]) for r in single["by_op"]} == \
        {(r["op"], r["p50_us"], r["p99_us"], r["max_us"]) for r in many["by_op"]}


def test_the_script_reenters_as_a_module_without_shadowing(tmp_path):
    """Run as a script, the tool replaces itself with an import of itself (the script's syntax
    tree is not kept for the whole run); a csv.py in the current directory still cannot
    shadow the standard library, and the in-place run (re-entry refused) gives the same."""
    import os
    import subprocess
    import sys
    (tmp_path / "csv.py").write_text("raise SystemExit('shadowed')\n")
    argv = [sys.executable, str(ROOT / "decode_analyze.py"), "compute",
            str(REAL_TRACES["qwen3moe-l4-ct-layers.csv"]), "--format", "json"]
    outputs = []
    for extra in ({}, {"DECODE_ANALYZE_REENTERED": "1"}):
        done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True,
                              env={**os.environ, **extra})
        assert done.returncode == 0 and done.stderr == "", done.stderr
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1] and '"kind": "compute"' in outputs[0]
