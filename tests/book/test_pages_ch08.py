"""Chapter 8's page (:mod:`book.pages.ch08`, exported from
``chapters/08_attention_by_hand.py``): the head layouts against index formulas written
independently, the hand-written module against the package and torch, the two-relation model
and its training step, and the module tests against modules with known bugs."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from attention.heads import MultiHeadAttention, merge_heads, split_heads
from attention.positional import RotaryEmbedding
from book.claims import ch08 as claims
from book.pages import ch08 as page
from book.pages.ch08 import (
    CORRECT,
    LAYOUTS,
    SILENT_WRONG,
    WRONG,
    HandMultiHeadAttention,
    LayoutPairModel,
    future_test,
    head_independence_test,
    interleaved_as_correct,
    interleaved_twin_state,
    make_attention,
    package_twin,
    permutation_test,
    source_map,
    train_layout,
)

sizes = st.tuples(
    st.integers(1, 3), st.integers(1, 6), st.integers(1, 4), st.integers(1, 4)
)  # (B, L, H, Dh)


def _x(b, l, d, seed=0):
    return torch.randn(b, l, d, generator=torch.Generator().manual_seed(seed))


# --- layouts ----------------------------------------------------------------------------------


def _reference_split(name, x, h):
    """Each split as an index formula on the flat memory of x (B, L, D), entry by entry."""
    b, l, d = x.shape
    dh = d // h
    flat = x.reshape(b, l * d)
    xt = x.transpose(1, 2).reshape(b, d * l)  # memory of the (B, D, L) transpose
    if name == "no transpose":
        out = torch.empty(b, l, h, dh)
        for t in range(l):
            for i in range(h):
                out[:, t, i] = x[:, t, i * dh : (i + 1) * dh]
        return out
    out = torch.empty(b, h, l, dh)
    for i in range(h):
        for t in range(l):
            for e in range(dh):
                if name in ("correct", "reshape merge", "no contiguous"):
                    out[:, i, t, e] = x[:, t, i * dh + e]
                elif name in ("reshape split", "reshape both"):
                    out[:, i, t, e] = flat[:, i * l * dh + t * dh + e]
                elif name == "transpose first":
                    out[:, i, t, e] = xt[:, i * l * dh + t * dh + e]
                elif name == "interleaved":
                    out[:, i, t, e] = x[:, t, e * h + i]
    return out


@settings(max_examples=25, deadline=None)
@given(sizes)
def test_splits_match_index_formulas(size):
    b, l, h, dh = size
    x = _x(b, l, h * dh)
    for name, layout in LAYOUTS.items():
        torch.testing.assert_close(layout.split(x, h), _reference_split(name, x, h), rtol=0, atol=0)


@settings(max_examples=25, deadline=None)
@given(sizes)
def test_correct_layout_is_the_package_split_and_merge(size):
    b, l, h, dh = size
    x = _x(b, l, h * dh)
    layout = LAYOUTS[CORRECT]
    assert torch.equal(layout.split(x, h), split_heads(x, num_heads=h))
    out = _x(b * h, l, dh).reshape(b, h, l, dh)  # (B, H, L, Dh), contiguous like SDPA's output
    assert torch.equal(layout.merge(out, b, l, h * dh), merge_heads(out))


def test_merges_match_index_formulas():
    b, h, l, dh = 2, 3, 4, 5
    out = _x(b * h, l, dh).reshape(b, h, l, dh)
    flat = out.reshape(b, h * l * dh)
    straight = LAYOUTS["reshape merge"].merge(out, b, l, h * dh)
    for t in range(l):
        for f in range(h * dh):
            assert straight[0, t, f] == flat[0, t * h * dh + f]
    with pytest.raises(RuntimeError, match="view"):
        LAYOUTS["no contiguous"].merge(out, b, l, h * dh)


@pytest.mark.parametrize("name", list(LAYOUTS))
def test_code_strings_do_what_the_functions_do(name):
    layout = LAYOUTS[name]
    b, l, h, dh = 2, 5, 3, 4
    names = {"B": b, "L": l, "H": h, "Dh": dh, "D": h * dh}
    x = _x(b, l, h * dh)
    split = eval(layout.split_code, {}, {**names, "x": x})  # noqa: S307 - our own strings
    assert torch.equal(split, layout.split(x, h))
    out = _x(b * h, l, dh).reshape(split.shape)
    if layout.silent:
        merged = eval(layout.merge_code, {}, {**names, "out": out})  # noqa: S307
        assert torch.equal(merged, layout.merge(out, b, l, h * dh))
    else:
        with pytest.raises(RuntimeError):
            eval(layout.merge_code, {}, {**names, "out": out})  # noqa: S307


def test_keeps_tokens_labels_follow_from_the_source_map():
    """A layout keeps tokens iff every row of every head holds one token, at its position —
    computed from the split, and for the merge from a round trip of labelled heads."""
    l, d, h = 5, 12, 3
    for name, layout in LAYOUTS.items():
        where = source_map(name, l, d, h)  # (H', L', Dh, 2)
        positions = torch.arange(where.shape[1]).view(1, -1, 1)
        split_keeps = where.shape[1] == l and bool((where[..., 0] == positions).all())
        position = torch.arange(l).view(1, 1, l, 1).expand(1, h, l, d // h).contiguous()
        try:
            merged = layout.merge(position, 1, l, d)[0]  # (L, D): the position each cell holds
            merge_keeps = bool((merged == torch.arange(l).view(l, 1)).all())
        except RuntimeError:
            merge_keeps = True  # it never runs: the label is about the split
        assert layout.keeps_tokens == (split_keeps and merge_keeps), name


def test_source_map_of_the_correct_layout():
    where = source_map(CORRECT, 4, 6, 2)  # (H, L, Dh, 2)
    assert where.shape == (2, 4, 3, 2)
    assert where[1, 2, 0].tolist() == [2, 3]  # head 1, token 2, slot 0 = token 2, feature 3


def test_layout_registry():
    assert WRONG == tuple(n for n in LAYOUTS if n != CORRECT)
    assert SILENT_WRONG == tuple(n for n in WRONG if n != "no contiguous")
    with pytest.raises(ValueError, match="layout"):
        page.get_layout("sideways")


# --- the hand-written module ----------------------------------------------------------------


def test_hand_module_with_the_correct_layout_is_the_package_and_torch():
    d, h = 12, 3
    module = make_attention(CORRECT, d, h, seed=1)
    package = package_twin(module)
    torch_mha = package.to_torch()
    x = _x(2, 6, d)
    with torch.no_grad():
        torch.testing.assert_close(module(x), package(x))
        torch.testing.assert_close(module(x), torch_mha(x, x, x, need_weights=False)[0])
        torch.testing.assert_close(module(x, causal=True), package(x, causal=True))
        out, weights = module(x, need_weights=True)
        _, want = package(x, need_weights=True)
        torch.testing.assert_close(weights, want)
        assert out.shape == (2, 6, d) and weights.shape == (2, h, 6, 6)


def test_hand_module_with_rotary_is_the_package_with_rotary():
    d, h = 16, 2
    module = HandMultiHeadAttention(d, h, rotary=RotaryEmbedding(d // h))
    package = MultiHeadAttention(d, h, rotary=RotaryEmbedding(d // h))
    package.load_state_dict(module.state_dict())
    x = _x(2, 5, d)
    with torch.no_grad():
        torch.testing.assert_close(module(x), package(x))


def test_make_attention_gives_every_layout_the_same_weights():
    states = [make_attention(name, 8, 2, seed=3).state_dict() for name in LAYOUTS]
    for state in states[1:]:
        for key, value in state.items():
            assert torch.equal(value, states[0][key])


def test_hand_module_refuses_bad_sizes():
    with pytest.raises(ValueError, match="divisible"):
        HandMultiHeadAttention(10, 3)
    with pytest.raises(ValueError, match="layout"):
        HandMultiHeadAttention(12, 3, layout="upside down")


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.booleans())
def test_interleaved_is_the_correct_layout_with_permuted_weights(h, dh, bias):
    d = h * dh
    torch.manual_seed(h * 10 + dh)
    module = HandMultiHeadAttention(d, h, layout="interleaved", bias=bias)
    x = _x(2, 4, d)
    with torch.no_grad():
        torch.testing.assert_close(module(x), interleaved_as_correct(module)(x), rtol=0, atol=1e-6)


def test_interleaved_as_correct_refuses_other_layouts():
    with pytest.raises(ValueError, match="interleaved"):
        interleaved_as_correct(make_attention(CORRECT))


def test_interleaved_twin_state_starts_where_the_interleaved_model_starts():
    torch.manual_seed(4)
    interleaved = LayoutPairModel("interleaved", n_keys=6, n_values=8, d_model=32, num_heads=2)
    twin = LayoutPairModel(CORRECT, n_keys=6, n_values=8, d_model=32, num_heads=2)
    twin.load_state_dict(interleaved_twin_state(4))
    tokens = torch.randint(96, (3, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(interleaved(tokens), twin(tokens), rtol=0, atol=1e-6)


def test_layout_pair_model_shapes_and_training_determinism():
    model = LayoutPairModel(CORRECT, n_keys=3, n_values=4, d_model=8, num_heads=2)
    assert model(torch.randint(24, (2, 6))).shape == (2, 6, 2, 4)
    a = train_layout("reshape both", seed=0, d_model=8, n_pairs=3, n_values=4, steps=5,
                     eval_size=16)  # fmt: skip
    b = train_layout("reshape both", seed=0, d_model=8, n_pairs=3, n_values=4, steps=5,
                     eval_size=16)  # fmt: skip
    assert a.losses == b.losses and a.accuracy == b.accuracy and len(a.losses) == 5
    assert a.layout == "reshape both" and 0 <= a.mean_accuracy <= 1


def test_train_layout_uses_the_initial_state():
    kwargs = dict(d_model=8, n_pairs=3, n_values=4, steps=3, eval_size=16)
    torch.manual_seed(9)
    start = LayoutPairModel(CORRECT, n_keys=3, n_values=4, d_model=8, num_heads=2).state_dict()
    other_seed = train_layout(CORRECT, seed=0, initial_state=start, **kwargs)
    torch.manual_seed(9)
    same = LayoutPairModel(CORRECT, n_keys=3, n_values=4, d_model=8, num_heads=2).state_dict()
    again = train_layout(CORRECT, seed=0, initial_state=same, **kwargs)
    plain = train_layout(CORRECT, seed=0, **kwargs)
    assert other_seed.losses == again.losses != plain.losses


# --- the module tests -------------------------------------------------------------------------


class _Wrapped(nn.Module):
    """A correct module with one deliberate bug in its forward."""

    def __init__(self, bug: str) -> None:
        super().__init__()
        self.inner = make_attention(CORRECT, 12, 3, seed=0)
        self.d_model, self.num_heads = 12, 3
        self.q_proj, self.k_proj = self.inner.q_proj, self.inner.k_proj
        self.v_proj, self.out_proj = self.inner.v_proj, self.inner.out_proj
        self.bug = bug

    def forward(self, x, *, mask=None, causal=False, need_weights=False):
        if self.bug == "ignores causal":
            causal = False
        out, weights = self.inner(x, mask=mask, causal=causal, need_weights=True)
        if self.bug == "narrow output":
            out = out[..., :-1]
        if self.bug == "doubled output":
            out = 2 * out
        return (out, weights) if need_weights else out


def test_article_tests_catch_the_bugs_they_are_for():
    assert not page.shape_test(_Wrapped("narrow output"))
    assert not page.causal_weights_test(_Wrapped("ignores causal"))
    detached = _Wrapped("none")
    detached.inner.q_proj.weight.requires_grad_(False)  # no gradient reaches W_Q
    assert not page.gradient_test(detached)
    for test in claims.ARTICLE_TESTS:
        assert claims.run_test(test, make_attention(CORRECT)) == claims.PASSED


def test_reference_tests_pass_the_package_and_catch_known_bugs():
    package = MultiHeadAttention(12, 3)
    for name in claims.TESTS:
        assert claims.run_test(name, package) == claims.PASSED, name
    assert not page.torch_comparison_test(_Wrapped("doubled output"))
    assert permutation_test(_Wrapped("doubled output"))  # still equivariant
    assert not future_test(_Wrapped("ignores causal"))
    assert not permutation_test(_Shifted())


class _Shifted(HandMultiHeadAttention):
    """Each token gets the output of the next one: not permutation-equivariant."""

    def __init__(self) -> None:
        super().__init__(12, 3)

    def forward(self, x, *, mask=None, causal=False, need_weights=False):
        return super().forward(x, mask=mask, causal=causal).roll(1, dims=1)


def test_head_independence_catches_a_shared_head():
    """A module whose heads all read head 0's queries fails per-head independence."""

    class SharedQueries(HandMultiHeadAttention):
        def forward(self, x, *, mask=None, causal=False, need_weights=False):
            b, l, d = x.shape
            h, dh = self.num_heads, d // self.num_heads
            q = self.q_proj(x)[..., :dh].view(b, l, 1, dh).expand(b, l, h, dh).transpose(1, 2)
            k, v = (split_heads(p(x), num_heads=h) for p in (self.k_proj, self.v_proj))
            out = torch.softmax(q @ k.transpose(-2, -1) / dh**0.5, -1) @ v
            return self.out_proj(merge_heads(out))

    torch.manual_seed(0)
    assert not head_independence_test(SharedQueries(12, 3))
    assert head_independence_test(make_attention(CORRECT, 12, 3))
