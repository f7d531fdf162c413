"""How far a gradient has to travel: sensitivity and path length against distance.

Two measurements used by chapter 1 (why RNNs forget) and chapter 5 (why attention does not):

- :func:`gradient_vs_distance`: for a sequence model ``y = fn(x)`` with ``x (B, L, D)`` and
  ``y (B, L, D_out)``, the size of the Jacobian block ``‖∂y_t / ∂x_j‖_F`` for every input
  position ``j``, reported against the distance ``t - j``. An RNN multiplies one Jacobian per
  step, so this shrinks geometrically with distance; one attention layer connects every pair
  directly, so it does not.
- :func:`path_lengths` and :func:`sequential_depth`: how many *rounds* of a model's mixing
  operation lie between input ``j`` and output ``t``, measured from values, not from how the
  code is written. A round applies the model's token-mixing step once, at every position in
  parallel: one layer of an attention stack (:func:`layer_rounds`), or one application of a
  recurrent cell to every position's previous state (:func:`recurrence_rounds`, which works
  for any torch RNN, fused or not, because it calls the module itself one step at a time).
  The path length from ``j`` to ``t`` is the fewest rounds after which ``∂y_t/∂x_j ≠ 0``
  (a per-token Jacobian, probed with a random vector): ``t - j + 1`` for an RNN, 1 for one
  attention layer, and *no path* (``None``) for a model that never mixes tokens. The
  sequential depth is the most rounds any output needs before it has felt every input: the
  number of steps that must run one after another: ``n`` for an RNN run step by step (a
  non-linear one cannot be run otherwise; a linear recurrence can, by a parallel scan).

The autograd graph is *not* a measure of dependence: ``torch.stack(tokens)`` creates one node
linked to every token, so a graph search finds a short "path" from every token to every
output even when the output depends on one token only. Everything here is measured on values.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from attention.checks import check_float, check_positive_int, check_rank, check_tensor

Tensor = torch.Tensor


@dataclass(frozen=True)
class GradientProfile:
    """``‖∂y_t / ∂x_j‖_F`` for one output position ``t`` and every input position ``j``.

    ``distances[j] = t - j`` (negative for inputs after ``t``, which only a non-causal model can
    see); ``norms[j]`` is the Frobenius norm of the ``(D_out, D)`` Jacobian block, averaged over
    the batch, in float64. ``per_example`` keeps the ``(B, L)`` values before the average.
    """

    position: int
    distances: Tensor  # (L,) int64
    norms: Tensor  # (L,) float64
    per_example: Tensor  # (B, L) float64

    def _band(self, low: int, high: int) -> Tensor:
        if low > high:
            raise ValueError(f"need low <= high, got low={low}, high={high}")
        keep = (self.distances >= low) & (self.distances <= high)  # (L,)
        if not bool(keep.any()):
            have = (int(self.distances.min()), int(self.distances.max()))
            raise ValueError(
                f"no position has a distance in [{low}, {high}]; distances span {have}"
            )
        return keep

    def band_mean(self, low: int, high: int) -> float:
        """Mean of ``norms`` over the positions with ``low <= distance <= high``."""
        return float(self.norms[self._band(low, high)].mean())

    def decay_per_step(self, low: int, high: int) -> float:
        """Least-squares fit of ``log norm = a + d · log r`` over ``low <= distance <= high``.

        Returns ``r``, the factor the gradient is multiplied by per step of distance: about
        ``|λ|`` for a linear RNN ``h_t = λ h_{t-1} + x_t``, 1 for a model that does not decay.
        Raises if a norm in the band is 0 (it underflowed: measure in float64).
        """
        keep = self._band(low, high)
        d = self.distances[keep].double()  # (n,)
        n = self.norms[keep]  # (n,)
        if d.numel() < 2:
            raise ValueError(f"need at least 2 distances in [{low}, {high}] to fit, got 1")
        if bool((n <= 0).any()):
            raise ValueError(
                f"a gradient norm in distances [{low}, {high}] is 0 (underflow?): measure in "
                f"float64 or narrow the band"
            )
        log_n = n.log()
        slope = ((d - d.mean()) * (log_n - log_n.mean())).sum() / ((d - d.mean()) ** 2).sum()
        return math.exp(float(slope))


def _position_index(position: int, length: int) -> int:
    """``position`` (negative counts from the end) as an index into a sequence of ``length``."""
    if isinstance(position, bool) or not isinstance(position, int):
        raise TypeError(f"position must be an int, got {type(position).__name__}")
    if not -length <= position < length:
        raise ValueError(
            f"position must be in [-{length}, {length}) for a sequence of {length}, got {position}"
        )
    return position % length


def gradient_vs_distance(
    fn: Callable[[Tensor], Tensor],
    x: Tensor,
    *,
    position: int = -1,
    n_probes: int | None = None,
    generator: torch.Generator | None = None,
) -> GradientProfile:
    """Measure ``‖∂y_t / ∂x_j‖_F`` for output position ``t = position`` and every input ``j``.

    Args:
        fn: the model, ``x (B, L, D) -> y (B, L, D_out)``. Examples must not interact (no
            BatchNorm across the batch): one backward pass then gives every example's gradient.
        x: inputs ``(B, L, D)``, floating point (float64 avoids underflow when a gradient
            shrinks by hundreds of orders of magnitude). It is not modified.
        position: the output position ``t`` (negative counts from the end).
        n_probes: ``None`` computes the Jacobian norm exactly, one backward pass per output
            feature. An int uses that many random Gaussian probes ``u`` and the unbiased
            estimate ``E ‖uᵀ J‖² = ‖J‖_F²`` (Hutchinson): cheaper when ``D_out`` is large.
        generator: for the probes.

    Returns:
        A :class:`GradientProfile`.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable (x -> y), got {type(fn).__name__}")
    check_float("x", x)
    check_rank("x", x, 3, "[batch, seq, dim]")
    b, l, _ = x.shape
    t = _position_index(position, l)
    if n_probes is not None:
        n_probes = check_positive_int("n_probes", n_probes)

    leaf = x.detach().clone().requires_grad_(True)  # (B, L, D)
    y = fn(leaf)
    check_tensor("fn(x)", y)
    if y.dim() != 3 or tuple(y.shape[:2]) != (b, l):
        raise ValueError(
            f"fn(x) must have shape (B, L, D_out) = ({b}, {l}, D_out), got {tuple(y.shape)}"
        )
    y_t = y[:, t]  # (B, D_out)
    d_out = y_t.shape[-1]
    if n_probes is None:
        probes = [
            torch.zeros_like(y_t).index_fill_(1, torch.tensor([k]), 1.0) for k in range(d_out)
        ]
    else:
        probes = [
            torch.randn(y_t.shape, generator=generator, dtype=y_t.dtype).to(y_t.device)
            for _ in range(n_probes)
        ]
    squared = torch.zeros(b, l, dtype=torch.float64, device=x.device)  # (B, L)
    for idx, u in enumerate(probes):
        # Summing over the batch is harmless: example b's output depends only on example b.
        (grad,) = torch.autograd.grad(
            (y_t * u).sum(), leaf, retain_graph=idx < len(probes) - 1, allow_unused=True
        )
        if grad is not None:
            squared += grad.double().pow(2).sum(-1)  # (B, L)
    if n_probes is not None:
        squared /= n_probes
    per_example = squared.sqrt()  # (B, L)
    distances = t - torch.arange(l, device=x.device)  # (L,)
    return GradientProfile(
        position=t, distances=distances, norms=per_example.mean(0), per_example=per_example
    )


