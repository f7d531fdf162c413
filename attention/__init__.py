"""attention: the tested companion package of the book.

Conventions everywhere: tensors ``[batch, heads, seq, dim]``; boolean masks ``True`` = may
attend (as in ``torch.nn.functional.scaled_dot_product_attention``); float masks are additive
biases.

Package rules (every public function and module; tests/attention/test_bad_inputs_*.py):

- **Bad input** raises ``TypeError`` (wrong type or dtype) or ``ValueError`` (wrong shape,
  range, device) whose message names the argument, what it got and what was expected
  (the helpers of ``attention._checks``; the generic ones are public, for code built on the
  library, in ``attention.checks``); nothing is broadcast or cast silently into a wrong
  answer. ``scale``, ``dim``, ``generator``, ``device`` and ``dtype=`` arguments are checked
  the same way everywhere: ``scale`` is ``None`` or a finite real; ``dtype=`` of a table, bias
  or slopes must be a floating-point dtype; a mask must be on its inputs' device.
- **Fully masked rows** (a query with no key it may attend) give zeros, never NaN, on every
  variant and backend.
- **NaN policy.** Non-finite values in the *inputs* (query, key, value, token vectors) are not
  refused (checking would cost a pass over the data) and propagate only where the arithmetic
  takes them: a NaN or inf in one batch element or head never changes another's output
  (a property test covers every variant; flash_attention's shared lazy-rescale decision can
  move another element's output by rounding only). Non-finite *arguments* are refused:
  ``scale``, ``eps``, ``logit_scale``, ``mlp_ratio``, and NaN or ``+inf`` in a float mask
  (``-inf`` there means "not allowed"). ``safe_softmax`` refuses a ``+inf`` score (its
  softmax is ``inf / inf``; the check reads the row maxima it computes anyway, so it costs no
  pass over the data); the attention functions and ``normalize_scores``, whose scores come
  from the inputs, apply the same softmax unchecked, so an inf there follows the rule above.
- **Empty inputs.** A zero-sized batch, head, sequence or head-dim axis gives the correct
  empty result, never an error or NaN: empty outputs for an empty batch, heads or queries;
  zeros for queries when there are no keys (every row fully masked); for a head dim of 0
  the scores are all 0 (empty dot products), so each query averages the values uniformly
  (the default scale is then 1). Exceptions, each a ``ValueError``: reductions whose answer
  would be 0 / 0, i.e. ``clip_contrastive_loss`` on a batch of no pairs and
  ``SequenceClassifier`` on a sequence with no real token; and the builders of masks, tables
  and layers, whose sizes (``n_queries``, ``max_len``, ``d_model``, ``window`` ...) must be
  >= 1.
- **Padded query rows.** Masks act on keys: a query at a padded position still attends the
  real keys and gets an ordinary output (the package does not zero it, unlike
  x-transformers). Ignore those rows downstream (``SequenceClassifier`` pools over real
  tokens only) or zero them with ``out * keep[..., None]``.
- **One dtype rule for modules.** A module's float input must have the dtype (and device) of
  the module's floating-point parameters, else ``TypeError`` (``ValueError`` for the device)
  naming both and the cast to make (``module.to(x.dtype)``); modules never cast silently.
  Inside, half precision is computed as in the functions: attention in float32, cast back.
  Modules without parameters (``RotaryEmbedding``, the sinusoidal encoding) take any float
  dtype; the sinusoidal table is built in float64 for float64 inputs.
- **float64** paths are computed in float64 throughout (slopes, tables, angles), so that they
  agree with an exact reference to float64 rounding.
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
