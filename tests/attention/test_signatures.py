"""The public API's vocabulary (STYLE.md, "Public API vocabulary").

Each pinned case pairs a form the vocabulary rules out (a synonym, or a positional use of an
argument that is keyword-only) with the form it prescribes: the first must raise
``TypeError`` from the signature itself, the second must run. Beyond the pinned cases, every
public signature of the package and every block's submodules are checked against the
"never" column of STYLE.md's table."""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest
import torch

import attention.efficient._threads as threads
from attention import vision
from attention.blocks import DecoderBlock, Encoder, EncoderLayer, FeedForward, SequenceClassifier
from attention.decoder import KVCache
from attention.efficient import (
    LinearAttentionState,
    block_sparse_attention,
    chunked_attention,
    flash_attention,
    linear_attention,
    linear_attention_step,
)
from attention.efficient.block_sparse import bigbird_layout
from attention.efficient.probsparse import sparsity_measure
from attention.functional import safe_softmax, scaled_dot_product_attention
from attention.gpu.flex import flex_block_sparse
from attention.gpu.triton_flash import attention_flops
from attention.heads import MultiHeadAttention, SelfAttention, split_heads
from attention.masks import causal_mask, to_additive
from attention.multimodal import CLIPHead, CrossAttentionBlock, ProjectionHead
from attention.normalizers import normalize_scores, sigmoid_attention
from attention.positional import (
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    alibi_bias,
    rope_angles,
    sinusoidal_encoding,
)
from attention.timeseries import TransformerForecaster
from tests.attention.inputs import random_qkv

Q, K, V = random_qkv(1, 2, 8, 8, 4, 4, dtype=torch.float32)
X = torch.randn(2, 6, 8)  # (B, L, D)
GRID = torch.randn(1, 4, 4, 3)  # (B, H, W, C)
LAYOUT = torch.ones(2, 2, dtype=torch.bool)
SIZES = dict(d_model=8, num_heads=2, num_layers=1, d_ff=16, max_len=8)
VIT_SIZES = dict(d_model=16, num_heads=2, num_layers=1, d_ff=32)

