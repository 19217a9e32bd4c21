"""A loss under torch.compile (`training.compiled_loss`; torchtitan e7c0cae compiles it with
--training.compile): Inductor keeps the model-dtype logits for the backward, not the fp32
log-softmax, and its backward writes their gradient in one kernel (model-dtype bytes per
logit), against torchtitan's eager loss (fp32 copy, 4 B a logit kept, 8 B of backward
buffers: the torchtitan profile's cross_entropy)."""

from pathlib import Path

from simulator.api import load_scenario
from simulator.config.framework.load import load_framework
from simulator.program.model_program import transformer_program
from simulator.report.alloc_sequence import fsdp2_sequence

ROOT = Path(__file__).resolve().parent.parent
CASE = str(ROOT / "benchmarks" / "data" / "memory" / "h200-eager-llama3-8b-8l.yaml")
TOKENS, VOCAB = 8192, 128256
LOGITS = TOKENS * VOCAB


def _head(compiled: bool):
    sc = load_scenario(CASE, [f"training.compiled_loss={str(compiled).lower()}"]).scenario
    prog = transformer_program(sc, load_framework("torchtitan").software)
    return prog, prog.block("head")


def test_the_compiled_loss_keeps_the_bf16_logits_instead_of_the_fp32_log_softmax():
    _, eager = _head(False)
    _, compiled = _head(True)
    assert eager.saved_bytes - compiled.saved_bytes == (4 - 2) * LOGITS


def test_its_backward_makes_the_bf16_gradient_alone():
    _, eager = _head(False)
    _, compiled = _head(True)
    assert eager.transient_bytes == 8 * LOGITS  # NllLossBackward0 and LogSoftmaxBackward0
    assert compiled.transient_bytes == 2 * LOGITS


def test_the_replay_makes_no_other_logits_tensor():
    prog, head = _head(True)
    static = {"parameters": 1.0, "optimizer_states": 1.0}
    eager = fsdp2_sequence(prog, static, 1, fp32_logits=True)
    compiled = fsdp2_sequence(prog, static, 1, kept_logits=True)
    keys = {key for _, key, _, _ in compiled}
    assert "logits" not in keys and "logits_fp32" not in keys
    assert {"logits", "logits_fp32"} <= {key for _, key, _, _ in eager}
    # what the loss keeps is the logits themselves, 2 B a logit, alive into its backward
    kept = max(n for kind, key, n, _ in compiled if kind == "alloc"
               and key.startswith("saved:head"))
    assert kept == 2 * LOGITS
