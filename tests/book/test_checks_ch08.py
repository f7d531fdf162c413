"""Chapter 8's exercise checks: a correct answer passes, each typical mistake fails with the
message that names it — in particular every wrong view/transpose order of exercise 08.2 gets
its own message."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from book.checks import CheckFailed, exercises_for_chapter
from book.checks.ch08 import LAYOUT_HINTS, future_zoo, layout_outputs
from book.claims.ch08 import c28_layout_run
from book.pages.ch08 import CORRECT, LAYOUTS, SILENT_WRONG, WRONG, make_attention
from book.sceptic import Outcome
from tests.book.check_outcomes import fails, fails_with, passes, run_check

EXERCISES = {ex.id: ex for ex in exercises_for_chapter("08")}


def test_all_five_exercises_are_registered():
    assert sorted(EXERCISES) == ["08.1", "08.2", "08.3", "08.4", "08.5"]


# --- 08.1 -------------------------------------------------------------------------------------


def unpack_right(mha):
    d = mha.embed_dim
    w = mha.in_proj_weight.detach()
    return w[:d].T, w[d : 2 * d].T, w[2 * d :].T, mha.out_proj.weight.detach().T


def test_unpack_weights():
    run_check("08.1", unpack_right)
    passes("08.1", lambda m: tuple(t.T for t in m.in_proj_weight.detach().chunk(3)) + (
        m.out_proj.weight.detach().T,))  # fmt: skip
    fails("08.1", lambda m: tuple(t.T for t in unpack_right(m)), "transposed")
    fails("08.1", lambda m: (lambda q, k, v, o: (k, q, v, o))(*unpack_right(m)), "your w_q is W_K")
    fails("08.1", lambda m: (lambda q, k, v, o: (q, k, v, v))(*unpack_right(m)), "your w_o is W_V")
    fails("08.1", lambda m: tuple(m.in_proj_weight.detach().chunk(3, dim=1)) + (None,), "dim 0")
    fails("08.1", lambda m: unpack_right(m)[:3], "four matrices")
    fails("08.1", lambda m: tuple(2 * t for t in unpack_right(m)), "off by up to")


def test_unpack_weights_reports_a_crash():
    fails_with("08.1", lambda m: m.q_proj_weight.T, "AttributeError")


# --- 08.2: every wrong layout, written as a learner would -------------------------------------


def _qkv(module, x, split):
    return (split(p(x)) for p in (module.q_proj, module.k_proj, module.v_proj))


def _attend(q, k, v):
    return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1) @ v


def forward_with(split_kind: str, merge_kind: str):
    """A learner's forward pass, with the split and merge written out independently of the
    book's layout functions."""

    def forward(module, x):
        b, l, d = x.shape
        h = module.num_heads
        dh = d // h
        splits = {
            "right": lambda t: t.view(b, l, h, dh).transpose(1, 2),
            "straight": lambda t: t.reshape(b, h, l, dh),
            "transpose first": lambda t: t.transpose(1, 2).reshape(b, h, l, dh),
            "no transpose": lambda t: t.reshape(b, l, h, dh),
            "interleaved": lambda t: t.reshape(b, l, dh, h).permute(0, 3, 1, 2),
        }
        merges = {
            "right": lambda t: t.permute(0, 2, 1, 3).reshape(b, l, d),
            "straight": lambda t: t.reshape(b, l, d),
            "no contiguous": lambda t: t.transpose(1, 2).view(b, l, d),
        }
        q, k, v = _qkv(module, x, splits[split_kind])
        return module.out_proj(merges[merge_kind](_attend(q, k, v)))

    return forward


LEARNER_LAYOUTS = {
    "reshape split": ("straight", "right"),
    "reshape merge": ("right", "straight"),
    "reshape both": ("straight", "straight"),
    "transpose first": ("transpose first", "right"),
    "no transpose": ("no transpose", "straight"),
    "interleaved": ("interleaved", "right"),
}


def test_forward_right():
    run_check("08.2", forward_with("right", "right"))


def test_every_silent_layout_has_a_hint():
    assert set(LEARNER_LAYOUTS) == set(SILENT_WRONG) == set(LAYOUT_HINTS)


@pytest.mark.parametrize("name", list(LEARNER_LAYOUTS))
def test_forward_names_each_wrong_layout(name):
    split_kind, merge_kind = LEARNER_LAYOUTS[name]
    fails("08.2", forward_with(split_kind, merge_kind), f"the '{name}' layout")