# (old form, new form): the old one must raise TypeError, the new one must run.
CASES = {
    "sdpa return_weights -> need_weights": (
        lambda: scaled_dot_product_attention(Q, K, V, return_weights=True),
        lambda: scaled_dot_product_attention(Q, K, V, need_weights=True),
    ),
    "safe_softmax dim keyword-only": (
        lambda: safe_softmax(X, -1),
        lambda: safe_softmax(X, dim=-1),
    ),
    "to_additive dtype keyword-only": (
        lambda: to_additive(causal_mask(3), torch.float64),
        lambda: to_additive(causal_mask(3), dtype=torch.float64),
    ),
    "split_heads num_heads keyword-only": (
        lambda: split_heads(X, 2),
        lambda: split_heads(X, num_heads=2),
    ),
    "SelfAttention.forward mask keyword-only": (
        lambda: SelfAttention(8)(X, causal_mask(6)),
        lambda: SelfAttention(8)(X, mask=causal_mask(6)),
    ),
    "MultiHeadAttention average_weights -> average_attn_weights": (
        lambda: MultiHeadAttention(8, 2)(X, need_weights=True, average_weights=True),
        lambda: MultiHeadAttention(8, 2)(X, need_weights=True, average_attn_weights=True),
    ),
    "FeedForward dropout and activation keyword-only": (
        lambda: FeedForward(8, 16, 0.1, "gelu"),
        lambda: FeedForward(8, 16, dropout=0.1, activation="gelu"),
    ),
    "EncoderLayer dropout keyword-only": (
        lambda: EncoderLayer(8, 2, 16, 0.1),
        lambda: EncoderLayer(8, 2, 16, dropout=0.1),
    ),
    "Encoder dropout keyword-only": (
        lambda: Encoder(8, 2, 16, 0.1),
        lambda: Encoder(8, 2, 16, num_layers=1, dropout=0.1),
    ),
    "Encoder (d_model, num_heads, d_ff, *, num_layers)": (
        lambda: Encoder(1, 8, 2, 16),
        lambda: Encoder(8, 2, 16, num_layers=1),
    ),
    "TransformerForecaster sizes keyword-only": (
        lambda: TransformerForecaster(8, 3, 8, 2, 1, 16),
        lambda: TransformerForecaster(8, 3, d_model=8, num_heads=2, num_layers=1, d_ff=16),
    ),
    "SequenceClassifier sizes keyword-only": (
        lambda: SequenceClassifier(20, 3, 8, 2, 1, 16, 8),
        lambda: SequenceClassifier(20, 3, **SIZES),
    ),
    "DecoderBlock dropout and causal keyword-only": (
        lambda: DecoderBlock(8, 2, 16, 0.0, False),
        lambda: DecoderBlock(8, 2, 16, dropout=0.0, causal=False),
    ),
    "causal_mask alignment -> causal_alignment": (
        lambda: causal_mask(3, 4, alignment="bottom_right"),
        lambda: causal_mask(3, 4, causal_alignment="bottom_right"),
    ),
    "alibi_bias alignment -> causal_alignment": (
        lambda: alibi_bias(2, 3, 4, alignment="bottom_right"),
        lambda: alibi_bias(2, 3, 4, causal_alignment="bottom_right"),
    ),
    "normalize_scores allowed -> mask": (
        lambda: normalize_scores(X, allowed=X > 0),
        lambda: normalize_scores(X, mask=X > 0),
    ),
    "sinusoidal_encoding base keyword-only": (
        lambda: sinusoidal_encoding(10, 8, 100.0),
        lambda: sinusoidal_encoding(10, 8, base=100.0),
    ),
    "SinusoidalPositionalEncoding max_len keyword-only": (
        lambda: SinusoidalPositionalEncoding(8, 16),
        lambda: SinusoidalPositionalEncoding(8, max_len=16),
    ),
    "SinusoidalPositionalEncoding.forward offset keyword-only": (
        lambda: SinusoidalPositionalEncoding(8, max_len=16)(X, 2),
        lambda: SinusoidalPositionalEncoding(8, max_len=16)(X, offset=2),
    ),
    "LearnedPositionalEmbedding.forward offset keyword-only": (
        lambda: LearnedPositionalEmbedding(8, max_len=16)(X, 2),
        lambda: LearnedPositionalEmbedding(8, max_len=16)(X, offset=2),
    ),
    "LearnedPositionalEmbedding max_len keyword-only, after d_model": (
        lambda: LearnedPositionalEmbedding(16, 8),
        lambda: LearnedPositionalEmbedding(8, max_len=16),
    ),
    "RotaryEmbedding base keyword-only": (
        lambda: RotaryEmbedding(4, 100.0),
        lambda: RotaryEmbedding(4, base=100.0),
    ),
    "RotaryEmbedding.forward offset keyword-only": (
        lambda: RotaryEmbedding(4)(Q, 2),
        lambda: RotaryEmbedding(4)(Q, offset=2),
    ),
    "rope_angles head_dim keyword-only": (
        lambda: rope_angles(torch.arange(5), 4),
        lambda: rope_angles(torch.arange(5), head_dim=4),
    ),
    "window_partition window_size keyword-only": (
        lambda: vision.window_partition(GRID, 2),
        lambda: vision.window_partition(GRID, window_size=2),
    ),
    "window_reverse sizes keyword-only": (
        lambda: vision.window_reverse(torch.randn(4, 4, 3), 2, 4, 4),
        lambda: vision.window_reverse(torch.randn(4, 4, 3), window_size=2, height=4, width=4),
    ),
    "window_partition window -> window_size": (
        lambda: vision.window_partition(GRID, window=2),
        lambda: vision.window_partition(GRID, window_size=2),
    ),
    "WindowAttention num_heads second, window_size keyword-only": (
        lambda: vision.WindowAttention(6, 2, 2),
        lambda: vision.WindowAttention(6, 2, window_size=2),
    ),
    "cyclic_shift shift keyword-only": (
        lambda: vision.cyclic_shift(GRID, 1),
        lambda: vision.cyclic_shift(GRID, shift=1),
    ),
    "SwinBlock shift keyword-only": (
        lambda: vision.SwinBlock(6, 4, 2, 2, 1),
        lambda: vision.SwinBlock(6, 4, 2, 2, shift=1),
    ),
    "WindowAttention.forward return_weights -> need_weights": (
        lambda: vision.WindowAttention(6, 2, window_size=2)(
            torch.randn(4, 4, 6), return_weights=True
        ),
        lambda: vision.WindowAttention(6, 2, window_size=2)(
            torch.randn(4, 4, 6), need_weights=True
        ),
    ),
    "WindowAttention.forward mask keyword-only": (
        lambda: vision.WindowAttention(6, 2, window_size=2)(torch.randn(4, 4, 6), None),
        lambda: vision.WindowAttention(6, 2, window_size=2)(torch.randn(4, 4, 6), mask=None),
    ),
    "CrossAttentionBlock.forward mask keyword-only": (
        lambda: CrossAttentionBlock(8, 2)(X, X, None),
        lambda: CrossAttentionBlock(8, 2)(X, X, mask=None),
    ),
    "ViTEmbedding dropout keyword-only": (
        lambda: vision.ViTEmbedding(8, 4, 3, 6, 0.1),
        lambda: vision.ViTEmbedding(8, 4, 3, 6, dropout=0.1),
    ),
    "VisionTransformer dropout keyword-only": (
        lambda: vision.VisionTransformer(8, 4, 1, 3, 16, 2, 1, 32, 0.1),
        lambda: vision.VisionTransformer(8, 4, 1, 3, **VIT_SIZES, dropout=0.1),
    ),
    "VisionTransformer sizes keyword-only": (
        lambda: vision.VisionTransformer(8, 4, 1, 3, 16, 2, 1, 32),
        lambda: vision.VisionTransformer(8, 4, 1, 3, **VIT_SIZES),
    ),
    "CrossAttentionBlock dropout keyword-only": (
        lambda: CrossAttentionBlock(8, 2, 16, 0.1),
        lambda: CrossAttentionBlock(8, 2, 16, dropout=0.1),
    ),
    "ProjectionHead hidden_dim keyword-only": (
        lambda: ProjectionHead(4, 3, 8),
        lambda: ProjectionHead(4, 3, hidden_dim=8),
    ),
    "CLIPHead hidden_dim keyword-only": (
        lambda: CLIPHead(6, 5, 4, 8),
        lambda: CLIPHead(6, 5, 4, hidden_dim=8),
    ),
    "flash_attention q/k/v -> query/key/value": (
        lambda: flash_attention(q=Q, k=K, v=V),
        lambda: flash_attention(query=Q, key=K, value=V),
    ),
    "flash_attention causal keyword-only": (
        lambda: flash_attention(Q, K, V, True),
        lambda: flash_attention(Q, K, V, causal=True),
    ),
    "chunked_attention q/k/v -> query/key/value": (
        lambda: chunked_attention(q=Q, k=K, v=V),
        lambda: chunked_attention(query=Q, key=K, value=V),
    ),
    "linear_attention q/k/v -> query/key/value": (
        lambda: linear_attention(q=Q, k=K, v=V),
        lambda: linear_attention(query=Q, key=K, value=V),
    ),
    "linear_attention_step q_t/k_t/v_t -> query/key/value": (
        lambda: linear_attention_step(q_t=Q[:, :, :1], k_t=K[:, :, :1], v_t=V[:, :, :1]),
        lambda: linear_attention_step(query=Q[:, :, :1], key=K[:, :, :1], value=V[:, :, :1]),
    ),
    "LinearAttentionState.zeros heads -> num_heads": (
        lambda: LinearAttentionState.zeros(1, heads=2, head_dim=4, value_dim=4),
        lambda: LinearAttentionState.zeros(1, num_heads=2, head_dim=4, value_dim=4),
    ),
    "LinearAttentionState.zeros dim_k/dim_v -> head_dim/value_dim": (
        lambda: LinearAttentionState.zeros(1, 2, dim_k=4, dim_v=4),
        lambda: LinearAttentionState.zeros(1, 2, head_dim=4, value_dim=4),
    ),
    "block_sparse_attention block_size keyword-only": (
        lambda: block_sparse_attention(Q, K, V, LAYOUT, 4),
        lambda: block_sparse_attention(Q, K, V, LAYOUT, block_size=4),
    ),
    "flex_block_sparse block_size keyword-only": (
        lambda: flex_block_sparse(Q, K, V, LAYOUT, 4),
        lambda: flex_block_sparse(Q, K, V, LAYOUT, block_size=4),
    ),
    "sparsity_measure scale keyword-only": (
        lambda: sparsity_measure(Q, K, torch.arange(3), 0.5),
        lambda: sparsity_measure(Q, K, torch.arange(3), scale=0.5),
    ),
    "attention_flops heads -> num_heads": (
        lambda: attention_flops(1, heads=2, n_queries=8, n_keys=8, head_dim=4, causal=False),
        lambda: attention_flops(1, num_heads=2, n_queries=8, n_keys=8, head_dim=4, causal=False),
    ),
    "attention_flops batch -> batch_size": (
        lambda: attention_flops(
            batch=1, num_heads=2, n_queries=8, n_keys=8, head_dim=4, causal=False
        ),
        lambda: attention_flops(
            batch_size=1, num_heads=2, n_queries=8, n_keys=8, head_dim=4, causal=False
        ),
    ),
    "window_attention_score_count batch -> batch_size": (
        lambda: vision.window_attention_score_count(
            batch=1, height=4, width=4, num_heads=2, window_size=2
        ),
        lambda: vision.window_attention_score_count(
            batch_size=1, height=4, width=4, num_heads=2, window_size=2
        ),
    ),
    "SelfAttention d_k -> head_dim": (
        lambda: SelfAttention(8, d_k=4),
        lambda: SelfAttention(8, head_dim=4),
    ),
    "bigbird_layout window -> n_window": (
        lambda: bigbird_layout(4, window=1),
        lambda: bigbird_layout(4, n_window=1),
    ),
    "sigmoid_attention bias -> score_bias": (
        lambda: sigmoid_attention(Q, K, V, bias=0.0),
        lambda: sigmoid_attention(Q, K, V, score_bias=0.0),
    ),
    "KVCache.append k/v -> key/value": (
        lambda: KVCache(1, 1, 2, 4, 8).append(0, k=K[:, :, :1], v=V[:, :, :1]),
        lambda: KVCache(1, 1, 2, 4, 8).append(0, key=K[:, :, :1], value=V[:, :, :1]),
    ),
    "run_over_heads work and device keyword-only": (
        lambda: threads.run_over_heads(lambda hs: hs, 2, 0, "cpu"),
        lambda: threads.run_over_heads(lambda hs: hs, 2, work=0, device="cpu"),
    ),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_old_form_raises_type_error_and_new_form_runs(case):
    old, new = CASES[case]
    # Refused by the signature itself, not by a validation further in.
    with pytest.raises(TypeError, match=r"positional argument|keyword argument"):
        old()
    new()


def test_swin_block_attend_is_attend_windows():
    block = vision.SwinBlock(6, 4, 2, 2, shift=1)
    assert not hasattr(block, "attend")
    x = torch.randn(1, 16, 6)  # (B, H·W, C)
    assert block.attend_windows(x).shape == x.shape


def test_attend_is_the_dispatcher_only():
    """``attention.attend`` is the one public ``attend`` (the backend dispatcher)."""
    import attention
    from attention.dispatch import attend

    assert attention.attend is attend


# --- the whole public API against STYLE.md's table ---------------------------------------------

ROOT = Path(__file__).resolve().parents[2]
# A parameter named after torch's own argument that it converts from.
EXEMPT = {("attention.masks.from_torch_attn_mask", "attn_mask")}


def vocabulary() -> tuple[set[str], set[str]]:
    """The names of STYLE.md's vocabulary table: (every prescribed name, every "never" name
    that is not also prescribed for another concept, such as ``bias``)."""
    text = (ROOT / "STYLE.md").read_text(encoding="utf-8")
    section = text.split("## Public API vocabulary", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1:-1] for line in section.splitlines() if line.startswith("| ")]
    rows = [r for r in rows if len(r) == 3 and r[0].strip() not in ("concept", "---")]
    # The names column's parentheses are comments (``q, k, v`` inside bodies, torch's names).
    names = {n for r in rows for n in re.findall(r"`(\w+)", re.sub(r"\(.*?\)", "", r[1]))}
    never = {n for r in rows for n in re.findall(r"`(\w+)`", r[2])}
    return names, never - names


