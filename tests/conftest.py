"""pytest's fixtures; the helpers they use are in helpers.py."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import run  # noqa: E402


@pytest.fixture
def small_split(monkeypatch):
    """small_split(*argv) -> (one-process result, result with the split on for files of a few
    KiB)."""
    import trace_io

    def both(*argv):
        monkeypatch.setattr(trace_io, "PARALLEL_MIN_BYTES", 1 << 60)
        single = run(*argv)
        monkeypatch.setattr(trace_io, "PARALLEL_MIN_BYTES", 1024)
        return single, run(*argv)
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
