"""How far a gradient has to travel: sensitivity and path length against distance.

Two measurements used by chapter 1 (why RNNs forget) and chapter 5 (why attention does not):

- :func:`gradient_vs_distance`: for a sequence model ``y = fn(x)`` with ``x (B, L, D)`` and
  ``y (B, L, D_out)``, the size of the Jacobian block ``‖∂y_t / ∂x_j‖_F`` for every input
  position ``j``, reported against the distance ``t - j``. An RNN multiplies one Jacobian per
  step, so this shrinks geometrically with distance; one attention layer connects every pair
  directly, so it does not.
- :func:`autograd_path_lengths` and :func:`autograd_depth`: count operations in the autograd
  graph. The shortest path from an input to an output is how many differentiable steps the
  gradient crosses (O(n) for an RNN, O(1) for attention); the longest path from the output to
  any input (the depth) is the critical path: how many steps must run one after another.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from attention._checks import check_float, check_positive_int, check_rank, check_tensor

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
    if isinstance(position, bool) or not isinstance(position, int):
        raise TypeError(f"position must be an int, got {type(position).__name__}")
    if not -l <= position < l:
        raise ValueError(f"position must be in [-{l}, {l}) for a sequence of {l}, got {position}")
    t = position % l
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
# Path lengths in the autograd graph
# ------------------------------------------------------------------------------------------


def _children(node) -> list:
    return [child for child, _ in node.next_functions if child is not None]


def _root(output: Tensor, name: str = "output"):
    check_tensor(name, output)
    if output.grad_fn is None:
        raise ValueError(
            f"{name} must be the result of differentiable operations on inputs that require "
            f"grad (it has no grad_fn)"
        )
    return output.grad_fn


def autograd_path_lengths(output: Tensor, inputs: Sequence[Tensor]) -> list[int | None]:
    """Fewest operations between each input and ``output`` in the autograd graph.

    ``inputs`` must be leaf tensors that require grad (e.g. one ``(B, D)`` leaf per token, fed
    to the model one by one). The length counts differentiable operations: ``y = x * 2`` gives
    1, ``y = (x * 2).sum()`` gives 2. ``None`` means the output does not depend on that input.

    The graph is structural: ``torch.stack(states)[-1]`` keeps an edge to *every* stacked
    state (their gradient is zero, but the edge exists), so take ``output`` from where it is
    computed (the final state of a loop, say) rather than from a slice of a stacked result.
    """
    root = _root(output)
    targets: dict[int, int] = {}
    for idx, t in enumerate(inputs):
        check_tensor(f"inputs[{idx}]", t)
        if not (t.is_leaf and t.requires_grad):
            raise ValueError(
                f"inputs[{idx}] must be a leaf tensor that requires grad (create it with "
                f"requires_grad=True and feed it to the model), got is_leaf={t.is_leaf}, "
                f"requires_grad={t.requires_grad}"
            )
        targets[id(t)] = idx
    found: list[int | None] = [None] * len(targets)
    # Breadth-first search: the first time a leaf's AccumulateGrad node is reached, the number
    # of edges walked is the number of operations on the shortest path.
    seen = {root}
    queue = deque([(root, 0)])
    while queue:
        node, dist = queue.popleft()
        variable = getattr(node, "variable", None)
        if variable is not None and id(variable) in targets:
            found[targets[id(variable)]] = dist
        for child in _children(node):
            if child not in seen:
                seen.add(child)
                queue.append((child, dist + 1))
    return found


def autograd_depth(output: Tensor) -> int:
    """The longest chain of operations in ``output``'s autograd graph (its critical path).

    Each operation needs the results of the ones below it, so no amount of parallel hardware
    can compute ``output`` in fewer than ``depth`` sequential steps. ``y = x * 2`` has depth 1;
    an RNN unrolled over ``n`` steps has depth proportional to ``n``; one attention layer has
    the same depth at every length.
    """
    root = _root(output)
    # Topological order from the root (iterative: an unrolled RNN is thousands of nodes deep),
    # then the longest distance from the root by dynamic programming.
    order, visited, stack = [], set(), [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:  # every child is finished: the node goes after them
            order.append(node)
            continue
        if node in visited:
            continue
        visited.add(node)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if child not in visited)
    longest = {node: 0 for node in order}
    for node in reversed(order):  # parents before children
        for child in _children(node):
            longest[child] = max(longest[child], longest[node] + 1)
    # Leaves (AccumulateGrad, or nodes with no inputs) end the chains; count operations only.
    ends = [
        longest[n] if getattr(n, "variable", None) is not None else longest[n] + 1
        for n in order
        if not _children(n)
    ]
    return max(ends)