def public_signatures():
    """(qualified name, inspect.Signature) of every public function, constructor, forward and
    public method defined in a public module of ``attention``."""
    import attention

    modules = ["attention"] + [
        m.name
        for m in pkgutil.walk_packages(attention.__path__, "attention.")
        if not any(part.startswith("_") for part in m.name.split("."))
    ]
    for module_name in modules:
        module = importlib.import_module(module_name)
        for name, obj in vars(module).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != module_name:
                continue
            if inspect.isfunction(obj):
                yield f"{module_name}.{name}", inspect.signature(obj)
            elif inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    if attr.startswith("_") and attr != "__init__":
                        continue
                    func = getattr(member, "__func__", member)  # classmethod, staticmethod
                    if inspect.isfunction(func):
                        yield f"{module_name}.{name}.{attr}", inspect.signature(func)


def test_the_vocabulary_table_is_read():
    names, never = vocabulary()
    assert {"query", "mask", "causal_alignment", "num_heads", "head_dim", "norm1"} <= names
    assert {"alignment", "allowed", "d_k", "batch", "window", "ln1", "mlp"} <= never
    assert "bias" not in never  # prescribed for "projections have a bias"


def test_no_public_signature_uses_a_name_the_vocabulary_rules_out():
    _, never = vocabulary()
    signatures = list(public_signatures())
    assert len(signatures) > 100
    bad = [
        f"{where}({param})"
        for where, sig in signatures
        for param in sig.parameters
        if param in never and (where, param) not in EXEMPT
    ]
    assert not bad, f"names STYLE.md rules out: {bad}"


def test_bias_is_always_the_bool_of_torch():
    bad = [
        where
        for where, sig in public_signatures()
        if "bias" in sig.parameters and "bool" not in str(sig.parameters["bias"].annotation)
    ]
    assert not bad, f"bias that is not a bool (a score shift is score_bias): {bad}"


def test_no_block_names_a_submodule_the_vocabulary_rules_out():
    _, never = vocabulary()
    bad = []
    for path in sorted((ROOT / "attention").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            for target in getattr(node, "targets", []):
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == "self"
                    and target.attr in never
                ):
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno} self.{target.attr}")
    assert not bad, f"attributes STYLE.md rules out: {bad}"


def test_the_checks_see_a_ruled_out_name():
    _, never = vocabulary()

    def old(q, k, v, *, alignment="top_left", batch=1):  # the forms ruled out
        return q

    assert {"q", "k", "v", "alignment", "batch"} <= set(inspect.signature(old).parameters) & never
