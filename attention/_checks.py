"""Input validation shared by the whole package.

Every public function checks its arguments with these helpers, so that a bad input fails with
one consistent kind of message: the argument's name, what it got, and what was expected.
Nothing is silently broadcast into a wrong answer.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence

import torch

Tensor = torch.Tensor


def check_tensor(name: str, x: object) -> Tensor:
    """Raise ``TypeError`` unless ``x`` is a tensor."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    return x


def check_float(name: str, x: object) -> Tensor:
    """Raise ``TypeError`` unless ``x`` is a floating-point tensor."""
    check_tensor(name, x)
    if not x.is_floating_point():
        raise TypeError(
            f"{name} must be a floating-point tensor (float16/bfloat16/float32/float64), "
            f"got dtype {x.dtype}"
        )
    return x


def check_rank(name: str, x: Tensor, rank: int, layout: str) -> Tensor:
    """Raise ``ValueError`` unless ``x`` has ``rank`` dimensions (``layout`` names them)."""
    if x.dim() != rank:
        raise ValueError(
            f"{name} must have {rank} dimensions {layout}, got {x.dim()} with shape "
            f"{tuple(x.shape)}"
        )
    return x


def check_positive_int(name: str, value: object, *, allow_zero: bool = False) -> int:
    """Raise unless ``value`` is an int > 0 (or >= 0 with ``allow_zero``)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
    low = 0 if allow_zero else 1
    if value < low:
        raise ValueError(f"{name} must be >= {low}, got {value}")
    return value


def check_probability(name: str, value: float) -> float:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"{name} must be a float in [0, 1), got {type(value).__name__}")
    if not 0.0 <= float(value) < 1.0:
        raise ValueError(f"{name} must be in [0, 1), got {value}")
    return float(value)


def check_choice(name: str, value: object, choices: Sequence[object]) -> object:
    """Raise ``ValueError`` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}, got {value!r}")
    return value


def check_qkv(query: object, key: object, value: object, *, enable_gqa: bool = False) -> None:
    """Validate attention inputs in the book's layout ``[batch, heads, seq, dim]``.

    query ``(B, H, Lq, E)``, key ``(B, Hk, Lk, E)``, value ``(B, Hk, Lk, Ev)``. ``Hk`` must equal
    ``H`` unless ``enable_gqa`` is true, in which case ``H`` must be a multiple of ``Hk``.
    """
    layout = "[batch, heads, seq, dim]"
    for name, t in (("query", query), ("key", key), ("value", value)):
        check_float(name, t)
        check_rank(name, t, 4, layout)
    if not (query.dtype == key.dtype == value.dtype):
        raise TypeError(
            f"query, key and value must share a dtype, got {query.dtype}, {key.dtype}, "
            f"{value.dtype}"
        )
    if not (query.device == key.device == value.device):
        raise ValueError(
            f"query, key and value must be on one device, got {query.device}, {key.device}, "
            f"{value.device}"
        )
    b, h, _, e = query.shape
    bk, hk, lk, ek = key.shape
    bv, hv, lv, _ = value.shape
    if bk != b or bv != b:
        raise ValueError(
            f"batch sizes differ: query has {b}, key has {bk}, value has {bv} (dim 0 of "
            f"{layout} must match)"
        )
    if ek != e:
        raise ValueError(
            f"key must have the same last dim as query: expected (..., {e}), got key shape "
            f"{tuple(key.shape)}"
        )
    if lv != lk:
        raise ValueError(
            f"value must have as many positions as key: expected seq {lk}, got value shape "
            f"{tuple(value.shape)}"
        )
    if hv != hk:
        raise ValueError(f"key and value must have the same number of heads, got {hk} and {hv}")
    if hk != h:
        if not enable_gqa:
            raise ValueError(
                f"key has {hk} heads but query has {h}; pass enable_gqa=True for grouped-query "
                f"attention (query heads must be a multiple of key heads)"
            )
        if h % hk != 0:
            raise ValueError(
                f"query heads ({h}) must be a multiple of key/value heads ({hk}) for grouped-"
                f"query attention"
            )


