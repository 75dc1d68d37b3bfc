"""Issue 7: figures framed on the right clock, verdicts that decide only on evidence, one
denominator per table, headlines that fit the run, output fit for a bug report."""
import json
import os
import re
import subprocess
import sys

import pytest

import tracegen
from helpers import REAL_TRACES, ROOT, ct_text, io_text, report, run

# The engine's own end-of-run summary (tests/data/README.md): flash I/O s/token (rounded to
# ms) and MiB/s, per decoded token; every run decoded 128 tokens with 4 lanes.
ENGINE = {"gemma4-l4-io-serial.csv": (0.003, 366), "qwen3moe-l4-io-overlap.csv": (0.017, 96),
          "qwen3moe-l4-io-prefetch.csv": (0.005, 275), "qwen3moe-l4-io-serial.csv": (0.005, 344)}
DECODED = 128


@pytest.mark.parametrize("name", sorted(ENGINE))
def test_the_io_range_holds_the_engines_own_figures(name):
    r = report("io", REAL_TRACES[name])
    assert r["lanes"] == 4 and r["tokens"] == DECODED  # every token read: per read-token = decoded
    wall, rate = r["io_wall_ms_per_token"], r["throughput_mib_per_s"]
    seconds, mib_per_s = ENGINE[name]
    assert wall["min"] - 0.5 <= seconds * 1e3 <= wall["max"] + 0.5  # the engine rounds to ms
    assert rate["min"] <= mib_per_s <= rate["max"]
    # the bounds by definition: lane-busy over the lanes, and all of it
    assert wall["max"] == pytest.approx(r["busy_ms_per_token"])
    assert wall["min"] == pytest.approx(r["busy_ms_per_token"] / 4)
    assert rate["min"] == pytest.approx(r["mib_per_token"] / (wall["max"] / 1e3))


def test_io_text_leads_with_the_range():
    out = run("io", REAL_TRACES["qwen3moe-l4-io-serial.csv"]).out
    text = " ".join(out.split())
    assert text.index("I/O per read-token: between 3.57 ms (4 lanes in parallel) and 14.27 ms "
                      "(one at a time); throughput between 112 and 447 MiB/s") < \
        text.index("lanes busy 14.27 ms per read-token summed over lanes") < text.index("verdicts")


@pytest.mark.parametrize("name", sorted(ENGINE))
def test_latency_bound_is_undetermined_with_one_size_class(name):
    r = report("io", REAL_TRACES[name])
    (verdict,) = [v for v in r["verdicts"] if v["id"] == "latency_bound"]
    if len(r["by_size"]) == 1:
        assert verdict["flagged"] is None
        assert verdict["text"].startswith("latency-bound undetermined: every read is in one size "
                                          f"class ({r['by_size'][0]['label']}")


# A pair where half the decoded tokens read nothing, with speculative reads, and a router that
# the reads can account for: compute tokens 1-4 (2 of them read), reads of 1 MiB.
PAIR_CT = ct_text([f"0,1,{step},{seq},0,{op},{name},{ms * 1_000_000},0"
                   for step, slow in ((1, 1), (2, 0), (3, 1), (4, 0))
                   for seq, (op, name, ms) in enumerate(
                       [("GET_ROWS", "ffn_moe_weights-0", 6 if slow else 1),
                        ("MUL_MAT_ID", "ffn_moe_up-0", 4)])])
PAIR_IO = io_text([f"0,1,{step},0,{expert},0,{lane},{spec},{offset},1048576,1048576,8000000"
                   for step in (1, 3) for expert, lane, spec, offset in
                   ((1, 0, 0, 0), (2, 1, 1, 1 << 20))])


@pytest.fixture
def pair(write):
    return write(PAIR_CT, "ct.csv"), write(PAIR_IO, "io.csv")


def test_every_report_io_figure_is_per_decoded_token(pair):
    r = report("report", *pair)
    p = r["pair"]
    assert p["tokens"] == 4 and p["tokens_without_reads"] == 2
    assert p["io_mib_per_token"] == 1.0  # 4 MiB over 4 decoded tokens
    assert sum(row["mib_per_token"] for row in p["demand_vs_spec"]) == pytest.approx(1.0)
    assert sum(row["mib_per_token"] for row in p["by_lane"]) == pytest.approx(1.0)
    assert p["io_wall_ms_per_token"] == pytest.approx({"min": 4.0, "max": 8.0})  # 32 ms / 4
    assert p["adjacency"]["reads_per_token"] == 1.0
    assert r["io"]["mib_per_token"] == 2.0  # the io report keeps its own: per read-token
    text = " ".join(run("report", *pair).out.split())
    assert "MiB/tok is per decoded token" in text and "per read-token" not in text


