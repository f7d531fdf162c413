"""Attention across modalities: text attending to image patches, and CLIP's contrastive head.

Two ways to connect modalities:

* **Cross-attention** (Flamingo, the decoders of captioning models): the queries come from one
  modality (text tokens ``(B, Lt, D)``), the keys and values from the other (image patches
  ``(B, Np, D)``). Each text token reads what it needs from the image.
* **Contrastive alignment** (CLIP): each modality is encoded separately, projected to a shared
  width, L2-normalised; matching (image, text) pairs are pulled together and every other pair
  in the batch pushed apart by a symmetric cross-entropy over the similarity matrix.

Masks follow the book: bool ``True`` = may attend, broadcastable to ``(B, H, Lq, Lk)``; a key
padding mask over image patches is ``(B, 1, 1, Np)`` (see
:func:`attention.masks.padding_mask_from_keep`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ._checks import (
    check_embedding_pair,
    check_module_input,
    check_positive_int,
    check_positive_scalar,
    check_probability,
    check_tokens,
)
from .blocks import FeedForward
from .heads import MultiHeadAttention

Tensor = torch.Tensor

# CLIP: temperature initialised to 0.07, logits never scaled by more than 100.
CLIP_INIT_LOGIT_SCALE = math.log(1 / 0.07)
CLIP_MAX_LOGIT_SCALE = math.log(100.0)


class CrossAttentionBlock(nn.Module):
    """Pre-LN cross-attention block: queries from ``x``, keys/values from ``context``.

    ``x = x + attn(norm1(x), context=norm_context(context)); x = x + ff(norm2(x))``.

    Args:
        d_model: width of the query tokens ``x`` (and of the block's output).
        num_heads: attention heads.
        d_ff: hidden width of the feed-forward network (default ``4 · d_model``).
        dropout: dropout on the attention weights and in the feed-forward network.
        context_dim: width of the context tokens when it differs from ``d_model``; they are
            then linearly projected to ``d_model`` (after their LayerNorm).
        activation: of the feed-forward network (``"relu"`` or ``"gelu"``).

    ``forward(x (B, Lq, d_model), context (B, Lk, context_dim), mask=None) -> (B, Lq, d_model)``.
    ``mask``: bool (``True`` = may attend) or additive float, broadcastable to
    ``(B, H, Lq, Lk)``; e.g. ``padding_mask_from_keep(keep)`` with ``keep (B, Lk)`` marking real
    image patches.
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int | None = None,
        *,
        dropout: float = 0.0,
        context_dim: int | None = None,
        activation: str = "gelu",
    ) -> None:
        super().__init__()
        self.d_model = check_positive_int("d_model", d_model)
        d_ff = 4 * d_model if d_ff is None else check_positive_int("d_ff", d_ff)
        dropout = check_probability("dropout", dropout)
        self.context_dim = (
            d_model if context_dim is None else check_positive_int("context_dim", context_dim)
        )
        self.norm1 = nn.LayerNorm(d_model)
        self.norm_context = nn.LayerNorm(self.context_dim)
        # Only when widths differ: a projection that would be the identity is left out.
        self.context_proj = (
            nn.Linear(self.context_dim, d_model) if self.context_dim != d_model else nn.Identity()
        )
        self.attn = MultiHeadAttention(d_model, num_heads, dropout=dropout)
        self.norm2 = nn.LayerNorm(d_model)
        self.ff = FeedForward(d_model, d_ff, dropout=dropout, activation=activation)

    def forward(
        self,
        x: Tensor,
        context: Tensor,
        *,
        mask: Tensor | None = None,
        need_weights: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """Returns ``(B, Lq, d_model)``; with ``need_weights`` also the per-head weights
        ``(B, H, Lq, Lk)`` (which image patch each text token read)."""
        check_tokens("x", x, self.d_model, layout="[batch, q_len, d_model]")
        check_tokens(
            "context",
            context,
            self.context_dim,
            width_name="context_dim",
            layout="[batch, k_len, context_dim]",
        )
        check_module_input("x", x, self)
        check_module_input("context", context, self)
        memory = self.context_proj(self.norm_context(context))  # (B, Lk, D)
        result = self.attn(self.norm1(x), memory, mask=mask, need_weights=need_weights)
        attended, weights = result if need_weights else (result, None)  # (B, Lq, D)
        x = x + attended  # (B, Lq, D)
        x = x + self.ff(self.norm2(x))  # (B, Lq, D)
        return (x, weights) if need_weights else x


class ProjectionHead(nn.Module):
    """Map one modality's features to the shared embedding width.

    ``hidden_dim=None``: a single bias-free linear map, as in CLIP. Otherwise a two-layer MLP
    ``Linear → GELU → Linear``. ``forward(features (B, in_dim)) -> (B, embed_dim)`` (any leading
    dims are kept). The output is *not* normalised; :func:`clip_contrastive_loss` does that.
    """

    def __init__(self, in_dim: int, embed_dim: int, *, hidden_dim: int | None = None) -> None:
        super().__init__()
        self.in_dim = check_positive_int("in_dim", in_dim)
        self.embed_dim = check_positive_int("embed_dim", embed_dim)
        if hidden_dim is None:
            self.net = nn.Linear(in_dim, embed_dim, bias=False)
        else:
            hidden_dim = check_positive_int("hidden_dim", hidden_dim)
            self.net = nn.Sequential(
                nn.Linear(in_dim, hidden_dim), nn.GELU(), nn.Linear(hidden_dim, embed_dim)
            )

    def forward(self, features: Tensor) -> Tensor:
        check_module_input("features", features, self)
        if features.dim() < 1 or features.shape[-1] != self.in_dim:
            raise ValueError(
                f"features must have last dim in_dim={self.in_dim}, expected shape "
                f"(B, {self.in_dim}), got {tuple(features.shape)}"
            )
        return self.net(features)  # (B, embed_dim)


def clip_logits(image_emb: Tensor, text_emb: Tensor, logit_scale: Tensor | float) -> Tensor:
    """Scaled cosine similarities ``(B_img, B_txt)``: entry ``(i, j)`` is image i vs text j.

    Both embeddings (``(B_img, E)`` and ``(B_txt, E)``) are L2-normalised first; ``logit_scale``
    multiplies the cosines (it is ``1 / temperature``, i.e. already exponentiated: CLIP's
    ``logit_scale.exp()``).
    """
    check_embedding_pair(image_emb, text_emb, paired=False)
    logit_scale = check_positive_scalar("logit_scale", logit_scale)
    image_emb = F.normalize(image_emb, dim=-1)  # (B_img, E), unit rows
    text_emb = F.normalize(text_emb, dim=-1)  # (B_txt, E)
    return logit_scale * image_emb @ text_emb.T  # (B_img, B_txt)


def clip_contrastive_loss(
    image_emb: Tensor, text_emb: Tensor, logit_scale: Tensor | float
) -> Tensor:
    """CLIP's symmetric InfoNCE loss over a batch of ``B`` matching (image, text) pairs.

    Row ``i`` of ``image_emb (B, E)`` and of ``text_emb (B, E)`` is a matching pair; every
    other pairing in the batch is a negative. With ``S = clip_logits(...)`` ``(B, B)``:
    ``loss = (CE(S, diag) + CE(Sᵀ, diag)) / 2``, the mean of "which text matches this image?"
    and "which image matches this text?".

    ``logit_scale``: ``1 / temperature`` (> 0), a float or a one-element tensor (gradients flow
    into it). Returns a scalar tensor.
    """
    check_embedding_pair(image_emb, text_emb, paired=True)
    if image_emb.shape[0] == 0:
        # The mean over no pairs is 0 / 0: refuse rather than return NaN.
        raise ValueError(
            "image_emb and text_emb must hold at least one matching pair (batch >= 1), got "
            f"shapes {tuple(image_emb.shape)} and {tuple(text_emb.shape)}"
        )
    logits = clip_logits(image_emb, text_emb, logit_scale)  # (B, B)
    targets = torch.arange(logits.shape[0], device=logits.device)  # (B,): pair i is diagonal
    image_to_text = F.cross_entropy(logits, targets)
    text_to_image = F.cross_entropy(logits.T, targets)
    return (image_to_text + text_to_image) / 2


class CLIPHead(nn.Module):
    """CLIP's alignment head: two projections to a shared width and a learnable temperature.

    Takes already-pooled features of each modality (e.g. a ViT's ``[CLS]`` output and a text
    encoder's last token) and returns the contrastive loss.

    The temperature is learned in log space, ``log_logit_scale`` initialised to
    ``log(1 / 0.07)`` as in CLIP, and clamped to ``[0, log 100]`` when used, so the logits are
    never scaled by more than 100 (CLIP clips the parameter after each step; clamping in the
    forward pass has the same effect and stops the gradient pushing it further out).

    Args:
        image_dim, text_dim: widths of the incoming features.
        embed_dim: shared embedding width.
        hidden_dim: if given, two-layer MLP projections instead of linear ones.
    """

    def __init__(
        self, image_dim: int, text_dim: int, embed_dim: int, *, hidden_dim: int | None = None
    ) -> None:
        super().__init__()
        self.image_projection = ProjectionHead(image_dim, embed_dim, hidden_dim=hidden_dim)
        self.text_projection = ProjectionHead(text_dim, embed_dim, hidden_dim=hidden_dim)
        self.log_logit_scale = nn.Parameter(torch.tensor(CLIP_INIT_LOGIT_SCALE))

    def logit_scale(self) -> Tensor:
        """``1 / temperature``: ``exp`` of the clamped log parameter, in ``[1, 100]``."""
        return self.log_logit_scale.clamp(0.0, CLIP_MAX_LOGIT_SCALE).exp()

    def encode_image(self, image_features: Tensor) -> Tensor:
        """``(B, image_dim) -> (B, embed_dim)``, L2-normalised."""
        return F.normalize(self.image_projection(image_features), dim=-1)

    def encode_text(self, text_features: Tensor) -> Tensor:
        """``(B, text_dim) -> (B, embed_dim)``, L2-normalised."""
        return F.normalize(self.text_projection(text_features), dim=-1)

    def similarity(self, image_features: Tensor, text_features: Tensor) -> Tensor:
        """Logits ``(B_img, B_txt)`` between every image and every text (zero-shot use:
        the texts are class prompts, the argmax over a row is the predicted class)."""
        return clip_logits(
            self.image_projection(image_features),
            self.text_projection(text_features),
            self.logit_scale(),
        )  # (B_img, B_txt)

    def forward(self, image_features: Tensor, text_features: Tensor) -> Tensor:
        """Contrastive loss of ``B`` matching pairs (row i of each input), a scalar."""
        return clip_contrastive_loss(
            self.image_projection(image_features),
            self.text_projection(text_features),
            self.logit_scale(),
        )
