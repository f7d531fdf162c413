"""The efficient kernels as ``attn_fn``: callables that replace the reference attention inside
:class:`attention.heads.MultiHeadAttention` and the blocks built on it
(``SequenceClassifier(..., attn_fn=SlidingWindowAttnFn(2, 2))``).

Every adapter is called as ``attn_fn(query, key, value, mask=None, *, causal=False)`` with
``query``, ``key`` ``(B, H, L, E)`` and ``value`` ``(B, H, L, Ev)``, returns ``(B, H, L, Ev)``,
and calls its kernel with the arguments it was built with. The kernels take no mask: an
adapter accepts ``mask=None`` or an all-``True`` bool mask (what ``SequenceClassifier`` passes
for a batch without padding), and refuses ``causal=True``.

``adapter.allowed(seq_len)`` is the equivalent dense mask ``(L, L)``, bool, ``True`` = may
attend: the adapter computes ``scaled_dot_product_attention(query, key, value, allowed)``
without the ``L × L`` table. :class:`MaskedAttnFn` computes exactly that, densely.

| adapter | kernel |
| --- | --- |
| :class:`SlidingWindowAttnFn` | :func:`~.sliding_window.sliding_window_attention` |
| :class:`BigBirdAttnFn` | :func:`~.block_sparse.block_sparse_attention` on a BigBird layout |
| :class:`LinearAttnFn` | :func:`~.linear.linear_attention` (non-causal) |
| :class:`MaskedAttnFn` | torch's fused attention under another adapter's ``allowed`` mask |
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from .._checks import check_positive_int, check_tensor
from ..masks import block_layout_to_mask, sliding_window_mask
from .block_sparse import bigbird_layout, block_sparse_attention
from .linear import linear_attention
from .sliding_window import sliding_window_attention

Tensor = torch.Tensor


def _no_mask(name: str, mask: Tensor | None, causal: bool) -> None:
    """The wrapped kernels take no mask: accept only "no mask" or an all-True padding mask
    (what ``SequenceClassifier`` passes for sequences without padding)."""
    if causal:
        raise ValueError(f"{name} is bidirectional here: expected causal=False, got True")
    if mask is None:
        return
    check_tensor("mask", mask)
    if mask.dtype != torch.bool:
        raise TypeError(f"{name} takes no additive mask: expected None or bool, got {mask.dtype}")
    if not bool(mask.all()):
        raise ValueError(
            f"{name} takes no mask: expected None or an all-True mask (no padding), got a mask "
            f"that hides {int((~mask).sum())} entries"
        )


class SlidingWindowAttnFn:
    """``attn_fn``: sliding-window attention, query ``i`` sees keys ``i - left .. i + right``,
    plus Longformer global tokens (``global_tokens``; negative values count from the end,
    ``(-1,)`` makes the last token global). Wraps
    :func:`attention.efficient.sliding_window.sliding_window_attention`."""

    def __init__(self, left: int, right: int, global_tokens: Sequence[int] = ()) -> None:
        self.left = check_positive_int("left", left, allow_zero=True)
        self.right = check_positive_int("right", right, allow_zero=True)
        for p in global_tokens:
            if isinstance(p, bool) or not isinstance(p, int):
                raise TypeError(f"global_tokens must hold ints, got {global_tokens!r}")
        self.global_tokens = tuple(global_tokens)

    def _globals(self, seq_len: int) -> Tensor | None:
        if not self.global_tokens:
            return None
        for p in self.global_tokens:
            if not -seq_len <= p < seq_len:
                raise ValueError(f"global position {p} is outside a sequence of length {seq_len}")
        return torch.tensor(sorted({p % seq_len for p in self.global_tokens}))  # (G,)

    def __call__(
        self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None, *,
        causal: bool = False,
    ) -> Tensor:  # fmt: skip
        """``(B, H, L, E), (B, H, L, E), (B, H, L, Ev)`` → ``(B, H, L, Ev)``."""
        _no_mask("SlidingWindowAttnFn", mask, causal)
        g = self._globals(query.shape[-2])
        return sliding_window_attention(
            query, key, value, left=self.left, right=self.right, global_tokens=g
        )  # (B, H, L, Ev)

    def allowed(self, seq_len: int) -> Tensor:
        """The equivalent dense mask ``(L, L)``, bool, ``True`` = may attend."""
        band = sliding_window_mask(seq_len, left=self.left, right=self.right)  # (L, L)
        g = self._globals(seq_len)
        if g is None:
            return band
        is_global = torch.zeros(seq_len, dtype=torch.bool)
        is_global[g] = True
        return band | is_global[:, None] | is_global[None, :]  # (L, L)

    def __repr__(self) -> str:
        extra = f", global_tokens={self.global_tokens}" if self.global_tokens else ""
        return f"SlidingWindowAttnFn(left={self.left}, right={self.right}{extra})"


class BigBirdAttnFn:
    """``attn_fn``: block-sparse attention on a BigBird layout (window, global and random
    blocks; :func:`attention.efficient.block_sparse.bigbird_layout`). The random blocks are
    drawn once per number of blocks from a generator seeded with ``seed``, so every call at a
    given length uses the same layout."""

    def __init__(
        self, block_size: int, *, n_window: int = 1, n_global: int = 1, n_random: int = 1,
        seed: int = 0,
    ) -> None:  # fmt: skip
        self.block_size = check_positive_int("block_size", block_size)
        self.n_window = check_positive_int("n_window", n_window, allow_zero=True)
        self.n_global = check_positive_int("n_global", n_global, allow_zero=True)
        self.n_random = check_positive_int("n_random", n_random, allow_zero=True)
        self.seed = seed
        self._layouts: dict[int, Tensor] = {}

    def layout(self, seq_len: int) -> Tensor:
        """The block layout ``(n_blocks, n_blocks)``, bool, ``True`` = the query block may attend
        the key block, used at length ``seq_len``."""
        n_blocks = -(-check_positive_int("seq_len", seq_len) // self.block_size)
        if n_blocks not in self._layouts:
            self._layouts[n_blocks] = bigbird_layout(
                n_blocks,
                n_window=self.n_window,
                n_global=self.n_global,
                n_random=self.n_random,
                generator=torch.Generator().manual_seed(self.seed),
            )
        return self._layouts[n_blocks]

    def __call__(
        self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None, *,
        causal: bool = False,
    ) -> Tensor:  # fmt: skip
        """``(B, H, L, E), (B, H, L, E), (B, H, L, Ev)`` → ``(B, H, L, Ev)``."""
        _no_mask("BigBirdAttnFn", mask, causal)
        layout = self.layout(query.shape[-2]).to(query.device)
        return block_sparse_attention(
            query, key, value, layout, block_size=self.block_size
        )  # (B, H, L, Ev)

    def allowed(self, seq_len: int) -> Tensor:
        """The equivalent dense mask ``(L, L)``, bool, ``True`` = may attend."""
        return block_layout_to_mask(self.layout(seq_len), self.block_size, seq_len, seq_len)

    def __repr__(self) -> str:
        return (
            f"BigBirdAttnFn(block_size={self.block_size}, n_window={self.n_window}, "
            f"n_global={self.n_global}, n_random={self.n_random})"
        )


class LinearAttnFn:
    """``attn_fn``: kernelised linear attention with ``φ(x) = elu(x) + 1``, non-causal
    (:func:`attention.efficient.linear.linear_attention`). Every query sees every key, but
    through a feature map instead of a softmax: the weights ``φ(q)·φ(k) / Σ_j φ(q)·φ(k_j)``
    form a matrix of rank at most the head width."""

    def __init__(self, eps: float = 1e-6) -> None:
        self.eps = float(eps)

    def __call__(
        self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None, *,
        causal: bool = False,
    ) -> Tensor:  # fmt: skip
        """``(B, H, L, E), (B, H, L, E), (B, H, L, Ev)`` → ``(B, H, L, Ev)``."""
        _no_mask("LinearAttnFn", mask, causal)
        return linear_attention(query, key, value, causal=False, eps=self.eps)  # (B, H, L, Ev)

    def allowed(self, seq_len: int) -> Tensor:
        """Every key is reachable: ``(L, L)`` all ``True`` (= may attend)."""
        return torch.ones(check_positive_int("seq_len", seq_len), seq_len, dtype=torch.bool)

    def __repr__(self) -> str:
        return "LinearAttnFn()"


class MaskedAttnFn:
    """``attn_fn``: dense attention (torch's fused kernel) restricted by another adapter's
    may-attend mask, ``variant.allowed(L)`` (bool, ``True`` = may attend). It computes the same
    function as the variant's own kernel (``tests/attention/test_adapters.py`` checks the
    kernels against exactly this), at dense cost: for experiments about *what a pattern can
    learn*, where the efficient kernel's Python loops would only slow training down."""

    def __init__(self, variant) -> None:
        if not callable(getattr(variant, "allowed", None)):
            raise TypeError(
                f"variant must have an allowed(seq_len) method, got {type(variant).__name__}"
            )
        self.variant = variant
        self._masks: dict[int, Tensor] = {}

    def __call__(
        self, query: Tensor, key: Tensor, value: Tensor, mask: Tensor | None = None, *,
        causal: bool = False,
    ) -> Tensor:  # fmt: skip
        """``(B, H, L, E), (B, H, L, E), (B, H, L, Ev)`` → ``(B, H, L, Ev)``."""
        _no_mask("MaskedAttnFn", mask, causal)
        n = query.shape[-2]
        if n not in self._masks:
            self._masks[n] = self.variant.allowed(n)  # (L, L)
        allowed = self._masks[n].to(query.device)  # (L, L)
        return torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=allowed
        )  # (B, H, L, Ev)

    def allowed(self, seq_len: int) -> Tensor:
        """The variant's mask ``(L, L)``, bool, ``True`` = may attend."""
        return self.variant.allowed(seq_len)

    def __repr__(self) -> str:
        return f"MaskedAttnFn({self.variant!r})"
