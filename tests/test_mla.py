"""Multi-head latent attention (graph/mla.py) and multi-token prediction (graph/mtp.py):
the graph against numpy references written from the papers' equations (DeepSeek-V2 Sec.
2.1, DeepSeek-V3 Sec. 2.2) that fail under mutations, verify on the bundled tiny scenario
(and failing under the same mutations), parameters and FLOPs per layer in closed form, the
MTP module on the last pipeline stage, and the scenario keys (--set, refusals)."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import yaml

from simulator.config.resources import bundled_dir, resolve_yaml
from simulator.config.scenario import parse_scenario
from simulator.config.scenario.hf import load_hf, read_hf_config
from simulator.errors import InputError
from simulator.graph.builders import build_gpt
from simulator.graph.decoder import GptDims, LayerKind
from simulator.graph.graph import Graph, GraphBuilder, OpNode
from simulator.graph.mla import mla
from simulator.graph.ops import KernelCtx
from simulator.models.cases import build_case
from simulator.models.params import transformer_params
from simulator.models.transformer_plan import planned_transformer
from simulator.numeric.verify import verify_case
from simulator.program.model_program import transformer_program
from simulator.sharding.lower import saved
from simulator.sharding.plan import build_plan
from simulator.simulation.verify import verify_scenario

SCENARIO = "mla-mtp-tiny-verify"
DIMS = GptDims(layers=2, hidden=16, heads=4, kv_heads=4, ffn=24, seq=6, vocab=20, batch=2,
               swiglu=True, dropout=0.0, q_lora_rank=8, kv_lora_rank=8,
               qk_nope_head_dim=4, qk_rope_head_dim=4, v_head_dim=3)


def _bundled(overrides=()):
    data = yaml.safe_load(resolve_yaml(SCENARIO, "scenarios").read_text())
    return parse_scenario(data, SCENARIO, list(overrides))


def _run(graph: Graph, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every op's forward on one device, in graph order."""
    vals = dict(values)
    for op in graph.ops:
        xs = [vals[n] for n in op.inputs]
        ctx = KernelCtx.whole([x.shape for x in xs], graph.tensors[op.output].shape)
        vals[op.output] = op.family.forward(xs, op.attrs, ctx)
    return vals


