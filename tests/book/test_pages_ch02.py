"""book.pages.ch02 (the definitions chapter 2's page exports) against independent references:
a per-row loop over the retrieval batches, and a float64 re-computation of the one-head model
from its weights, written out example by example (embeddings, LayerNorm, projections, each
normaliser by hand)."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from book.pages.ch02 import QK_INITS, RetrievalBatch, RetrievalModel, retrieval_batch
from tests.reference import naive_attention_float64

FAST = settings(max_examples=25, deadline=None)


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------------------------------
# The task
# ------------------------------------------------------------------------------------------


@FAST
@given(
    batch_size=st.integers(1, 6),
    n_pairs=st.integers(1, 6),
    extra_keys=st.integers(0, 5),
    n_values=st.integers(1, 9),
    seed=st.integers(0, 1000),
)
def test_retrieval_batch_is_a_valid_lookup(batch_size, n_pairs, extra_keys, n_values, seed):
    n_keys = n_pairs + extra_keys
    b = retrieval_batch(batch_size, n_pairs, n_keys, n_values, generator=_gen(seed))
    assert b.keys.shape == b.values.shape == (batch_size, n_pairs)
    assert b.query.shape == b.target.shape == (batch_size,)
    assert b.keys.dtype == b.values.dtype == b.query.dtype == b.target.dtype == torch.int64
    for row in range(batch_size):
        keys = b.keys[row].tolist()
        assert len(set(keys)) == n_pairs and all(0 <= k < n_keys for k in keys)
        assert all(0 <= v < n_values for v in b.values[row].tolist())
        position = keys.index(int(b.query[row]))
        assert int(b.target[row]) == int(b.values[row, position])


def test_retrieval_batch_draws_keys_values_and_query_in_that_order():
    """Same generator state, same batch; and the draws are the documented ones, replayed."""
    b = retrieval_batch(4, 3, 10, 7, generator=_gen(5))
    g = _gen(5)
    keys = torch.rand(4, 10, generator=g).argsort(-1)[:, :3]
    values = torch.randint(7, (4, 3), generator=g)
    pick = torch.randint(3, (4, 1), generator=g)
    assert torch.equal(b.keys, keys) and torch.equal(b.values, values)
    for row in range(4):
        assert int(b.query[row]) == int(keys[row, pick[row, 0]])
        assert int(b.target[row]) == int(values[row, pick[row, 0]])


def test_retrieval_batch_is_a_tuple_with_named_fields():
    b = retrieval_batch(2, 2, 4, 4, generator=_gen())
    assert isinstance(b, RetrievalBatch)
    keys, values, query, target = b  # chapter 9 unpacks it
    assert keys is b.keys and values is b.values and query is b.query and target is b.target


def test_retrieval_batch_refuses_bad_sizes():
    with pytest.raises(ValueError, match="n_pairs must be <= n_keys=4"):
        retrieval_batch(2, 5, 4, 3)
    with pytest.raises(ValueError, match="batch_size"):
        retrieval_batch(0, 1, 4, 3)
    with pytest.raises(TypeError, match="n_values"):
        retrieval_batch(2, 1, 4, 3.0)


# ------------------------------------------------------------------------------------------
# The model, against a float64 re-computation from its weights
# ------------------------------------------------------------------------------------------


def _layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    mean = x.mean()
    var = ((x - mean) ** 2).mean()  # biased, as LayerNorm
    return (x - mean) / math.sqrt(float(var) + 1e-5) * weight + bias


def _normalise(scores: torch.Tensor, normalizer: str, score_bias: float | None) -> torch.Tensor:
    """One row of scores (n,) → weights, each normaliser written out by hand."""
    n = scores.shape[0]
    if normalizer == "softmax":
        e = torch.exp(scores - scores.max())
        return e / e.sum()
    if normalizer == "sigmoid":
        b = -math.log(n) if score_bias is None else score_bias
        return 1.0 / (1.0 + torch.exp(-(scores + b)))
    top = scores.clamp(min=0) if normalizer == "relu" else scores
    return top / top.sum() if float(top.sum()) != 0 else torch.zeros_like(top)


def _reference(model: RetrievalModel, batch: RetrievalBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits (B, n_values) and weights (B, N) in float64, one example at a time."""
    p = {name: t.detach().double() for name, t in model.state_dict().items()}
    logits, weights = [], []
    for row in range(batch.keys.shape[0]):
        tokens = [
            _layer_norm(
                p["key_embedding.weight"][int(k)] + p["value_embedding.weight"][int(v)],
                p["norm.weight"],
                p["norm.bias"],
            )
            for k, v in zip(batch.keys[row], batch.values[row], strict=True)
        ]
        x = torch.stack(tokens)  # (N, D)
        x_q = _layer_norm(
            p["key_embedding.weight"][int(batch.query[row])], p["norm.weight"], p["norm.bias"]
        )  # (D,)
        q = p["w_q.weight"] @ x_q  # (d_k,)
        k = x @ p["w_k.weight"].T  # (N, d_k)
        v = x @ p["w_v.weight"].T  # (N, D)
        scale = 1 / math.sqrt(model.d_k) if model.scaled else 1.0
        w = _normalise((k @ q) * scale, model.normalizer, model.score_bias)  # (N,)
        logits.append(p["readout.weight"] @ (w @ v) + p["readout.bias"])
        weights.append(w)
    return torch.stack(logits), torch.stack(weights)


