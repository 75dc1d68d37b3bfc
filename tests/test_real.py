"""Real traces (../shared/traces, copied to tests/data): each analyses cleanly, the session
pair equals an independent count with the csv module, and every figure the reference script
prints equals ours at its precision. The reference's output on the generated parity traces is
saved under tests/golden/reference/, so that a clone without ../shared runs the parity checks
too; where the script is here, its live output must equal the saved one
(python3 tests/test_real.py --update rewrites them)."""
import re
import subprocess
import sys
from collections import defaultdict

import pytest

import tracegen
from helpers import REAL_TRACES, REFERENCE, ROOT, report, shared_trace, trace_rows


REFERENCE_SAID = ROOT / "tests" / "golden" / "reference"  # its output, saved


REAL = sorted(REAL_TRACES)


EXAMPLES = sorted(p.name for p in (ROOT / "examples").glob("*.csv"))


def kind_of(name):
    return "io" if "-io" in name else "compute"


def independent(path):
    """Decode tokens and their summed time by the csv module, with no code of the tool."""
    per_token = defaultdict(int)
    for row in trace_rows(path):
        if row["phase"] == "1":
            value = int(row.get("wall_ns") or row.get("read_bytes"))
            per_token[int(row["turn"]), int(row["step"])] += value
    return per_token


def reference(name, *argv):
    """What the reference script prints for argv: run live where it is here (and then equal to
    its saved output, tests/golden/reference/NAME.txt), else as saved."""
    saved = REFERENCE_SAID / f"{name}.txt"
    if not REFERENCE.exists():
        return saved.read_text(encoding="utf-8")
    result = subprocess.run([sys.executable, str(REFERENCE), *map(str, argv)],
                            capture_output=True, text=True, check=True)
    assert result.stdout == saved.read_text(encoding="utf-8"), \
        f"the reference's output moved: python3 tests/test_real.py --update ({saved.name})"
    return result.stdout


def same(value, printed, spec):
    assert format(value, spec).strip() == printed.strip(), (value, printed, spec)


@pytest.fixture(scope="module")
def node_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("parity") / "ct.csv"
    return tracegen.write(path, tracegen.compute_lines(n_layer=6, decode_tokens=24, seed=5))


@pytest.fixture(scope="module")
def layer_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("parity") / "ct-layers.csv"
    return tracegen.write(path, tracegen.compute_lines(n_layer=6, decode_tokens=24, layers=True,
                                                       seed=6))


@pytest.fixture(scope="module")
def io_trace(tmp_path_factory):
    path = tmp_path_factory.mktemp("parity") / "io.csv"
    return tracegen.write(path, tracegen.io_lines(n_layer=6, decode_tokens=30,
                                                  reads_per_token=60, spec_share=0.2, seed=7))


@pytest.mark.parametrize("name", REAL)
def test_real_trace_analyses_cleanly(name):
    r = report(kind_of(name), shared_trace(name), *(("--adjacent",) if "-io" in name else ()))
    assert r["tokens"] > 0 and r["warnings"] == []
    if r["kind"] == "compute":
        assert r["ms_per_token"] > 0
        assert sum(op["share"] for op in r["by_op"]) == pytest.approx(1.0)
    else:
        assert r["reads"] > 0 and 1.0 <= r["adjacency"]["coalesce_factor"] < 10


@pytest.mark.parametrize("name", EXAMPLES)
def test_examples_match_an_independent_count(name):
    path = ROOT / "examples" / name
    expected = independent(path)
    r = report(kind_of(name), path)
    assert r["tokens"] == len(expected) and r["warnings"] == []
    if r["kind"] == "compute":
        assert r["ms_per_token"] == pytest.approx(sum(expected.values()) / 1e6 / len(expected))
    else:
        assert r["read_bytes"] == sum(expected.values())


def test_session_pair_compute():
    path = shared_trace("qwen3moe-l4-session-ct-node.csv")
    expected = independent(path)
    r = report("compute", path)
    assert r["tokens"] == len(expected) == 208
    assert r["ms_per_token"] == pytest.approx(sum(expected.values()) / 1e6 / 208)
    for turn, tokens in enumerate((64, 48, 64, 32)):
        per_turn = report("compute", path, "--turn", turn)
        mine = {k: v for k, v in expected.items() if k[0] == turn}
        assert per_turn["tokens"] == len(mine) == tokens
        assert per_turn["ms_per_token"] == pytest.approx(sum(mine.values()) / 1e6 / tokens)
        assert [t["ms"] for t in per_turn["per_token"]] == pytest.approx(
            [v / 1e6 for _, v in sorted(mine.items())])


