"""Independent references the tests compare the library against (not library API).

:func:`naive_attention_float64` is the textbook formula in float64, written with torch's own
``softmax`` and nothing from ``attention``: the reference every attention variant is tested
against.
"""

from __future__ import annotations

import math

import torch

Tensor = torch.Tensor


def naive_attention_float64(
    query: Tensor, key: Tensor, value: Tensor, allowed: Tensor | None = None
) -> Tensor:
    """The textbook formula in float64 with an explicit per-row loop-free mask.

    Used by tests as an independent reference. ``allowed`` is a bool mask broadcastable to
    ``(B, H, Lq, Lk)``; rows with no allowed key give zeros. Returns float64.
    """
    q, k, v = (t.double() for t in (query, key, value))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    w = torch.softmax(scores, dim=-1)
    w = torch.nan_to_num(w, nan=0.0)
    return w @ v