@pytest.mark.parametrize("scaled", [True, False])
@pytest.mark.parametrize(
    ("normalizer", "score_bias"),
    [("softmax", None), ("sigmoid", None), ("sigmoid", 0.0), ("relu", None), ("plain", None)],
)
def test_retrieval_model_equals_a_float64_recomputation(scaled, normalizer, score_bias):
    torch.manual_seed(0)
    model = RetrievalModel(
        10, 7, 8, 16, scaled=scaled, normalizer=normalizer, score_bias=score_bias
    ).double()
    b = retrieval_batch(5, 4, 10, 7, generator=_gen())
    logits, weights = model(b.keys, b.values, b.query, need_weights=True)
    assert logits.shape == (5, 7) and weights.shape == (5, 4)
    want_logits, want_weights = _reference(model, b)
    torch.testing.assert_close(weights, want_weights)
    torch.testing.assert_close(logits, want_logits)
    torch.testing.assert_close(model(b.keys, b.values, b.query), logits)  # logits alone
    if normalizer == "softmax":
        torch.testing.assert_close(weights.sum(-1), torch.ones(5, dtype=torch.float64))


def test_retrieval_model_attention_equals_naive_attention():
    """The softmax head is the textbook formula (tests.reference), given the projections."""
    torch.manual_seed(1)
    model = RetrievalModel(12, 9, 8, 16).double()
    b = retrieval_batch(6, 5, 12, 9, generator=_gen(2))
    q, k, v = model.project(b.keys, b.values, b.query)
    assert q.shape == (6, 1, 1, 16) and k.shape == (6, 1, 5, 16) and v.shape == (6, 1, 5, 8)
    out = naive_attention_float64(q, k, v)  # (B, 1, 1, D)
    torch.testing.assert_close(model(b.keys, b.values, b.query), model.readout(out[:, 0, 0]))


def test_float32_model_matches_its_float64_recomputation():
    torch.manual_seed(3)
    model = RetrievalModel(64, 64, 64, 512, scaled=False)
    b = retrieval_batch(8, 8, 64, 64, generator=_gen(3))
    logits = model(b.keys, b.values, b.query)
    want, _ = _reference(model, b)
    torch.testing.assert_close(logits.double(), want, atol=1e-4, rtol=1e-4)


def test_scaled_and_unscaled_models_start_from_the_same_weights():
    torch.manual_seed(7)
    a = RetrievalModel(10, 7, 8, 16, scaled=True)
    torch.manual_seed(7)
    b = RetrievalModel(10, 7, 8, 16, scaled=False, normalizer="sigmoid")
    for (name, p), (_, p2) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(p, p2), name
    assert a.scale == pytest.approx(0.25) and b.scale == 1.0


def test_initial_scores_have_the_spread_the_derivation_predicts():
    d_k = 256
    b = retrieval_batch(512, 8, 64, 64, generator=_gen())
    for scaled, want in ((False, math.sqrt(d_k)), (True, 1.0)):
        torch.manual_seed(0)
        model = RetrievalModel(64, 64, 32, d_k, scaled=scaled)
        with torch.no_grad():
            q, k, _ = model.project(b.keys, b.values, b.query)
            std = float((q @ k.transpose(-2, -1)).std()) * model.scale
        assert 0.8 * want < std < 1.25 * want


@pytest.mark.parametrize("qk_init", QK_INITS)
def test_retrieval_model_initialises_w_q_and_w_k_as_asked(qk_init):
    torch.manual_seed(0)
    model = RetrievalModel(10, 7, 256, 16, qk_init=qk_init)
    std = float(model.w_q.weight.detach().std())
    expected = 1 / math.sqrt(256) if qk_init == "normal" else 1 / math.sqrt(3 * 256)
    assert std == pytest.approx(expected, rel=0.05)
    torch.manual_seed(0)
    other = RetrievalModel(10, 7, 256, 16, qk_init="torch" if qk_init == "normal" else "normal")
    torch.testing.assert_close(model.readout.weight, other.readout.weight)  # the rest: the same


def test_retrieval_model_refuses_bad_arguments():
    with pytest.raises(ValueError, match="qk_init must be one of"):
        RetrievalModel(10, 7, 8, 16, qk_init="xavier")
    with pytest.raises(ValueError, match="normalizer must be one of"):
        RetrievalModel(10, 7, 8, 16, normalizer="sparsemax")
    with pytest.raises(ValueError, match="score_bias is only used by normalizer='sigmoid'"):
        RetrievalModel(10, 7, 8, 16, score_bias=0.0)
    model = RetrievalModel(10, 7, 8, 16)
    with pytest.raises(ValueError, match="keys"):
        model(
            torch.zeros(2, 3, dtype=torch.long),
            torch.zeros(2, 4, dtype=torch.long),
            torch.zeros(2, dtype=torch.long),
        )
    with pytest.raises(ValueError, match="keys must have shape"):
        model(torch.zeros(3, dtype=torch.long), torch.zeros(3, dtype=torch.long), torch.zeros(3))
