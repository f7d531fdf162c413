"""Efficient attention variants, each with the cost it claims, each equal to the dense reference
(``attention.functional.scaled_dot_product_attention``) under the equivalent mask.

| function | cost | equals the dense reference with |
| --- | --- | --- |
| :func:`flash_attention` | O(n²) time, O(n) memory (forward and backward) | no mask / causal |
| :func:`chunked_attention` | O(n²) time, O(n) memory via checkpointed chunks | no mask / causal |
| :func:`sliding_window_attention` | O(n·w) | ``sliding_window_mask`` (+ global tokens) |
| :func:`block_sparse_attention` | O(active blocks · b²) | ``block_layout_to_mask`` |
| :func:`linear_attention` | O(n·d²) | a different kernel: φ(q)·φ(k), not softmax |
| :func:`probsparse_attention` | O(n log n) | dense rows for the top-u queries, mean(V) elsewhere |

The same kernels as ``attn_fn`` for :class:`attention.heads.MultiHeadAttention` and the blocks
(:mod:`attention.efficient.adapters`): :class:`SlidingWindowAttnFn`, :class:`BigBirdAttnFn`,
:class:`LinearAttnFn`, each with ``allowed(seq_len)``, its dense mask (``True`` = may attend);
:class:`MaskedAttnFn`, dense attention under such a mask.
"""

from .adapters import BigBirdAttnFn, LinearAttnFn, MaskedAttnFn, SlidingWindowAttnFn
from .block_sparse import bigbird_layout, block_sparse_attention
from .chunked import chunked_attention
from .flash import flash_attention
from .linear import LinearAttentionState, elu_feature_map, linear_attention, linear_attention_step
from .probsparse import probsparse_attention
from .sliding_window import sliding_window_attention

__all__ = [
    "BigBirdAttnFn",
    "LinearAttnFn",
    "MaskedAttnFn",
    "SlidingWindowAttnFn",
    "LinearAttentionState",
    "bigbird_layout",
    "block_sparse_attention",
    "chunked_attention",
    "elu_feature_map",
    "flash_attention",
    "linear_attention",
    "linear_attention_step",
    "probsparse_attention",
    "sliding_window_attention",
]
