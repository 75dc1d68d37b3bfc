"""The same input through every read path gives the same report: the fast path and the
line-by-line path, one process and two, a file and stdin."""
import io
import json
import sys

import pytest

import decode_analyze
import trace_io
from helpers import REAL_TRACES, run

OPTIONS = {"compute": ("--layers",), "io": ("--adjacent", "--cache")}


def kind_of(name):
    return "io" if "-io" in name else "compute"


def json_of(result):
    assert result.code == 0, result.err
    report = result.json
    report.pop("path")
    return report


@pytest.mark.parametrize("name", sorted(REAL_TRACES))
def test_every_path_gives_the_same_report(name, monkeypatch):
    path = REAL_TRACES[name]
    argv = (kind_of(name), path, *OPTIONS[kind_of(name)], "--format", "json")
    monkeypatch.setattr(trace_io, "PARALLEL_MIN_BYTES", 1 << 60)
    single = json_of(run(*argv))
    monkeypatch.setattr(trace_io, "PARALLEL_MIN_BYTES", 4096)
    assert json_of(run(*argv)) == single, "two processes"
    monkeypatch.setattr(trace_io, "PARALLEL_MIN_BYTES", 1 << 60)
    monkeypatch.setattr(trace_io.Trace, "_fast_batch", lambda self, *args, **kwargs: None)
    assert json_of(run(*argv)) == single, "line by line"
    monkeypatch.undo()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(path.read_bytes())))
    out, err = io.StringIO(), io.StringIO()
    assert decode_analyze.main([argv[0], "-", *argv[2:]], out=out, err=err) == 0
    from_stdin = json.loads(out.getvalue())
    from_stdin.pop("path")
    assert from_stdin == single, "stdin"
