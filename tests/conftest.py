"""pytest's fixtures; the helpers they use are in helpers.py."""
import fcntl
import hashlib
import json
import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import (CT_48_LAYERS, HALF_READ_CT, HALF_READ_IO, ROOT, SIX_READS,  # noqa: E402
                     ct_text, io_text, report_with_warnings, run)


def compiled_once():
    """The tool's bytecode, written once for the processes the tests start (helpers.TOOL), which
    find the tool on PYTHONPATH: written even where PYTHONDONTWRITEBYTECODE is set (CI's
    machines set it), since each process would compile 13k lines again."""
    import importlib.util
    import os
    import py_compile
    for name in ("decode_analyze", "trace_io"):
        source = str(ROOT / f"{name}.py")
        py_compile.compile(source, cfile=importlib.util.cache_from_source(source), doraise=True)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT)] + [path for path in [os.environ.get("PYTHONPATH")] if path])


compiled_once()


@pytest.fixture
def small_split(monkeypatch):
    """small_split(*argv) -> (one-process result, result with the split on for files of a few
    KiB)."""
    import trace_io

    def both(*argv):
        monkeypatch.setattr(trace_io, "PARALLEL_MIN_BYTES", 1 << 60)
        single = run(*argv)
        monkeypatch.setattr(trace_io, "PARALLEL_MIN_BYTES", 1024)
        return single, run(*argv, "--jobs", "2")  # the default is 1 when the cores are busy
    return both


@pytest.fixture
def write(tmp_path):
    """write(text, name='t.csv', mode='w') -> path of a file in a fresh directory."""
    def _write(text, name="t.csv"):
        path = tmp_path / name
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text, newline="")
        return path
    return _write


@pytest.fixture
def half_read(write):
    """(compute trace, io trace) of helpers.HALF_READ_CT and HALF_READ_IO."""
    return write(HALF_READ_CT, "ct.csv"), write(HALF_READ_IO, "io.csv")


@pytest.fixture
def reads(write):
    """An io trace of helpers.SIX_READS."""
    return write(io_text(SIX_READS))


def one_token_traces(folder, count, many=True):
    """A compute trace of `count` rows that all share one (turn, phase, step), and (many) the
    same rows as ordinary 160-row tokens."""
    rows = [f"{layer % 48},{('MUL_MAT', 'ADD', 'RMS_NORM')[i % 3]},blk-{layer % 48}-{i % 7},"
            f"{1000 + i % 977},{i % 5 == 0 and 2 or 0}" for i, layer in
            ((i, i // 7) for i in range(count))]
    (folder / "single.csv").write_text(ct_text([f"0,1,7,{i},{row}" for i, row in enumerate(rows)],
                                               CT_48_LAYERS))
    if many:
        (folder / "many.csv").write_text(ct_text([f"0,1,{7 + i // 160},{i % 160},{row}"
                                                  for i, row in enumerate(rows)], CT_48_LAYERS))
    return folder


@pytest.fixture(scope="session")
def one_token(tmp_path_factory):
    """16 MB of one token: large enough that holding its rows would show in the memory."""
    return one_token_traces(tmp_path_factory.mktemp("one-token"), 320_000, many=False)


@pytest.fixture(scope="session")
def long_token(tmp_path_factory):
    """One token of about four pieces of trace_io.HOLD_ROWS, and the same rows as 400 tokens."""
    return one_token_traces(tmp_path_factory.mktemp("long-token"), 64_000)


@pytest.fixture(scope="session")
def once_a_run(tmp_path_factory):
    """get(name, compute): what `compute` returns (JSON), computed once a test run for every
    xdist worker, where a module's fixture was computed once a worker (each worker runs some of
    its tests): the first to ask computes it, the others wait for it and read it back."""
    base = tmp_path_factory.getbasetemp()
    folder = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # this run's

    def get(name, compute):
        path = folder / f"{name}.json"
        with open(folder / f"{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not path.exists():
                path.write_text(json.dumps(compute()))
        return json.loads(path.read_text())
    return get


@pytest.fixture(scope="session")
def report_once(once_a_run):
    """report_once(*argv): the JSON report of a run that must succeed (its warnings in it), read
    once a test run for every test that only reads it: the 48-layer runs several files read."""
    def report_of(*argv):
        argv = [str(arg) for arg in argv]
        name = "report-" + hashlib.sha1("\0".join(argv).encode()).hexdigest()
        return once_a_run(name, lambda: report_with_warnings(*argv))
    return report_of