def check_mask(
    mask: object, target: Sequence[int], name: str = "mask", *, device: object = None
) -> Tensor | None:
    """Validate an attention mask against the score shape ``target = (B, H, Lq, Lk)``.

    A mask is a bool tensor (``True`` = may attend) or a float tensor (an additive bias). It
    may have fewer than 4 dims (leading dims are treated as 1) and size-1 dims broadcast; any
    other size must equal the target's. Integer masks are refused: 0/1 is ambiguous between a
    keep-mask and an additive bias. A float mask must hold finite values or ``-inf`` (NaN or
    ``+inf`` in a bias would turn its whole row into NaN). ``device``: the inputs' device,
    which the mask must share.
    """
    if mask is None:
        return None
    check_tensor(name, mask)
    if mask.dtype != torch.bool and not mask.is_floating_point():
        raise TypeError(
            f"{name} must be a bool tensor (True = may attend) or a float tensor (additive "
            f"bias), got dtype {mask.dtype}"
        )
    target = tuple(int(t) for t in target)
    if mask.dim() > len(target) or mask.dim() < 2:
        raise ValueError(
            f"{name} must have 2 to {len(target)} dims, broadcastable to {target} "
            f"[batch, heads, q_len, k_len], got shape {tuple(mask.shape)}"
        )
    padded = (1,) * (len(target) - mask.dim()) + tuple(mask.shape)
    for got, want in zip(padded, target, strict=True):
        if got != 1 and got != want:
            raise ValueError(
                f"{name} of shape {tuple(mask.shape)} does not broadcast to {target} "
                f"[batch, heads, q_len, k_len]: each dim must be 1 or equal to the target's"
            )
    # The last two dims are never broadcast silently from a wrong length: a (1, Lk) mask is
    # fine (same for every query), but a size-1 key dim means "one key", which is only right
    # when there is one key.
    if padded[-1] != target[-1]:
        raise ValueError(
            f"{name} must cover every key: expected last dim {target[-1]}, got shape "
            f"{tuple(mask.shape)}"
        )
    if device is not None and mask.device != torch.device(device):
        raise ValueError(
            f"{name} must be on the inputs' device ({device}), got a mask on {mask.device}"
        )
    if mask.is_floating_point():
        n_nan = int(torch.isnan(mask).sum())
        n_pos_inf = int((mask == float("inf")).sum())
        if n_nan or n_pos_inf:
            raise ValueError(
                f"{name} is a float mask (an additive bias) and must hold finite values or "
                f"-inf (= not allowed), got {n_nan} NaN and {n_pos_inf} +inf entries"
            )
    return mask


def check_even(name: str, value: object) -> int:
    """Raise unless ``value`` is a positive even int (sin/cos and rotation channels pair up)."""
    check_positive_int(name, value)
    if value % 2:
        raise ValueError(f"{name} must be even (channels are used in pairs), got {value}")
    return value


def check_base(base: object) -> float:
    """Raise unless ``base`` (of sinusoidal or rotary frequencies) is a number > 1."""
    if isinstance(base, bool) or not isinstance(base, (int, float)):
        raise TypeError(f"base must be a number > 1, got {type(base).__name__}")
    if not base > 1:
        raise ValueError(f"base must be > 1, got {base}")
    return float(base)


def check_bool(name: str, value: object) -> bool:
    """Raise ``TypeError`` unless ``value`` is a bool (``1`` or ``None`` are refused: a flag
    given by position or by mistake should not silently mean ``True`` or ``False``)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} ({value!r})")
    return value


def check_scale(scale: object) -> float | None:
    """``scale`` of the attention scores: ``None`` (the default ``1/sqrt(E)``, see
    :func:`resolve_scale`) or a finite real number, returned as a float."""
    if scale is None:
        return None
    if isinstance(scale, bool) or not isinstance(scale, numbers.Real):
        raise TypeError(f"scale must be a float or None, got {type(scale).__name__} ({scale!r})")
    if not math.isfinite(scale):
        raise ValueError(f"scale must be finite, got {scale}")
    return float(scale)


def resolve_scale(scale: object, head_dim: int) -> float:
    """The scale the scores are multiplied by: ``scale`` validated by :func:`check_scale`, or
    by default ``1 / sqrt(head_dim)`` ("Attention Is All You Need"; 1.0 for an empty head)."""
    scale = check_scale(scale)
    if scale is not None:
        return scale
    return 1.0 / math.sqrt(head_dim) if head_dim > 0 else 1.0


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype attention is computed in for inputs of ``dtype``: float16 and bfloat16 in
    float32 (their exp and row sums would lose too much), every other dtype as it is."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def check_nonnegative_float(name: str, value: object) -> float:
    """Raise unless ``value`` is a finite real number >= 0 (e.g. an ``eps``); return a float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a float, got {type(value).__name__} ({value!r})")
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a finite float >= 0, got {value}")
    return float(value)