# ------------------------------------------------------------------------------------------
# Path lengths in rounds of mixing, from per-token Jacobians
# ------------------------------------------------------------------------------------------

Rounds = Callable[[Tensor], Sequence[Tensor]]


def layer_rounds(layers: Sequence[Callable[[Tensor], Tensor]]) -> Rounds:
    """Rounds of a stack: ``x -> [f_1(x), f_2(f_1(x)), ...]``, one round per layer.

    Each ``f_k`` maps ``(B, L, D) -> (B, L, D')``; a layer needs the whole output of the one
    before it, and computes all positions at once.
    """
    layers = list(layers)
    if not layers or not all(callable(f) for f in layers):
        raise TypeError(f"layers must be a non-empty sequence of callables, got {layers!r}")

    def rounds(x: Tensor) -> list[Tensor]:
        outs = []
        for f in layers:
            x = f(x)  # (B, L, D')
            outs.append(x)
        return outs

    return rounds


_RNN_MODULES = (nn.RNN, nn.GRU, nn.LSTM)
_RNN_CELLS = (nn.RNNCell, nn.GRUCell, nn.LSTMCell)


def _step_of(rnn: nn.Module):
    """``(step, state_shapes)``: ``step(x (N, D), state) -> (out (N, H), state)`` with state a
    tuple of ``(N, *shape)`` tensors, calling ``rnn`` itself on one time step."""
    if isinstance(rnn, nn.LSTMCell):

        def step(x, state):
            h, c = rnn(x, state)  # (N, H) each
            return h, (h, c)

        return step, [(rnn.hidden_size,)] * 2
    if isinstance(rnn, _RNN_CELLS):

        def step(x, state):
            h = rnn(x, state[0])  # (N, H)
            return h, (h,)

        return step, [(rnn.hidden_size,)]
    if isinstance(rnn, _RNN_MODULES):
        if rnn.bidirectional:
            raise ValueError("rnn must be unidirectional: a bidirectional RNN reads both ways")
        if getattr(rnn, "proj_size", 0):
            raise ValueError(f"rnn must have proj_size=0, got {rnn.proj_size}")
        is_lstm = isinstance(rnn, nn.LSTM)
        shape = (rnn.num_layers, rnn.hidden_size)

        def step(x, state):
            s = tuple(t.transpose(0, 1).contiguous() for t in state)  # (layers, N, H) each
            seq = x.unsqueeze(1) if rnn.batch_first else x.unsqueeze(0)  # one time step
            out, new = rnn(seq, s if is_lstm else s[0])
            new = new if isinstance(new, tuple) else (new,)
            out = out[:, 0] if rnn.batch_first else out[0]  # (N, H)
            return out, tuple(t.transpose(0, 1) for t in new)  # (N, layers, H) each

        return step, [shape] * (2 if is_lstm else 1)
    raise TypeError(
        f"rnn must be a torch RNN module or cell (nn.RNN, nn.GRU, nn.LSTM, nn.RNNCell, "
        f"nn.GRUCell, nn.LSTMCell), got {type(rnn).__name__}"
    )