def test_router_waits_for_reads_when_the_reads_can_account_for_it(pair):
    p = report("report", *pair)["pair"]
    (router,) = [v for v in p["verdicts"] if v["id"] == "router_wait"]
    assert router["flagged"] is True
    assert router["text"].startswith(
        "ROUTER WAITS FOR READS: routing nodes take 3.50 ms per decoded token, 47% of compute "
        "(> 20%), and the reads took between 4.00 and 8.00 ms per decoded token")


def test_read_split(pair):
    p = report("report", *pair)["pair"]
    assert p["read_split"] == {"read": {"tokens": 2, "ms_per_token": 10.0},
                               "no_read": {"tokens": 2, "ms_per_token": 5.0}}
    (split,) = [v for v in p["verdicts"] if v["id"] == "read_split"]
    assert split["flagged"] is False and split["text"] == (
        "reads do not split the tokens: the 2 tokens that read take 10.00 ms of compute each, the "
        "2 that read nothing 5.00 ms (2.00x; <= 2.0x)")


def test_outliers_are_named_with_their_share(write):
    walls = [16.5] * 126 + [716.0, 612.0]
    rows = [f"0,1,{100 + i},0,0,MUL_MAT,Qcur-0,{int(ms * 1e6)},0" for i, ms in enumerate(walls)]
    r = report("compute", write(ct_text(rows)))
    (verdict,) = [v for v in r["verdicts"] if v["id"] == "outliers"]
    share = (716 + 612) / sum(walls)
    assert verdict["flagged"] is True
    assert verdict["text"] == (
        f"OUTLIER TOKENS: 2 token(s) >= 10x the median (16.50 ms) hold {share:.0%} of the time "
        f"(>= 10%): turn 0 step 226 716.00 ms, turn 0 step 227 612.00 ms; the mean token is "
        f"{sum(walls) / len(walls) / 16.5:.2f}x the median")


def test_no_outliers_on_a_steady_run():
    r = report("compute", REAL_TRACES["qwen3moe-l4-session-ct-node.csv"])
    (verdict,) = [v for v in r["verdicts"] if v["id"] == "outliers"]
    assert verdict["flagged"] is False


def test_prefill_is_per_batch_and_per_prompt_token():
    r = report("compute", REAL_TRACES["qwen3moe-l4-ct-node.csv"], "--phase", "prefill")
    assert r["prefill"]["batches"] == 1 and r["prefill"]["prompt_tokens"] == 64
    assert r["prefill"]["ms_per_prompt_token"] == pytest.approx(r["ms_per_token"] / 64)
    out = run("compute", REAL_TRACES["qwen3moe-l4-ct-node.csv"], "--phase", "prefill").out
    assert "batches=1 (phase prefill)" in out
    assert f"1 batch(es) of 64 prompt tokens: {r['ms_per_token']:.2f} ms per batch" in out


def test_verdicts_come_right_after_the_header():
    out = run("compute", REAL_TRACES["qwen3moe-l4-ct-node.csv"]).out
    assert out.index("verdicts") < out.index("by op")


def commands_for(name):
    if "-io" in name:
        return [("io", "--adjacent", "--cache"), ("io", "--layers")]
    return [("compute",), ("compute", "--layers"), ("compute", "--phase", "prefill")]


@pytest.mark.parametrize("name", sorted(REAL_TRACES))
def test_no_line_over_100_columns(name):
    for command, *options in commands_for(name):
        out = run(command, REAL_TRACES[name], *options).out
        assert max(map(len, out.splitlines())) <= 100, (command, options)
    partner = next(other for other in sorted(REAL_TRACES)
                   if ("-io" in other) == ("-io" in name) and other != name)
    out = run("diff", REAL_TRACES[name], REAL_TRACES[partner]).out  # one NEW: one column group
    assert max(map(len, out.splitlines())) <= 100, partner
    out = run("report", REAL_TRACES["qwen3moe-l4-session-ct-node.csv"],
              REAL_TRACES["qwen3moe-l4-session-ct-node-io.csv"]).out
    assert max(map(len, out.splitlines())) <= 100


