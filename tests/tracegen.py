"""Synthetic traces shaped like the engine's, for parity tests and the benchmark.

The node template is the real qwen3moe graph of ../shared/traces (names, ops, the -1 layers of
views and KV-cache copies, unnamed node_<N> nodes), repeated for as many layers as asked. Times
are deterministic pseudo-random; expert matmuls fault when `faults` is on. Nothing here is used
by the tool itself.
"""
import gzip
import random

# (layer_is_set, op, name) for one qwen3moe layer; '{il}' is the layer index. None = unnamed.
QWEN3MOE_LAYER = [
    (1, "RMS_NORM", "norm-{il}"), (1, "MUL", "attn_norm-{il}"),
    (1, "MUL_MAT", "Qcur-{il}"), (1, "RESHAPE", "Qcur-{il}"), (1, "RMS_NORM", "norm-{il}"),
    (1, "MUL", "Qcur_normed-{il}"), (1, "ROPE", "Qcur-{il}"), (1, "MUL_MAT", "Vcur-{il}"),
    (1, "RESHAPE", "Vcur-{il}"), (1, "MUL_MAT", "Kcur-{il}"), (1, "RESHAPE", "Kcur-{il}"),
    (1, "RMS_NORM", "norm-{il}"), (1, "MUL", "Kcur_normed-{il}"), (1, "ROPE", "Kcur-{il}"),
    (0, "VIEW", "Kcur-{il} (view)"), (0, "SET_ROWS", "cache_k_l{il} (view)"),
    (0, "VIEW", "Vcur-{il} (view)"), (0, "SET_ROWS", "cache_v_l{il} (view)"),
    (0, "VIEW", "Qcur-{il} (view)"), (0, "PERMUTE", "Qcur-{il} (view) (permuted)"),
    (0, "VIEW", "cache_k_l{il} (view)"), (0, "PERMUTE", "cache_k_l{il} (view) (permuted)"),
    (0, "VIEW", "cache_v_l{il} (view)"), (0, "PERMUTE", "cache_v_l{il} (view) (permuted)"),
    (0, "FLASH_ATTN_EXT", None), (1, "RESHAPE", "kqv_out-{il}"), (0, "MUL_MAT", None),
    (1, "ADD", "ffn_inp-{il}"), (1, "RMS_NORM", "norm-{il}"), (1, "MUL", "ffn_norm-{il}"),
    (1, "MUL_MAT", "ffn_moe_logits-{il}"), (1, "SOFT_MAX", "ffn_moe_probs-{il}"),
    (0, "RESHAPE", "ffn_moe_probs-{il} (reshaped)"), (1, "ARGSORT", "ffn_moe_argsort-{il}"),
    (1, "VIEW", "ffn_moe_topk-{il}"), (1, "GET_ROWS", "ffn_moe_weights-{il}"),
    (0, "RESHAPE", "ffn_moe_weights-{il} (reshaped)"), (1, "SUM_ROWS", "ffn_moe_weights_sum-{il}"),
    (1, "CLAMP", "ffn_moe_weights_sum_clamped-{il}"), (1, "DIV", "ffn_moe_weights_norm-{il}"),
    (0, "RESHAPE", "ffn_moe_weights_norm-{il} (reshaped)"),
    (0, "RESHAPE", "ffn_norm-{il} (reshaped)"),
    (1, "MUL_MAT_ID", "ffn_moe_gate-{il}"), (1, "MUL_MAT_ID", "ffn_moe_up-{il}"),
    (1, "GLU", "ffn_moe_swiglu-{il}"), (1, "MUL_MAT_ID", "ffn_moe_down-{il}"),
    (1, "MUL", "ffn_moe_weighted-{il}"), (0, "VIEW", "ffn_moe_weighted-{il} (view)"),
    (0, "VIEW", "ffn_moe_weighted-{il} (view)"), (1, "ADD", "ffn_moe_out-{il}"),
    (1, "ADD", "l_out-{il}"),
]
HEAD = [(-1, "GET_ROWS", "inp_embd")]
TAIL = [(-1, "RMS_NORM", "norm"), (-1, "MUL", "result_norm"), (-1, "MUL_MAT", "result_output")]

BASE_NS = {"MUL_MAT": 60000, "MUL_MAT_ID": 250000, "FLASH_ATTN_EXT": 40000, "GET_ROWS": 30000,
           "VIEW": 800, "RESHAPE": 700, "PERMUTE": 700}

COMPUTE_HEADER = "turn,phase,step,seq,layer,op,name,wall_ns,majflt"
IO_HEADER = "turn,phase,step,layer,expert,proj,lane,spec,offset,req_bytes,read_bytes,latency_ns"


