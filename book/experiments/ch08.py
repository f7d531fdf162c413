"""Experiments of chapter 8: writing multi-head attention by hand, and getting it wrong.

- :data:`LAYOUTS`: the right way to cut ``(B, L, D)`` into heads and glue them back, and the
  usual wrong ones (:class:`HeadLayout`: the split, the merge, their code as a reader would
  write it, and what they do to the data).
- :class:`HandMultiHeadAttention`: the article's multi-head module with the head layout as a
  parameter (parameter names as :class:`attention.heads.MultiHeadAttention`, so the two load
  each other's ``state_dict``); with the correct layout it *is* the package's layer.
- C28, :func:`train_layout`: the two-relation task of chapter 3 (previous token and partner,
  :func:`book.experiments.tasks.pairs_batch`) learnt by a one-layer model with each layout.
- The tests of a hand-written module (:data:`TESTS`): the article's three (shape, causal
  mask, non-zero gradients) and the ones that catch a wrong layout (comparison with
  ``nn.MultiheadAttention`` given the same weights, per-head independence, permutation
  equivariance, no leak from the future, the split/merge round trip). The three property
  tests (head independence, permutation, no future leak) and their input are defined on the
  chapter's page and imported from the module exported from it, :mod:`book.pages.ch08`.
- The asserting functions ``assert_c28_...`` raise ``AssertionError`` when the claim is false.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch
from torch import nn

from attention.blocks import FeedForward
from attention.checks import check_choice, check_positive_int
from attention.functional import scaled_dot_product_attention
from attention.heads import MultiHeadAttention
from attention.positional import RotaryEmbedding
from book.experiments.seeds import Spread, spread
from book.experiments.tasks import (
    RELATIONS,
    pairs_batch,
    pairs_loss,
    pairs_vocab_size,
    relation_accuracy,
)
from book.experiments.training import fit, torch_threads
from book.pages.ch08 import (
    TEST_SHAPE,
    _test_input,
    future_test,
    head_independence_test,
    permutation_test,
)

Tensor = torch.Tensor

# ------------------------------------------------------------------------------------------
# Head layouts: one right, several wrong
# ------------------------------------------------------------------------------------------


def _split_correct(x: Tensor, num_heads: int) -> Tensor:
    b, l, d = x.shape
    return x.view(b, l, num_heads, d // num_heads).transpose(1, 2)  # (B, H, L, Dh)


def _merge_correct(out: Tensor, b: int, l: int, d: int) -> Tensor:
    return out.transpose(1, 2).contiguous().view(b, l, d)  # (B, L, D)


def _split_reshape(x: Tensor, num_heads: int) -> Tensor:
    b, l, d = x.shape
    return x.view(b, num_heads, l, d // num_heads)  # (B, H, L, Dh): right shape, wrong content


def _merge_reshape(out: Tensor, b: int, l: int, d: int) -> Tensor:
    return out.reshape(b, l, d)  # (B, L, D): right shape, wrong content


def _merge_no_contiguous(out: Tensor, b: int, l: int, d: int) -> Tensor:
    return out.transpose(1, 2).view(b, l, d)  # raises once H > 1 and L > 1


def _split_transpose_first(x: Tensor, num_heads: int) -> Tensor:
    b, l, d = x.shape
    return x.transpose(1, 2).reshape(b, num_heads, l, d // num_heads)  # (B, H, L, Dh)


def _split_no_transpose(x: Tensor, num_heads: int) -> Tensor:
    b, l, d = x.shape
    return x.view(b, l, num_heads, d // num_heads)  # (B, L, H, Dh): "heads" play sequence


def _split_interleaved(x: Tensor, num_heads: int) -> Tensor:
    b, l, d = x.shape
    return x.view(b, l, d // num_heads, num_heads).permute(0, 3, 1, 2)  # (B, H, L, Dh)


@dataclass(frozen=True)
class HeadLayout:
    """One way to split ``(B, L, D)`` into heads and merge them back.

    ``split(x, num_heads)`` maps ``(B, L, D)`` to the 4-D tensor the attention runs on (for
    the right layout ``(B, H, L, Dh)``); ``merge(out, B, L, D)`` maps the attention's output
    back to ``(B, L, D)``. ``split_code`` and ``merge_code`` are the same operations as a
    reader writes them (``B, L, H, Dh, D`` as local names; ``tests/book`` checks they agree).
    """

    name: str
    split: Callable[[Tensor, int], Tensor]
    merge: Callable[[Tensor, int, int, int], Tensor]
    split_code: str
    merge_code: str
    effect: str  # what it does to the data, in a few words
    keeps_tokens: bool  # every head row holds one whole token's features, at its position
    silent: bool = True  # runs without error for H > 1


CORRECT = "correct"
LAYOUTS: dict[str, HeadLayout] = {
    layout.name: layout
    for layout in (
        HeadLayout(
            CORRECT,
            _split_correct,
            _merge_correct,
            "x.view(B, L, H, Dh).transpose(1, 2)",
            "out.transpose(1, 2).contiguous().view(B, L, D)",
            "head h gets features h*Dh ... (h+1)*Dh - 1 of every token",
            keeps_tokens=True,
        ),
        HeadLayout(
            "reshape split",
            _split_reshape,
            _merge_correct,
            "x.view(B, H, L, Dh)",
            "out.transpose(1, 2).contiguous().view(B, L, D)",
            "head h gets whole tokens (h*L/H onwards), each cut into H pieces of Dh",
            keeps_tokens=False,
        ),
        HeadLayout(
            "reshape merge",
            _split_correct,
            _merge_reshape,
            "x.view(B, L, H, Dh).transpose(1, 2)",
            "out.view(B, L, D)",
            "the heads' outputs are glued token-block by token-block: rows of tokens mix",
            keeps_tokens=False,
        ),
        HeadLayout(
            "reshape both",
            _split_reshape,
            _merge_reshape,
            "x.view(B, H, L, Dh)",
            "out.view(B, L, D)",
            "split and merge undo each other, but head h only sees tokens h*L/H ... "
            "(a block of the sequence), each cut into pieces",
            keeps_tokens=False,
        ),
        HeadLayout(
            "transpose first",
            _split_transpose_first,
            _merge_correct,
            "x.transpose(1, 2).reshape(B, H, L, Dh)",
            "out.transpose(1, 2).contiguous().view(B, L, D)",
            "head h keeps its features, read feature by feature: each 'token' mixes positions",
            keeps_tokens=False,
        ),
        HeadLayout(
            "no transpose",
            _split_no_transpose,
            _merge_reshape,
            "x.view(B, L, H, Dh)",
            "out.reshape(B, L, D)",
            "attention runs over each token's H slices: tokens never see each other",
            keeps_tokens=False,
        ),
        HeadLayout(
            "interleaved",
            _split_interleaved,
            _merge_correct,
            "x.view(B, L, Dh, H).permute(0, 3, 1, 2)",
            "out.transpose(1, 2).contiguous().view(B, L, D)",
            "head h gets features h, h+H, h+2H, ... of every token: a fixed permutation",
            keeps_tokens=True,
        ),
        HeadLayout(
            "no contiguous",
            _split_correct,
            _merge_no_contiguous,
            "x.view(B, L, H, Dh).transpose(1, 2)",
            "out.transpose(1, 2).view(B, L, D)",
            "the merge raises a RuntimeError (view of a transposed tensor)",
            keeps_tokens=True,
            silent=False,
        ),
    )
}
WRONG = tuple(name for name in LAYOUTS if name != CORRECT)
SILENT_WRONG = tuple(name for name in WRONG if LAYOUTS[name].silent)


def get_layout(layout: str | HeadLayout) -> HeadLayout:
    if isinstance(layout, HeadLayout):
        return layout
    return LAYOUTS[check_choice("layout", layout, tuple(LAYOUTS))]


def source_map(layout: str | HeadLayout, seq_len: int, d_model: int, num_heads: int) -> Tensor:
    """Where each entry of the split tensor comes from: ``(*split shape, 2)`` int64 holding
    (token, feature) of the input ``(1, L, D)`` (batch axis dropped)."""
    lay = get_layout(layout)
    token = torch.arange(seq_len).view(1, seq_len, 1).expand(1, seq_len, d_model)  # (1, L, D)
    feature = torch.arange(d_model).view(1, 1, d_model).expand(1, seq_len, d_model)
    both = torch.stack([token, feature], dim=-1).contiguous()  # (1, L, D, 2)
    # Split the (token, feature) pairs as if they were one value: apply the layout to each.
    parts = [lay.split(both[..., i].contiguous(), num_heads)[0] for i in range(2)]
    return torch.stack(parts, dim=-1)  # (H, L, Dh, 2) for the right layout


# ------------------------------------------------------------------------------------------
# The hand-written module
# ------------------------------------------------------------------------------------------


class HandMultiHeadAttention(nn.Module):
    """The article's multi-head self-attention, with the head ``layout`` as a parameter.

    ``q_proj, k_proj, v_proj, out_proj`` are ``nn.Linear(D, D)`` as in
    :class:`attention.heads.MultiHeadAttention` (their ``state_dict`` are interchangeable):
    with ``layout="correct"`` both compute the same thing. ``rotary`` is applied to q and k
    after the split, on whatever the layout made of them (as a buggy model would).
    """

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        *,
        layout: str | HeadLayout = CORRECT,
        bias: bool = True,
        rotary: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.d_model = check_positive_int("d_model", d_model)
        self.num_heads = check_positive_int("num_heads", num_heads)
        if d_model % num_heads:
            raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
        self.layout = get_layout(layout)
        self.rotary = rotary
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def forward(
        self,
        x: Tensor,
        *,
        mask: Tensor | None = None,
        causal: bool = False,
        need_weights: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """``x (B, L, D)`` → ``(B, L, D)`` (and the weights, ``(B, H, L, L)`` for the right
        layout, whatever shape the layout's attention had otherwise)."""
        b, l, d = x.shape
        split = self.layout.split
        q = split(self.q_proj(x), self.num_heads)  # (B, H, L, Dh) if the layout is right
        k = split(self.k_proj(x), self.num_heads)  # (B, H, L, Dh)
        v = split(self.v_proj(x), self.num_heads)  # (B, H, L, Dh)
        if self.rotary is not None:
            q, k = self.rotary(q), self.rotary(k)
        out, weights = scaled_dot_product_attention(
            q, k, v, mask, causal=causal, need_weights=True
        )  # (B, H, L, Dh), (B, H, L, L)
        out = self.out_proj(self.layout.merge(out, b, l, d))  # (B, L, D)
        return (out, weights) if need_weights else out


def make_attention(
    layout: str | HeadLayout, d_model: int = 12, num_heads: int = 2, *, seed: int = 0
) -> HandMultiHeadAttention:
    """A :class:`HandMultiHeadAttention` whose weights depend on ``seed`` only (not on the
    layout): every layout gets the same weights."""
    torch.manual_seed(seed)
    return HandMultiHeadAttention(d_model, num_heads, layout=layout)


def package_twin(module: nn.Module) -> MultiHeadAttention:
    """The package's :class:`MultiHeadAttention` with ``module``'s four projections."""
    twin = MultiHeadAttention(module.d_model, module.num_heads, bias=module.q_proj.bias is not None)
    twin.load_state_dict(
        {k: v for k, v in module.state_dict().items() if k.split(".")[0] in _PROJS}
    )
    return twin.train(module.training)


_PROJS = ("q_proj", "k_proj", "v_proj", "out_proj")


# ------------------------------------------------------------------------------------------
# C28: training each layout on a task that needs two heads
# ------------------------------------------------------------------------------------------


class LayoutPairModel(nn.Module):
    """Embedding → one pre-LN block (:class:`HandMultiHeadAttention` with ``layout`` and RoPE,
    then a feed-forward network) → the two digit read-outs of chapter 3's pairs task.

    ``forward(tokens (B, L))`` returns logits ``(B, L, 2, n_values)``.
    """

    def __init__(
        self,
        layout: str | HeadLayout,
        *,
        n_keys: int,
        n_values: int,
        d_model: int,
        num_heads: int,
    ) -> None:
        super().__init__()
        self.n_values = check_positive_int("n_values", n_values)
        self.embed = nn.Embedding(pairs_vocab_size(n_keys, n_values), d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = HandMultiHeadAttention(
            d_model, num_heads, layout=layout, rotary=RotaryEmbedding(d_model // num_heads)
        )
        self.norm2 = nn.LayerNorm(d_model)
        self.ff = FeedForward(d_model, 2 * d_model)
        self.norm = nn.LayerNorm(d_model)
        self.readout = nn.Linear(d_model, len(RELATIONS) * n_values)

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.embed(tokens)  # (B, L, D)
        x = x + self.attn(self.norm1(x))  # (B, L, D)
        x = x + self.ff(self.norm2(x))  # (B, L, D)
        logits = self.readout(self.norm(x))  # (B, L, 2 * n_values)
        return logits.unflatten(-1, (len(RELATIONS), self.n_values))  # (B, L, 2, n_values)


@dataclass(frozen=True)
class LayoutRun:
    """What :func:`train_layout` measured on the held-out batch."""

    layout: str
    seed: int
    losses: list[float]
    accuracy: tuple[float, float]  # (previous, partner)

    @property
    def mean_accuracy(self) -> float:
        return sum(self.accuracy) / len(self.accuracy)


def train_layout(
    layout: str,
    *,
    seed: int = 0,
    num_heads: int = 2,
    d_model: int = 32,
    n_pairs: int = 6,
    n_values: int = 8,
    steps: int = 300,
    batch_size: int = 64,
    lr: float = 1e-2,
    eval_size: int = 512,
    progress: bool = False,
    initial_state: Mapping[str, Tensor] | None = None,
) -> LayoutRun:
    """Train :class:`LayoutPairModel` with ``layout`` on chapter 3's two-relation task.

    Seeds as in :func:`book.experiments.ch03.train_pairs`: parameters from ``seed``, batches
    from ``seed + 1``, the held-out batch from ``seed + 2`` — every layout starts from the same
    weights and sees the same examples. One thread. ``initial_state`` (a ``state_dict`` of
    the model) replaces the initial weights drawn from ``seed``.
    """
    name = get_layout(layout).name
    torch.manual_seed(seed)
    model = LayoutPairModel(
        name, n_keys=n_pairs, n_values=n_values, d_model=d_model, num_heads=num_heads
    )
    if initial_state is not None:
        model.load_state_dict(initial_state)
    log = fit(
        model,
        lambda g: pairs_batch(batch_size, n_pairs, n_values, generator=g),
        lambda m, batch: pairs_loss(m(batch.tokens), batch.targets),
        steps=steps,
        lr=lr,
        data_seed=seed + 1,
        threads=1,
        progress=progress,
        desc=f"{name}, seed {seed}",
    )
    held_out = pairs_batch(
        eval_size, n_pairs, n_values, generator=torch.Generator().manual_seed(seed + 2)
    )
    with torch.no_grad(), torch_threads(1):
        accuracy = relation_accuracy(model(held_out.tokens), held_out.targets)
    return LayoutRun(name, seed, log.losses, accuracy)


def interleaved_twin_state(
    seed: int, *, num_heads: int = 2, d_model: int = 32, n_pairs: int = 6, n_values: int = 8
) -> dict[str, Tensor]:
    """The initial ``state_dict`` of a *correct*-layout :class:`LayoutPairModel` computing
    exactly what the interleaved model of :func:`train_layout` (same ``seed``) starts from."""
    torch.manual_seed(seed)
    model = LayoutPairModel(
        "interleaved", n_keys=n_pairs, n_values=n_values, d_model=d_model, num_heads=num_heads
    )
    return _permute_qkv(model.state_dict(), "attn.", _interleaved_permutation(d_model, num_heads))


# ------------------------------------------------------------------------------------------
# Tests of a hand-written attention module
# ------------------------------------------------------------------------------------------


def shape_test(module: nn.Module) -> bool:
    """The article's first test: ``(B, L, D)`` in, ``(B, L, D)`` out."""
    x = _test_input(module)  # (B, L, D)
    with torch.no_grad():
        return tuple(module(x).shape) == tuple(x.shape)


def causal_weights_test(module: nn.Module) -> bool:
    """The article's second test: with a causal mask, position 0 puts all its weight on
    position 0."""
    x = _test_input(module)
    with torch.no_grad():
        _, weights = module(x, causal=True, need_weights=True)  # (B, H, L, L)
    row = weights[..., 0, :]  # (B, H, L): query 0's weights
    return bool(torch.all(row[..., 0] == 1) and torch.all(row[..., 1:] == 0))


def gradient_test(module: nn.Module) -> bool:
    """The article's third test: after a backward pass every weight has a non-zero gradient."""
    m = copy.deepcopy(module)
    m.zero_grad(set_to_none=True)
    m(_test_input(m)).pow(2).sum().backward()
    return all(p.grad is not None and bool(p.grad.abs().sum() > 0) for p in m.parameters())


def torch_comparison_test(module: nn.Module, atol: float = 1e-5) -> bool:
    """The same output as ``nn.MultiheadAttention`` given the same weights (in the package's
    ``q_proj, k_proj, v_proj, out_proj`` layout; see :func:`package_twin`)."""
    x = _test_input(module)
    reference = package_twin(module).to_torch().eval()
    with torch.no_grad():
        want, _ = reference(x, x, x, need_weights=False)  # (B, L, D)
        return bool(torch.allclose(module(x), want, atol=atol))


@dataclass(frozen=True)
class ModuleTest:
    """A unit test of an attention module: ``run(module) -> True`` when it passes."""

    name: str
    run: Callable[[nn.Module], bool]
    from_article: bool


TESTS: dict[str, ModuleTest] = {
    t.name: t
    for t in (
        ModuleTest("shape", shape_test, True),
        ModuleTest("causal mask", causal_weights_test, True),
        ModuleTest("gradients", gradient_test, True),
        ModuleTest("vs nn.MultiheadAttention", torch_comparison_test, False),
        ModuleTest("head independence", head_independence_test, False),
        ModuleTest("permutation", permutation_test, False),
        ModuleTest("no future leak", future_test, False),
    )
}
ARTICLE_TESTS = tuple(name for name, t in TESTS.items() if t.from_article)

PASSED, FAILED, RAISED = "passes", "fails", "raises"


def run_test(test: str | ModuleTest, module: nn.Module) -> str:
    """``"passes"``, ``"fails"``, or ``"raises"`` (the module raised an exception)."""
    t = test if isinstance(test, ModuleTest) else TESTS[check_choice("test", test, tuple(TESTS))]
    try:
        return PASSED if t.run(module) else FAILED
    except RuntimeError:
        return RAISED


def outcome_table(
    layouts: Sequence[str] = tuple(LAYOUTS), *, d_model: int = 12, num_heads: int = 2
) -> dict[str, dict[str, str]]:
    """``table[layout][test]``: the outcome of every test on a module with that layout (the
    same weights for every layout)."""
    return {
        name: {
            test: run_test(test, make_attention(name, d_model, num_heads, seed=0)) for test in TESTS
        }
        for name in layouts
    }


def one_head_equal(
    layouts: Sequence[str] = WRONG, *, num_heads: int = 1, d_model: int = 12, seed: int = 0
) -> dict[str, bool]:
    """``{layout: torch.equal(its output, the correct layout's)}`` with the same weights."""
    x = torch.randn(*TEST_SHAPE, d_model, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        want = make_attention(CORRECT, d_model, num_heads, seed=seed)(x)
        equal = {}
        for name in layouts:
            try:
                equal[name] = torch.equal(
                    make_attention(name, d_model, num_heads, seed=seed)(x), want
                )
            except RuntimeError:
                equal[name] = False
    return equal


def _interleaved_permutation(d_model: int, num_heads: int) -> Tensor:
    """``(D,)``: feature ``perm[j]`` of a projection is what the interleaved split puts where
    the correct split puts feature ``j`` (head h, slot e <- feature e·H + h)."""
    return source_map("interleaved", 1, d_model, num_heads)[:, 0, :, 1].reshape(d_model)


def _permute_qkv(state: dict[str, Tensor], prefix: str, perm: Tensor) -> dict[str, Tensor]:
    """``state`` with the output features (rows) of ``prefix`` + ``q_proj/k_proj/v_proj``
    permuted by ``perm``; everything else untouched."""
    state = dict(state)
    for name in ("q_proj", "k_proj", "v_proj"):
        for part in ("weight", "bias"):
            key = f"{prefix}{name}.{part}"
            if key in state:
                state[key] = state[key][perm]
    return state


def interleaved_as_correct(module: HandMultiHeadAttention) -> HandMultiHeadAttention:
    """A correct-layout module computing exactly what the ``"interleaved"`` ``module`` does:
    its Q, K, V projections' output features permuted (head h, slot e <- feature e·H + h)."""
    if module.layout.name != "interleaved":
        raise ValueError(f"module must have the 'interleaved' layout, got {module.layout.name!r}")
    d, h = module.d_model, module.num_heads
    twin = HandMultiHeadAttention(
        d, h, layout=CORRECT, bias=module.q_proj.bias is not None, rotary=module.rotary
    )
    twin.load_state_dict(_permute_qkv(module.state_dict(), "", _interleaved_permutation(d, h)))
    return twin


# ------------------------------------------------------------------------------------------
# Asserting functions: each raises AssertionError when the claim it states is false
# ------------------------------------------------------------------------------------------


def assert_c28_ruins(
    accuracy: Mapping[str, Sequence[float]],
    *,
    keeps_tokens: Mapping[str, bool],
    min_correct: float,
    gap: float,
    reach: float,
) -> None:
    """C28, "a wrong view/transpose order ruins results", as predicted layout by layout.

    ``accuracy[layout]`` holds held-out accuracies over seeds (``accuracy["correct"]`` too).
    The correct layout must learn the task (every seed ``>= min_correct``). A layout that mixes
    tokens (``keeps_tokens[layout]`` False) must be ruined: mean at least ``gap`` below the
    correct mean and its best seed below the correct worst seed. A layout that only permutes
    each token's features must not be: its best seed within ``reach`` of the correct mean.
    """
    if CORRECT not in accuracy:
        raise ValueError(f"accuracy must hold the {CORRECT!r} layout, got {sorted(accuracy)}")
    right = spread(accuracy[CORRECT])
    assert right.min >= min_correct, (
        f"the correct layout did not learn the task: {right} < {min_correct}, so the "
        "experiment cannot tell a ruined variant from a hard task"
    )
    for name, values in accuracy.items():
        if name == CORRECT:
            continue
        s = spread(values)
        if keeps_tokens[name]:
            assert s.max >= right.mean - reach, (
                f"{name!r} only permutes features, yet its best seed {s.max:.3f} is more than "
                f"{reach} below the correct mean {right.mean:.3f}"
            )
        else:
            assert s.mean <= right.mean - gap and s.max < right.min, (
                f"{name!r} mixes tokens but is not ruined: {s} against correct {right} "
                f"(needed a mean {gap} lower and every seed below the correct worst)"
            )


def assert_c28_one_head(
    equal_one_head: Mapping[str, bool],
    equal_two_heads: Mapping[str, bool],
    invisible: Sequence[str],
) -> None:
    """ "With one head the bug is invisible": the layouts in ``invisible`` give exactly the
    correct output with one head and a different one with two; every other layout differs
    already with one head."""
    for name, same in equal_one_head.items():
        if name in invisible:
            assert same, f"{name!r} was predicted invisible with one head but its output differs"
            assert not equal_two_heads[name], f"{name!r} is not a bug: equal with two heads too"
        else:
            assert not same, f"{name!r} was predicted visible with one head but gives equal output"


def assert_tests_miss(
    table: Mapping[str, Mapping[str, str]], tests: Sequence[str], layouts: Sequence[str]
) -> None:
    """Every test in ``tests`` passes every module in ``layouts`` (it misses the bugs)."""
    caught = [(t, name) for name in layouts for t in tests if table[name][t] != PASSED]
    assert not caught, f"these tests caught these layouts: {caught}"


def assert_test_catches(
    table: Mapping[str, Mapping[str, str]], test: str, layouts: Sequence[str]
) -> None:
    """``test`` passes the correct layout and fails (or raises on) every one of ``layouts``."""
    assert table[CORRECT][test] == PASSED, f"{test!r} rejects the correct layout"
    missed = [name for name in layouts if table[name][test] == PASSED]
    assert not missed, f"{test!r} passes these wrong layouts: {missed}"


def accuracy_spreads(runs: Sequence[LayoutRun]) -> dict[str, Spread]:
    """Mean accuracy (both relations) over seeds, per layout, in the order first seen."""
    by_layout: dict[str, list[float]] = {}
    for run in runs:
        by_layout.setdefault(run.layout, []).append(run.mean_accuracy)
    return {name: spread(values) for name, values in by_layout.items()}


def assert_tests_catch_together(
    table: Mapping[str, Mapping[str, str]], tests: Sequence[str], layouts: Sequence[str]
) -> None:
    """The correct layout passes every test in ``tests``, and each of ``layouts`` fails (or
    raises on) at least one of them."""
    rejected = [t for t in tests if table[CORRECT][t] != PASSED]
    assert not rejected, f"these tests reject the correct layout: {rejected}"
    missed = [name for name in layouts if all(table[name][t] == PASSED for t in tests)]
    assert not missed, f"{list(tests)} together pass these wrong layouts: {missed}"
