"""Attention heads: splitting a model's width into heads, one head, and multi-head attention.

Layout: token representations ``x`` are ``(B, L, d_model)``; per-head tensors are
``(B, H, L, d_head)``. Boolean masks mean ``True`` = may attend (torch SDPA's polarity) and
broadcast to ``(B, H, Lq, Lk)``; float masks are additive biases. ``nn.MultiheadAttention``
uses the opposite polarity: convert its masks with ``attention.masks.from_key_padding_mask``
and ``attention.masks.from_torch_attn_mask``.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ._checks import (
    check_divisible,
    check_float,
    check_mask,
    check_positive_int,
    check_probability,
    check_rank,
    check_tokens,
)
from .functional import scaled_dot_product_attention

Tensor = torch.Tensor

# attn_fn(q (B, H, Lq, E), k (B, H, Lk, E), v (B, H, Lk, Ev), mask=None, causal=False)
#   -> (B, H, Lq, Ev)
AttnFn = Callable[..., Tensor]


def split_heads(x: Tensor, *, num_heads: int) -> Tensor:
    """``(B, L, D)`` → ``(B, H, L, D // H)``: head ``h`` gets features ``h*Dh .. h*Dh+Dh-1``.

    The order matters: view ``(B, L, H, Dh)`` first (each token's features cut into H
    contiguous slices), then swap L and H. Viewing straight to ``(B, H, L, Dh)`` would mix
    tokens across heads.
    """
    check_float("x", x)
    check_rank("x", x, 3, "[batch, seq, d_model]")
    num_heads = check_positive_int("num_heads", num_heads)
    b, l, d = x.shape
    check_divisible("d_model (last dim of x)", d, "num_heads", num_heads)
    return x.view(b, l, num_heads, d // num_heads).transpose(1, 2)  # (B, H, L, Dh)


def merge_heads(x: Tensor) -> Tensor:
    """``(B, H, L, Dh)`` → ``(B, L, H * Dh)``, the inverse of :func:`split_heads`."""
    check_float("x", x)
    check_rank("x", x, 4, "[batch, heads, seq, d_head]")
    b, h, l, dh = x.shape
    return x.transpose(1, 2).reshape(b, l, h * dh)  # (B, L, H*Dh)


class SelfAttention(nn.Module):
    """One attention head, the smallest complete version: Q, K, V projections, no output one.

    ``SelfAttention(d_model, head_dim)`` maps ``x (B, L, d_model)`` to ``(B, L, head_dim)``
    (``head_dim`` is the paper's ``d_k``; default ``d_model``).
    """

    def __init__(self, d_model: int, head_dim: int | None = None) -> None:
        super().__init__()
        self.d_model = check_positive_int("d_model", d_model)
        self.head_dim = d_model if head_dim is None else check_positive_int("head_dim", head_dim)
        self.w_q = nn.Linear(self.d_model, self.head_dim, bias=False)
        self.w_k = nn.Linear(self.d_model, self.head_dim, bias=False)
        self.w_v = nn.Linear(self.d_model, self.head_dim, bias=False)

    def forward(
        self,
        x: Tensor,
        *,
        mask: Tensor | None = None,
        causal: bool = False,
        need_weights: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Args:
            x: ``(B, L, d_model)``.
            mask: bool (``True`` = may attend) or additive float, broadcastable to
                ``(B, 1, L, L)`` (e.g. ``causal_mask(L)`` or ``padding_mask(lengths)``).
            causal: forbid attending to later positions (ANDed with ``mask``).
            need_weights: also return the weights ``(B, L, L)``.

        Returns ``(B, L, head_dim)`` (and the weights).
        """
        check_tokens("x", x, self.d_model, dtype=self.w_q.weight.dtype)
        b, l, _ = x.shape
        check_mask(mask, (b, 1, l, l), device=x.device)
        q = self.w_q(x).unsqueeze(1)  # (B, 1, L, d_k): a single head
        k = self.w_k(x).unsqueeze(1)  # (B, 1, L, d_k)
        v = self.w_v(x).unsqueeze(1)  # (B, 1, L, d_k)
        out, weights = scaled_dot_product_attention(
            q, k, v, mask, causal=causal, need_weights=True
        )  # (B, 1, L, d_k), (B, 1, L, L)
        out = out.squeeze(1)  # (B, L, d_k)
        return (out, weights.squeeze(1)) if need_weights else out


class MultiHeadAttention(nn.Module):
    """Multi-head attention, batch-first, with MQA/GQA, cross-attention, RoPE and a swappable core.

    Args:
        d_model: model width ``D``; split into ``num_heads`` heads of ``D // num_heads``.
        num_heads: query heads ``H``.
        num_kv_heads: key/value heads ``H_kv`` (default ``H``). ``1`` is multi-query attention,
            ``1 < H_kv < H`` grouped-query attention; query head ``h`` reads key/value head
            ``h // (H // H_kv)``. The K and V projections are ``D → H_kv * d_head``.
        dropout: dropout on the attention weights during training (as ``nn.MultiheadAttention``).
        bias: biases on the four projections.
        rotary: a ``RotaryEmbedding`` applied to q and k after the head split (positions start at
            0 for both the queries and the keys).
        attn_fn: replaces the reference attention: ``attn_fn(q, k, v, mask=None, causal=False)
            -> out`` with q, k, v ``(B, H, L, d_head)``; key/value heads are repeated to ``H``
            before the call, so ``attn_fn`` need not know about GQA. It gets no dropout and
            cannot return weights.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        num_kv_heads: int | None = None,
        dropout: float = 0.0,
        bias: bool = True,
        rotary: nn.Module | None = None,
        attn_fn: AttnFn | None = None,
    ) -> None:
        super().__init__()
        self.d_model = check_positive_int("d_model", d_model)
        self.num_heads = check_positive_int("num_heads", num_heads)
        check_divisible("d_model", d_model, "num_heads", num_heads)
        kv = num_heads if num_kv_heads is None else num_kv_heads
        self.num_kv_heads = check_positive_int("num_kv_heads", kv)
        check_divisible("num_heads", num_heads, "num_kv_heads", kv)
        self.dropout = check_probability("dropout", dropout)
        if attn_fn is not None and not callable(attn_fn):
            raise TypeError(f"attn_fn must be callable or None, got {type(attn_fn).__name__}")
        if rotary is not None and not isinstance(rotary, nn.Module):
            raise TypeError(
                f"rotary must be a RotaryEmbedding module or None, got {type(rotary).__name__}"
            )
        self.head_dim = d_model // num_heads
        rot_dim = getattr(rotary, "head_dim", self.head_dim)
        if rot_dim != self.head_dim:
            raise ValueError(
                f"rotary.head_dim must equal d_model // num_heads = {self.head_dim}, got {rot_dim}"
            )
        self.rotary = rotary
        self.attn_fn = attn_fn
        kv_width = self.num_kv_heads * self.head_dim
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, kv_width, bias=bias)
        self.v_proj = nn.Linear(d_model, kv_width, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(
        self,
        x: Tensor,
        context: Tensor | None = None,
        *,
        mask: Tensor | None = None,
        causal: bool = False,
        need_weights: bool = False,
        average_attn_weights: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Args:
            x: queries' tokens ``(B, Lq, D)``.
            context: keys' and values' tokens ``(B, Lk, D)`` for cross-attention; default ``x``.
            mask: bool (``True`` = may attend) or additive float, broadcastable to
                ``(B, H, Lq, Lk)``; a key padding mask is ``(B, 1, 1, Lk)``.
            causal: forbid query i from attending keys j > i (ANDed with ``mask``).
            need_weights: also return the attention weights (before dropout): per head
                ``(B, H, Lq, Lk)``, or ``(B, Lq, Lk)`` averaged over heads with
                ``average_attn_weights=True`` (torch's name).

        Returns ``(B, Lq, D)`` (and the weights). A query with no allowed key gets a zero
        attention output (then the output projection's bias). A padding mask acts on keys
        only: a query at a padded position still attends the real keys and gets an ordinary
        output, which is not zeroed (ignore those rows downstream, or multiply by the keep
        mask: ``out * keep[..., None]``).
        """
        check_tokens("x", x, self.d_model, dtype=self.q_proj.weight.dtype)
        if context is None:
            context = x
        else:
            check_tokens("context", context, self.d_model, dtype=self.q_proj.weight.dtype)
            if context.shape[0] != x.shape[0]:
                raise ValueError(
                    f"context must have the batch size of x ({x.shape[0]}), got shape "
                    f"{tuple(context.shape)}"
                )
        b, lq, _ = x.shape
        lk = context.shape[1]
        check_mask(mask, (b, self.num_heads, lq, lk), device=x.device)
        if need_weights and self.attn_fn is not None:
            raise ValueError(
                "need_weights=True needs the reference attention, but attn_fn is set (an "
                "efficient kernel does not return weights); expected need_weights=False"
            )

        q = split_heads(self.q_proj(x), num_heads=self.num_heads)  # (B, H, Lq, Dh)
        k = split_heads(self.k_proj(context), num_heads=self.num_kv_heads)  # (B, H_kv, Lk, Dh)
        v = split_heads(self.v_proj(context), num_heads=self.num_kv_heads)  # (B, H_kv, Lk, Dh)
        if self.rotary is not None:
            q = self.rotary(q)  # (B, H, Lq, Dh)
            k = self.rotary(k)  # (B, H_kv, Lk, Dh)

        weights = None
        if self.attn_fn is not None:
            group = self.num_heads // self.num_kv_heads
            k = k.repeat_interleave(group, dim=1)  # (B, H, Lk, Dh)
            v = v.repeat_interleave(group, dim=1)  # (B, H, Lk, Dh)
            out = self.attn_fn(q, k, v, mask=mask, causal=causal)  # (B, H, Lq, Dh)
        else:
            out, weights = scaled_dot_product_attention(
                q,
                k,
                v,
                mask,
                causal=causal,
                dropout_p=self.dropout,
                training=self.training,
                enable_gqa=self.num_kv_heads != self.num_heads,
                need_weights=True,
            )  # (B, H, Lq, Dh), (B, H, Lq, Lk)
        out = self.out_proj(merge_heads(out))  # (B, Lq, D)
        if not need_weights:
            return out
        if average_attn_weights:
            weights = weights.mean(dim=1)  # (B, Lq, Lk)
        return out, weights

    # --- exact conversion to and from torch.nn.MultiheadAttention ---------------------------

    @classmethod
    def from_torch(cls, mha: nn.MultiheadAttention) -> MultiHeadAttention:
        """Copy the weights of an ``nn.MultiheadAttention``; the result computes the same thing
        (and is in the same train/eval mode).

        torch packs W_Q, W_K, W_V into one ``in_proj_weight (3D, D)``; it is split in that
        order. Refused (``ValueError``): ``kdim``/``vdim`` different from ``embed_dim``,
        ``add_bias_kv`` and ``add_zero_attn``, which this module does not have. torch's masks
        use the opposite polarity: pass ``from_key_padding_mask(key_padding_mask)``.
        """
        if not isinstance(mha, nn.MultiheadAttention):
            raise TypeError(f"mha must be a torch.nn.MultiheadAttention, got {type(mha).__name__}")
        if not mha._qkv_same_embed_dim:
            raise ValueError(
                f"mha must have kdim == vdim == embed_dim ({mha.embed_dim}) to convert, got "
                f"kdim={mha.kdim}, vdim={mha.vdim}"
            )
        if mha.bias_k is not None or mha.add_zero_attn:
            raise ValueError(
                "mha must have add_bias_kv=False and add_zero_attn=False to convert, got "
                f"add_bias_kv={mha.bias_k is not None}, add_zero_attn={mha.add_zero_attn}"
            )
        has_bias = mha.in_proj_bias is not None
        w = mha.in_proj_weight
        new = cls(mha.embed_dim, mha.num_heads, dropout=mha.dropout, bias=has_bias)
        new.to(device=w.device, dtype=w.dtype)
        d = mha.embed_dim
        with torch.no_grad():
            for i, proj in enumerate((new.q_proj, new.k_proj, new.v_proj)):
                proj.weight.copy_(w[i * d : (i + 1) * d])
                if has_bias:
                    proj.bias.copy_(mha.in_proj_bias[i * d : (i + 1) * d])
            new.out_proj.weight.copy_(mha.out_proj.weight)
            if has_bias:
                new.out_proj.bias.copy_(mha.out_proj.bias)
        return new.train(mha.training)

    def to_torch(self) -> nn.MultiheadAttention:
        """An ``nn.MultiheadAttention(batch_first=True)`` with these weights (exact copy).

        Refused (``ValueError``): GQA/MQA (``num_kv_heads != num_heads``) and ``rotary``, which
        torch's module cannot express. ``attn_fn`` is not carried over (torch uses its own).
        """
        if self.num_kv_heads != self.num_heads:
            raise ValueError(
                f"to_torch needs num_kv_heads == num_heads ({self.num_heads}), got "
                f"num_kv_heads={self.num_kv_heads}: nn.MultiheadAttention has no GQA/MQA"
            )
        if self.rotary is not None:
            raise ValueError("to_torch needs rotary=None: nn.MultiheadAttention has no RoPE")
        w = self.q_proj.weight
        has_bias = self.q_proj.bias is not None
        mha = nn.MultiheadAttention(
            self.d_model,
            self.num_heads,
            dropout=self.dropout,
            bias=has_bias,
            batch_first=True,
            device=w.device,
            dtype=w.dtype,
        )
        with torch.no_grad():
            projs = (self.q_proj, self.k_proj, self.v_proj)
            mha.in_proj_weight.copy_(torch.cat([p.weight for p in projs]))  # (3D, D)
            if has_bias:
                mha.in_proj_bias.copy_(torch.cat([p.bias for p in projs]))  # (3D,)
                mha.out_proj.bias.copy_(self.out_proj.bias)
            mha.out_proj.weight.copy_(self.out_proj.weight)
        return mha.train(self.training)