def recurrence_rounds(rnn: nn.Module, n_rounds: int | None = None) -> Rounds:
    """Rounds of a recurrent network, computed in parallel over positions (Jacobi iteration).

    Round ``k`` applies the network's own step, at every position ``t`` at once, to the input
    ``x_t`` and to the state position ``t - 1`` had after round ``k - 1`` (zeros before
    position 0 and before round 1). After round ``k`` the outputs at positions ``0 .. k - 1``
    are exact; after ``L`` rounds the whole output equals ``rnn(x)``: a recurrence needs ``L``
    rounds however it is implemented, fused (``nn.LSTM``) or a Python loop (``nn.LSTMCell``).
    Returns ``x (B, L, D) -> [y (B, L, H) after each round]``, ``n_rounds`` rounds (default
    ``L``). The step is the module called on one time step, so its weights are the module's.
    """
    step, shapes = _step_of(rnn)
    if n_rounds is not None:
        n_rounds = check_positive_int("n_rounds", n_rounds)

    def rounds(x: Tensor) -> list[Tensor]:
        check_float("x", x)
        check_rank("x", x, 3, "[batch, seq, dim]")
        b, l, d = x.shape
        flat = x.reshape(b * l, d)  # (B·L, D): every position is one row of the step's batch
        state = tuple(x.new_zeros(b * l, *shape) for shape in shapes)
        outs = []
        for _ in range(l if n_rounds is None else n_rounds):
            prev = []
            for s in state:  # position t gets the state of position t - 1; position 0 zeros
                s = s.reshape(b, l, *s.shape[1:])  # (B, L, ...)
                s = torch.cat([torch.zeros_like(s[:, :1]), s[:, :-1]], 1)  # shifted by one
                prev.append(s.reshape(b * l, *s.shape[2:]))
            out, state = step(flat, tuple(prev))
            outs.append(out.reshape(b, l, -1))  # (B, L, H)
        return outs

    return rounds