def graph(n_layer):
    """One decode's nodes in order: [(layer, op, name)], unnamed nodes named node_<seq>."""
    nodes = list(HEAD)
    for il in range(n_layer):
        for has_layer, op, name in QWEN3MOE_LAYER:
            named = None if name is None else name.format(il=il)
            nodes.append((il if has_layer else -1, op, named))
    nodes.extend(TAIL)
    return [(layer, op, name if name is not None else f"node_{seq}")
            for seq, (layer, op, name) in enumerate(nodes)]


def preamble(kind, model="bench-moe.gguf", n_layer=48, extra=""):
    return (f"# {kind} v1\n# model={model} arch=qwen3moe n_layer={n_layer} n_threads=4 "
            f"io_threads=4 o_direct=1 overlap=0{extra}\n")


def compute_lines(n_layer=48, decode_tokens=300, prompt=64, turns=1, faults=True,
                  layers=False, seed=1, speed=1.0):
    """Yield the lines of a compute trace: per turn one prefill batch, then decode tokens.
    speed divides every node's time (a run on a slower or faster machine state)."""
    rng = random.Random(seed)
    nodes = graph(n_layer)
    yield preamble("compute_trace", n_layer=n_layer)
    yield COMPUTE_HEADER + "\n"
    for turn in range(turns):
        start = prompt + turn * 7
        tokens = [(0, start - 1)] + [(1, start + i) for i in range(decode_tokens)]
        for phase, step in tokens:
            scale = (20 if phase == 0 else 1) / speed
            if layers:
                yield from _layer_rows(turn, phase, step, n_layer, rng, scale, faults)
                continue
            prefix = f"{turn},{phase},{step},"
            for seq, (layer, op, name) in enumerate(nodes):
                ns = int(BASE_NS.get(op, 9000) * scale * (0.5 + rng.random()))
                faulting = faults and op == "MUL_MAT_ID" and rng.random() < 0.6
                flt = rng.randrange(0, 40) if faulting else 0
                yield f"{prefix}{seq},{layer},{op},{name},{ns},{flt}\n"


def _layer_rows(turn, phase, step, n_layer, rng, scale, faults):
    """Layer granularity: pre, two rows per MoE layer (the router closes a segment), post."""
    segments = [(-1, "pre")]
    for il in range(n_layer):
        segments += [(il, f"blk.{il}"), (il, f"blk.{il}")]
    segments.append((-1, "post"))
    for seq, (layer, name) in enumerate(segments):
        ns = int(400000 * scale * (0.5 + rng.random()))
        flt = rng.randrange(0, 90) if faults and rng.random() < 0.5 else 0
        yield f"{turn},{phase},{step},{seq},{layer},LAYER,{name},{ns},{flt}\n"


SIZES = (65536, 131072, 262144, 1048576)


def io_lines(n_layer=48, decode_tokens=1000, prompt=64, reads_per_token=350, lanes=4,
             spec_share=0.1, seed=2, experts=128, speed=1.0):
    """Yield the lines of an io trace shaped like the streamer's: per token, layer after layer,
    the routed experts' slices (3 projections each, a fixed size and chunking per slice) read
    as O_DIRECT windows on the lanes; a few reads are speculative prefetches. speed divides
    every latency."""
    rng = random.Random(seed)
    yield preamble("io_trace", n_layer=n_layer)
    yield IO_HEADER + "\n"
    slice_bytes = 3 * 1048576
    layer_bytes = experts * slice_bytes
    # reads per expert = 3 projections x 2 chunks on average: this many experts per layer
    per_layer = reads_per_token / n_layer / 6
    tokens = [(0, prompt - 1)] + [(1, prompt + i) for i in range(decode_tokens)]
    for phase, step in tokens:
        for layer in range(n_layer):
            # a skewed choice: some experts are hot
            wanted = int(per_layer) + (rng.random() < per_layer - int(per_layer))
            chosen = set()
            while len(chosen) < wanted:
                chosen.add(min(experts - 1, int(rng.paretovariate(0.8)) - 1 + layer % 7))
            for expert in sorted(chosen):
                spec = 1 if rng.random() < spec_share else 0
                for proj in range(3):
                    size = SIZES[(layer + expert + proj) % len(SIZES)]
                    chunks = 1 + (expert + proj) % 3
                    base = (4096 + layer * layer_bytes + expert * slice_bytes
                            + proj * 1048576 + 96)
                    for chunk in range(chunks):
                        offset = base + chunk * size
                        aligned = offset - offset % 4096
                        read = (offset + size + 4095) // 4096 * 4096 - aligned
                        latency = int((90000 + read / 2000) * (0.6 + rng.random()) / speed)
                        yield (f"0,{phase},{step},{layer},{expert},{proj},{rng.randrange(lanes)},"
                               f"{spec},{offset},{size},{read},{latency}\n")


def write(path, lines, compress=False):
    opener = gzip.open if compress else open
    with opener(path, "wt", newline="") as f:
        f.writelines(lines)
    return path