def test_session_pair_io():
    path = shared_trace("qwen3moe-l4-session-ct-node-io.csv")
    expected = independent(path)
    r = report("io", path)
    assert r["tokens"] == len(expected)
    assert r["read_bytes"] == sum(expected.values())
    assert r["mib_per_token"] == pytest.approx(sum(expected.values()) / 2**20 / len(expected))


def test_layer_trace_segments_in_order():
    r = report("compute", shared_trace("qwen3moe-l4-ct-layers.csv"))
    assert r["granularity"] == "layer"
    assert [s["name"] for s in r["segments"]] == ["pre", "blk.0", "blk.1", "blk.2", "blk.3",
                                                  "post"]
    assert sum(s["share"] for s in r["segments"]) == pytest.approx(1.0)


def test_o_direct_waste_on_real_io():
    r = report("io", shared_trace("qwen3moe-l4-io-serial.csv"))
    # 65536 wanted, 69632 read: 1 - 65536/69632 = 5.88%, a little less where the window is short
    assert 5.0 < r["waste_pct"] < 5.9


PARITY_RUNS = {"compute-node": ("compute", "--layers", "--top", "50"),
               "compute-layers": ("compute",), "io": ("io",)}


def test_compute_node_parity(node_trace):
    text = reference("compute-node", "compute", node_trace, "--layers", "--top", "50")
    ours = report("compute", node_trace)
    header = re.search(r"decode steps=(\d+)\s+nodes/step=(\d+)\s+measured compute=\s*([\d.]+) "
                       r"ms/token\s+majflt=(\d+)/token", text)
    assert int(header[1]) == ours["tokens"]
    assert int(header[2]) == int(ours["nodes_per_token"])
    same(ours["ms_per_token"], header[3], ".2f")
    same(ours["majflt_per_token"], header[4], ".0f")

    ops = {op["op"]: op for op in ours["by_op"]}
    op_rows = re.findall(r"^([A-Z_]+)\s+([\d.]+)\s+([\d.]+)%\s+([\d.]+)\s+[#.]+$", text, re.M)
    assert len(op_rows) == len(ops)
    for name, ms, share, majflt in op_rows:
        same(ops[name]["ms_per_token"], ms, ".2f")
        same(ops[name]["share"] * 100, share, ".1f")
        same(ops[name]["majflt_per_token"], majflt, ".1f")

    faults = {op["op"]: op for op in ours["faults"]["by_op"]}
    fault_rows = re.findall(r"^  (\w+)\s+([\d.]+) majflt/tok  in\s+([\d.]+) ms/tok \(\s*([\d.]+)%",
                            text, re.M)
    assert fault_rows and fault_rows[-1][0] == "TOTAL"
    for name, majflt, ms, share in fault_rows:
        figures = ours["faults"] if name == "TOTAL" else faults[name]
        same(figures["majflt_per_token"], majflt, ".1f")
        same(figures["ms_per_token"], ms, ".2f")
        same(figures["share"] * 100, share, ".1f")

    # The reference's by-layer table is the layer column as written.
    layers = {row["layer"]: row for row in ours["by_layer_column"]}
    layer_rows = re.findall(r"^  layer\s+(-?\d+)\s+([\d.]+) ms/tok", text, re.M)
    assert len(layer_rows) == len(layers)
    for layer, ms in layer_rows:
        same(layers[int(layer)]["ms_per_token"], ms, ".2f")


def test_compute_layer_parity(layer_trace):
    text = reference("compute-layers", "compute", layer_trace)
    ours = report("compute", layer_trace)
    assert ours["granularity"] == "layer"
    header = re.search(r"decode steps=(\d+)\s+layer granularity\s+measured compute=\s*([\d.]+) "
                       r"ms/token\s+majflt=(\d+)/token", text)
    assert int(header[1]) == ours["tokens"]
    same(ours["ms_per_token"], header[2], ".2f")
    same(ours["majflt_per_token"], header[3], ".0f")
    rows = re.findall(r"^(pre|post|blk\.\d+)\s+([\d.]+)\s+([\d.]+)%\s+([\d.]+)", text, re.M)
    assert [name for name, *_ in rows] == [s["name"] for s in ours["segments"]]
    for (name, ms, share, majflt), segment in zip(rows, ours["segments"]):
        same(segment["ms_per_token"], ms, ".2f")
        same(segment["share"] * 100, share, ".1f")
        same(segment["majflt_per_token"], majflt, ".1f")


