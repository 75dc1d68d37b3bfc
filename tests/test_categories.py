"""Node categories (../shared/spec/node-names.md) and inferred layers, on hand-made graphs."""
import pytest

from helpers import ct_text, report, shared_trace
from decode_analyze import base_name, classify, infer_layers

# One token: a dense layer 0, a MoE layer 1 with a shared expert, and the tail. Each node's
# wall is a distinct power of two (in us) so every category's sum is unambiguous.
GRAPH = [  # (layer, op, name, expected category)
    (-1, "GET_ROWS", "inp_embd", "embedding"),
    (0, "RMS_NORM", "norm-0", "norm"),
    (0, "MUL", "attn_norm-0", "norm"),
    (0, "MUL_MAT", "Qcur-0", "attention"),
    (-1, "VIEW", "Kcur_pos-0 (view)", "attention"),
    (-1, "SET_ROWS", "cache_k_l0 (view)", "attention"),
    (-1, "FLASH_ATTN_EXT", "node_6", "attention"),
    (-1, "MUL_MAT", "node_7", "attention"),  # inherits: the output projection
    (0, "ADD", "attn_out-0", "residual"),  # gemma4's residual add
    (0, "MUL_MAT", "ffn_gate-0", "dense_ffn"),
    (0, "MUL_MAT", "ffn_out-0", "dense_ffn"),
    (1, "MUL_MAT", "attn_out-1", "attention"),  # the projection, when a MUL_MAT
    (1, "MUL_MAT", "ffn_moe_logits-1", "router"),
    (1, "SUM_ROWS", "ffn_moe_weights_sum-1", "router"),  # exact match, not a prefix
    (1, "MUL_MAT_ID", "whatever-1", "experts"),  # the op decides
    (-1, "ADD", "node_15", "experts"),  # sum of expert outputs: inherits
    (1, "MUL_MAT", "ffn_up-1", "shared_expert"),  # dense helper inside a MoE layer
    (1, "ADD", "ffn_out-1", "experts"),  # the MoE output in a MoE layer
    (1, "ADD", "l_out-1", "residual"),
    (-1, "MUL", "result_norm", "output"),
    (-1, "TANH", "mystery_op", "other"),
    (-1, "SCALE", "", "other"),
]


@pytest.fixture
def graph(write):
    rows = [f'0,1,5,{seq},{layer},{op},"{name}",{1000 << seq},0'
            for seq, (layer, op, name, _) in enumerate(GRAPH)]
    return write(ct_text(rows))


def test_every_node_lands_in_its_category(graph):
    expected = {}
    for seq, (_, _, _, category) in enumerate(GRAPH):
        expected[category] = expected.get(category, 0) + (1000 << seq)
    got = {c["category"]: c for c in report("compute", graph)["by_category"]}
    assert {cat: row["ms_per_token"] for cat, row in got.items()} == pytest.approx(
        {cat: ns / 1e6 for cat, ns in expected.items()})
    total = sum(1000 << seq for seq in range(len(GRAPH)))
    assert got["experts"]["share"] == pytest.approx(expected["experts"] / total)
    assert got["attention"]["nodes_per_token"] == 6


def test_unclassified_names_are_listed(graph):
    unclassified = report("compute", graph)["unclassified"]
    assert [u["name"] for u in unclassified] == ["", "mystery_op"]
    assert unclassified[0]["ms_per_token"] == pytest.approx((1000 << 21) / 1e6)


@pytest.mark.parametrize("name, base", [
    ("Qcur-0 (view) (permuted)", "Qcur"), ("ffn_moe_out, part 0-3", "ffn_moe_out"),
    ("v_cache_view-0 (copy of Vcur-0)", "v_cache_view"), ("norm", "norm"),
    ("ffn_norm-0 (reshaped)", "ffn_norm"), ("kqv_out-12 (cont)", "kqv_out"), ("", ""),
])
def test_base_names(name, base):
    assert base_name(name) == base


def test_classify_is_exact_not_prefix():
    assert classify("ffn_moe_weights_sum_clamped-3", "CLAMP")[1] == "router"
    assert classify("ffn_moe_weights_sumX-3", "CLAMP")[1] == "other"
    assert classify("cache_v_l7 (view)", "SET_ROWS")[1] == "attention"
    assert classify("inp_per_layer_selected", "GET_ROWS")[1] == "embedding"


def test_layers_are_inferred_only_between_nodes_of_one_layer():
    assert infer_layers([-1, 0, -1, -1, 0, -1, 1, -1]) == [-1, 0, 0, 0, 0, -1, 1, -1]


def test_layer_table_uses_inferred_layers(graph):
    layers = {row["layer"]: row["ms_per_token"] for row in report("compute", graph)["by_layer"]}
    # nodes 4-7 (layer -1) run between layer-0 nodes; 15 between layer-1 nodes
    layer0 = sum(1000 << seq for seq in range(1, 11))
    assert layers[0] == pytest.approx(layer0 / 1e6)


@pytest.mark.parametrize("name", ["qwen3moe-l4-ct-node.csv", "gemma4-l4-ct-node.csv"])
def test_real_graphs_leave_little_unclassified(name):
    r = report("compute", shared_trace(name))
    other = sum(c["share"] for c in r["by_category"] if c["category"] == "other")
    assert other < 0.05
    categories = {c["category"] for c in r["by_category"]}
    assert {"attention", "router", "experts", "norm", "embedding", "output"} <= categories


def test_gemma4_dense_layer_and_shared_expert():
    r = report("compute", shared_trace("gemma4-l4-ct-node.csv"))
    categories = {c["category"]: c for c in r["by_category"]}
    # layer 0 is dense (ffn_gate/up/geglu/ffn_out); layers 1-3 have a shared expert
    assert categories["dense_ffn"]["nodes_per_token"] == 4
    assert categories["shared_expert"]["nodes_per_token"] > 0
