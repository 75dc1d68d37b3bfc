"""Parity with the reference script (../shared/reference): on generated single-turn traces,
every figure it prints equals ours at the precision it prints. Adjacency is left out: its
definition is corrected (requested extents, not O_DIRECT windows)."""
import re
import subprocess
import sys

import pytest

import tracegen
from helpers import REFERENCE, report

pytestmark = pytest.mark.skipif(not REFERENCE.exists(), reason="../shared/reference not here")


def reference(*argv):
    result = subprocess.run([sys.executable, str(REFERENCE), *map(str, argv)],
                            capture_output=True, text=True, check=True)
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


def test_compute_node_parity(node_trace):
    text = reference("compute", node_trace, "--layers", "--top", "50")
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
    text = reference("compute", layer_trace)
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
    text = reference("io", io_trace)
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
