"""Issue 8, hangs and memory: whatever the input, time stays linear and memory bounded. Each
case runs as its own process (memory is its peak RSS) under a generous time limit that only a
hang or a quadratic path would meet."""
import gzip
import sys

import pytest

from helpers import REAL_TRACES, ROOT, ct_text, run_measured

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
    from helpers import report
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


def reentry_of(tmp_path, monkeypatch):
    """The argv the re-entry would exec for a large input, after checking when it happens:
    next to a large file (the syntax tree's 9 MB then matter), not next to small files, not
    twice."""
    import os
    import sys
    import decode_analyze
    big = tmp_path / "big.csv"
    with open(big, "wb") as f:
        f.truncate(200 << 20)  # sparse: a size, no data
    calls = []
    monkeypatch.setattr(os, "execv", lambda path, argv: calls.append(argv))
    monkeypatch.setenv("DECODE_ANALYZE_REENTERED", "")  # restored after the test
    for argv in (["x", "compute", str(REAL_TRACES["qwen3moe-l4-ct-layers.csv"])],
                 ["x", "compute", str(big)]):
        monkeypatch.setattr(sys, "argv", argv)
        decode_analyze.reenter_as_module()
    assert len(calls) == 1 and calls[0][0] == sys.executable and calls[0][1] == "-c"
    assert calls[0][4:] == ["compute", str(big)] and calls[0][3] == str(ROOT)
    assert os.environ["DECODE_ANALYZE_REENTERED"] == "1"
    decode_analyze.reenter_as_module()  # the re-entered process: in place
    assert len(calls) == 1
    return calls[0]


def test_a_large_run_reenters_as_a_module(tmp_path, monkeypatch):
    reentry_of(tmp_path, monkeypatch)


def test_the_reentered_process_is_the_same_run_and_not_shadowed(tmp_path, monkeypatch):
    """What the re-entry runs, from a folder holding a csv.py: the standard library's csv is
    still the one imported, and the output is the in-place run's."""
    import os
    import subprocess
    import sys
    argv = reentry_of(tmp_path, monkeypatch)
    (tmp_path / "csv.py").write_text("raise SystemExit('shadowed')\n")
    trace = str(REAL_TRACES["qwen3moe-l4-ct-layers.csv"])
    env = {key: value for key, value in os.environ.items() if key != "DECODE_ANALYZE_REENTERED"}
    reentered = subprocess.run(argv[:4] + ["compute", trace, "--format", "json"],
                               cwd=tmp_path, capture_output=True, text=True,
                               env={**env, "DECODE_ANALYZE_REENTERED": "1"})
    in_place = subprocess.run([sys.executable, str(ROOT / "decode_analyze.py"), "compute", trace,
                               "--format", "json"], cwd=tmp_path, capture_output=True, text=True)
    assert reentered.returncode == 0 and reentered.stderr == "", reentered.stderr
    assert reentered.stdout == in_place.stdout and '"kind": "compute"' in in_place.stdout
