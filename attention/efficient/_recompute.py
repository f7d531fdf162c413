"""The two steps of a FlashAttention-style backward that recomputes the attention weights.

A forward that keeps only its inputs, its output and each row's log-sum-exp ``lse`` can
rebuild the weights exactly in the backward as ``exp(scores - lse)``: O(n) saved per head
instead of the O(n·keys) weights. Used by the sliding-window and block-sparse variants (the
flash loop of :mod:`attention.efficient.flash` has its own, in base 2 and in place).
"""

from __future__ import annotations

import torch

Tensor = torch.Tensor


def probabilities(scores: Tensor, lse: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Softmax weights of ``scores (..., keys)`` (``-inf`` = masked), in place, and the row
    log-sum-exp ``(..., 1)`` they were normalised with (computed unless ``lse`` is given).

    One exponential pass either way (``torch.logsumexp`` would take one of its own). A row
    with no key it may attend gets ``lse = +inf`` rather than ``-inf``, so that the backward's
    ``exp(scores - lse)`` gives its zero weights again, where ``-inf - (-inf)`` would be NaN.
    ``scores`` is overwritten with the weights.
    """
    if lse is not None:
        return scores.sub_(lse).exp_(), lse
    if scores.shape[-1] == 0:  # no keys at all: nothing to weigh
        return scores, scores.new_full((*scores.shape[:-1], 1), float("inf"))
    row_max = scores.amax(dim=-1, keepdim=True)  # (..., 1)
    row_max = row_max.masked_fill_(row_max == float("-inf"), 0.0)  # a row with no key
    p = scores.sub_(row_max).exp_()  # (..., keys), unnormalised
    total = p.sum(dim=-1, keepdim=True)  # (..., 1); 0 for a row with no key
    p = p.div_(total.masked_fill(total == 0, 1.0))  # that row stays all zeros
    lse = row_max.add_(total.log())  # (..., 1); -inf for a row with no key...
    return p, lse.masked_fill_(lse == float("-inf"), float("inf"))  # ...+inf, see above


def softmax_backward(p: Tensor, d_p: Tensor, d_out: Tensor, out: Tensor) -> Tensor:
    """Gradient of the scores from the weights ``p (..., keys)``, the gradient of the weights
    ``d_p = d_out · Vᵀ (..., keys)``, and ``d_out``, ``out`` ``(..., Ev)``:
    ``p ∘ (d_p - rowsum(d_out ∘ out))`` (``rowsum(p ∘ d_p)`` computed as the cheaper
    ``rowsum(d_out ∘ out)``). Zero wherever ``p`` is."""
    delta = (d_out * out).sum(dim=-1, keepdim=True)  # (..., 1)
    return p * (d_p - delta)  # (..., keys)
