"""book.pages.ch02 (the definitions chapter 2's page exports) against independent references:
the closed-form variance of a dot product, autograd's Jacobian of torch.softmax,
torch.distributions' entropy, a per-row loop over the retrieval batches, a float64
re-computation of the one-head model from its weights (embeddings, LayerNorm, projections,
each normaliser by hand), per-example backward passes, and a hand-written Adam loop."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from book.pages.ch02 import (
    QK_INITS,
    RetrievalBatch,
    RetrievalModel,
    dot_product_scores,
    dot_product_stats,
    gradient_snapshot,
    retrieval_batch,
    retrieval_loss,
    saturation_stats,
    shared_qk_scores,
    softmax_jacobian,
    train_retrieval,
    unit_variance_samples,
)
from tests.reference import naive_attention_float64

FAST = settings(max_examples=25, deadline=None)


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------------------------------
# §2.1: random sentences' scores with one projection or two
# ------------------------------------------------------------------------------------------


def test_shared_qk_scores_equal_the_projections_written_out():
    shared = shared_qk_scores(50, shared=True, seed=3)  # (S, L, L)
    torch.testing.assert_close(shared, shared.transpose(-2, -1))  # symmetric, as derived
    separate = shared_qk_scores(50, shared=False, seed=3)
    assert not torch.allclose(separate, separate.transpose(-2, -1), atol=1e-2)
    # Replay the documented draws (x, W_Q, W_K) and compute one sentence's scores by hand.
    g = _gen(3)
    x = torch.randn(50, 10, 16, generator=g)
    w_q = torch.randn(50, 16, 8, generator=g) / 4.0
    w_k = torch.randn(50, 16, 8, generator=g) / 4.0
    for i in (0, 49):
        want = (x[i].double() @ w_q[i].double()) @ (x[i].double() @ w_k[i].double()).T
        torch.testing.assert_close(separate[i].double(), want, rtol=1e-5, atol=1e-5)
        want_shared = (x[i].double() @ w_q[i].double()) @ (x[i].double() @ w_q[i].double()).T
        torch.testing.assert_close(shared[i].double(), want_shared, rtol=1e-5, atol=1e-5)
    with pytest.raises(ValueError, match="seq_len"):
        shared_qk_scores(2, shared=True, seq_len=0)


# ------------------------------------------------------------------------------------------
# C5: variance of q · k
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("distribution", ["normal", "uniform", "rademacher", "exponential"])
def test_unit_variance_samples_have_mean_0_and_variance_1(distribution):
    x = unit_variance_samples((200_000,), distribution, generator=_gen())
    assert x.dtype == torch.float32
    assert abs(float(x.mean())) < 0.01
    assert abs(float(x.var()) - 1.0) < 0.02


def test_unit_variance_samples_rejects_unknown_distribution():
    with pytest.raises(ValueError, match="distribution"):
        unit_variance_samples((3,), "cauchy")


@pytest.mark.parametrize("distribution", ["normal", "uniform", "rademacher", "exponential"])
@pytest.mark.parametrize("d_k", [1, 8, 64])
def test_dot_product_variance_matches_d_k(distribution, d_k):
    stats = dot_product_stats(d_k, 20_000, distribution=distribution, generator=_gen(d_k))
    # Theory: mean 0, variance d_k; 20k samples give a relative error of about 1-2 %.
    assert abs(stats.mean) < 4 * math.sqrt(d_k / 20_000)
    assert stats.var == pytest.approx(d_k, rel=0.06)
    assert stats.scaled_var == pytest.approx(1.0, rel=0.06)
    assert stats.scaled_var == pytest.approx(stats.var / d_k, rel=1e-9)


def test_dot_product_stats_equals_a_direct_computation():
    n, d_k = 1000, 12
    stats = dot_product_stats(d_k, n, generator=_gen(3), chunk=n)
    g = _gen(3)
    q, k = torch.randn(n, d_k, generator=g), torch.randn(n, d_k, generator=g)
    s = torch.einsum("nd,nd->n", q.double(), k.double())
    assert stats.mean == pytest.approx(float(s.mean()), abs=1e-9)
    assert stats.var == pytest.approx(float(s.var()), rel=1e-9)


def test_dot_product_stats_refuses_bad_arguments():
    with pytest.raises(ValueError, match="d_k"):
        dot_product_stats(0)
    with pytest.raises(ValueError, match="n_samples"):
        dot_product_stats(4, 1)
    with pytest.raises(TypeError, match="d_k"):
        dot_product_stats(4.0)


# ------------------------------------------------------------------------------------------
# C6: softmax saturation
# ------------------------------------------------------------------------------------------


@FAST
@given(n=st.integers(1, 7), rows=st.integers(1, 3), spread=st.floats(0.1, 20.0))
def test_softmax_jacobian_matches_autograd(n, rows, spread):
    s = torch.randn(rows, n, generator=_gen(n), dtype=torch.float64) * spread
    got = softmax_jacobian(torch.softmax(s, dim=-1))  # (rows, n, n)
    for r in range(rows):
        want = torch.autograd.functional.jacobian(lambda x: torch.softmax(x, dim=-1), s[r])
        torch.testing.assert_close(got[r], want)


def test_softmax_jacobian_vanishes_at_one_hot():
    p = torch.tensor([0.0, 1.0, 0.0])
    assert torch.equal(softmax_jacobian(p), torch.zeros(3, 3))


@pytest.mark.parametrize("n", [1, 2, 10, 64])
def test_saturation_of_equal_scores_is_the_uniform_case(n):
    sat = saturation_stats(torch.zeros(5, n))
    assert sat.max_weight == pytest.approx(1.0 / n)
    assert sat.entropy == pytest.approx(math.log(n), abs=1e-12)
    # |I/n - 11ᵀ/n²|_F = sqrt(n - 1) / n, worked out by hand.
    assert sat.jacobian_mean == pytest.approx(math.sqrt(n - 1) / n)
    assert sat.jacobian_median == pytest.approx(math.sqrt(n - 1) / n)


def test_saturation_stats_match_torch_references():
    s = torch.randn(50, 16, generator=_gen(1)) * 3.0
    sat = saturation_stats(s)
    entropy = torch.distributions.Categorical(logits=s.double()).entropy().mean()
    assert sat.entropy == pytest.approx(float(entropy), rel=1e-9)
    assert sat.max_weight == pytest.approx(float(torch.softmax(s.double(), -1).amax(-1).mean()))
    assert sat.score_std == pytest.approx(float(s.double().std()))
    norms = []
    for row in s.double():
        jac = torch.autograd.functional.jacobian(lambda x: torch.softmax(x, dim=-1), row)
        norms.append(float(jac.norm()))
    assert sat.jacobian_mean == pytest.approx(sum(norms) / len(norms), rel=1e-9)


def test_saturation_grows_with_the_spread_of_the_scores():
    base = torch.randn(400, 32, generator=_gen(2))
    low, high = saturation_stats(base), saturation_stats(base * 30.0)
    assert high.max_weight > 0.8 > 0.3 > low.max_weight
    assert high.entropy < 0.2 * low.entropy
    assert high.jacobian_median < 0.1 * low.jacobian_median


def test_saturation_stats_refuses_wrong_rank():
    with pytest.raises(ValueError, match="scores"):
        saturation_stats(torch.zeros(2, 3, 4))


def test_dot_product_scores_scaled_is_unscaled_over_sqrt_d_k():
    raw = dot_product_scores(200, 16, 256, scaled=False, generator=_gen(4))
    scaled = dot_product_scores(200, 16, 256, scaled=True, generator=_gen(4))
    assert raw.shape == (200, 16)
    torch.testing.assert_close(scaled, raw / 16.0)
    assert float(raw.var()) == pytest.approx(256.0, rel=0.1)


def test_saturation_stats_in_blocks_equals_one_block():
    scores = 5 * torch.randn(200, 9, generator=_gen(2))  # (R, n): over one block of 64 rows
    p = torch.softmax(scores.double(), -1)  # (R, n)
    norms = softmax_jacobian(p).flatten(-2).norm(dim=-1)  # (R,)
    stats = saturation_stats(scores)
    assert stats.jacobian_mean == pytest.approx(float(norms.mean()), rel=1e-12)
    assert stats.jacobian_median == pytest.approx(float(norms.median()), rel=1e-12)


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


# ------------------------------------------------------------------------------------------
# The training step and the gradient probe
# ------------------------------------------------------------------------------------------


def test_gradient_snapshot_agrees_with_the_model_forward():
    torch.manual_seed(0)
    model = RetrievalModel(16, 16, 8, 32, scaled=False)
    b = retrieval_batch(64, 6, 16, 16, generator=_gen(1))
    snap = gradient_snapshot(model, b)
    assert all(p.grad is None for p in model.parameters())
    F.cross_entropy(model(b.keys, b.values, b.query), b.target).backward()
    assert snap.w_q_grad_norm == pytest.approx(float(model.w_q.weight.grad.norm()), rel=1e-4)
    assert 0.1 <= snap.top_decile_share <= 1.0
    assert 0.0 <= snap.score_grad_median and snap.score_grad_mean > 0.0


def test_train_retrieval_is_deterministic_and_learns():
    kwargs = dict(
        d_k=16,
        steps=80,
        batch_size=32,
        n_pairs=4,
        n_keys=16,
        n_values=16,
        d_model=16,
        lr=3e-3,
        eval_size=256,
    )
    a = train_retrieval(scaled=True, **kwargs)
    b = train_retrieval(scaled=True, **kwargs)
    assert a.losses == b.losses and a.accuracy == b.accuracy
    assert len(a.losses) == 80
    assert sum(a.losses[-10:]) / 10 < 0.8 * sum(a.losses[:10]) / 10
    assert 0.0 <= a.accuracy <= 1.0
    c = train_retrieval(scaled=False, **{**kwargs, "steps": 1})
    assert c.init_score_std == pytest.approx(a.init_score_std * 4.0, rel=1e-4)


def test_train_retrieval_restores_the_thread_setting():
    before = torch.get_num_threads()
    run = train_retrieval(scaled=True, d_k=8, steps=2, batch_size=4, n_pairs=2, n_keys=4,
                          n_values=4, d_model=8, eval_size=8, num_threads=1)  # fmt: skip
    assert torch.get_num_threads() == before and len(run.losses) == 2
    with pytest.raises(ValueError, match="threads"):
        train_retrieval(scaled=True, steps=1, num_threads=0)


def test_chapter_2_shows_the_five_steps_before_any_training():
    """Issue 9, item 12: a newcomer meets the formula before any trained model."""
    from book.notebooks.common import REPO

    source = (REPO / "chapters" / "02_scaled_dot_product.py").read_text(encoding="utf-8")
    five_steps = source.index("## 2.3 The whole computation in five steps")
    first_training = source.index("train_retrieval(scaled=")
    assert five_steps < first_training
    assert source.index("print(retrieval_model)") < first_training  # the model, shown first


def test_retrieval_loss_is_the_mean_negative_log_likelihood():
    torch.manual_seed(0)
    model = RetrievalModel(10, 7, 8, 16).double()
    b = retrieval_batch(6, 4, 10, 7, generator=_gen(4))
    logits, _ = _reference(model, b)  # (B, n_values), float64, by hand
    log_p = logits - logits.exp().sum(-1, keepdim=True).log()  # (B, n_values)
    want = -sum(float(log_p[i, int(b.target[i])]) for i in range(6)) / 6
    assert float(retrieval_loss(model, b).detach()) == pytest.approx(want, rel=1e-9)


def test_gradient_snapshot_equals_per_example_backward_passes():
    """Each example's score gradient from its own loss, one backward pass per example."""
    torch.manual_seed(2)
    model = RetrievalModel(16, 16, 8, 32, scaled=False).double()
    b = retrieval_batch(40, 6, 16, 16, generator=_gen(5))
    snap = gradient_snapshot(model, b)
    norms = []
    for i in range(40):
        q, k, v = model.project(b.keys[i : i + 1], b.values[i : i + 1], b.query[i : i + 1])
        scores = (q @ k.transpose(-2, -1)).detach().requires_grad_(True)  # (1, 1, 1, N)
        weights = torch.softmax(scores * model.scale, dim=-1)  # (1, 1, 1, N)
        logits = model.readout((weights @ v)[:, 0, 0])  # (1, n_values)
        (grad,) = torch.autograd.grad(F.cross_entropy(logits, b.target[i : i + 1]), scores)
        norms.append(float((grad * model.scale).norm()))  # d loss / d (scaled scores)
    norms_t = torch.tensor(norms, dtype=torch.float64)
    assert snap.score_grad_mean == pytest.approx(float(norms_t.mean()), rel=1e-6)
    assert snap.score_grad_median == pytest.approx(float(norms_t.median()), rel=1e-6)
    top4 = norms_t.pow(2).sort(descending=True).values[:4].sum() / norms_t.pow(2).sum()
    assert snap.top_decile_share == pytest.approx(float(top4), rel=1e-6)


def test_train_retrieval_equals_a_hand_written_adam_loop():
    """Seeds as documented: parameters from ``seed``, batches from ``seed + 1``, the held-out
    batch from ``seed + 2``; Adam on the mean cross-entropy."""
    sizes = dict(batch_size=16, n_pairs=4, n_keys=12, n_values=12, d_model=8)
    run = train_retrieval(scaled=False, d_k=16, steps=5, lr=1e-2, seed=3, eval_size=64, **sizes)
    torch.manual_seed(3)
    model = RetrievalModel(12, 12, 8, 16, scaled=False)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    data = _gen(4)
    losses = []
    for _ in range(5):
        b = retrieval_batch(16, 4, 12, 12, generator=data)
        loss = F.cross_entropy(model(b.keys, b.values, b.query), b.target)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(float(loss))
    assert run.losses == pytest.approx(losses, rel=1e-5)
    held_out = retrieval_batch(64, 4, 12, 12, generator=_gen(5))
    with torch.no_grad():
        logits = model(held_out.keys, held_out.values, held_out.query)
    assert run.accuracy == pytest.approx(
        float((logits.argmax(-1) == held_out.target).float().mean())
    )
    assert run.scaled is False and run.d_k == 16
