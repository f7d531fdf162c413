"""Attention for images: ViT's patch tokens and Swin's (shifted) window attention.

Images are ``(B, C, H, W)`` (torch's channel-first layout) when they enter a patch embedding;
inside Swin the token grid is kept as ``(B, H·W, C)`` (row-major: token ``r·W + c`` is pixel
``(r, c)``) and viewed as ``(B, H, W, C)`` when windows are cut. Attention masks follow the
book: bool ``True`` = may attend, float = additive bias.

ViT turns an image into a sequence and runs a plain Transformer encoder over it: cost
quadratic in the number of patches. Swin restricts attention to non-overlapping
``window × window`` groups of tokens (cost linear in the image area) and alternates with a
cyclically shifted grid so that information crosses window borders.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from ._checks import (
    check_device,
    check_divisible,
    check_module_input,
    check_nonnegative_float,
    check_positive_int,
    check_probability,
    check_rank,
    check_tensor,
    check_tokens,
)
from .blocks import Encoder, FeedForward
from .functional import scaled_dot_product_attention
from .masks import to_additive

Tensor = torch.Tensor

GRID_LAYOUT = "[batch, height*width, channels]"  # Swin's tokens, row-major over the grid


# --------------------------------------------------------------------------------------------
# Sizes given as an int or a (height, width) pair
# --------------------------------------------------------------------------------------------


def _pair(name: str, value: object) -> tuple[int, int]:
    """``int`` or ``(int, int)`` → ``(height, width)``, each checked to be a positive int."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValueError(f"{name} must be an int or a pair (height, width), got {value!r}")
        return (
            check_positive_int(f"{name}[0]", value[0]),
            check_positive_int(f"{name}[1]", value[1]),
        )
    n = check_positive_int(name, value)
    return n, n


# --------------------------------------------------------------------------------------------
# ViT: patches as tokens
# --------------------------------------------------------------------------------------------


