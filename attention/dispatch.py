"""One entry point, several implementations: ``attend`` picks (or is told) a backend.

Backends (all compute softmax(Q Kᵀ · scale + bias) V with the book's conventions):

========== ================================================= ==============================
name       implementation                                    takes
========== ================================================= ==============================
reference  ``attention.functional.scaled_dot_product_attention`` (readable, dense)
                                                             any mask, any device
torch      ``torch.nn.functional.scaled_dot_product_attention`` (fused kernels)
                                                             any mask, any device
flash      ``attention.efficient.flash.flash_attention`` (tiled, pure PyTorch)
                                                             no mask (``causal`` only)
triton     ``attention.gpu.triton_flash.triton_flash_attention`` (GPU kernel)
                                                             no mask (``causal`` only); CUDA,
                                                             or CPU under TRITON_INTERPRET=1
========== ================================================= ==============================

``backend="auto"`` (:func:`pick_backend`): on a CUDA device with triton installed, no mask,
float16/bfloat16/float32, head dim <= 128 and value width = query width -> ``"triton"``;
everything else (the CPU, masks, other shapes) -> ``"torch"``. The CPU never gets the Triton
interpreter (far too slow) unless asked for by name.

Masks: bool, ``True`` = may attend, or float (additive bias), broadcastable to
``(B, H, Lq, Lk)``. ``causal=True`` is top-left aligned (query ``i`` sees keys ``j <= i``) and
is ANDed with the mask. A query with no allowed key gets zeros on every backend.
"""

from __future__ import annotations

import torch

from ._checks import (
    check_bool,
    check_choice,
    check_device,
    check_mask,
    check_qkv,
    check_scale,
)
from .efficient.flash import flash_attention
from .functional import scaled_dot_product_attention, torch_sdpa

Tensor = torch.Tensor

BACKENDS = ("reference", "torch", "flash", "triton")
_MASKLESS = ("flash", "triton")


def backend_unavailable_reason(
    backend: str, device: torch.device | str | None = None, dtype: torch.dtype | None = None
) -> str | None:
    """Why ``backend`` cannot run on ``device`` (and ``dtype``); ``None`` if it can.

    ``device=None`` means the default device (CUDA if present, else the CPU).
    """
    check_choice("backend", backend, BACKENDS)
    check_device("device", device)
    if dtype is not None and not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype or None, got {type(dtype).__name__}")
    if backend in ("reference", "torch", "flash"):  # pure PyTorch: any device, any dtype
        return None
    from .gpu.triton_flash import triton_unavailable_reason

    return triton_unavailable_reason(device, dtype)


def available_backends(device: torch.device | str | None = None) -> list[str]:
    """The backends that can run on ``device`` (default: CUDA if present, else the CPU)."""
    return [name for name in BACKENDS if backend_unavailable_reason(name, device) is None]


def pick_backend(
    device: torch.device | str,
    dtype: torch.dtype,
    head_dim: int,
    *,
    value_dim: int | None = None,
    has_mask: bool = False,
) -> str:
    """What ``backend="auto"`` runs for these arguments (see the module docstring)."""
    from .gpu.triton_flash import MAX_HEAD_DIM, SUPPORTED_DTYPES

    check_device("device", device)
    device = torch.device(device)
    value_dim = head_dim if value_dim is None else value_dim
    if (
        device.type == "cuda"
        and not has_mask
        and dtype in SUPPORTED_DTYPES
        and head_dim <= MAX_HEAD_DIM
        and value_dim == head_dim
        and backend_unavailable_reason("triton", device, dtype) is None
    ):
        return "triton"
    return "torch"


def attend(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None = None,
    *,
    causal: bool = False,
    scale: float | None = None,
    backend: str = "auto",
) -> Tensor:
    """Attention by the chosen backend; every backend gives the reference's answer.

    Args:
        query: ``(B, H, Lq, E)``; key ``(B, H, Lk, E)``; value ``(B, H, Lk, Ev)``.
        mask: bool (``True`` = may attend) or float (additive bias), broadcastable to
            ``(B, H, Lq, Lk)``; only the ``reference`` and ``torch`` backends take one.
        causal: top-left causal mask (query ``i`` sees keys ``j <= i``), ANDed with ``mask``.
        scale: default ``1 / sqrt(E)``.
        backend: ``"auto"`` or one of :data:`BACKENDS`.

    Returns:
        ``(B, H, Lq, Ev)`` in the query's dtype.

    Raises:
        ValueError: unknown backend, or a mask given to a backend that takes none.
        RuntimeError: the named backend cannot run here (the message says why).
    """
    check_choice("backend", backend, ("auto", *BACKENDS))
    check_qkv(query, key, value)
    check_bool("causal", causal)
    check_scale(scale)
    b, h, lq, e = query.shape
    check_mask(mask, (b, h, lq, key.shape[-2]), device=query.device)
    if backend == "auto":
        backend = pick_backend(
            query.device,
            query.dtype,
            e,
            value_dim=value.shape[-1],
            has_mask=mask is not None,
        )
    if mask is not None and backend in _MASKLESS:
        raise ValueError(
            f"backend {backend!r} takes no mask (only causal=True), got a mask of shape "
            f"{tuple(mask.shape)}; use backend='torch' or 'reference'"
        )
    reason = backend_unavailable_reason(backend, query.device, query.dtype)
    if reason is not None:
        raise RuntimeError(f"backend {backend!r} cannot run: {reason}")

    if backend == "reference":
        return scaled_dot_product_attention(query, key, value, mask, causal=causal, scale=scale)
    if backend == "torch":
        return torch_sdpa(query, key, value, mask, causal=causal, scale=scale)
    if backend == "flash":
        return flash_attention(query, key, value, causal=causal, scale=scale)
    from .gpu.triton_flash import triton_flash_attention

    return triton_flash_attention(query, key, value, causal=causal, scale=scale)