def _values(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for t in graph.tensors.values():
        if t.kind in ("input", "label"):
            out[t.name] = rng.integers(0, DIMS.vocab, t.shape)
        elif t.kind == "parameter":
            out[t.name] = rng.standard_normal(t.shape) * 0.5
    return out


# ---- numpy references, written from the papers' equations ------------------------------

def _rms(x, g):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * g


def _ln(x, g, b):
    mu = x.mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(((x - mu) ** 2).mean(-1, keepdims=True) + 1e-5) * g + b


def _rope(x):
    """RoFormer Eq. 34 in complex form: the pairs (x_j, x_(j + d/2)) turned by p theta_j
    at position p (dim 1), theta_j = 10000^(-2j/d)."""
    half = x.shape[-1] // 2
    z = x[..., :half] + 1j * x[..., half:]
    theta = 10000.0 ** (-np.arange(half) * 2.0 / x.shape[-1])
    turn = np.exp(1j * np.arange(x.shape[1])[:, None] * theta[None, :])
    z = z * turn.reshape((1, x.shape[1]) + (1,) * (x.ndim - 3) + (half,))
    return np.concatenate([z.real, z.imag], axis=-1)


def _mla_ref(x, w, p, d: GptDims):
    """DeepSeek-V2 Eq. 9-19 with the output projection and the residual (without a query
    latent, V2-Lite's: the queries from the normed hidden state)."""
    a = _ln(x, w[f"{p}.ln1.g"], w[f"{p}.ln1.b"])
    cq = _rms(a @ w[f"{p}.w_q_down"], w[f"{p}.q_norm.g"]) if d.q_lora_rank else a
    qc = np.einsum("bsc,cnd->bsnd", cq, w[f"{p}.w_q_nope"][:, :, 0])
    qr = _rope(np.einsum("bsc,cnd->bsnd", cq, w[f"{p}.w_q_rope"][:, :, 0]))
    ckv = _rms(a @ w[f"{p}.w_kv_down"], w[f"{p}.kv_norm.g"])
    kc = np.einsum("bsc,cnd->bsnd", ckv, w[f"{p}.w_k_nope"])
    v = np.einsum("bsc,cnd->bsnd", ckv, w[f"{p}.w_v_up"])
    kr = _rope(a @ w[f"{p}.w_k_rope"])
    scores = (np.einsum("bsnd,btnd->bnst", qc, kc) + np.einsum("bsnd,btd->bnst", qr, kr))
    scores /= math.sqrt(d.qk_nope_head_dim + d.qk_rope_head_dim)
    s = x.shape[1]
    scores = np.where(np.triu(np.ones((s, s), bool), 1), -np.inf, scores)
    prob = np.exp(scores - scores.max(-1, keepdims=True))
    prob /= prob.sum(-1, keepdims=True)
    o = np.einsum("bnst,btnd->bsnd", prob, v)
    return x + np.einsum("bsnd,ndh->bsh", o, w[f"{p}.wo"][:, 0])


def _ffn_ref(x, w, p):
    a = _ln(x, w[f"{p}.ln2.g"], w[f"{p}.ln2.b"])
    u = a @ w[f"{p}.w1"]
    return x + (u / (1 + np.exp(-u)) * (a @ w[f"{p}.w3"])) @ w[f"{p}.w2"]


def _ce(logits, labels):
    z = logits - logits.max(-1, keepdims=True)
    lse = np.log(np.exp(z).sum(-1))
    return (lse - np.take_along_axis(z, labels[..., None], -1)[..., 0]).mean()


def _mla_graph(d: GptDims) -> Graph:
    g = GraphBuilder()
    x = g.tensor("x", [d.batch, d.seq, d.hidden], "input")
    mla(g, x, "l0", d, LayerKind(mixer="mla"))
    return g.build()


def _mutated(graph: Graph, change) -> Graph:
    return Graph(graph.tensors, tuple(change(op) for op in graph.ops))


def _drop_rope(op: OpNode) -> OpNode:
    """The rotary part of queries and keys zeroed (its rotation a scale by 0)."""
    if op.type != "Rotary":
        return op
    return dataclasses.replace(op, type="Scale", attrs={**op.attrs, "factor": 0.0})


def _kv_from_query_latent(op: OpNode) -> OpNode:
    """The keys up-projected from the query latent (a wrong latent)."""
    if op.name.split(".")[-1] != "k_nope":
        return op
    p = op.name.rsplit(".", 1)[0]
    return dataclasses.replace(op, inputs=(f"{p}.q_norm",) + op.inputs[1:])


@pytest.mark.parametrize("q_lora", [8, 0])
def test_mla_block_matches_the_papers_equations(q_lora):
    d = dataclasses.replace(DIMS, q_lora_rank=q_lora)
    graph = _mla_graph(d)
    rng = np.random.default_rng(1)
    vals = {n: rng.standard_normal(t.shape) * 0.5 for n, t in graph.tensors.items()
            if t.kind in ("input", "parameter")}
    got = _run(graph, vals)[graph.ops[-1].output]
    np.testing.assert_allclose(got, _mla_ref(vals["x"], vals, "l0", d), rtol=1e-10)


@pytest.mark.parametrize("mutation", [_drop_rope, _kv_from_query_latent])
def test_the_reference_fails_under_a_mutation(mutation):
    graph = _mla_graph(DIMS)
    rng = np.random.default_rng(1)
    vals = {n: rng.standard_normal(t.shape) * 0.5 for n, t in graph.tensors.items()
            if t.kind in ("input", "parameter")}
    bad = _mutated(graph, mutation)
    got = _run(bad, vals)[bad.ops[-1].output]
    ref = _mla_ref(vals["x"], vals, "l0", DIMS)
    assert not np.allclose(got, ref, rtol=1e-3, atol=1e-6)


def test_mtp_loss_matches_deepseek_v3_eq_21_to_25():
    """The total loss: the main cross-entropy + lambda / D * the modules' (D = 2), each
    module normalising the previous depth's hidden state and the shifted tokens'
    embedding, projecting [emb; h] from 2h to h, one MLA layer, its own final norm and
    the shared (tied) LM head."""
    d = dataclasses.replace(DIMS, mtp_depth=2, mtp_weight=0.3)
    graph = build_gpt(d)
    vals = _values(graph)
    got = _run(graph, vals)
    w = vals
    h = _ln(got["l1.res2"], w["lnf.g"], w["lnf.b"])  # the main model's final-norm output
    ref_main = _ce(h @ w["wte"].T, w["labels"])
    np.testing.assert_allclose(got["loss"], ref_main, rtol=1e-10)
    losses = []
    for k in (1, 2):
        p = f"mtp{k}"
        emb = _rms(w["wte"][w[f"{p}.ids"]], w[f"{p}.enorm.g"])
        x = np.concatenate([emb, _rms(h, w[f"{p}.hnorm.g"])], -1) @ w[f"{p}.eh_proj.w"]
        h = _ln(_ffn_ref(_mla_ref(x, w, p, d), w, p), w[f"{p}.lnf.g"], w[f"{p}.lnf.b"])
        losses.append(_ce(h @ w["wte"].T, w[f"{p}.labels"]))
    total = ref_main + 0.3 / 2 * sum(losses)
    np.testing.assert_allclose(got[graph.loss], total, rtol=1e-10)
    # a skipped MTP loss (its weight 0) is the main loss alone: the reference tells
    skipped = _mutated(graph, lambda op: dataclasses.replace(op, attrs={**op.attrs,
                       "factor": 0.0}) if op.name == "mtp_scale" else op)
    assert not np.isclose(_run(skipped, vals)[graph.loss], total, rtol=1e-6)


# ---- verify on the bundled scenario, and under mutations --------------------------------

def test_bundled_scenario_verifies_with_both_blocks():
    s = _bundled()
    result = verify_scenario(s)
    assert result.ok, [c for c in result.checks if not c.ok]
    names = {c.tensor for c in result.checks}
    assert {"l0.k_cat", "l1.q_cat", "mtp1.eh_proj", "l0.w_kv_down.grad",
            "mtp1.eh_proj.w.updated", "wte.updated"} <= names


def _sharded(case, change):
    return dataclasses.replace(case, sharded=_mutated(case.sharded, change))


@pytest.mark.parametrize("mutation", ["rope", "latent", "mtp"])
def test_verify_fails_under_a_mutation(mutation):
    s = _bundled(["parallel.pipeline=1", "parallel.data=4", "model.mla.q_lora_rank=8"])
    case = build_case(s)
    change = {"rope": _drop_rope, "latent": _kv_from_query_latent,
              "mtp": lambda op: dataclasses.replace(op, attrs={**op.attrs, "factor": 0.0})
              if op.name == "mtp_scale" else op}[mutation]
    result = verify_case(_sharded(case, change))
    assert not result.ok


# ---- closed forms ------------------------------------------------------------------------

def _mla_layer_params(h, n, qr, kvr, dn, dr, dv) -> int:
    """DeepSeek-V2 Sec. 2.1: W_DQ, the query norm, W_UQ and W_QR; W_DKV, the key/value
    norm, W_UK, W_UV and W_KR; W_O (and the layer's input norm, the model's: an RMSNorm,
    gain only, for this swiglu model as for DeepSeek-V3)."""
    q = (h * qr + qr + qr * n * (dn + dr)) if qr else h * n * (dn + dr)
    kv = h * kvr + kvr + kvr * n * (dn + dv) + h * dr
    return q + kv + n * dv * h + h


def _model(**over):
    m = _bundled().model
    return m.model_copy(update=over)


@pytest.mark.parametrize("tensor", [1, 2])
def test_parameters_per_layer_follow_the_closed_form(tensor):
    """Per device: the up-projections and W_O split over the heads, the down-projections
    and latent norms replicated (Megatron-Core's duplicated TELinear)."""
    m = _model(mtp=None)
    c = transformer_params(m, tensor=tensor, sequence_parallel=True)
    h, f, n = m.hidden_size, m.ffn, m.num_heads
    a = m.mla
    whole = _mla_layer_params(h, n, a.q_lora_rank, a.kv_lora_rank, a.qk_nope_head_dim,
                              a.qk_rope_head_dim, a.v_head_dim)
    split = (a.q_lora_rank * n * (a.qk_nope_head_dim + a.qk_rope_head_dim)
             + a.kv_lora_rank * n * (a.qk_nope_head_dim + a.v_head_dim)
             + n * a.v_head_dim * h)
    ffn = 3 * h * f + h  # the FFN's pre-norm an RMSNorm (a swiglu model's, gain only)
    assert c.per_layer == whole - split + split // tensor + 3 * h * f // tensor + h
    assert tensor > 1 or c.per_layer == whole + ffn


def test_mtp_module_parameters_follow_the_closed_form():
    """One MTP module: enorm, hnorm, eh_proj (2h x h), one layer, its final norm (the
    model's: an RMSNorm here); the embedding and head are the main model's (shared)."""
    with_mtp, without = transformer_params(_model()), transformer_params(_model(mtp=None))
    m = _bundled().model
    h = m.hidden_size
    assert with_mtp.head - without.head == 2 * h + 2 * h * h + with_mtp.layer + h
    assert with_mtp.embedding == without.embedding


def _mla_layer_flops(b, s, h, n, qr, kvr, dn, dr, dv) -> float:
    """Forward GEMM FLOPs of one MLA layer's attention: the projections (2 per
    multiply-add), QK^T over nope + rope and PV (causal counted in full, as Megatron-LM's
    formula)."""
    t = b * s
    proj = 2 * t * ((h * qr + qr * n * (dn + dr)) + h * kvr + kvr * n * (dn + dv) + h * dr
                    + n * dv * h)
    return proj + 2 * b * n * s * s * (dn + dr + dv)


def test_layer_flops_follow_the_closed_form():
    s = _bundled(["model.mtp=null", "parallel.tensor=1", "parallel.data=4",
                  "parallel.sequence_parallel=false", "parallel.pipeline=2"])
    m = s.model
    prog = transformer_program(s)
    layer = prog.block("layer")
    gemm = sum(op.flops for op in layer.fwd if getattr(op, "kind", "") in ("gemm", "attention"))
    a, h, f = m.mla, m.hidden_size, m.ffn
    b = s.training.micro_batch_size
    want = _mla_layer_flops(b, m.seq_length, h, m.num_heads, a.q_lora_rank, a.kv_lora_rank,
                            a.qk_nope_head_dim, a.qk_rope_head_dim, a.v_head_dim)
    assert gemm == pytest.approx(want + 2 * b * m.seq_length * 3 * h * f, rel=1e-12)


def test_mtp_runs_on_the_last_pipeline_stage():
    """Its ops are the head's: the last stage's work grows by one layer and its head."""
    s = _bundled()
    head = transformer_program(s).block("head")
    assert head.pinned == "last"
    assert any(op.name.startswith("q_up") for op in head.fwd)


# ---- scenario keys -----------------------------------------------------------------------

@pytest.mark.parametrize("key,value", [
    ("model.mla.q_lora_rank", 6), ("model.mla.kv_lora_rank", 4),
    ("model.mla.qk_nope_head_dim", 2), ("model.mla.qk_rope_head_dim", 4),
    ("model.mla.v_head_dim", 2), ("model.mtp.depth", 2), ("model.mtp.loss_weight", 0.1)])
def test_set_reaches_every_key(key, value):
    m = _bundled([f"{key}={value}"]).model
    section, field = key.split(".")[1:]
    assert getattr(getattr(m, section), field) == value


def test_set_adds_a_section_to_a_model_without_one():
    data = yaml.safe_load(resolve_yaml("verify-tiny-dp8", "scenarios").read_text())
    s = parse_scenario(data, "verify-tiny-dp8", ["model.mtp.depth=1"])
    assert s.model.mtp.depth == 1


@pytest.mark.parametrize("override,message", [
    ("model.mla.qk_rope_head_dim=3", "model.mla.qk_rope_head_dim: 3 must be even"),
    ("model.num_kv_heads=2", "model.num_kv_heads: 2: multi-head latent attention has a key"),
    ("model.mtp.depth=0", "model.mtp.depth"),
    ("model.mla.kv_lora_rank=0", "model.mla.kv_lora_rank"),
])
def test_bad_values_are_refused_with_key_and_reason(override, message):
    with pytest.raises(InputError, match=message.replace("(", r"\(")):
        _bundled([override])


def test_context_parallel_is_refused_by_name():
    with pytest.raises(InputError, match="parallel.context: 2 with model.mla is not simulated"):
        _bundled(["parallel.context=2", "parallel.data=1", "model.attention=flash"])


# ---- Hugging Face deepseek_v3 ------------------------------------------------------------

def test_deepseek_v3_parameters_match_the_published_figures():
    """DeepSeek-V3 (arXiv:2412.19437 Sec. 1): 671B total, 37B activated per token; the
    checkpoint's 685B adds the MTP module (README: 671B main + 14B MTP, rounded)."""
    m = load_hf("deepseek-v3")
    assert abs(m.param_count() - 671e9) / 671e9 < 0.005
    # 37.55B with the embedding table and the LM head whole: the published 37B is rounded
    assert abs(m.deepseek.count(m, m.top_k) - 37e9) / 37e9 < 0.015
    assert abs(m.param_count() + m.deepseek.mtp_params(m) - 685e9) / 685e9 < 0.005


def test_the_simulated_mla_layer_has_deepseek_v3s_attention_parameters():
    """The graph's MLA weights and latent norms of one layer (the simulator's) equal the
    Hugging Face module's (the LayerNorm before it apart)."""
    m = load_hf("deepseek-v3")
    k = m.deepseek
    d = GptDims(layers=1, hidden=m.hidden, heads=m.heads, kv_heads=m.heads, ffn=8, seq=4,
                vocab=8, batch=1, q_lora_rank=k.q_lora_rank, kv_lora_rank=k.kv_lora_rank,
                qk_nope_head_dim=k.qk_nope_head_dim, qk_rope_head_dim=k.qk_rope_head_dim,
                v_head_dim=k.v_head_dim)
    graph = _mla_graph(d)
    mla_params = sum(math.prod(t.shape) for n, t in graph.tensors.items()
                     if t.kind == "parameter" and not n.startswith("l0.ln1"))
    assert mla_params == k.attention_params(m) == 187_107_328


def test_from_hf_reads_mla_and_mtp_and_refuses_what_it_cannot_express(tmp_path):
    cfg = json.loads((bundled_dir("scenarios") / "models" / "deepseek-v3.json").read_text())
    with pytest.raises(InputError, match="model.from_hf: the config's moe_layer_freq is 2: "
                                         "a layer frequency are not simulated yet"):
        bad = tmp_path / "freq.json"
        bad.write_text(json.dumps({**cfg, "moe_layer_freq": 2}))
        parse_scenario({"hardware": "h100-sxm", "model": {"from_hf": str(bad)}}, "s")
    cfg.update(n_routed_experts=None, num_hidden_layers=4)  # its dense layers alone
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    s = parse_scenario({"hardware": "h100-sxm", "model": {
        "from_hf": str(tmp_path / "config.json"), "seq_length": 4096}}, "s")
    assert s.model.mla.model_dump() == {
        "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
        "qk_rope_head_dim": 64, "v_head_dim": 128}
    assert (s.model.mtp.depth, s.model.num_heads, s.model.ffn) == (1, 128, 18432)


def test_saved_activations_of_the_mla_block_follow_the_closed_form():
    """What one layer's MLA keeps for its backward at t = 1 with FlashAttention and no
    dropout, per token (elements): the layer input and the normed input (h each), the
    query latent before and after its norm (2 q_lora_rank), the key/value latent likewise
    (2 kv_lora_rank), the concatenated queries and keys (2 n (nope + rope)), the values and
    the attention output (2 n v_head_dim); and the fp32 log-sum-exp per head and query.
    The rotary and concatenation ops keep nothing (linear; a slice for the backward)."""
    d = dataclasses.replace(DIMS, flash=True, dropout=0.0, tied=True)
    graph, mesh = planned_transformer(d, 1, 1, False)
    sv = saved(build_plan(graph, mesh, 2), 2)
    roles = ("ln1", "q_down", "q_norm", "q_nope", "q_rope_mm", "q_rope", "q_cat",
             "k_rope_mm", "k_rope", "kv_down", "kv_norm", "k_nope", "v_up", "k_cat",
             "attn", "proj")
    got = sv.total(lambda n: n.startswith("l0.") and n.split(".")[1] in roles)
    n, qk = d.heads, d.qk_nope_head_dim + d.qk_rope_head_dim
    per_token = (2 * d.hidden + 2 * d.q_lora_rank + 2 * d.kv_lora_rank + 2 * n * qk
                 + 2 * n * d.v_head_dim)
    tokens = d.batch * d.seq
    assert got == 2 * tokens * per_token + 4 * tokens * n


def test_kimi_k2_reads_as_deepseek_v3():
    """Kimi-K2's config.json names model_type 'kimi_k2' over DeepseekV3ForCausalLM."""
    cfg = json.loads((bundled_dir("scenarios") / "models" / "deepseek-v3.json").read_text())
    cfg.update(model_type="kimi_k2", num_attention_heads=64, n_routed_experts=None,
               num_nextn_predict_layers=0)
    fields = read_hf_config(cfg, "kimi.json").model_fields()
    assert (fields["num_heads"], fields["mla"]["kv_lora_rank"], "mtp" in fields) == \
        (64, 512, False)