def path_lengths(
    rounds: Rounds,
    x: Tensor,
    *,
    position: int = -1,
    generator: torch.Generator | None = None,
) -> list[int | None]:
    """Fewest rounds after which output ``position`` depends on each input position.

    ``rounds(x)`` returns the model's outputs ``(B, L, D_out)`` after rounds ``1, 2, ...``
    (:func:`layer_rounds`, :func:`recurrence_rounds`). Entry ``j`` of the result is the
    smallest ``k`` with ``∂y^(k)_t / ∂x_j ≠ 0`` — measured: the gradient of ``u · y^(k)_t``
    for a random Gaussian ``u`` (zero for a non-zero Jacobian block with probability 0) — or
    ``None`` if no round makes ``y_t`` depend on ``x_j``: no path. Measure in float64, where a
    real but tiny dependence (an RNN's, after hundreds of steps) does not underflow to 0.
    """
    if not callable(rounds):
        raise TypeError(f"rounds must be callable (x -> outputs per round), got {rounds!r}")
    check_float("x", x)
    check_rank("x", x, 3, "[batch, seq, dim]")
    b, l, _ = x.shape
    t = _position_index(position, l)
    leaf = x.detach().clone().requires_grad_(True)  # (B, L, D)
    outs = list(rounds(leaf))
    if not outs:
        raise ValueError("rounds(x) must return at least one output, got none")
    found: list[int | None] = [None] * l
    for k, y in enumerate(outs, start=1):
        check_tensor(f"rounds(x)[{k - 1}]", y)
        if y.dim() != 3 or tuple(y.shape[:2]) != (b, l):
            raise ValueError(
                f"rounds(x)[{k - 1}] must have shape (B, L, D_out) = ({b}, {l}, D_out), got "
                f"{tuple(y.shape)}"
            )
        if not y.requires_grad:
            continue  # depends on no input at all
        u = torch.randn(y[:, t].shape, generator=generator, dtype=y.dtype).to(y.device)
        (grad,) = torch.autograd.grad(
            (y[:, t] * u).sum(), leaf, retain_graph=k < len(outs), allow_unused=True
        )
        if grad is None:
            continue
        reached = (grad != 0).flatten(2).any(-1).any(0)  # (L,)
        for j in torch.nonzero(reached).flatten().tolist():
            if found[j] is None:
                found[j] = k
    return found


def sequential_depth(rounds: Rounds, x: Tensor, *, generator: torch.Generator | None = None) -> int:
    """Rounds before the last output has felt every input it ever depends on.

    The largest entry of :func:`path_lengths` at the last position: the number of steps that
    must run one after another, because round ``k`` needs round ``k - 1``'s result. ``L`` for
    any recurrent network over ``L`` tokens, the number of layers (or fewer) for attention.
    """
    lengths = [p for p in path_lengths(rounds, x, generator=generator) if p is not None]
    if not lengths:
        raise ValueError("the last output depends on no input: no depth to measure")
    return max(lengths)