def test_forward_missing_contiguous():
    fails("08.2", forward_with("right", "no contiguous"), "not contiguous in memory")


def test_wrong_layouts_are_distinguishable_on_the_check_inputs():
    """No two layouts give the same output on the check's inputs, so a message cannot name the
    wrong one."""
    from book.checks import randn
    from book.checks.ch08 import _module, _reference
    from book.checks.helpers import matches

    for b, l, d, h, seed in ((2, 5, 12, 3, 3), (1, 4, 8, 2, 4)):
        module = _module("correct", d, h, seed)
        x = randn(b, l, d, seed=seed)
        with torch.no_grad():
            outs = {"correct": _reference(module, x), **layout_outputs(module, x)}
        names = list(outs)
        for i, a in enumerate(names):
            for other in names[i + 1 :]:
                assert not matches(outs[a], outs[other]), (a, other)


def test_forward_other_mistakes():
    def scaled_by_d(module, x):
        b, l, d = x.shape
        h = module.num_heads
        q, k, v = _qkv(module, x, lambda t: t.view(b, l, h, d // h).transpose(1, 2))
        w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d), dim=-1)
        return module.out_proj((w @ v).transpose(1, 2).reshape(b, l, d))

    def softmax_dim_2(module, x):
        b, l, d = x.shape
        h = module.num_heads
        q, k, v = _qkv(module, x, lambda t: t.view(b, l, h, d // h).transpose(1, 2))
        w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d // h), dim=-2)
        return module.out_proj((w @ v).transpose(1, 2).reshape(b, l, d))

    def no_out_proj(module, x):
        b, l, d = x.shape
        h = module.num_heads
        q, k, v = _qkv(module, x, lambda t: t.view(b, l, h, d // h).transpose(1, 2))
        return _attend(q, k, v).transpose(1, 2).reshape(b, l, d)

    fails("08.2", scaled_by_d, r"sqrt\(D\)")
    fails("08.2", softmax_dim_2, "over the queries")
    fails("08.2", no_out_proj, "out_proj")
    fails("08.2", lambda m, x: forward_with("right", "right")(m, x) - m.out_proj.bias, "bias")
    fails("08.2", lambda m, x: x[:, :2], "shape")


# --- 08.3 -------------------------------------------------------------------------------------


def _torch_twin(module, *, copy_biases=True, batch_first=True):
    d, h = module.d_model, module.num_heads
    ref = nn.MultiheadAttention(d, h, batch_first=batch_first)
    projs = (module.q_proj, module.k_proj, module.v_proj)
    with torch.no_grad():
        ref.in_proj_weight.copy_(torch.cat([p.weight for p in projs]))
        ref.out_proj.weight.copy_(module.out_proj.weight)
        if copy_biases:
            ref.in_proj_bias.copy_(torch.cat([p.bias for p in projs]))
            ref.out_proj.bias.copy_(module.out_proj.bias)
        else:
            ref.in_proj_bias.zero_()
            ref.out_proj.bias.zero_()
    return ref


def matches_torch_with(**kwargs):
    def test(module):
        ref = _torch_twin(module, **kwargs)
        x = torch.randn(2, 5, module.d_model, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            return torch.allclose(module(x), ref(x, x, x)[0], atol=1e-5)

    return test


def shapes_only(module):
    x = torch.randn(2, 5, module.d_model)
    with torch.no_grad():
        return module(x).shape == x.shape


def test_matches_torch():
    run_check("08.3", matches_torch_with())
    fails("08.3", matches_torch_with(copy_biases=False), "biases")
    fails("08.3", matches_torch_with(batch_first=False), "rejects a correct module")
    fails("08.3", shapes_only, "passes a module with the 'reshape split' layout")
    fails("08.3", lambda m: "yes", "True or False")


def test_matches_torch_lets_a_learners_own_crash_through():
    def broken(module):
        raise RuntimeError("my own bug")

    fails_with("08.3", broken, "RuntimeError", "my own bug")


def test_matches_torch_names_the_layout_that_slips_through():
    """A test that happens to catch some layouts but not all is told which one it missed."""

    def only_permutation(module):  # catches the token-mixing layouts only
        x = torch.randn(2, 5, module.d_model, generator=torch.Generator().manual_seed(0))
        perm = torch.tensor([4, 2, 0, 1, 3])
        with torch.no_grad():
            return torch.allclose(module(x[:, perm]), module(x)[:, perm], atol=1e-5)

    fails("08.3", only_permutation, "'no transpose' layout")


# --- 08.4 -------------------------------------------------------------------------------------


def leaks_with(first_changed: int):
    """A learner's leak test that changes the tokens from ``t + first_changed`` on and compares
    the outputs up to ``t``: ``1`` is right, ``2`` an off-by-one in the test."""

    def leaks(module):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(2, 6, module.d_model, generator=g)
        with torch.no_grad():
            base = module(x, causal=True)
            for t in range(x.shape[1] - first_changed):
                other = x.clone()
                start = t + first_changed
                other[:, start:] = torch.randn(other[:, start:].shape, generator=g)
                if not torch.allclose(module(other, causal=True)[:, : t + 1], base[:, : t + 1]):
                    return True
        return False

    return leaks


leaks_right = leaks_with(1)


def article_mask_test(module):
    """The article's test, as a leak detector: looks only at query 0's weights."""
    x = torch.randn(2, 6, module.d_model)
    with torch.no_grad():
        _, w = module(x, causal=True, need_weights=True)
    return not bool(torch.all(w[..., 0, 1:] == 0))


def whole_output(module):
    """Compares every position, including those allowed to change."""
    x = torch.randn(2, 6, module.d_model, generator=torch.Generator().manual_seed(0))
    other = x.clone()
    other[:, 3:] = 0
    with torch.no_grad():
        return not torch.allclose(module(x, causal=True), module(other, causal=True))


def last_token_only(module):
    """A leak test that only changes the last token: blind to a leak into position 0."""
    x = torch.randn(2, 6, module.d_model, generator=torch.Generator().manual_seed(0))
    other = x.clone()
    other[:, -1] = 0
    with torch.no_grad():
        return not torch.allclose(
            module(x, causal=True)[:, :-1], module(other, causal=True)[:, :-1]
        )


def test_leaks_future():
    run_check("08.4", leaks_right)
    fails("08.4", last_token_only, "prefix-LM-style leak.* does not leak")
    fails("08.4", article_mask_test, "'reshape split' layout.* does not leak")
    fails("08.4", whole_output, "leaks the future, but it does not")
    fails("08.4", leaks_with(2), "position t see t \\+ 1")


def test_future_zoo_truths():
    """The zoo holds leaking and non-leaking modules, so that both kinds of error are seen."""
    truths = [leaks_right(m) for m in future_zoo().values()]
    assert any(truths) and not all(truths)
    assert not leaks_right(make_attention("correct"))


def test_layout_outputs_cover_every_silent_layout():
    module = make_attention("correct")
    x = torch.randn(1, 4, module.d_model)
    assert set(layout_outputs(module, x)) == {n for n in WRONG if LAYOUTS[n].silent}


# --- 08.5 predict, then run -------------------------------------------------------------------


def _layout_outcome(verdict: str, steps: int) -> Outcome:
    """What ``c28_layout_run(layout="interleaved", seed=2, steps=steps)`` returns (its keys;
    the verdicts measured: "reproduced" at 300 steps, "not reproduced" at 600)."""
    return Outcome(verdict, {"layout": "interleaved", "seed": 2, "steps": steps, "heads": 2})


def test_predicting_the_unlucky_seed_at_a_longer_budget():
    check_85 = EXERCISES["08.5"].check
    run = _layout_outcome("not reproduced", 600)
    check_85(lambda: "not reproduced", outcome=run)
    with pytest.raises(CheckFailed, match="gives 'not reproduced'.*budget effect"):
        check_85(lambda: "reproduced", outcome=run)
    with pytest.raises(CheckFailed, match="not more than the chapter's 300"):
        check_85(lambda: "reproduced", outcome=_layout_outcome("reproduced", 300))
    with pytest.raises(CheckFailed, match="outcome should be the Outcome"):
        check_85(lambda: "not reproduced", outcome=None)


def test_the_exercise_runner_runs_and_judges_a_tiny_budget():
    out = c28_layout_run(layout="interleaved", seed=2, steps=2)
    assert out.verdict == "not reproduced"  # the correct layout has not learnt: nothing judged
    assert out.numbers["steps"] == 2 and out.numbers["layout"] == "interleaved"
    with pytest.raises(ValueError, match="wrong layout"):
        c28_layout_run(layout=CORRECT, seed=0, steps=2)