def test_io_parity(io_trace):
    text = reference("io", "io", io_trace)
    ours = report("io", io_trace)
    head = re.search(r"decode steps=(\d+)\s+reads=(\d+) \((\d+)/token\)\s+read=([\d.]+) MiB/token",
                     text)
    assert int(head[1]) == ours["tokens"] and int(head[2]) == ours["reads"]
    same(ours["reads_per_token"], head[3], ".0f")
    same(ours["mib_per_token"], head[4], ".1f")
    busy = re.search(r"lane-busy bandwidth=(\d+) MiB/s .*\((\d+) ms lane-busy/token\)", text)
    same(ours["busy_mib_per_s"], busy[1], ".0f")
    same(ours["busy_ms_per_token"], busy[2], ".0f")
    waste = re.search(r"alignment waste=([\d.]+)% \(([\d.]+) MiB/token", text)
    same(ours["waste_pct"], waste[1], ".1f")
    same(ours["waste_mib_per_token"], waste[2], ".2f")
    for name in ("p50", "p90", "p99", "max"):
        printed = re.search(rf"^  {name}\s+([\d.]+)$", text, re.M)[1]
        same(ours["latency_us"][name], printed, ".1f")
    sizes = re.findall(r"^\s+(\d+) K\s+(\d+)\s+([\d.]+)\s+(\d+)\s+([\d.]+)$", text, re.M)
    assert [int(kib) for kib, *_ in sizes] == [row["kib"] for row in ours["by_size"]]
    assert len(sizes) >= 3
    for (kib, reads, mib, rate, us), row in zip(sizes, ours["by_size"]):
        assert int(reads) == row["reads"]
        same(row["mib"], mib, ".1f")
        same(row["mib_per_s"], rate, ".0f")
        same(row["us_per_read"], us, ".1f")
    lanes = re.findall(r"lane (\d+):\s+([\d.]+) MiB/tok\s+busy\s+([\d.]+) ms/tok\s+(\d+) MiB/s",
                       text)
    assert [int(lane) for lane, *_ in lanes] == [row["lane"] for row in ours["by_lane"]]
    for (lane, mib, busy_ms, rate), row in zip(lanes, ours["by_lane"]):
        same(row["mib_per_token"], mib, ".1f")
        same(row["busy_ms_per_token"], busy_ms, ".1f")
        same(row["mib_per_s"], rate, ".0f")
    spec = re.search(r"speculative: (\d+) reads, ([\d.]+) MiB/token \((\d+)% of bytes", text)
    assert int(spec[1]) == ours["spec"]["reads"] > 0
    same(ours["spec"]["mib_per_token"], spec[2], ".1f")
    same(ours["spec"]["share_of_bytes"] * 100, spec[3], ".0f")


def update(folder):
    """Run the reference on the parity traces and save what it prints."""
    traces = {"compute-node": tracegen.compute_lines(n_layer=6, decode_tokens=24, seed=5),
              "compute-layers": tracegen.compute_lines(n_layer=6, decode_tokens=24, layers=True,
                                                       seed=6),
              "io": tracegen.io_lines(n_layer=6, decode_tokens=30, reads_per_token=60,
                                      spec_share=0.2, seed=7)}
    REFERENCE_SAID.mkdir(exist_ok=True)
    for name, lines in traces.items():
        path = tracegen.write(folder / f"{name}.csv", lines)
        command, *options = PARITY_RUNS[name]
        result = subprocess.run([sys.executable, str(REFERENCE), command, str(path), *options],
                                capture_output=True, text=True, check=True)
        (REFERENCE_SAID / f"{name}.txt").write_text(result.stdout, encoding="utf-8")
        print(f"{REFERENCE_SAID / name}.txt")


if __name__ == "__main__" and sys.argv[1:] == ["--update"]:
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as scratch:
        update(Path(scratch))
