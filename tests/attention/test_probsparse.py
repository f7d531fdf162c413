"""probsparse_attention: dense attention for the selected queries, mean(V) for the rest."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attention.efficient.probsparse import n_selected, probsparse_attention, sparsity_measure
from attention.functional import scaled_dot_product_attention
from tests.attention.cost_probe import AllocationProbe
from tests.attention.inputs import input_grads, random_qkv


def _reference(q, k, v, index, causal):
    """float64: dense attention rows for the selected queries, (running) mean of V elsewhere."""
    q, k, v = (t.double() for t in (q, k, v))
    dense = scaled_dot_product_attention(q, k, v, causal=causal)  # (B, H, Lq, Ev)
    if causal:
        seen = torch.arange(1, v.shape[-2] + 1, dtype=v.dtype)[:, None]  # keys 0..i
        lazy = v.cumsum(dim=-2) / seen  # (B, H, L, Ev)
    else:
        lazy = v.mean(dim=-2, keepdim=True).expand_as(dense)  # (B, H, Lq, Ev)
    selected = torch.zeros(dense.shape[:-1], dtype=torch.bool).scatter(2, index, True)
    return torch.where(selected[..., None], dense, lazy)


cases = st.fixed_dictionaries(
    {
        "b": st.integers(1, 2),
        "h": st.integers(1, 3),
        "lq": st.integers(1, 60),
        "lk": st.integers(1, 60),
        "e": st.integers(1, 6),
        "ev": st.integers(1, 4),
        "factor": st.integers(1, 3),
        "causal": st.booleans(),
        "seed": st.integers(0, 2**16),
    }
)


@settings(max_examples=50, deadline=None)
@given(c=cases)
def test_matches_reference_given_selected_queries(c):
    lk = c["lq"] if c["causal"] else c["lk"]
    q, k, v = random_qkv(c["b"], c["h"], c["lq"], lk, c["e"], c["ev"], seed=c["seed"])
    out, index = probsparse_attention(
        q,
        k,
        v,
        factor=c["factor"],
        causal=c["causal"],
        generator=torch.Generator().manual_seed(c["seed"]),
        return_index=True,
    )
    u = n_selected(c["lq"], c["factor"])
    assert index.shape == (c["b"], c["h"], u)
    assert all(len(set(row.tolist())) == u for row in index.flatten(0, 1))  # distinct queries
    torch.testing.assert_close(out, _reference(q, k, v, index, c["causal"]))


@settings(max_examples=25, deadline=None)
@given(c=cases)
def test_gradients_match_reference(c):
    lk = c["lq"] if c["causal"] else c["lk"]
    q, k, v = random_qkv(c["b"], c["h"], c["lq"], lk, c["e"], c["ev"], requires_grad=True)
    out, index = probsparse_attention(
        q, k, v, factor=c["factor"], causal=c["causal"], return_index=True
    )
    ref = _reference(q, k, v, index, c["causal"])
    for got, want in zip(input_grads(out, (q, k, v)), input_grads(ref, (q, k, v)), strict=True):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("causal", [False, True])
def test_all_queries_selected_is_dense_attention(causal):
    # Lq = 20: u = 5 * ceil(ln 20) = 15 < 20 with factor 5, but 30 >= 20 with factor 10.
    q, k, v = random_qkv(2, 2, 20, 20, 8, 8, dtype=torch.float32, requires_grad=True)
    assert n_selected(20, 10) == 20
    out = probsparse_attention(q, k, v, factor=10, causal=causal)
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    torch.testing.assert_close(out, ref)
    for got, want in zip(input_grads(out, (q, k, v)), input_grads(ref, (q, k, v)), strict=True):
        torch.testing.assert_close(got, want)


def test_selects_the_peaked_queries():
    # Zero queries score every key alike: M = 0. Large random queries have a clear maximum.
    b, h, n, e, factor = 2, 3, 200, 8, 2
    u = n_selected(n, factor)  # 2 * ceil(ln 200) = 12
    q, k, v = random_qkv(b, h, n, n, e, e)
    peaked = torch.stack(
        [torch.randperm(n, generator=torch.Generator().manual_seed(i))[:u] for i in range(b * h)]
    ).view(b, h, u)  # (B, H, u)
    keep = torch.zeros(b, h, n, dtype=torch.bool).scatter(2, peaked, True)
    q = torch.where(keep[..., None], 10 * q, torch.zeros_like(q))
    _, index = probsparse_attention(q, k, v, factor=factor, return_index=True)
    assert torch.equal(index, peaked.sort(dim=-1).values)


def test_sparsity_measure_is_max_minus_mean_of_sampled_scores():
    q, k, _ = random_qkv(2, 2, 7, 9, 4, 4)
    sample = torch.tensor([8, 0, 3, 5])
    got = sparsity_measure(q, k, sample, scale=0.5)
    want = torch.empty(2, 2, 7, dtype=torch.float64)
    for b in range(2):
        for h in range(2):
            for i in range(7):
                s = [0.5 * float(q[b, h, i] @ k[b, h, j]) for j in sample.tolist()]
                want[b, h, i] = max(s) - sum(s) / len(s)
    torch.testing.assert_close(got, want)


def test_sparsity_measure_on_every_key_is_informer_eq4():
    q, k, _ = random_qkv(2, 3, 11, 13, 5, 5)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(5)  # (B, H, Lq, Lk)
    want = scores.max(dim=-1).values - scores.mean(dim=-1)
    got = sparsity_measure(q, k, torch.randperm(13), scale=1 / math.sqrt(5))
    torch.testing.assert_close(got, want)


def test_n_selected_follows_informer():
    assert n_selected(96, 5) == 5 * math.ceil(math.log(96)) == 25
    assert n_selected(1, 5) == 1  # ln 1 = 0: at least one
    assert n_selected(4, 5) == 4  # never more than the length
    assert n_selected(0, 5) == 0


def test_seeded_and_reproducible():
    q, k, v = random_qkv(1, 4, 300, 300, 8, 8)
    runs = [
        probsparse_attention(
            q, k, v, factor=1, generator=torch.Generator().manual_seed(s), return_index=True
        )[1]
        for s in (7, 7, 8)
    ]
    assert torch.equal(runs[0], runs[1])
    assert torch.equal(
        probsparse_attention(q, k, v, factor=1, return_index=True)[1],
        probsparse_attention(q, k, v, factor=1, return_index=True)[1],
    )


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_close_to_float32(dtype):
    q, k, v = random_qkv(2, 2, 40, 40, 16, 16, dtype=torch.float32)
    ref, index = probsparse_attention(q, k, v, factor=2, causal=True, return_index=True)
    out, index_h = probsparse_attention(
        q.to(dtype), k.to(dtype), v.to(dtype), factor=2, causal=True, return_index=True
    )
    assert out.dtype == dtype
    # Rounding may swap near-tied queries; compare with the reference for the chosen ones.
    torch.testing.assert_close(
        out.float(), _reference(q, k, v, index_h, True).float(), atol=2e-2, rtol=2e-2
    )


def test_never_allocates_an_l_by_l_tensor():
    n = 2**14  # one n × n float32 tensor: 1 GiB

    e = 4
    q, k, v = random_qkv(1, 1, n, n, e, e, dtype=torch.float32, requires_grad=True)
    with AllocationProbe() as probe:
        probsparse_attention(q, k, v, causal=True).sum().backward()
    # The largest tensors: the sampled scores (L, U) and the u selected score rows (u, L).
    n_samples = n_top = n_selected(n, 5)
    assert probe.largest <= 4 * n * max(n_samples, n_top, e)
    assert probe.largest < 4 * n * n // 100


@pytest.mark.parametrize(
    ("kwargs", "shapes", "error", "match"),
    [
        ({"factor": 0}, (9, 9), ValueError, "factor"),
        ({"factor": 2.5}, (9, 9), TypeError, "factor"),
        ({"causal": True}, (9, 7), ValueError, "causal"),
    ],
)
def test_bad_arguments_raise_clear_errors(kwargs, shapes, error, match):
    q, k, v = random_qkv(1, 2, shapes[0], shapes[1], 4, 4)
    with pytest.raises(error, match=match):
        probsparse_attention(q, k, v, **kwargs)


@pytest.mark.parametrize(
    ("sample", "error"),
    [
        (torch.zeros(5, 1, dtype=torch.long), ValueError),
        (torch.tensor([0, 5]), ValueError),
        (torch.tensor([-1]), ValueError),
        (torch.tensor([], dtype=torch.long), ValueError),
        (torch.tensor([0.0]), TypeError),
        ([0, 1], TypeError),
    ],
)
def test_bad_sample_index_raises(sample, error):
    q, k, _ = random_qkv(1, 1, 5, 5, 4, 4)
    with pytest.raises(error, match="sample_index"):
        sparsity_measure(q, k, sample, scale=1.0)
