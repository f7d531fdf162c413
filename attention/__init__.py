"""attention: the tested companion package of the book.

Conventions everywhere: tensors ``[batch, heads, seq, dim]``; boolean masks ``True`` = may
attend (as in ``torch.nn.functional.scaled_dot_product_attention``); float masks are additive
biases.
"""

from . import multimodal, vision
from .blocks import DecoderBlock, Encoder, EncoderLayer, FeedForward, SequenceClassifier
from .dispatch import attend, available_backends
from .functional import safe_softmax, scaled_dot_product_attention
from .heads import MultiHeadAttention, SelfAttention, merge_heads, split_heads
from .masks import (
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
from .positional import (
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    alibi_bias,
    alibi_slopes,
    apply_rope,
    rope_angles,
    sinusoidal_encoding,
)

__version__ = "0.1.0"

__all__ = [
    "DecoderBlock",
    "Encoder",
    "EncoderLayer",
    "FeedForward",
    "LearnedPositionalEmbedding",
    "MultiHeadAttention",
    "RotaryEmbedding",
    "SelfAttention",
    "SequenceClassifier",
    "SinusoidalPositionalEncoding",
    "alibi_bias",
    "attend",
    "available_backends",
    "alibi_slopes",
    "apply_rope",
    "merge_heads",
    "multimodal",
    "rope_angles",
    "sinusoidal_encoding",
    "split_heads",
    "vision",
    "block_layout_to_mask",
    "causal_mask",
    "combine_masks",
    "from_key_padding_mask",
    "from_torch_attn_mask",
    "padding_mask",
    "padding_mask_from_keep",
    "safe_softmax",
    "scaled_dot_product_attention",
    "sliding_window_mask",
    "to_additive",
]