def check_positive_scalar(name: str, value: object) -> Tensor | float:
    """Raise unless ``value`` is a real number > 0 or a one-element float tensor holding one
    (a learnable parameter: returned as a 0-dim tensor, so gradients still flow)."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or not value.is_floating_point():
            raise ValueError(
                f"{name} must be a positive float or a one-element float tensor, got a tensor "
                f"of shape {tuple(value.shape)} and dtype {value.dtype}"
            )
        got = float(value.detach())
        if not (math.isfinite(got) and got > 0):
            raise ValueError(f"{name} must be > 0, got {got}; expected a finite number > 0")
        return value.reshape(())
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a float or a tensor, got {type(value).__name__}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be > 0, got {value}; expected a finite number > 0")
    return float(value)


def check_divisible(name: str, value: int | tuple[int, ...], by_name: str, by: int) -> None:
    """Raise ``ValueError`` unless ``value`` (an int, or every int of a tuple such as an image's
    ``(height, width)``) is a multiple of ``by``."""
    values = value if isinstance(value, tuple) else (value,)
    remainders = tuple(v % by for v in values)
    if any(remainders):
        shown = f"({value})" if isinstance(value, int) else str(value)
        got = remainders[0] if isinstance(value, int) else remainders
        raise ValueError(
            f"{name} {shown} must be divisible by {by_name} ({by}); got remainder {got}"
        )


def check_tokens(
    name: str,
    x: object,
    width: int,
    *,
    width_name: str = "d_model",
    length: int | None = None,
    dtype: torch.dtype | None = None,
    layout: str = "[batch, seq, d_model]",
) -> Tensor:
    """Token representations: ``x`` must be a float ``(B, L, width)`` tensor.

    ``length``: ``L`` must equal it too (e.g. a Swin grid's ``H·W``). ``dtype``: the module's
    weights' dtype, which ``x`` must share (a float64 input into float32 weights is a
    mistake, not something to cast silently). ``layout`` names the dims in the messages.
    """
    check_float(name, x)
    check_rank(name, x, 3, layout)
    if length is not None and tuple(x.shape[1:]) != (length, width):
        raise ValueError(
            f"{name} must have shape (B, {length}, {width}) {layout} ({width_name}={width}), "
            f"got {tuple(x.shape)}"
        )
    if x.shape[-1] != width:
        raise ValueError(
            f"{name} must have last dim {width_name}={width}, expected shape (B, L, {width}), "
            f"got {tuple(x.shape)}"
        )
    if dtype is not None and x.dtype != dtype:
        raise TypeError(
            f"{name} has dtype {x.dtype} but the module's weights are {dtype}; cast one of them "
            f"(e.g. module.to({x.dtype}))"
        )
    return x


def check_span(offset: object, length: int, max_len: int) -> int:
    """Positions ``offset .. offset + length - 1`` must exist in a table of ``max_len``
    positions (``0 .. max_len - 1``); returns ``offset`` (an int >= 0)."""
    offset = check_positive_int("offset", offset, allow_zero=True)
    needed = offset + length
    if needed > max_len:
        raise ValueError(
            f"positions up to {needed - 1} requested (offset={offset} + seq length {length}), "
            f"but max_len={max_len}: the encoding covers positions 0..{max_len - 1}"
        )
    return offset


def check_block_layout(layout: object, target: Sequence[int], block_size: int) -> Tensor:
    """A block layout: a bool tensor (``True`` = the query block may attend the key block)
    whose last two dims are exactly ``target[-2:] = (query blocks, key blocks)`` and whose
    leading dims (up to ``len(target)`` dims in all) are 1 or equal to the target's."""
    check_tensor("layout", layout)
    if layout.dtype != torch.bool:
        raise TypeError(
            f"layout must be a bool tensor (True = block may attend), got {layout.dtype}"
        )
    target = tuple(int(t) for t in target)
    names = ("batch", "heads", "q_blocks", "k_blocks")[-len(target) :]
    expected = (
        f"{target} [{', '.join(names)}] (leading dims may be 1 or left out; q_blocks = "
        f"ceil(Lq / block_size), k_blocks = ceil(Lk / block_size) for block_size={block_size})"
    )
    if not 2 <= layout.dim() <= len(target):
        raise ValueError(
            f"layout must have 2 to {len(target)} dims, {expected}, got shape {tuple(layout.shape)}"
        )
    padded = (1,) * (len(target) - layout.dim()) + tuple(layout.shape)
    for i, (got, want) in enumerate(zip(padded, target, strict=True)):
        if got != want and not (i < len(target) - 2 and got == 1):
            raise ValueError(f"layout of shape {tuple(layout.shape)} does not fit {expected}")
    return layout


