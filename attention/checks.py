"""The library's argument checks, for code that builds on it.

Every public function of :mod:`attention` checks its arguments with these helpers, so that a bad
input fails with one kind of message: the argument's name, what it got and what was expected
(``TypeError`` for a wrong type or dtype, ``ValueError`` for a wrong value or shape). Code of
your own around the library (a model, an experiment, an ``attn_fn``) can check its arguments
the same way::

    from attention.checks import check_positive_int, check_rank, check_tensor

    def pool(x, *, window):
        check_rank("x", check_tensor("x", x), 3, "[batch, seq, dim]")
        window = check_positive_int("window", window)

Each returns the checked value, so that a check can be written where the value is used.

| helper | passes |
| --- | --- |
| :func:`check_tensor` | a ``torch.Tensor`` |
| :func:`check_float` | a floating-point tensor |
| :func:`check_rank` | a tensor with the given number of dimensions |
| :func:`check_positive_int` | an ``int`` > 0 (>= 0 with ``allow_zero=True``); not a ``bool`` |
| :func:`check_choice` | one of the given choices |
| :func:`check_even` | a positive even ``int`` (channels used in pairs: sin/cos, rotations) |
| :func:`check_base` | a number > 1 (the base of sinusoidal or rotary frequencies) |

The rest of the library's checks (masks, ``query``/``key``/``value`` shapes, scales, devices)
are private (``attention._checks``): they belong to its own signatures.
"""

from ._checks import (
    check_base,
    check_choice,
    check_even,
    check_float,
    check_positive_int,
    check_rank,
    check_tensor,
)

__all__ = [
    "check_base",
    "check_choice",
    "check_even",
    "check_float",
    "check_positive_int",
    "check_rank",
    "check_tensor",
]
