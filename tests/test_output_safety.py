"""Issue 8, output: untrusted strings never reach a terminal or a JSON reader raw; a signal
ends every process of a run."""
import json
import os
import signal
import subprocess
import sys
import time

import pytest

import tracegen
from helpers import ROOT, ct_text, run

HOSTILE = ["\x7f", "\x85", "\x9b", "\u2028", "\u2029", "\u202e", "\u200b", "\u200f", "\ufeff",
           "\u2066"]


def test_json_escapes_every_unprintable_character(write):
    name = "evil" + "".join(HOSTILE) + "-0"
    preamble = f"# compute_trace v1\n# model=m{HOSTILE[2]}{HOSTILE[5]}.gguf\n"
    path = write(ct_text([f"0,1,4,0,0,MUL_MAT,{name},1000,0"], preamble=preamble).encode())
    result = run("compute", path, "--format", "json")
    assert result.code == 0
    assert not any(ch in result.out for ch in HOSTILE)
    parsed = json.loads(result.out)
    assert parsed["meta"]["model"] == f"m{HOSTILE[2]}{HOSTILE[5]}.gguf"
    assert parsed["unclassified"][0]["name"] == "evil" + "".join(HOSTILE)
    text = run("compute", path).out
    assert not any(ch in text for ch in HOSTILE) and "\\u202e" in text


def test_printable_non_ascii_stays_as_it_is(write):
    path = write(ct_text(["0,1,4,0,0,MUL_MAT,Qcur-0 é→ü,1000,0"]).encode())
    assert "é→ü" in run("compute", path, "--format", "json").out


@pytest.mark.skipif(not hasattr(os, "fork") or not os.path.isdir("/proc"), reason="Linux only")
def test_sigterm_ends_both_processes(tmp_path):
    path = tracegen.write(tmp_path / "ct.csv", tracegen.compute_lines(n_layer=48,
                                                                      decode_tokens=160))
    assert path.stat().st_size > 16 << 20
    child = subprocess.Popen([sys.executable, str(ROOT / "decode_analyze.py"), "compute",
                              str(path)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    workers = []
    deadline = time.time() + 20
    while not workers and time.time() < deadline:
        time.sleep(0.05)
        try:
            with open(f"/proc/{child.pid}/task/{child.pid}/children") as f:
                workers = [int(pid) for pid in f.read().split()]
        except OSError:
            break
    assert workers, "the run never started its second process"
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=20)
    assert child.returncode == 143 and err == b""
    time.sleep(0.2)
    for pid in workers:
        assert not os.path.exists(f"/proc/{pid}") or _is_zombie(pid)


def _is_zombie(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] == "Z"
    except OSError:
        return True