def test_a_long_path_stays_on_one_line(tmp_path):
    deep = tmp_path / ("d" * 90) / ("e" * 90)
    deep.mkdir(parents=True)
    path = deep / "ct.csv"
    path.write_text(ct_text(["0,1,4,0,0,MUL_MAT,Qcur-0,1000,0"]))
    lines = run("compute", path).out.splitlines()
    assert max(map(len, lines)) <= 100 and lines[1].startswith("  trace: ") and "…" in lines[1]


def test_many_layers_are_compact_by_default(tmp_path):
    ct = tracegen.write(tmp_path / "ct.csv", tracegen.compute_lines(n_layer=48, decode_tokens=6))
    io = tracegen.write(tmp_path / "io.csv", tracegen.io_lines(n_layer=48, decode_tokens=6))
    compact = run("report", ct, io).out
    full = run("report", ct, io, "--layers").out
    section = compact.split("by layer")[1].split("\n\n")[0].splitlines()
    assert len(section) < 20 and "49 layers, min/median/max:" in section[1]
    assert len(full.split("by layer")[1].split("\n\n")[0].splitlines()) == 1 + 1 + 49
    assert len(report("report", ct, io)["pair"]["by_layer"]) == 49


def test_identical_layers_fold_into_one_line(write):
    rows = [f"0,1,4,{i},{layer},MUL_MAT,Qcur-{layer},{1000000 if layer != 20 else 5000000},0"
            for i, layer in enumerate(range(40))]
    io_rows = [f"0,1,4,{layer},1,0,0,0,{layer << 20},65536,65536,1000" for layer in range(40)]
    out = run("io", write(io_text(io_rows), "io.csv")).out
    assert "no layer stands out" in out
    compact = run("report", write(ct_text(rows), "ct.csv"), write(io_text(io_rows), "io.csv")).out
    table = compact.split("layers that stand out")[1].split("\n\n")[0]
    assert re.search(r"^ +20 +5\.00", table, re.M) and table.count("\n") < 6


def package_version():
    text = (ROOT / "pyproject.toml").read_text()
    return re.search(r'^version = "([^"]+)"', text, re.M).group(1)


def test_version():
    """One version everywhere: the package's, --version's, the report's and the header's."""
    version = package_version()
    done = subprocess.run([sys.executable, str(ROOT / "decode_analyze.py"), "--version"],
                          capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.startswith(f"decode-analyze {version} ")
    r = report("compute", REAL_TRACES["qwen3moe-l4-ct-layers.csv"])
    assert r["tool_version"] == version and r["schema"] == 3
    assert run("compute", REAL_TRACES["qwen3moe-l4-ct-layers.csv"]).out.startswith(
        f"decode-analyze {version} compute")


@pytest.mark.parametrize("command", ["compute", "report"])
def test_cp1252_output_falls_back_to_ascii(command):
    paths = [REAL_TRACES["qwen3moe-l4-session-ct-node.csv"]]
    if command == "report":
        paths.append(REAL_TRACES["qwen3moe-l4-session-ct-node-io.csv"])
    done = subprocess.run([sys.executable, str(ROOT / "decode_analyze.py"), command, *paths],
                          capture_output=True, env={**os.environ, "PYTHONIOENCODING": "cp1252"})
    assert done.returncode == 0, done.stderr
    assert done.stderr == b"" and done.stdout.isascii() and b"  run |" in done.stdout
    # nothing written before the retry
    assert done.stdout.count(f"decode-analyze {package_version()}".encode()) == 1


def test_json_on_cp1252_stays_json(write):
    path = write(ct_text(["0,1,4,0,0,MUL_MAT,Qcur-0 é\u2192,1000,0"]).encode())
    done = subprocess.run([sys.executable, str(ROOT / "decode_analyze.py"), "compute", str(path),
                           "--format", "json"], capture_output=True,
                          env={**os.environ, "PYTHONIOENCODING": "cp1252"})
    assert done.returncode == 0
    assert json.loads(done.stdout.decode("cp1252"))["unclassified"][0]["name"] == "Qcur-0 é\u2192"
