"""The tests' helpers, in one module: run the CLI in-process, write tiny traces, find the real
traces. Fixtures that use them are in conftest.py."""
import io
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The tool as a process of its own, as `python3 -m decode_analyze` runs it (conftest puts the
# repository on PYTHONPATH): from the bytecode conftest compiles once, where a script is
# compiled anew each run, a third of a second each
TOOL = [sys.executable, "-m", "decode_analyze"]
TOOL_SHELL = f"'{sys.executable}' -m decode_analyze"  # the same, in a shell line
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import decode_analyze  # noqa: E402

SHARED = ROOT.parent / "shared"
REFERENCE = SHARED / "reference" / "decode-analyze.py"
# The real engine traces (../shared/traces, copied here so that a fresh clone runs every test);
# the session pair is examples/session-*.csv.
TRACES = ROOT / "tests" / "data"
REAL_TRACES = {**{p.name: p for p in TRACES.glob("*.csv")},
               "qwen3moe-l4-session-ct-node.csv": ROOT / "examples" / "session-ct.csv",
               "qwen3moe-l4-session-ct-node-io.csv": ROOT / "examples" / "session-io.csv"}

CT_HEADER = "turn,phase,step,seq,layer,op,name,wall_ns,majflt"
IO_HEADER = "turn,phase,step,layer,expert,proj,lane,spec,offset,req_bytes,read_bytes,latency_ns"


# Runs a command and prints the peak RSS of its process tree (the largest of its processes).
# The command runs with its addresses unrandomized where Linux allows it (personality
# ADDR_NO_RANDOMIZE) and a fixed hash seed: the address layout alone moved the peak of one
# report by up to 500 KiB from run to run (16 runs at 60k one-row tokens), a tenth of what
# 50k tokens take, and with it fixed the same runs spread 180 KiB.
_MEASURE = """
import ctypes, os, resource, subprocess, sys
def same_layout():
    try:
        libc = ctypes.CDLL(None)
        libc.personality(libc.personality(0xffffffff) | 0x0040000)
    except (AttributeError, OSError):
        pass
done = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                      preexec_fn=same_layout, env={**os.environ, "PYTHONHASHSEED": "0"})
sys.stdout.buffer.write(done.stdout)
sys.stderr.buffer.write(done.stderr)
print(done.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def run_measured(argv, timeout):
    """(exit status, stdout, stderr, peak RSS in MiB) of a command run as its own process."""
    done = subprocess.run([sys.executable, "-c", _MEASURE, *map(str, argv)],
                          capture_output=True, timeout=timeout)
    out, _, last = done.stdout.decode().rstrip("\n").rpartition("\n")
    status, peak_kib = map(int, last.split())
    return status, out, done.stderr.decode(), peak_kib / 1024


class Result:
    def __init__(self, code, out, err):
        self.code, self.out, self.err = code, out, err

    @property
    def json(self):
        return json.loads(self.out)


def run(*argv):
    """main(argv) in-process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    code = decode_analyze.main([str(a) for a in argv], out=out, err=err)
    return Result(code, out.getvalue(), err.getvalue())


def assert_token_start(data, offset):
    """`offset` of the file's bytes `data` starts a line whose token differs from the line's
    before it."""
    before = data[:offset].rstrip(b"\n").rsplit(b"\n", 1)[1].split(b",")[:3]
    after = data[offset:].split(b"\n", 1)[0].split(b",")[:3]
    assert data[offset - 1:offset] == b"\n" and before != after


def error_of(*argv):
    """The one-line error of a run that must fail with exit status 1 and print nothing else."""
    result = run(*argv)
    assert result.code == 1, result.out
    assert result.out == ""
    lines = result.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("decode-analyze: "), result.err
    return lines[0]


def report_with_warnings(*argv):
    """The JSON report of a run that must succeed; warnings allowed (they are in it)."""
    result = run(*argv, "--format", "json")
    assert result.code == 0, result.err
    return result.json


def report(*argv):
    """The JSON report of a run that must succeed with no warning."""
    result = run(*argv, "--format", "json")
    assert result.code == 0, result.err
    assert result.err == "", result.err
    return result.json


def ct_text(rows, preamble="# compute_trace v1\n# model=m.gguf arch=qwen3moe n_layer=2 "
                           "n_threads=4\n", header=CT_HEADER):
    return preamble + header + "\n" + "".join(row + "\n" for row in rows)


# A preamble of 48 layers, for rows that number them so (n_layer=2 beside layer 47 is said)
CT_48_LAYERS = "# compute_trace v1\n# model=m.gguf arch=qwen3moe n_layer=48 n_threads=4\n"


def io_text(rows, preamble="# io_trace v1\n# model=m.gguf io_threads=2 o_direct=1 overlap=0\n",
            header=IO_HEADER):
    return preamble + header + "\n" + "".join(row + "\n" for row in rows)


def trace_rows(path):
    """A trace's rows as dicts, read by the csv module (no code of the tool): an independent
    count for a test to check a figure against."""
    import csv
    with open(path, newline="") as f:
        yield from csv.DictReader(line for line in f if not line.startswith("#"))


def shared_trace(name):
    """A real engine trace by its name in ../shared/traces."""
    return REAL_TRACES[name]


# A pair where half the decoded tokens read nothing, with speculative reads, and a router that
# the reads can account for: compute tokens 1-4 (2 of them read), reads of 1 MiB.
HALF_READ_CT = ct_text([f"0,1,{step},{seq},0,{op},{name},{ms * 1_000_000},0"
                        for step, slow in ((1, 1), (2, 0), (3, 1), (4, 0))
                        for seq, (op, name, ms) in enumerate(
                            [("GET_ROWS", "ffn_moe_weights-0", 6 if slow else 1),
                             ("MUL_MAT_ID", "ffn_moe_up-0", 4)])])
HALF_READ_IO = io_text([f"0,1,{step},0,{expert},0,{lane},{spec},{offset},1048576,1048576,8000000"
                        for step in (1, 3) for expert, lane, spec, offset in
                        ((1, 0, 0, 0), (2, 1, 1, 1 << 20))])
# Six reads of hand-computable figures: two tokens, three layers, two lanes, one spec read.
SIX_READS = [
    "0,1,1,0,1,0,0,0,0,65536,65536,500",
    "0,1,1,0,2,0,0,0,65536,65536,65536,1000",
    "0,1,1,1,1,0,0,1,1048576,65536,65536,3000",
    "0,1,2,1,1,0,1,0,1048576,65536,65536,1000000",
    "0,1,2,1,1,1,1,1,1114112,65536,65536,1000000",
    "0,1,2,2,7,0,1,0,9000000,1048576,1048576,1500000",
]
# The engine's own end-of-run summary of the io traces (tests/data/README.md): flash I/O
# s/token (rounded to ms) and MiB/s, per decoded token; every run decoded 128 tokens, 4 lanes.
ENGINE = {"gemma4-l4-io-serial.csv": (0.003, 366), "qwen3moe-l4-io-overlap.csv": (0.017, 96),
          "qwen3moe-l4-io-prefetch.csv": (0.005, 275), "qwen3moe-l4-io-serial.csv": (0.005, 344)}


def difference(got, expected):
    """None, or the first line where two long texts differ (pytest's own diff of two long
    texts takes minutes)."""
    if got == expected:
        return None
    for number, (line, wanted) in enumerate(zip(got.splitlines(), expected.splitlines()), 1):
        if line != wanted:
            return f"line {number}: {line[:200]!r} instead of {wanted[:200]!r}"
    return "one text is longer"


def scaled_trace(source, target, factor, op=None):
    """A copy of a trace (plain or gzip-compressed) with each row's time (a compute trace's
    wall_ns, of `op`'s nodes only when given; an io trace's latency_ns) times factor."""
    import gzip
    data = Path(source).read_bytes()
    text = (gzip.decompress(data) if str(source).endswith(".gz") else data).decode()
    out, header = [], None
    for line in text.splitlines(keepends=True):
        if line.startswith("#") or header is None:
            out.append(line)
            if not line.startswith("#"):
                header = line.rstrip("\n").split(",")
            continue
        fields = line.rstrip("\n").split(",")
        if op is None or fields[header.index("op")] == op:
            at = header.index("wall_ns" if "wall_ns" in header else "latency_ns")
            fields[at] = str(round(int(fields[at]) * factor))
        out.append(",".join(fields) + "\n")
    Path(target).write_text("".join(out))
    return Path(target)


def another_run(source, target, nudge=1):
    """A copy of a trace as another run of its command: its last row's time (wall_ns or
    latency_ns) `nudge` ns longer. Identical files are one run (diff and summary count them
    once), so a test that wants several runs of one trace's shape makes them with this."""
    lines = Path(source).read_text().splitlines(keepends=True)
    header = next(line for line in lines if not line.startswith("#")).rstrip("\n").split(",")
    column = header.index("wall_ns" if "wall_ns" in header else "latency_ns")
    fields = lines[-1].rstrip("\n").split(",")
    fields[column] = str(int(fields[column]) + nudge)
    lines[-1] = ",".join(fields) + "\n"
    Path(target).write_text("".join(lines))
    return Path(target)


# The test-only packages (tests/requirements.txt) a few tests need: where one is missing (a
# machine whose python has only pytest), those tests are skipped, saying what to install,
# and the rest run; .ci/run sets DECODE_ANALYZE_ALL_TESTS, under which nothing may skip so.
TEST_PACKAGES_HINT = "pip install -r tests/requirements.txt"


def needed_package(name):
    """The module `name` of tests/requirements.txt, or the calling test skipped."""
    import os
    import pytest
    if os.environ.get("DECODE_ANALYZE_ALL_TESTS"):
        return __import__(name)  # CI: a missing package fails, never skips
    return pytest.importorskip(name, reason=f"{name} is not installed: {TEST_PACKAGES_HINT}")


def markdown_parser():
    """GitHub-like Markdown (CommonMark with tables, HTML on), from markdown-it-py."""
    return needed_package("markdown_it").MarkdownIt("commonmark", {"html": True}).enable("table")
