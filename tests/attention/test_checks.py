"""attention._checks: the one home of validation. Each helper is tested directly (its error
names the argument, what it got and what was expected), and every exact attention variant is
shown to refuse a bad ``scale`` and a non-bool ``causal`` the same way, through the helpers."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
import torch

from attention._checks import (
    check_block_layout,
    check_bool,
    check_divisible,
    check_embedding_pair,
    check_nonnegative_float,
    check_positive_scalar,
    check_scale,
    check_span,
    check_tokens,
    compute_dtype,
    resolve_scale,
)
from attention.dispatch import attend, torch_sdpa
from attention.efficient import (
    block_sparse_attention,
    chunked_attention,
    flash_attention,
    linear_attention,
    probsparse_attention,
    sliding_window_attention,
)
from attention.functional import scaled_dot_product_attention
from attention.gpu.flex import flex_block_sparse, flex_sliding_window
from attention.gpu.triton_flash import triton_flash_attention
from tests.attention.inputs import random_qkv

# --- the helpers, one by one ----------------------------------------------------------------


def test_check_bool_accepts_bools_only():
    assert check_bool("causal", True) is True and check_bool("causal", False) is False
    for bad in (1, 0, None, "yes"):
        with pytest.raises(TypeError, match=rf"causal must be a bool, got {type(bad).__name__}"):
            check_bool("causal", bad)


def test_check_scale_takes_none_or_a_finite_real_number():
    assert check_scale(None) is None
    assert check_scale(2) == 2.0 and isinstance(check_scale(2), float)
    assert check_scale(Fraction(1, 4)) == 0.25  # any numbers.Real
    assert check_scale(-0.5) == -0.5  # the sign is the caller's business (unchanged behaviour)
    for bad, kind in (("big", "str"), ([1.0], "list"), (True, "bool"), (torch.tensor(1.0), "")):
        with pytest.raises(TypeError, match=rf"scale must be a float or None, got {kind}"):
            check_scale(bad)
    for bad in (math.inf, -math.inf, math.nan):
        with pytest.raises(ValueError, match=r"scale must be finite, got"):
            check_scale(bad)


def test_resolve_scale_defaults_to_one_over_sqrt_head_dim():
    assert resolve_scale(None, 64) == 1.0 / math.sqrt(64)
    assert resolve_scale(None, 0) == 1.0  # an empty head: nothing to scale
    assert resolve_scale(0.3, 64) == 0.3
    with pytest.raises(ValueError, match="scale must be finite"):
        resolve_scale(math.nan, 64)


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [
        (torch.float16, torch.float32),
        (torch.bfloat16, torch.float32),
        (torch.float32, torch.float32),
        (torch.float64, torch.float64),
    ],
)
def test_compute_dtype_lifts_half_precision_only(dtype, expected):
    assert compute_dtype(dtype) == expected


def test_check_nonnegative_float():
    assert check_nonnegative_float("eps", 0) == 0.0 and check_nonnegative_float("eps", 1e-6)
    with pytest.raises(TypeError, match=r"eps must be a float, got str"):
        check_nonnegative_float("eps", "tiny")
    for bad in (-1e-9, math.inf, math.nan):
        with pytest.raises(ValueError, match=r"eps must be a finite float >= 0, got"):
            check_nonnegative_float("eps", bad)


def test_check_positive_scalar_keeps_tensors_differentiable():
    p = torch.tensor([2.0], requires_grad=True)
    out = check_positive_scalar("logit_scale", p)
    assert out.shape == () and out.requires_grad
    assert check_positive_scalar("logit_scale", 3) == 3.0
    with pytest.raises(ValueError, match=r"logit_scale must be > 0, got -1"):
        check_positive_scalar("logit_scale", -1)
    with pytest.raises(ValueError, match=r"logit_scale must be > 0, got 0.0"):
        check_positive_scalar("logit_scale", torch.tensor(0.0))
    with pytest.raises(ValueError, match=r"one-element float tensor, got a tensor of shape \(2,\)"):
        check_positive_scalar("logit_scale", torch.ones(2))
    with pytest.raises(TypeError, match=r"logit_scale must be a float or a tensor, got str"):
        check_positive_scalar("logit_scale", "hot")


def test_check_divisible_takes_an_int_or_a_tuple_in_one_argument_order():
    check_divisible("d_model", 12, "num_heads", 4)
    check_divisible("image_size", (8, 12), "patch_size", 4)
    with pytest.raises(
        ValueError, match=r"d_model \(10\) must be divisible by num_heads \(4\); got remainder 2"
    ):
        check_divisible("d_model", 10, "num_heads", 4)
    with pytest.raises(
        ValueError,
        match=r"image_size \(8, 10\) must be divisible by patch_size \(4\); got remainder "
        r"\(0, 2\)",
    ):
        check_divisible("image_size", (8, 10), "patch_size", 4)


def test_check_tokens():
    x = torch.zeros(2, 5, 8)
    assert check_tokens("x", x, 8) is x
    check_tokens("x", x, 8, length=5, dtype=torch.float32)
    with pytest.raises(TypeError, match=r"x must be a torch.Tensor, got list"):
        check_tokens("x", [[1.0]], 8)
    with pytest.raises(TypeError, match=r"x must be a floating-point tensor"):
        check_tokens("x", torch.zeros(2, 5, 8, dtype=torch.long), 8)
    with pytest.raises(ValueError, match=r"x must have 3 dimensions \[batch, seq, d_model\]"):
        check_tokens("x", torch.zeros(5, 8), 8)
    with pytest.raises(
        ValueError, match=r"x must have last dim d_model=6, expected shape \(B, L, 6\), got"
    ):
        check_tokens("x", x, 6)
    with pytest.raises(
        ValueError,
        match=r"context must have last dim context_dim=6, expected shape \(B, L, 6\)",
    ):
        check_tokens("context", x, 6, width_name="context_dim")
    with pytest.raises(ValueError, match=r"x must have shape \(B, 4, 8\) .* got \(2, 5, 8\)"):
        check_tokens("x", x, 8, length=4)
    with pytest.raises(
        TypeError, match=r"x has dtype torch.float32 but the module's weights are torch.float64"
    ):
        check_tokens("x", x, 8, dtype=torch.float64)


def test_check_span():
    assert check_span(3, 5, 8) == 3
    with pytest.raises(ValueError, match=r"positions up to 8 requested \(offset=4 \+ seq length 5"):
        check_span(4, 5, 8)
    with pytest.raises(ValueError, match=r"offset must be >= 0, got -1"):
        check_span(-1, 5, 8)
    with pytest.raises(TypeError, match=r"offset must be an int, got float"):
        check_span(1.0, 5, 8)


def test_check_block_layout():
    ok = torch.ones(3, 4, dtype=torch.bool)
    assert check_block_layout(ok, (2, 3, 4), 8) is ok
    check_block_layout(torch.ones(2, 3, 4, dtype=torch.bool), (2, 3, 4), 8)
    check_block_layout(torch.ones(1, 1, 3, 4, dtype=torch.bool), (5, 2, 3, 4), 8)
    with pytest.raises(TypeError, match=r"layout must be a bool tensor .* got torch.float32"):
        check_block_layout(torch.ones(3, 4), (2, 3, 4), 8)
    with pytest.raises(TypeError, match=r"layout must be a torch.Tensor, got list"):
        check_block_layout([[True]], (2, 3, 4), 8)
    with pytest.raises(ValueError, match=r"layout must have 2 to 3 dims.*got shape \(4,\)"):
        check_block_layout(torch.ones(4, dtype=torch.bool), (2, 3, 4), 8)
    with pytest.raises(ValueError, match=r"layout of shape \(3, 5\) does not fit \(2, 3, 4\)"):
        check_block_layout(torch.ones(3, 5, dtype=torch.bool), (2, 3, 4), 8)
    with pytest.raises(ValueError, match=r"layout of shape \(3, 3, 4\) does not fit"):
        check_block_layout(torch.ones(3, 3, 4, dtype=torch.bool), (2, 3, 4), 8)


def test_check_embedding_pair():
    a, b = torch.zeros(3, 4), torch.zeros(2, 4)
    check_embedding_pair(a, b, paired=False)
    with pytest.raises(ValueError, match=r"must have the same batch size.*\(3, 4\) and \(2, 4\)"):
        check_embedding_pair(a, b, paired=True)
    with pytest.raises(ValueError, match=r"same embed_dim \(last dim\), got shapes"):
        check_embedding_pair(a, torch.zeros(3, 5), paired=False)
    with pytest.raises(TypeError, match=r"must share a dtype, got torch.float32 and"):
        check_embedding_pair(a, a.double(), paired=True)
    with pytest.raises(ValueError, match=r"text_emb must have 2 dimensions \[batch, embed_dim\]"):
        check_embedding_pair(a, torch.zeros(3), paired=False)


# --- every exact variant validates scale and causal through them ---------------------------

Q, K, V = random_qkv(1, 2, 8, 8, 4, 4, dtype=torch.float32)
LAYOUT = torch.ones(2, 2, dtype=torch.bool)

TAKES_SCALE = {
    "reference": lambda **kw: scaled_dot_product_attention(Q, K, V, **kw),
    "torch_sdpa": lambda **kw: torch_sdpa(Q, K, V, **kw),
    "attend": lambda **kw: attend(Q, K, V, **kw),
    "attend flash": lambda **kw: attend(Q, K, V, backend="flash", **kw),
    "flash": lambda **kw: flash_attention(Q, K, V, **kw),
    "chunked": lambda **kw: chunked_attention(Q, K, V, **kw),
    "sliding window": lambda **kw: sliding_window_attention(Q, K, V, left=1, right=1, **kw),
    "block sparse": lambda **kw: block_sparse_attention(Q, K, V, LAYOUT, block_size=4, **kw),
    "flex sliding window": lambda **kw: flex_sliding_window(Q, K, V, left=1, right=1, **kw),
    "flex block sparse": lambda **kw: flex_block_sparse(Q, K, V, LAYOUT, block_size=4, **kw),
    "probsparse": lambda **kw: probsparse_attention(Q, K, V, **kw),
    "triton": lambda **kw: triton_flash_attention(Q, K, V, **kw),
}
TAKES_CAUSAL = {
    name: TAKES_SCALE[name]
    for name in ("reference", "torch_sdpa", "attend", "flash", "chunked", "probsparse", "triton")
}
TAKES_CAUSAL["linear"] = lambda **kw: linear_attention(Q, K, V, **kw)


@pytest.mark.parametrize("name", list(TAKES_SCALE))
@pytest.mark.parametrize(
    ("scale", "error", "match"),
    [
        ("big", TypeError, r"scale must be a float or None, got str"),
        (True, TypeError, r"scale must be a float or None, got bool"),
        (math.nan, ValueError, r"scale must be finite, got nan"),
        (math.inf, ValueError, r"scale must be finite, got inf"),
    ],
)
def test_every_exact_variant_refuses_a_bad_scale_the_same_way(name, scale, error, match):
    with pytest.raises(error, match=match):
        TAKES_SCALE[name](scale=scale)


@pytest.mark.parametrize("name", list(TAKES_CAUSAL))
@pytest.mark.parametrize("causal", [1, None, "yes"])
def test_every_variant_with_causal_wants_a_bool(name, causal):
    with pytest.raises(TypeError, match=rf"causal must be a bool, got {type(causal).__name__}"):
        TAKES_CAUSAL[name](causal=causal)


# ---- helpers added for issue 13 ------------------------------------------------------------


def test_check_float_dtype_device_generator_dim():
    from attention._checks import check_device, check_dim, check_float_dtype, check_generator

    assert check_float_dtype("dtype", torch.float64) is torch.float64
    with pytest.raises(TypeError, match=r"dtype must be a floating-point dtype .* got torch.int8"):
        check_float_dtype("dtype", torch.int8)
    for ok in (None, "cpu", torch.device("cpu"), "cuda:1"):
        assert check_device("device", ok) == ok
    with pytest.raises(ValueError, match=r"device is not a valid device: 'tpu'"):
        check_device("device", "tpu")
    with pytest.raises(TypeError, match=r"device must be a torch.device.*got bool"):
        check_device("device", True)
    g = torch.Generator()
    assert check_generator("generator", g) is g and check_generator("generator", None) is None
    with pytest.raises(TypeError, match=r"generator must be a torch.Generator or None, got int"):
        check_generator("generator", 3)
    assert check_dim("dim", -3, 3) == -3 and check_dim("dim", 2, 3) == 2
    with pytest.raises(ValueError, match=r"dim must be in \[-3, 2\] for a 3-dim tensor, got -4"):
        check_dim("dim", -4, 3)


def test_check_module_input_is_the_one_dtype_rule():
    from torch import nn

    from attention._checks import check_module_input

    lin = nn.Linear(2, 2)
    x = torch.zeros(1, 2)
    assert check_module_input("x", x, lin) is x
    with pytest.raises(TypeError, match=r"x has dtype torch.float64 but the module's weights"):
        check_module_input("x", x.double(), lin)
    with pytest.raises(TypeError, match=r"x must be a floating-point tensor"):
        check_module_input("x", x.long(), lin)
    # a module without parameters takes any float dtype
    assert check_module_input("x", x.half(), nn.ReLU()).dtype == torch.float16
    # after module.to(dtype) the rule follows the weights
    assert check_module_input("x", x.double(), lin.double()).dtype == torch.float64


def test_check_mask_refuses_nan_and_pos_inf_but_keeps_neg_inf():
    from attention._checks import check_mask

    m = torch.zeros(2, 3)
    m[0, 1] = float("-inf")
    assert check_mask(m, (1, 1, 2, 3)) is m  # -inf = not allowed: fine
    m[1, 2] = float("nan")
    with pytest.raises(ValueError, match=r"got 1 NaN and 0 \+inf entries"):
        check_mask(m, (1, 1, 2, 3))


def test_the_public_checks_are_the_librarys_own_and_documented():
    import attention._checks as private
    import attention.checks as public

    assert public.__all__ == sorted(public.__all__) and len(public.__all__) >= 5
    for name in public.__all__:
        helper = getattr(public, name)
        assert helper is getattr(private, name)  # one definition, used by the library itself
        assert helper.__doc__, f"attention.checks.{name} has no docstring"
        assert f":func:`{name}`" in public.__doc__  # listed in the module's table
    assert public.check_positive_int("n", 3) == 3
    with pytest.raises(TypeError, match="n must be an int, got bool"):
        public.check_positive_int("n", True)
    with pytest.raises(ValueError, match=r"mode must be one of \['a', 'b'\], got 'c'"):
        public.check_choice("mode", "c", ("a", "b"))