class PatchEmbedding(nn.Module):
    """Cut an image into non-overlapping ``patch × patch`` squares and embed each linearly.

    A convolution with ``kernel_size = stride = patch_size`` *is* "flatten each patch and apply
    one shared linear layer": each output position sees exactly one patch and the kernel is the
    linear layer's weight. The conv form is just faster.

    Args:
        image_size: ``int`` or ``(H, W)``; both divisible by ``patch_size``.
        patch_size: side of a square patch, in pixels.
        in_channels: ``C`` of the input images.
        d_model: width of each patch token.

    ``forward(images (B, C, H, W)) -> (B, N, d_model)`` with ``N = (H/p)·(W/p)`` patches in
    row-major order.
    """

    def __init__(self, image_size, patch_size: int, in_channels: int, d_model: int) -> None:
        super().__init__()
        self.image_size = _pair("image_size", image_size)
        self.patch_size = check_positive_int("patch_size", patch_size)
        self.in_channels = check_positive_int("in_channels", in_channels)
        self.d_model = check_positive_int("d_model", d_model)
        check_divisible("image_size", self.image_size, "patch_size", patch_size)
        self.grid_size = (self.image_size[0] // patch_size, self.image_size[1] // patch_size)
        self.num_patches = self.grid_size[0] * self.grid_size[1]
        self.proj = nn.Conv2d(in_channels, d_model, kernel_size=patch_size, stride=patch_size)

    def forward(self, images: Tensor) -> Tensor:
        check_module_input("images", images, self)
        check_rank("images", images, 4, "[batch, channels, height, width]")
        _, c, h, w = images.shape
        if c != self.in_channels:
            raise ValueError(
                f"images must have {self.in_channels} channels (dim 1 of [batch, channels, "
                f"height, width]), got {c} in shape {tuple(images.shape)}"
            )
        if (h, w) != self.image_size:
            raise ValueError(
                f"images must be {self.image_size[0]}x{self.image_size[1]} (height x width), "
                f"got {h}x{w} in shape {tuple(images.shape)}"
            )
        x = self.proj(images)  # (B, D, H/p, W/p)
        return x.flatten(2).transpose(1, 2)  # (B, N, D)


class ViTEmbedding(nn.Module):
    """Patch tokens, a learned ``[CLS]`` token in front, plus learned positional embeddings.

    ``forward(images (B, C, H, W)) -> (B, 1 + N, d_model)``; token 0 is ``[CLS]``. Position
    embeddings are learned (one vector per slot, ``[CLS]`` included), as in ViT; the patch order
    is fixed, so the model learns the 2-D layout from data.
    """

    def __init__(
        self, image_size, patch_size: int, in_channels: int, d_model: int, *, dropout: float = 0.0
    ) -> None:
        super().__init__()
        self.patches = PatchEmbedding(image_size, patch_size, in_channels, d_model)
        self.num_tokens = self.patches.num_patches + 1
        self.cls_token = nn.Parameter(torch.zeros(1, 1, d_model))
        self.pos_embedding = nn.Parameter(torch.zeros(1, self.num_tokens, d_model))
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        nn.init.trunc_normal_(self.pos_embedding, std=0.02)
        self.dropout = nn.Dropout(check_probability("dropout", dropout))

    def forward(self, images: Tensor) -> Tensor:
        x = self.patches(images)  # (B, N, D)
        cls = self.cls_token.expand(x.shape[0], -1, -1)  # (B, 1, D)
        x = torch.cat([cls, x], dim=1) + self.pos_embedding  # (B, 1 + N, D)
        return self.dropout(x)


class VisionTransformer(nn.Module):
    """A small ViT classifier: patch tokens → pre-LN Transformer encoder → ``[CLS]`` → logits.

    Built from :class:`attention.blocks.Encoder` (full self-attention over all ``1 + N``
    tokens; no mask: every patch is real). ``forward(images (B, C, H, W)) -> (B, num_classes)``.
    ``norm_eps``: the ``eps`` of every LayerNorm (default ``1e-5``, torch's; timm's ViTs use
    ``1e-6``).
    """

    def __init__(
        self,
        image_size,
        patch_size: int,
        in_channels: int,
        num_classes: int,
        *,
        d_model: int,
        num_heads: int,
        num_layers: int,
        d_ff: int,
        dropout: float = 0.0,
        attn_fn=None,
        norm_eps: float = 1e-5,
    ) -> None:
        super().__init__()
        check_positive_int("num_classes", num_classes)
        norm_eps = check_nonnegative_float("norm_eps", norm_eps)
        self.embedding = ViTEmbedding(image_size, patch_size, in_channels, d_model, dropout=dropout)
        self.encoder = Encoder(
            d_model,
            num_heads,
            d_ff,
            num_layers=num_layers,
            dropout=dropout,
            pre_ln=True,
            activation="gelu",
            attn_fn=attn_fn,
            norm_eps=norm_eps,
        )
        self.head = nn.Linear(d_model, num_classes)

    def forward(self, images: Tensor) -> Tensor:
        x = self.embedding(images)  # (B, 1 + N, D)
        x = self.encoder(x)  # (B, 1 + N, D); pre-LN Encoder ends with a LayerNorm
        return self.head(x[:, 0])  # (B, num_classes)


# --------------------------------------------------------------------------------------------
# Swin: windows, shifts and the region mask
# --------------------------------------------------------------------------------------------


def window_partition(x: Tensor, *, window_size: int) -> Tensor:
    """Cut a grid ``(B, H, W, C)`` into windows ``(B·nW, window², C)``, ``nW = HW / window²``.

    Windows are ordered image by image, then row-major over the window grid; tokens inside a
    window are row-major. :func:`window_reverse` undoes it.
    """
    check_tensor("x", x)
    check_rank("x", x, 4, "[batch, height, width, channels]")
    window_size = check_positive_int("window_size", window_size)
    b, h, w, c = x.shape
    check_divisible("x's grid", (h, w), "window_size", window_size)
    x = x.view(
        b, h // window_size, window_size, w // window_size, window_size, c
    )  # (B, nH, ws, nW, ws, C)
    x = x.permute(0, 1, 3, 2, 4, 5)  # (B, nH, nW, ws, ws, C): the window grid first
    return x.reshape(-1, window_size * window_size, c)  # (B·nW, ws², C)


def window_reverse(windows: Tensor, *, window_size: int, height: int, width: int) -> Tensor:
    """Inverse of :func:`window_partition`: ``(B·nW, window², C) -> (B, H, W, C)``."""
    check_tensor("windows", windows)
    check_rank("windows", windows, 3, "[batch*num_windows, window*window, channels]")
    window_size = check_positive_int("window_size", window_size)
    size = (check_positive_int("height", height), check_positive_int("width", width))
    check_divisible("(height, width)", size, "window_size", window_size)
    n_h, n_w = height // window_size, width // window_size
    bw, n, c = windows.shape
    if n != window_size * window_size or bw % (n_h * n_w):
        raise ValueError(
            f"windows must have shape (B*{n_h * n_w}, {window_size * window_size}, C) for a "
            f"{height}x{width} grid cut into {window_size}x{window_size} windows, got "
            f"{tuple(windows.shape)}"
        )
    x = windows.view(-1, n_h, n_w, window_size, window_size, c)  # (B, nH, nW, ws, ws, C)
    x = x.permute(0, 1, 3, 2, 4, 5)  # (B, nH, ws, nW, ws, C)
    return x.reshape(-1, height, width, c)  # (B, H, W, C)


def _shift_pair(value: object) -> tuple[int, int]:
    """A shift given as an int (both axes) or a pair ``(rows, cols)`` of ints."""
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValueError(f"shift must be an int or a pair (rows, cols), got {value!r}")
        pair = tuple(value)
    else:
        pair = (value, value)
    for axis, v in zip(("shift[0]", "shift[1]"), pair, strict=True):
        if isinstance(v, bool) or not isinstance(v, int):
            name = axis if isinstance(value, (tuple, list)) else "shift"
            raise TypeError(f"{name} must be an int, got {type(v).__name__} ({v!r})")
    return pair[0], pair[1]


def cyclic_shift(x: Tensor, *, shift: int | tuple[int, int]) -> Tensor:
    """Roll a grid ``(B, H, W, C)`` up and left by ``shift`` (``-shift`` rolls it back).

    ``shift`` is an int (the same on both axes) or a pair ``(rows, cols)``. Swin's trick:
    after the roll, the regular window grid covers windows displaced by ``shift`` in the
    original image, so the same batched window code serves both layers. The rows/columns that
    wrap around are not neighbours of the ones they land next to; the mask of
    :func:`shifted_window_mask` keeps them apart.
    """
    check_tensor("x", x)
    check_rank("x", x, 4, "[batch, height, width, channels]")
    rows, cols = _shift_pair(shift)
    return torch.roll(x, shifts=(-rows, -cols), dims=(1, 2))


def swin_window_shift(
    input_resolution, window_size: int, shift: int | tuple[int, int]
) -> tuple[int, int]:
    """The shift Swin actually applies on a grid ``input_resolution = (H, W)``: ``(rows, cols)``.

    Along an axis that one window covers (``H == window_size`` or ``W == window_size``) there
    is nothing to shift across, so the original Swin (and timm) turn the shift off on that
    axis: a 4×4 grid with window 4 gets ``(0, 0)``, an 8×4 grid ``(shift, 0)``. (With the
    shift kept, the region mask would cut the single window into bands and each token would
    see only part of it.)
    """
    h, w = _pair("input_resolution", input_resolution)
    window_size = check_positive_int("window_size", window_size)
    rows, cols = _shift_pair(shift)
    return (rows if h > window_size else 0, cols if w > window_size else 0)


def shifted_window_mask(
    height: int,
    width: int,
    window_size: int,
    shift: int | tuple[int, int],
    *,
    device: torch.device | str | None = None,
) -> Tensor:
    """Which tokens of each window may attend each other after :func:`cyclic_shift`.

    Returns bool ``(nW, window², window²)``, ``True`` = may attend (the book's polarity; turn
    it into an additive bias with :func:`attention.masks.to_additive`). Window ``n`` is the
    ``n``-th window of :func:`window_partition` on the *shifted* grid. ``shift`` is an int (both
    axes) or a pair ``(rows, cols)``, each in ``[0, window_size)``.

    The Swin paper's construction: label each pixel of the shifted grid by the region it came
    from (3 bands along each shifted axis: the untouched part, the last window's part, and the
    wrapped-around strip of ``shift`` rows/columns; 1 band along an unshifted axis), then allow
    a pair iff both labels match. With ``shift = 0`` everything is allowed. Every token may
    attend at least itself, so no row is fully masked.
    """
    size = (check_positive_int("height", height), check_positive_int("width", width))
    window_size = check_positive_int("window_size", window_size)
    pair = _shift_pair(shift)
    for v in pair:
        check_positive_int("shift", v, allow_zero=True)
    check_divisible("(height, width)", size, "window_size", window_size)
    check_device("device", device)
    if max(pair) >= window_size:
        raise ValueError(f"shift must be in [0, window_size={window_size}), got {shift}")
    labels = torch.zeros(1, height, width, 1, dtype=torch.long, device=device)
    if any(pair):
        row_bands, col_bands = (
            (slice(0, -window_size), slice(-window_size, -s), slice(-s, None))
            if s
            else (slice(None),)
            for s in pair
        )
        label = 0
        for rows in row_bands:
            for cols in col_bands:
                labels[:, rows, cols, :] = label
                label += 1
    per_window = window_partition(labels, window_size=window_size).squeeze(-1)  # (nW, ws²)
    return per_window[:, :, None] == per_window[:, None, :]  # (nW, ws², ws²)


class RelativePositionBias(nn.Module):
    """Swin's learned bias for each (query, key) offset inside a window, one per head.

    Offsets along each axis range over ``-(w-1) .. w-1``: ``(2w-1)²`` distinct 2-D offsets,
    each with a learned value per head (the table ``((2w-1)², H)``). The index buffer
    ``(w², w²)`` maps a (query, key) pair to its table row. ``forward() -> (H, w², w²)``, an
    additive bias for the scores.
    """

    def __init__(self, window_size: int, num_heads: int) -> None:
        super().__init__()
        self.window_size = check_positive_int("window_size", window_size)
        self.num_heads = check_positive_int("num_heads", num_heads)
        self.table = nn.Parameter(torch.zeros((2 * window_size - 1) ** 2, num_heads))
        nn.init.trunc_normal_(self.table, std=0.02)
        rows, cols = torch.meshgrid(
            torch.arange(window_size), torch.arange(window_size), indexing="ij"
        )
        coords = torch.stack([rows.flatten(), cols.flatten()])  # (2, w²): (row, col) per token
        offsets = coords[:, :, None] - coords[:, None, :]  # (2, w², w²): query - key
        offsets = offsets + (window_size - 1)  # shift each axis into 0 .. 2w-2
        index = offsets[0] * (2 * window_size - 1) + offsets[1]  # (w², w²)
        self.register_buffer("index", index, persistent=False)

    def forward(self) -> Tensor:
        n = self.window_size * self.window_size
        bias = self.table[self.index.reshape(-1)]  # (w²·w², H)
        return bias.view(n, n, self.num_heads).permute(2, 0, 1)  # (H, w², w²)


class WindowAttention(nn.Module):
    """Multi-head self-attention inside each window, with the relative position bias.

    ``forward(windows (B·nW, w², d_model), *, mask=None) -> (B·nW, w², d_model)``, ``w`` =
    ``window_size``. ``mask`` is the
    bool ``(nW, w², w²)`` of :func:`shifted_window_mask` (``True`` = may attend), the same for
    every image of the batch. The scores go through the package's
    :func:`attention.functional.scaled_dot_product_attention` with one additive bias =
    relative bias + mask (``-inf`` where not allowed). Scores are ``(B·nW, H, w², w²)``:
    ``B·H·HW·w²`` elements, linear in the image area ``HW``.
    """

    def __init__(self, d_model: int, num_heads: int, *, window_size: int, qkv_bias: bool = True):
        super().__init__()
        self.d_model = check_positive_int("d_model", d_model)
        self.window_size = check_positive_int("window_size", window_size)
        self.num_heads = check_positive_int("num_heads", num_heads)
        check_divisible("d_model", d_model, "num_heads", num_heads)
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=qkv_bias)
        self.proj = nn.Linear(d_model, d_model)
        self.relative_bias = RelativePositionBias(window_size, num_heads)

    def forward(
        self, windows: Tensor, *, mask: Tensor | None = None, need_weights: bool = False
    ) -> Tensor | tuple[Tensor, Tensor]:
        n = self.window_size * self.window_size
        check_module_input("windows", windows, self)
        check_rank("windows", windows, 3, "[batch*num_windows, window*window, d_model]")
        bw, _, _ = windows.shape
        if windows.shape[1:] != (n, self.d_model):
            raise ValueError(
                f"windows must have shape (B*nW, {n}, {self.d_model}) for "
                f"window_size={self.window_size}, got {tuple(windows.shape)}"
            )
        h, dh = self.num_heads, self.d_model // self.num_heads
        qkv = self.qkv(windows).view(bw, n, 3, h, dh)  # (B·nW, w², 3, H, Dh)
        q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # each (B·nW, H, w², Dh)

        bias = self.relative_bias().to(q.dtype).unsqueeze(0)  # (1, H, w², w²)
        if mask is not None:
            if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
                raise TypeError(
                    "mask must be a bool tensor (nW, window², window²), True = may attend, "
                    f"got {type(mask).__name__ if not isinstance(mask, Tensor) else mask.dtype}"
                )
            if mask.device != windows.device:
                raise ValueError(
                    f"mask must be on the device of windows ({windows.device}), got a mask on "
                    f"{mask.device}"
                )
            n_win = mask.shape[0]
            if mask.dim() != 3 or mask.shape[1:] != (n, n) or bw % n_win:
                raise ValueError(
                    f"mask must have shape (nW, {n}, {n}) with nW dividing the {bw} windows, "
                    f"got {tuple(mask.shape)}"
                )
            # Windows are ordered image-major, so window i uses mask row i % nW.
            region = to_additive(mask, dtype=q.dtype)  # (nW, w², w²), 0 or -inf
            region = region.unsqueeze(0).expand(bw // n_win, -1, -1, -1)  # (B, nW, w², w²)
            bias = bias + region.reshape(bw, 1, n, n)  # (B·nW, H, w², w²)
        result = scaled_dot_product_attention(q, k, v, bias, need_weights=need_weights)
        out, weights = result if need_weights else (result, None)  # (B·nW, H, w², Dh)
        out = self.proj(out.transpose(1, 2).reshape(bw, n, self.d_model))  # (B·nW, w², D)
        return (out, weights) if need_weights else out


class SwinBlock(nn.Module):
    """One Swin Transformer block: pre-LN (shifted) window attention, then a pre-LN MLP.

    ``x = x + attend_windows(norm1(x)); x = x + ff(norm2(x))`` on tokens ``(B, H·W, d_model)``.
    ``shift = 0`` gives regular windows; ``shift = window_size // 2`` the shifted ones (Swin
    alternates the two). Attention never leaves a window: cost linear in ``H·W``.

    Args:
        d_model: token width ``C``.
        input_resolution: the token grid, ``int`` or ``(H, W)``, both divisible by
            ``window_size``.
        num_heads: heads of the window attention.
        window_size: side of a square window, in tokens.
        shift: cyclic shift in ``[0, window_size)``. Applied only along an axis longer than one
            window (:func:`swin_window_shift`): on a grid that one window covers the block
            attends regular windows whatever ``shift`` says; ``shift_size`` holds what is
            applied, ``(rows, cols)``.
        mlp_ratio: hidden width of the MLP is ``mlp_ratio · d_model``.
    """

    def __init__(
        self,
        d_model: int,
        input_resolution,
        num_heads: int,
        window_size: int,
        *,
        shift: int = 0,
        mlp_ratio: float = 4.0,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.resolution = _pair("input_resolution", input_resolution)
        self.d_model = check_positive_int("d_model", d_model)
        self.window_size = check_positive_int("window_size", window_size)
        self.shift = check_positive_int("shift", shift, allow_zero=True)
        check_divisible("input_resolution", self.resolution, "window_size", window_size)
        if shift >= window_size:
            raise ValueError(f"shift must be in [0, window_size={window_size}), got {shift}")
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = WindowAttention(d_model, num_heads, window_size=window_size)
        self.norm2 = nn.LayerNorm(d_model)
        dropout = check_probability("dropout", dropout)
        if isinstance(mlp_ratio, bool) or not isinstance(mlp_ratio, (int, float)):
            raise TypeError(
                f"mlp_ratio must be a number with mlp_ratio * d_model >= 1, got "
                f"{type(mlp_ratio).__name__} ({mlp_ratio!r})"
            )
        hidden = int(mlp_ratio * d_model) if math.isfinite(mlp_ratio) else 0
        if hidden < 1:
            raise ValueError(
                f"mlp_ratio must be a number with mlp_ratio * d_model >= 1, got {mlp_ratio!r}"
            )
        # Swin's MLP: the package's FeedForward (dropout on the hidden layer) + output dropout.
        ff = FeedForward(d_model, hidden, dropout=dropout, activation="gelu")
        self.ff = nn.Sequential(ff, nn.Dropout(dropout))
        # Per axis: no shift along an axis that one window covers (as in Swin and timm).
        self.shift_size = swin_window_shift(self.resolution, window_size, shift)  # (rows, cols)
        region = (
            shifted_window_mask(*self.resolution, window_size, self.shift_size)
            if any(self.shift_size)
            else None
        )
        self.register_buffer("region_mask", region, persistent=False)  # (nW, w², w²) or None

    def attend_windows(self, x: Tensor) -> Tensor:
        """The attention sub-layer alone, on the whole grid: ``(B, H·W, C) -> (B, H·W, C)``.

        Shift, cut into windows, attend inside each window, paste back, shift back.
        """
        (h, w), c = self.resolution, self.d_model
        check_tokens("x", x, c, length=h * w, layout=GRID_LAYOUT)
        check_module_input("x", x, self)
        grid = x.view(-1, h, w, c)  # (B, H, W, C)
        rows, cols = self.shift_size
        if rows or cols:
            grid = cyclic_shift(grid, shift=(rows, cols))
        windows = window_partition(grid, window_size=self.window_size)  # (B·nW, w², C)
        windows = self.attn(windows, mask=self.region_mask)  # (B·nW, w², C)
        grid = window_reverse(
            windows, window_size=self.window_size, height=h, width=w
        )  # (B, H, W, C)
        if rows or cols:
            grid = cyclic_shift(grid, shift=(-rows, -cols))
        return grid.reshape(-1, h * w, c)  # (B, H·W, C)

    def forward(self, x: Tensor) -> Tensor:
        (h, w), c = self.resolution, self.d_model
        check_tokens("x", x, c, length=h * w, layout=GRID_LAYOUT)
        check_module_input("x", x, self)
        x = x + self.attend_windows(self.norm1(x))  # (B, H·W, C)
        return x + self.ff(self.norm2(x))  # (B, H·W, C)


class PatchMerging(nn.Module):
    """Swin's downsampling: concatenate each 2×2 group of tokens, normalise, project 4C → 2C.

    ``forward(x (B, H·W, C)) -> (B, (H/2)·(W/2), 2C)``. The four neighbours of output
    ``(i, j)`` are concatenated in the order ``(2i, 2j), (2i+1, 2j), (2i, 2j+1), (2i+1, 2j+1)``
    (the reference implementation's).
    """

    def __init__(self, input_resolution, d_model: int) -> None:
        super().__init__()
        self.resolution = _pair("input_resolution", input_resolution)
        self.d_model = check_positive_int("d_model", d_model)
        check_divisible("input_resolution", self.resolution, "the merge factor", 2)
        self.norm = nn.LayerNorm(4 * d_model)
        self.reduction = nn.Linear(4 * d_model, 2 * d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        (h, w), c = self.resolution, self.d_model
        check_tokens("x", x, c, length=h * w, layout=GRID_LAYOUT)
        check_module_input("x", x, self)
        grid = x.view(-1, h, w, c)  # (B, H, W, C)
        corners = [
            grid[:, 0::2, 0::2],
            grid[:, 1::2, 0::2],
            grid[:, 0::2, 1::2],
            grid[:, 1::2, 1::2],
        ]
        merged = torch.cat(corners, dim=-1)  # (B, H/2, W/2, 4C)
        merged = merged.reshape(-1, (h // 2) * (w // 2), 4 * c)  # (B, HW/4, 4C)
        return self.reduction(self.norm(merged))  # (B, HW/4, 2C)


def window_attention_score_count(
    batch_size: int, height: int, width: int, num_heads: int, window_size: int
) -> int:
    """Number of score entries one window-attention layer computes: ``B·H_heads·HW·window²``.

    Compare with ``B·H_heads·(HW)²`` for global attention over the same grid.
    """
    for name, value in (
        ("batch_size", batch_size),
        ("height", height),
        ("width", width),
        ("num_heads", num_heads),
        ("window_size", window_size),
    ):
        check_positive_int(name, value)
    check_divisible("(height, width)", (height, width), "window_size", window_size)
    n_windows = (height // window_size) * (width // window_size)
    return batch_size * n_windows * num_heads * window_size**4
