"""Bad inputs to attention.heads and attention.blocks fail loudly, naming what was expected."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from attention.blocks import DecoderBlock, EncoderLayer, FeedForward, SequenceClassifier
from attention.heads import MultiHeadAttention, SelfAttention, merge_heads, split_heads
from attention.positional import RotaryEmbedding

B, L, D, H = 2, 5, 16, 4


def mha(**kw):
    torch.manual_seed(0)
    return MultiHeadAttention(D, H, **kw)


def clf(**kw):
    torch.manual_seed(0)
    args = dict(positional="sinusoidal", pooling="mean")
    args.update(kw)
    return SequenceClassifier(
        20, 3, d_model=D, num_heads=H, num_layers=1, d_ff=32, max_len=8, **args
    )


def x_(*shape, dtype=torch.float32):
    return torch.randn(*(shape or (B, L, D)), dtype=dtype)


def tokens(l=6):
    return torch.randint(0, 20, (B, l), generator=torch.Generator().manual_seed(0))


def _sdpa(q, k, v, mask=None, causal=False):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)


CASES = {
    # --- construction ---
    "d_model not divisible by heads": (
        lambda: MultiHeadAttention(10, 3),
        ValueError,
        r"d_model \(10\) must be divisible by num_heads \(3\)",
    ),
    "heads not divisible by kv heads": (
        lambda: MultiHeadAttention(16, 4, num_kv_heads=3),
        ValueError,
        r"num_heads \(4\) must be divisible by num_kv_heads \(3\)",
    ),
    "zero heads": (lambda: MultiHeadAttention(16, 0), ValueError, r"num_heads must be >= 1, got 0"),
    "float heads": (
        lambda: MultiHeadAttention(16, 2.0),
        TypeError,
        r"num_heads must be an int, got float",
    ),
    "dropout of 1": (lambda: mha(dropout=1.0), ValueError, r"dropout must be in \[0, 1\), got 1"),
    "rotary head_dim mismatch": (
        lambda: mha(rotary=RotaryEmbedding(8)),
        ValueError,
        r"rotary.head_dim must equal d_model // num_heads = 4, got 8",
    ),
    "rotary not a module": (
        lambda: mha(rotary="rope"),
        TypeError,
        r"rotary must be a RotaryEmbedding module or None, got str",
    ),
    "attn_fn not callable": (
        lambda: mha(attn_fn=3),
        TypeError,
        r"attn_fn must be callable or None, got int",
    ),
    "unknown activation": (
        lambda: FeedForward(D, 32, activation="swish"),
        ValueError,
        r"activation must be one of \['relu', 'gelu'\], got 'swish'",
    ),
    "unknown positional kind": (
        lambda: clf(positional="alibi"),
        ValueError,
        r"positional must be one of \['sinusoidal', 'learned', 'rope', 'none'\], got 'alibi'",
    ),
    "unknown pooling": (
        lambda: clf(pooling="max"),
        ValueError,
        r"pooling must be one of \['mean', 'cls', 'last'\], got 'max'",
    ),
    "rope with odd head dim": (
        lambda: SequenceClassifier(
            20, 3, d_model=12, num_heads=4, num_layers=1, d_ff=32, max_len=8, positional="rope"
        ),
        ValueError,
        r"positional='rope' needs an even head dim d_model // num_heads, got 12 // 4 = 3",
    ),
    # --- split / merge ---
    "split: width not divisible": (
        lambda: split_heads(x_(B, L, 10), num_heads=4),
        ValueError,
        r"d_model \(last dim of x\) \(10\) must be divisible by num_heads \(4\)",
    ),
    "merge: wrong rank": (
        lambda: merge_heads(x_()),
        ValueError,
        r"x must have 4 dimensions \[batch, heads, seq, d_head\], got 3 with shape \(2, 5, 16\)",
    ),
    # --- MultiHeadAttention.forward ---
    "x wrong rank": (
        lambda: mha()(x_(B, H, L, D // H)),
        ValueError,
        r"x must have 3 dimensions \[batch, seq, d_model\], got 4",
    ),
    "x wrong d_model": (
        lambda: mha()(x_(B, L, 12)),
        ValueError,
        r"x must have last dim d_model=16, expected shape \(B, L, 16\), got \(2, 5, 12\)",
    ),
    "x integer": (
        lambda: mha()(torch.ones(B, L, D, dtype=torch.long)),
        TypeError,
        r"x must be a floating-point tensor .* got dtype torch.int64",
    ),
    "x not a tensor": (
        lambda: mha()([[0.0] * D]),
        TypeError,
        r"x must be a torch.Tensor, got list",
    ),
    "x dtype differs from weights": (
        lambda: mha()(x_(dtype=torch.float64)),
        TypeError,
        r"x has dtype torch.float64 but the module's weights are torch.float32",
    ),
    "context with a different batch": (
        lambda: mha()(x_(), x_(3, 7, D)),
        ValueError,
        r"context must have the batch size of x \(2\), got shape \(3, 7, 16\)",
    ),
    "context wrong d_model": (
        lambda: mha()(x_(), x_(B, 7, 8)),
        ValueError,
        r"context must have last dim d_model=16",
    ),
    "mask misses a key": (
        lambda: mha()(x_(), mask=torch.ones(B, 1, 1, L + 1, dtype=torch.bool)),
        ValueError,
        r"mask of shape \(2, 1, 1, 6\) does not broadcast to \(2, 4, 5, 5\)",
    ),
    "mask wrong batch": (
        lambda: mha()(x_(), mask=torch.ones(3, 1, 1, L, dtype=torch.bool)),
        ValueError,
        r"mask of shape \(3, 1, 1, 5\) does not broadcast to \(2, 4, 5, 5\)",
    ),
    "mask integer dtype": (
        lambda: mha()(x_(), mask=torch.ones(L, L, dtype=torch.int64)),
        TypeError,
        r"mask must be a bool tensor \(True = may attend\) or a float tensor",
    ),
    "mask checked before attn_fn": (
        lambda: mha(attn_fn=_sdpa)(x_(), mask=torch.ones(L, L + 2, dtype=torch.bool)),
        ValueError,
        r"mask .* \(2, 4, 5, 5\)",
    ),
    "need_weights with attn_fn": (
        lambda: mha(attn_fn=_sdpa)(x_(), need_weights=True),
        ValueError,
        r"need_weights=True needs the reference attention, but attn_fn is set",
    ),
    "self-attention mask wrong length": (
        lambda: SelfAttention(D, 4)(x_(), mask=torch.ones(L, L - 1, dtype=torch.bool)),
        ValueError,
        r"mask .* \(2, 1, 5, 5\)",
    ),
    # --- conversions ---
    "from_torch: not an MHA": (
        lambda: MultiHeadAttention.from_torch(nn.Linear(D, D)),
        TypeError,
        r"mha must be a torch.nn.MultiheadAttention, got Linear",
    ),
    "from_torch: kdim differs": (
        lambda: MultiHeadAttention.from_torch(nn.MultiheadAttention(D, H, kdim=8, vdim=8)),
        ValueError,
        r"mha must have kdim == vdim == embed_dim \(16\) to convert, got kdim=8, vdim=8",
    ),
    "from_torch: add_bias_kv": (
        lambda: MultiHeadAttention.from_torch(nn.MultiheadAttention(D, H, add_bias_kv=True)),
        ValueError,
        r"add_bias_kv=False and add_zero_attn=False to convert, got add_bias_kv=True",
    ),
    "to_torch: GQA": (
        lambda: mha(num_kv_heads=2).to_torch(),
        ValueError,
        r"to_torch needs num_kv_heads == num_heads \(4\), got num_kv_heads=2",
    ),
    "to_torch: rotary": (
        lambda: mha(rotary=RotaryEmbedding(4)).to_torch(),
        ValueError,
        r"to_torch needs rotary=None",
    ),
    "EncoderLayer.from_torch: silu": (
        lambda: EncoderLayer.from_torch(nn.TransformerEncoderLayer(D, H, 32, activation=F.silu)),
        ValueError,
        r"layer.activation must be relu or \(exact\) gelu to convert",
    ),
    # --- blocks ---
    "feed-forward wrong width": (
        lambda: FeedForward(D, 32)(x_(B, L, 8)),
        ValueError,
        r"x must have last dim d_model=16, expected shape \(\.\.\., 16\), got \(2, 5, 8\)",
    ),
    "pre-LN encoder layer wrong d_model": (
        lambda: EncoderLayer(D, H, 32, pre_ln=True)(x_(B, L, 8)),
        ValueError,
        r"x must have last dim d_model=16",
    ),
    "decoder block wrong rank": (
        lambda: DecoderBlock(D, H, 32)(x_(L, D)),
        ValueError,
        r"x must have 3 dimensions \[batch, seq, d_model\]",
    ),
    # --- SequenceClassifier.forward ---
    "float tokens": (
        lambda: clf()(tokens().float()),
        TypeError,
        r"tokens must be an integer tensor of ids, got dtype torch.float32",
    ),
    "tokens wrong rank": (
        lambda: clf()(tokens()[0]),
        ValueError,
        r"tokens must have 2 dimensions \[batch, seq\], got 1",
    ),
    "token id out of vocab": (
        lambda: clf()(tokens() + 20),
        ValueError,
        r"tokens must be ids in \[0, vocab_size=20\)",
    ),
    "sequence longer than max_len": (
        lambda: clf()(tokens(9)),
        ValueError,
        r"tokens has seq length 9, expected at most max_len=8",
    ),
    "no room for the cls token": (
        lambda: clf(pooling="cls")(tokens(8)),
        ValueError,
        r"expected at most max_len=8 - 1 \(the cls token takes a position\)",
    ),
    "lengths and keep together": (
        lambda: clf()(tokens(), lengths=torch.tensor([6, 6]), keep=torch.ones(B, 6).bool()),
        ValueError,
        r"pass lengths or keep, not both",
    ),
    "lengths wrong shape": (
        lambda: clf()(tokens(), lengths=torch.tensor([[6, 6]])),
        ValueError,
        r"lengths must have shape \(batch,\) = \(2,\), got \(1, 2\)",
    ),
    "lengths longer than the sequence": (
        lambda: clf()(tokens(), lengths=torch.tensor([6, 7])),
        ValueError,
        r"lengths must be <= the sequence length of tokens \(6\), got a length of 7",
    ),
    "empty sequence": (
        lambda: clf()(tokens(), lengths=torch.tensor([6, 0])),
        ValueError,
        r"every sequence needs at least one real token",
    ),
    "keep not bool": (
        lambda: clf()(tokens(), keep=torch.ones(B, 6)),
        TypeError,
        r"keep must be a bool tensor \(True = real token\)",
    ),
    "keep wrong shape": (
        lambda: clf()(tokens(), keep=torch.ones(B, 5, dtype=torch.bool)),
        ValueError,
        r"keep must have the shape of tokens \(2, 6\), got \(2, 5\)",
    ),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_bad_input_raises_a_message_naming_the_argument(case):
    call, error, match = CASES[case]
    with pytest.raises(error, match=match):
        call()


def test_there_are_at_least_15_distinct_cases():
    assert len({m for _, _, m in CASES.values()}) >= 15
