"""Input validation shared by the whole package.

Every public function checks its arguments with these helpers, so that a bad input fails with
one consistent kind of message: the argument's name, what it got, and what was expected.
Nothing is silently broadcast into a wrong answer.
"""

from __future__ import annotations

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


def check_mask(mask: object, target: Sequence[int], name: str = "mask") -> Tensor | None:
    """Validate an attention mask against the score shape ``target = (B, H, Lq, Lk)``.

    A mask is a bool tensor (``True`` = may attend) or a float tensor (an additive bias). It
    may have fewer than 4 dims (leading dims are treated as 1) and size-1 dims broadcast; any
    other size must equal the target's. Integer masks are refused: 0/1 is ambiguous between a
    keep-mask and an additive bias.
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
