"""Transformer blocks built on :class:`attention.heads.MultiHeadAttention`.

Token representations are ``(B, L, d_model)``. Masks follow the book's polarity: bool
``True`` = may attend, broadcastable to ``(B, H, Lq, Lk)`` (a key padding mask is
``(B, 1, 1, L)``, see ``attention.masks.padding_mask``); float masks are additive biases.
Small on purpose: the chapters train these on two CPU cores.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import (
    check_choice,
    check_divisible,
    check_module_input,
    check_positive_int,
    check_probability,
    check_rank,
    check_tensor,
    check_tokens,
)
from .heads import AttnFn, MultiHeadAttention
from .masks import padding_mask, padding_mask_from_keep
from .positional import LearnedPositionalEmbedding, RotaryEmbedding, SinusoidalPositionalEncoding

Tensor = torch.Tensor

ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}
POSITIONAL_KINDS = ("sinusoidal", "learned", "rope", "none")
POOLINGS = ("mean", "cls", "last")


def _self_attention_sublayer(
    attn: MultiHeadAttention, h: Tensor, mask: Tensor | None, causal: bool, need_weights: bool
) -> tuple[Tensor, Tensor | None]:
    """``attn(h)`` on ``h (B, L, D)``, and its per-head weights ``(B, H, L, L)`` when asked
    (else ``None``)."""
    if need_weights:
        return attn(h, mask=mask, causal=causal, need_weights=True)
    return attn(h, mask=mask, causal=causal), None


class FeedForward(nn.Module):
    """Position-wise MLP ``linear2(dropout(activation(linear1(x))))``: ``(B, L, D) → (B, L, D)``.

    Same layout as the feed-forward part of ``nn.TransformerEncoderLayer`` (whose second dropout,
    on the block's output, lives in the layer).
    """

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        *,
        dropout: float = 0.0,
        activation: str = "relu",
        bias: bool = True,
    ) -> None:
        super().__init__()
        check_positive_int("d_model", d_model)
        check_positive_int("d_ff", d_ff)
        self.d_model = d_model
        self.activation = check_choice("activation", activation, tuple(ACTIVATIONS))
        self.linear1 = nn.Linear(d_model, d_ff, bias=bias)
        self.linear2 = nn.Linear(d_ff, d_model, bias=bias)
        self.dropout = nn.Dropout(check_probability("dropout", dropout))

    def forward(self, x: Tensor) -> Tensor:
        check_module_input("x", x, self)
        if x.dim() < 1 or x.shape[-1] != self.d_model:
            raise ValueError(
                f"x must have last dim d_model={self.d_model}, expected shape (..., "
                f"{self.d_model}), got {tuple(x.shape)}"
            )
        hidden = ACTIVATIONS[self.activation](self.linear1(x))  # (B, L, d_ff)
        return self.linear2(self.dropout(hidden))  # (B, L, D)


class EncoderLayer(nn.Module):
    """Self-attention + feed-forward, each wrapped in a residual connection and a LayerNorm.

    Post-LN (the 2017 paper, torch's default): ``x = norm1(x + drop(attn(x)))``,
    ``x = norm2(x + drop(ff(x)))``. Pre-LN (``pre_ln=True``, easier to train deep):
    ``x = x + drop(attn(norm1(x)))``, ``x = x + drop(ff(norm2(x)))``. ``dropout`` is used on the
    attention weights, inside the MLP and on both residual branches, as in
    ``nn.TransformerEncoderLayer``.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        *,
        dropout: float = 0.0,
        pre_ln: bool = False,
        activation: str = "relu",
        attn_fn: AttnFn | None = None,
        rotary: nn.Module | None = None,
        norm_eps: float = 1e-5,
        bias: bool = True,
    ) -> None:
        super().__init__()
        self.pre_ln = bool(pre_ln)
        self.self_attn = MultiHeadAttention(
            d_model, num_heads, dropout=dropout, bias=bias, rotary=rotary, attn_fn=attn_fn
        )
        self.ff = FeedForward(d_model, d_ff, dropout=dropout, activation=activation, bias=bias)
        self.norm1 = nn.LayerNorm(d_model, eps=norm_eps, bias=bias)
        self.norm2 = nn.LayerNorm(d_model, eps=norm_eps, bias=bias)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(
        self,
        x: Tensor,
        *,
        mask: Tensor | None = None,
        causal: bool = False,
        need_weights: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """``x (B, L, D)`` → ``(B, L, D)``; with ``need_weights`` also the per-head attention
        weights ``(B, H, L, L)``. ``mask``: bool ``True`` = may attend, broadcastable to
        ``(B, H, L, L)``."""
        check_tokens("x", x, self.self_attn.d_model, dtype=self.norm1.weight.dtype)
        if self.pre_ln:
            a, weights = _self_attention_sublayer(
                self.self_attn, self.norm1(x), mask, causal, need_weights
            )  # (B, L, D)
            x = x + self.dropout1(a)  # (B, L, D)
            x = x + self.dropout2(self.ff(self.norm2(x)))  # (B, L, D)
        else:
            a, weights = _self_attention_sublayer(
                self.self_attn, x, mask, causal, need_weights
            )  # (B, L, D)
            x = self.norm1(x + self.dropout1(a))  # (B, L, D)
            x = self.norm2(x + self.dropout2(self.ff(x)))  # (B, L, D)
        return (x, weights) if need_weights else x

    @classmethod
    def from_torch(cls, layer: nn.TransformerEncoderLayer) -> EncoderLayer:
        """Copy an ``nn.TransformerEncoderLayer`` (relu or exact gelu); same computation.

        torch's masks use the opposite polarity: pass
        ``from_key_padding_mask(src_key_padding_mask)`` as ``mask``.
        """
        if not isinstance(layer, nn.TransformerEncoderLayer):
            raise TypeError(
                f"layer must be a torch.nn.TransformerEncoderLayer, got {type(layer).__name__}"
            )
        act = layer.activation
        if act is F.relu or isinstance(act, nn.ReLU):
            activation = "relu"
        elif act is F.gelu or (isinstance(act, nn.GELU) and act.approximate == "none"):
            activation = "gelu"
        else:
            raise ValueError(
                f"layer.activation must be relu or (exact) gelu to convert, got {act!r}"
            )
        has_bias = layer.linear1.bias is not None
        attn = MultiHeadAttention.from_torch(layer.self_attn)
        w = layer.linear1.weight
        new = cls(
            attn.d_model,
            attn.num_heads,
            layer.linear1.out_features,
            dropout=layer.dropout.p,
            pre_ln=layer.norm_first,
            activation=activation,
            norm_eps=layer.norm1.eps,
            bias=has_bias,
        ).to(device=w.device, dtype=w.dtype)
        new.self_attn = attn
        new.train(layer.training)
        pairs = [
            (new.ff.linear1, layer.linear1),
            (new.ff.linear2, layer.linear2),
            (new.norm1, layer.norm1),
            (new.norm2, layer.norm2),
        ]
        with torch.no_grad():
            for mine, theirs in pairs:
                mine.weight.copy_(theirs.weight)
                if has_bias:
                    mine.bias.copy_(theirs.bias)
        return new


class Encoder(nn.Module):
    """A stack of :class:`EncoderLayer`; with ``pre_ln`` a final LayerNorm (the residual stream
    is otherwise never normalised). ``forward(x (B, L, D), *, mask, causal) -> (B, L, D)``."""

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        *,
        num_layers: int,
        dropout: float = 0.0,
        pre_ln: bool = False,
        activation: str = "relu",
        attn_fn: AttnFn | None = None,
        rotary: nn.Module | None = None,
        norm_eps: float = 1e-5,
    ) -> None:
        super().__init__()
        check_positive_int("num_layers", num_layers)
        self.layers = nn.ModuleList(
            EncoderLayer(
                d_model,
                num_heads,
                d_ff,
                dropout=dropout,
                pre_ln=pre_ln,
                activation=activation,
                attn_fn=attn_fn,
                rotary=rotary,
                norm_eps=norm_eps,
            )
            for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(d_model, eps=norm_eps) if pre_ln else None

    def forward(self, x: Tensor, *, mask: Tensor | None = None, causal: bool = False) -> Tensor:
        for layer in self.layers:
            x = layer(x, mask=mask, causal=causal)  # (B, L, D)
        return x if self.norm is None else self.norm(x)


class SequenceClassifier(nn.Module):
    """Token ids ``(B, L)`` → class logits ``(B, num_classes)`` with a Transformer encoder.

    Args:
        positional: ``"sinusoidal"`` or ``"learned"`` (added to the embeddings), ``"rope"``
            (rotary embedding inside every attention layer) or ``"none"`` (the model is then
            blind to order).
        pooling: ``"mean"`` over real tokens, ``"cls"`` (a learned token prepended at position
            0; sequences may then hold ``max_len - 1`` tokens) or ``"last"`` real token.
        max_len: the longest input (including the cls token).

    ``forward(tokens, *, lengths=None, keep=None, causal=False)``: padding is given by
    ``lengths (B,)`` (real tokens first) or ``keep (B, L)`` bool (``True`` = real token), never
    both; padded keys are masked out of attention and out of the pooling.
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        *,
        d_model: int,
        num_heads: int,
        num_layers: int,
        d_ff: int,
        max_len: int,
        positional: str = "sinusoidal",
        pooling: str = "mean",
        pre_ln: bool = True,
        attn_fn: AttnFn | None = None,
        dropout: float = 0.0,
        activation: str = "relu",
    ) -> None:
        super().__init__()
        self.vocab_size = check_positive_int("vocab_size", vocab_size)
        check_positive_int("num_classes", num_classes)
        self.max_len = check_positive_int("max_len", max_len)
        self.positional = check_choice("positional", positional, POSITIONAL_KINDS)
        self.pooling = check_choice("pooling", pooling, POOLINGS)
        check_positive_int("num_heads", num_heads)
        self.embed = nn.Embedding(vocab_size, d_model)
        self.cls_token = nn.Parameter(torch.randn(d_model) * 0.02) if pooling == "cls" else None
        self.pos = None
        rotary = None
        if positional == "sinusoidal":
            self.pos = SinusoidalPositionalEncoding(d_model, max_len=max_len)
        elif positional == "learned":
            self.pos = LearnedPositionalEmbedding(d_model, max_len=max_len)
            # nn.Embedding starts tokens at N(0, 1); the table's BERT-style N(0, 0.02) would
            # leave positions ~50x weaker than tokens and slow to learn. Match the scales.
            nn.init.normal_(self.pos.weight, std=1.0)
        elif positional == "rope":
            check_divisible("d_model", d_model, "num_heads", num_heads)
            if (d_model // num_heads) % 2:
                raise ValueError(
                    f"positional='rope' needs an even head dim d_model // num_heads, got "
                    f"{d_model} // {num_heads} = {d_model // num_heads}"
                )
            rotary = RotaryEmbedding(d_model // num_heads)
        self.dropout = nn.Dropout(check_probability("dropout", dropout))
        self.encoder = Encoder(
            d_model,
            num_heads,
            d_ff,
            num_layers=num_layers,
            dropout=dropout,
            pre_ln=pre_ln,
            activation=activation,
            attn_fn=attn_fn,
            rotary=rotary,
        )
        self.head = nn.Linear(d_model, num_classes)

    def _keep_mask(self, tokens: Tensor, lengths: Tensor | None, keep: Tensor | None) -> Tensor:
        """``(B, L)`` bool, ``True`` = real token, validated."""
        b, l = tokens.shape
        if lengths is not None and keep is not None:
            raise ValueError("pass lengths or keep, not both (got both)")
        if lengths is None and keep is None:
            if l == 0 and b > 0:  # mean pooling over no token would be 0 / 0 = NaN
                raise ValueError(
                    "every sequence needs at least one real token: got tokens of shape "
                    f"{tuple(tokens.shape)} (seq length 0)"
                )
            return torch.ones(b, l, dtype=torch.bool, device=tokens.device)
        if lengths is not None:
            check_tensor("lengths", lengths)
            if lengths.shape != (b,):
                raise ValueError(
                    f"lengths must have shape (batch,) = ({b},), got {tuple(lengths.shape)}"
                )
            integer = lengths.dtype != torch.bool and not (
                lengths.is_floating_point() or lengths.is_complex()
            )  # other dtypes are refused by padding_mask
            if integer and lengths.numel() and int(lengths.max()) > l:
                raise ValueError(
                    f"lengths must be <= the sequence length of tokens ({l}), got a length of "
                    f"{int(lengths.max())}"
                )
            keep = padding_mask(lengths, l, device=tokens.device)[:, 0, 0, :]  # (B, L)
        else:
            keep = padding_mask_from_keep(keep)[:, 0, 0, :]  # (B, L)
            if keep.shape != (b, l):
                raise ValueError(
                    f"keep must have the shape of tokens ({b}, {l}), got {tuple(keep.shape)}"
                )
        if not bool(keep.any(dim=1).all()):
            raise ValueError(
                "every sequence needs at least one real token: lengths must be >= 1 / every "
                "row of keep must hold a True"
            )
        return keep.to(tokens.device)

    def forward(
        self,
        tokens: Tensor,
        *,
        lengths: Tensor | None = None,
        keep: Tensor | None = None,
        causal: bool = False,
    ) -> Tensor:
        """``tokens (B, L)`` integer ids → logits ``(B, num_classes)``."""
        check_tensor("tokens", tokens)
        check_rank("tokens", tokens, 2, "[batch, seq]")
        if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
            raise TypeError(f"tokens must be an integer tensor of ids, got dtype {tokens.dtype}")
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= self.vocab_size):
            raise ValueError(
                f"tokens must be ids in [0, vocab_size={self.vocab_size}), got values in "
                f"[{int(tokens.min())}, {int(tokens.max())}]"
            )
        n_extra = 1 if self.cls_token is not None else 0
        if tokens.shape[1] + n_extra > self.max_len:
            raise ValueError(
                f"tokens has seq length {tokens.shape[1]}, expected at most max_len="
                f"{self.max_len}{' - 1 (the cls token takes a position)' if n_extra else ''}"
            )
        keep = self._keep_mask(tokens, lengths, keep)  # (B, L)

        x = self.embed(tokens)  # (B, L, D)
        if self.cls_token is not None:
            cls = self.cls_token.expand(x.shape[0], 1, -1)  # (B, 1, D)
            x = torch.cat([cls, x], dim=1)  # (B, 1+L, D)
            keep = torch.cat([keep.new_ones(keep.shape[0], 1), keep], dim=1)  # (B, 1+L)
        if self.pos is not None:
            x = self.pos(x)  # (B, L, D)
        x = self.dropout(x)
        x = self.encoder(x, mask=padding_mask_from_keep(keep), causal=causal)  # (B, L, D)

        if self.pooling == "cls":
            pooled = x[:, 0]  # (B, D)
        elif self.pooling == "last":
            positions = torch.arange(keep.shape[1], device=keep.device)  # (L,)
            last = torch.where(keep, positions, -1).amax(dim=1)  # (B,)
            pooled = x[torch.arange(x.shape[0], device=x.device), last]  # (B, D)
        else:
            w = keep.unsqueeze(-1).to(x.dtype)  # (B, L, 1)
            pooled = (x * w).sum(dim=1) / w.sum(dim=1)  # (B, D)
        return self.head(pooled)  # (B, num_classes)


class DecoderBlock(nn.Module):
    """GPT-style pre-LN block: ``x = x + drop(attn(norm1(x)))``, ``x = x + drop(ff(norm2(x)))``.

    Causal by default; ``causal=False`` removes the mask (the chapter that shows a decoder
    "cheating" by reading the token it must predict). ``forward(x (B, L, D), *, mask=None,
    need_weights=False)``; ``mask`` (bool, ``True`` = may attend, broadcastable to
    ``(B, H, L, L)``) is ANDed with the causal mask.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        *,
        dropout: float = 0.0,
        causal: bool = True,
        activation: str = "gelu",
        num_kv_heads: int | None = None,
        rotary: nn.Module | None = None,
        attn_fn: AttnFn | None = None,
    ) -> None:
        super().__init__()
        self.causal = bool(causal)
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = MultiHeadAttention(
            d_model,
            num_heads,
            num_kv_heads=num_kv_heads,
            dropout=dropout,
            rotary=rotary,
            attn_fn=attn_fn,
        )
        self.norm2 = nn.LayerNorm(d_model)
        self.ff = FeedForward(d_model, d_ff, dropout=dropout, activation=activation)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self, x: Tensor, *, mask: Tensor | None = None, need_weights: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        """``(B, L, D) → (B, L, D)``; with ``need_weights`` also ``(B, H, L, L)`` weights."""
        check_tokens("x", x, self.attn.d_model, dtype=self.norm1.weight.dtype)
        a, weights = _self_attention_sublayer(
            self.attn, self.norm1(x), mask, self.causal, need_weights
        )  # (B, L, D)
        x = x + self.dropout(a)  # (B, L, D)
        x = x + self.dropout(self.ff(self.norm2(x)))  # (B, L, D)
        return (x, weights) if need_weights else x
