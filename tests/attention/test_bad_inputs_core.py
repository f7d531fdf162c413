"""Bad inputs to functional, masks and positional fail loudly, and the message names the
argument, what it got and what was expected."""

from __future__ import annotations

import pytest
import torch

from attention.functional import scaled_dot_product_attention as sdpa
from attention.masks import (
    block_layout_to_mask,
    causal_mask,
    combine_masks,
    from_key_padding_mask,
    from_torch_attn_mask,
    padding_mask,
    padding_mask_from_keep,
    sliding_window_mask,
    to_additive,
)
from attention.positional import (
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    alibi_bias,
    alibi_slopes,
    apply_rope,
    rope_angles,
    sinusoidal_encoding,
)


def t(*shape, dtype=torch.float32):
    return torch.zeros(*shape, dtype=dtype)


Q, K, V = t(1, 2, 4, 8), t(1, 2, 5, 8), t(1, 2, 5, 3)  # (B, H, Lq, E), (B, H, Lk, E/Ev)

CASES = {
    # ---- scaled_dot_product_attention -----------------------------------------------------
    "query rank 3": (
        lambda: sdpa(t(2, 4, 8), K, V),
        ValueError,
        r"query must have 4 dimensions \[batch, heads, seq, dim\], got 3 with shape \(2, 4, 8\)",
    ),
    "key batch differs": (
        lambda: sdpa(Q, t(3, 2, 5, 8), V),
        ValueError,
        r"batch sizes differ: query has 1, key has 3, value has 1",
    ),
    "key dim differs": (
        lambda: sdpa(Q, t(1, 2, 5, 7), V),
        ValueError,
        r"key must have the same last dim as query: expected \(\.\.\., 8\), got key shape "
        r"\(1, 2, 5, 7\)",
    ),
    "value length differs": (
        lambda: sdpa(Q, K, t(1, 2, 6, 3)),
        ValueError,
        r"value must have as many positions as key: expected seq 5, got value shape",
    ),
    "heads differ without enable_gqa": (
        lambda: sdpa(t(1, 4, 4, 8), K, V),
        ValueError,
        r"key has 2 heads but query has 4; pass enable_gqa=True",
    ),
    "gqa heads not divisible": (
        lambda: sdpa(t(1, 3, 4, 8), K, V, enable_gqa=True),
        ValueError,
        r"query heads \(3\) must be a multiple of key/value heads \(2\)",
    ),
    "key and value heads differ": (
        lambda: sdpa(Q, K, t(1, 1, 5, 3), enable_gqa=True),
        ValueError,
        r"key and value must have the same number of heads, got 2 and 1",
    ),
    "integer query": (
        lambda: sdpa(t(1, 2, 4, 8, dtype=torch.int64), K, V),
        TypeError,
        r"query must be a floating-point tensor .* got dtype torch.int64",
    ),
    "query not a tensor": (
        lambda: sdpa([[1.0]], K, V),
        TypeError,
        r"query must be a torch.Tensor, got list",
    ),
    "mixed dtypes": (
        lambda: sdpa(Q, K.double(), V),
        TypeError,
        r"query, key and value must share a dtype, got torch.float32, torch.float64, "
        r"torch.float32",
    ),
    "integer mask": (
        lambda: sdpa(Q, K, V, torch.ones(4, 5, dtype=torch.int64)),
        TypeError,
        r"mask must be a bool tensor \(True = may attend\) or a float tensor \(additive bias\), "
        r"got dtype torch.int64",
    ),
    "mask with wrong query length": (
        lambda: sdpa(Q, K, V, torch.ones(3, 5, dtype=torch.bool)),
        ValueError,
        r"mask of shape \(3, 5\) does not broadcast to \(1, 2, 4, 5\)",
    ),
    "mask that does not cover every key": (
        lambda: sdpa(Q, K, V, torch.ones(4, 1, dtype=torch.bool)),
        ValueError,
        r"mask must cover every key: expected last dim 5, got shape \(4, 1\)",
    ),
    "mask of rank 1": (
        lambda: sdpa(Q, K, V, torch.ones(5, dtype=torch.bool)),
        ValueError,
        r"mask must have 2 to 4 dims, broadcastable to \(1, 2, 4, 5\)",
    ),
    "mask of rank 5": (
        lambda: sdpa(Q, K, V, torch.ones(1, 1, 2, 4, 5, dtype=torch.bool)),
        ValueError,
        r"mask must have 2 to 4 dims, broadcastable to \(1, 2, 4, 5\) .* got shape "
        r"\(1, 1, 2, 4, 5\)",
    ),
    "dropout_p of 1": (
        lambda: sdpa(Q, K, V, dropout_p=1.0),
        ValueError,
        r"dropout_p must be in \[0, 1\), got 1.0",
    ),
    "unknown causal_alignment": (
        lambda: sdpa(Q, K, V, causal=True, causal_alignment="bottom"),
        ValueError,
        r"causal_alignment must be one of \['top_left', 'bottom_right'\], got 'bottom'",
    ),
    # ---- masks ----------------------------------------------------------------------------
    "causal_mask of length 0": (
        lambda: causal_mask(0),
        ValueError,
        r"n_queries must be >= 1, got 0",
    ),
    "causal_mask float length": (
        lambda: causal_mask(4, 3.0),
        TypeError,
        r"n_keys must be an int, got float \(3.0\)",
    ),
    "window left < 0": (
        lambda: sliding_window_mask(4, left=-1, right=0),
        ValueError,
        r"left must be >= 0, got -1",
    ),
    "window right < 0": (
        lambda: sliding_window_mask(4, left=2, right=-2),
        ValueError,
        r"right must be >= 0, got -2",
    ),
    "float lengths": (
        lambda: padding_mask(torch.tensor([2.0, 3.0])),
        TypeError,
        r"lengths must be an integer tensor, got dtype torch.float32",
    ),
    "length past max_len": (
        lambda: padding_mask(torch.tensor([2, 5]), 3),
        ValueError,
        r"lengths must be <= max_len=3, got a length of 5",
    ),
    "negative length": (
        lambda: padding_mask(torch.tensor([2, -1])),
        ValueError,
        r"lengths must be >= 0, got \[2, -1\]",
    ),
    "lengths of rank 2": (
        lambda: padding_mask(torch.tensor([[2, 3]])),
        ValueError,
        r"lengths must have 1 dimensions \[batch\], got 2 with shape \(1, 2\)",
    ),
    "integer keep mask": (
        lambda: padding_mask_from_keep(torch.ones(2, 3, dtype=torch.int64)),
        TypeError,
        r"keep must be a bool tensor \(True = real token\), got torch.int64",
    ),
    "float mask to combine": (
        lambda: combine_masks(causal_mask(3), torch.zeros(3, 3)),
        TypeError,
        r"masks\[1\] must be a bool mask \(True = may attend\), got torch.float32",
    ),
    "masks that do not broadcast": (
        lambda: combine_masks(causal_mask(3), causal_mask(4)),
        ValueError,
        r"masks\[1\] of shape \(4, 4\) does not broadcast with the masks before it "
        r"\(shape \(3, 3\)\)",
    ),
    "masks on two devices": (
        lambda: combine_masks(None, causal_mask(3), causal_mask(3, device="meta")),
        ValueError,
        r"masks\[2\] must be on the same device as masks\[1\] \(cpu\), got meta",
    ),
    "block_size < 1": (
        lambda: block_layout_to_mask(torch.ones(2, 2, dtype=torch.bool), 0),
        ValueError,
        r"block_size must be >= 1, got 0",
    ),
    "n_queries too short for the layout": (
        lambda: block_layout_to_mask(torch.ones(2, 2, dtype=torch.bool), 4, 3, 8),
        ValueError,
        r"n_queries=3 does not fit a layout of 2 blocks of 4: expected 5..8",
    ),
    "integer layout": (
        lambda: block_layout_to_mask(torch.ones(2, 2, dtype=torch.int64), 4),
        TypeError,
        r"layout must be a bool tensor, got torch.int64",
    ),
    "layout of rank 1": (
        lambda: block_layout_to_mask(torch.ones(2, dtype=torch.bool), 4),
        ValueError,
        r"layout must have at least 2 dims \(\.\.\., q_blocks, k_blocks\), got shape \(2,\)",
    ),
    "integer key_padding_mask": (
        lambda: from_key_padding_mask(torch.zeros(2, 3, dtype=torch.int64)),
        TypeError,
        r"key_padding_mask must be bool \(True = ignore\) or float, got torch.int64",
    ),
    "key_padding_mask of rank 3": (
        lambda: from_key_padding_mask(torch.zeros(2, 1, 3, dtype=torch.bool)),
        ValueError,
        r"key_padding_mask must have 2 dimensions \[batch, k_len\], got 3",
    ),
    "integer attn_mask": (
        lambda: from_torch_attn_mask(torch.zeros(3, 3, dtype=torch.int32)),
        TypeError,
        r"attn_mask must be bool \(True = not allowed\) or float, got torch.int32",
    ),
    "float mask to to_additive": (
        lambda: to_additive(torch.zeros(3, 3)),
        TypeError,
        r"mask must be a bool tensor, got torch.float32",
    ),
    # ---- positional -----------------------------------------------------------------------
    "odd head_dim for RoPE": (
        lambda: apply_rope(t(1, 2, 4, 5)),
        ValueError,
        r"x must have an even head_dim for RoPE .* head_dim=5 in shape \(1, 2, 4, 5\)",
    ),
    "RoPE on (B, L, D)": (
        lambda: apply_rope(t(1, 4, 8)),
        ValueError,
        r"x must have 4 dimensions \[batch, heads, seq, head_dim\], got 3",
    ),
    "RoPE on integers": (
        lambda: apply_rope(t(1, 2, 4, 8, dtype=torch.int64)),
        TypeError,
        r"x must be a floating-point tensor .* got dtype torch.int64",
    ),
    "RoPE positions of the wrong length": (
        lambda: apply_rope(t(2, 2, 4, 8), positions=torch.arange(5)),
        ValueError,
        r"positions must have shape \(4,\) or \(2, 4\) to match x of shape \(2, 2, 4, 8\)",
    ),
    "RoPE negative offset": (
        lambda: apply_rope(t(1, 2, 4, 8), offset=-1),
        ValueError,
        r"offset must be >= 0, got -1",
    ),
    "RoPE offset and positions": (
        lambda: apply_rope(t(1, 2, 4, 8), offset=3, positions=torch.arange(4)),
        ValueError,
        r"pass offset or positions, not both: got offset=3",
    ),
    "RotaryEmbedding odd head_dim": (
        lambda: RotaryEmbedding(7),
        ValueError,
        r"head_dim must be even .* got 7",
    ),
    "RotaryEmbedding on another head_dim": (
        lambda: RotaryEmbedding(8)(t(1, 2, 4, 6)),
        ValueError,
        r"x must have last dim head_dim=8, got shape \(1, 2, 4, 6\)",
    ),
    "rope_angles in float16": (
        lambda: rope_angles(torch.arange(4), head_dim=8, dtype=torch.float16),
        ValueError,
        r"dtype must be one of \[torch.float32, torch.float64\], got torch.float16",
    ),
    "learned position past max_len": (
        lambda: LearnedPositionalEmbedding(4, max_len=8)(t(1, 7, 4), offset=3),
        ValueError,
        r"positions up to 9 requested \(offset=3 \+ seq length 7\), but max_len=8",
    ),
    "sinusoidal module with another d_model": (
        lambda: SinusoidalPositionalEncoding(8, max_len=16)(t(1, 4, 6)),
        ValueError,
        r"x must have last dim d_model=8, expected shape \(B, L, 8\), got \(1, 4, 6\)",
    ),
    "sinusoidal odd d_model": (
        lambda: sinusoidal_encoding(10, 7),
        ValueError,
        r"d_model must be even .* got 7",
    ),
    "sinusoidal base <= 1": (
        lambda: sinusoidal_encoding(10, 8, base=1.0),
        ValueError,
        r"base must be > 1, got 1.0",
    ),
    "alibi with no heads": (
        lambda: alibi_slopes(0),
        ValueError,
        r"num_heads must be >= 1, got 0",
    ),
    "alibi unknown alignment": (
        lambda: alibi_bias(4, 3, 5, causal_alignment="right"),
        ValueError,
        r"causal_alignment must be one of \['top_left', 'bottom_right'\], got 'right'",
    ),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_bad_input_names_the_argument(case):
    call, error, match = CASES[case]
    with pytest.raises(error, match=match):
        call()


def test_there_are_at_least_twenty_distinct_cases():
    assert len(CASES) >= 20
    assert len({m for _, _, m in CASES.values()}) == len(CASES)  # no duplicated message