def check_embedding_pair(image_emb: object, text_emb: object, *, paired: bool) -> None:
    """Two batches of embeddings ``(B, E)``: float tensors of one dtype and one width ``E``;
    with ``paired`` (row ``i`` of each is a matching pair) also one batch size."""
    for name, emb in (("image_emb", image_emb), ("text_emb", text_emb)):
        check_float(name, emb)
        check_rank(name, emb, 2, "[batch, embed_dim]")
    if image_emb.shape[-1] != text_emb.shape[-1]:
        raise ValueError(
            f"image_emb and text_emb must have the same embed_dim (last dim), got shapes "
            f"{tuple(image_emb.shape)} and {tuple(text_emb.shape)}"
        )
    if paired and image_emb.shape[0] != text_emb.shape[0]:
        raise ValueError(
            f"image_emb and text_emb must have the same batch size: row i of each is one "
            f"matching pair; got shapes {tuple(image_emb.shape)} and {tuple(text_emb.shape)}"
        )
    if image_emb.dtype != text_emb.dtype:
        raise TypeError(
            f"image_emb and text_emb must share a dtype, got {image_emb.dtype} and {text_emb.dtype}"
        )


FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def check_float_dtype(name: str, dtype: object) -> torch.dtype:
    """Raise unless ``dtype`` is a floating-point ``torch.dtype`` (a table of positions, a
    bias or slopes in bool or an integer dtype would silently be all zeros or truncated)."""
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"{name} must be a torch.dtype, got {type(dtype).__name__} ({dtype!r})")
    if not dtype.is_floating_point:
        raise TypeError(
            f"{name} must be a floating-point dtype (float16/bfloat16/float32/float64), got {dtype}"
        )
    return dtype


def check_device(name: str, device: object) -> torch.device | str | None:
    """Raise ``TypeError`` unless ``device`` is ``None``, a ``torch.device``, a device string
    (``"cpu"``, ``"cuda:0"``) or a device index; ``ValueError`` for an unparsable string."""
    if device is None or isinstance(device, torch.device):
        return device
    if isinstance(device, bool) or not isinstance(device, (str, int)):
        raise TypeError(
            f"{name} must be a torch.device, a device string or None, got "
            f"{type(device).__name__} ({device!r})"
        )
    try:
        torch.device(device)
    except (RuntimeError, ValueError) as err:
        raise ValueError(f"{name} is not a valid device: {device!r} ({err})") from err
    return device


def check_generator(name: str, generator: object) -> torch.Generator | None:
    """Raise ``TypeError`` unless ``generator`` is ``None`` or a ``torch.Generator``."""
    if generator is not None and not isinstance(generator, torch.Generator):
        raise TypeError(
            f"{name} must be a torch.Generator or None, got {type(generator).__name__} "
            f"({generator!r})"
        )
    return generator


def check_same_device(name: str, x: Tensor, ref_name: str, ref: Tensor) -> Tensor:
    """Raise ``ValueError`` unless tensor ``x`` is on ``ref``'s device."""
    if x.device != ref.device:
        raise ValueError(
            f"{name} must be on the same device as {ref_name} ({ref.device}), got {x.device}"
        )
    return x


def check_finite_real(name: str, value: object) -> float:
    """Raise unless ``value`` is a finite real number (not a bool); return it as a float."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(value).__name__} ({value!r})")
    if not math.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    return float(value)


def check_dim(name: str, dim: object, ndim: int) -> int:
    """Raise unless ``dim`` is an int in ``[-ndim, ndim)``; return it."""
    if isinstance(dim, bool) or not isinstance(dim, int):
        raise TypeError(f"{name} must be an int, got {type(dim).__name__} ({dim!r})")
    if not -max(ndim, 1) <= dim < max(ndim, 1):
        raise ValueError(
            f"{name} must be in [{-max(ndim, 1)}, {max(ndim, 1) - 1}] for a {ndim}-dim tensor, "
            f"got {dim}"
        )
    return dim


def check_module_input(name: str, x: Tensor, module: torch.nn.Module) -> Tensor:
    """The package's one dtype rule for modules: a float input must have the dtype of the
    module's floating-point parameters (``TypeError`` naming both otherwise, with the cast
    to make); no silent casts in either direction. A module without parameters accepts any
    float dtype."""
    check_float(name, x)
    param = next((p for p in module.parameters() if p.is_floating_point()), None)
    if param is not None and x.dtype != param.dtype:
        raise TypeError(
            f"{name} has dtype {x.dtype} but the module's weights are {param.dtype}; cast one "
            f"of them (e.g. module.to({x.dtype}))"
        )
    if param is not None and x.device != param.device:
        raise ValueError(
            f"{name} is on {x.device} but the module's weights are on {param.device}; move one "
            f"of them (e.g. module.to({str(x.device)!r}))"
        )
    return x
