"""Chapter 5's page (book.pages.ch05) against independent references: per-row loops over the
generated documents, and a manual forward pass for the attention maps. (The attn_fn adapters
the chapter trains are the library's: tests/attention/test_adapters.py.)"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attention.blocks import SequenceClassifier
from attention.efficient.adapters import SlidingWindowAttnFn
from book.pages.ch05 import (
    VOCAB,
    accuracy,
    attention_maps,
    classifier,
    document_vocab_size,
    documents_of_length,
    link_summary,
    predicted_accuracy,
    reach_after,
    topic_attention,
    topic_documents,
)

FAST = settings(max_examples=25, deadline=None)
SMALL = dict(d_model=8, num_heads=2, num_layers=1, d_ff=16, max_len=24)  # a tiny classifier


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------------------------------
# topic_documents
# ------------------------------------------------------------------------------------------


@FAST
@given(
    batch=st.integers(1, 6),
    seq_len=st.integers(2, 40),
    n_topics=st.integers(2, 4),
    n_fillers=st.integers(1, 5),
    seed=st.integers(0, 10_000),
)
def test_documents_follow_the_recipe_row_by_row(batch, seq_len, n_topics, n_fillers, seed):
    docs = topic_documents(
        batch, seq_len, n_topics=n_topics, n_fillers=n_fillers, generator=_gen(seed)
    )
    span = max(1, seq_len // 4)
    assert docs.tokens.shape == (batch, seq_len) and docs.tokens.dtype == torch.int64
    for b in range(batch):
        row = docs.tokens[b].tolist()
        topic, conclusion = int(docs.topics[b]), int(docs.conclusions[b])
        pos = int(docs.topic_positions[b])
        assert 0 <= pos < span
        assert row[pos] == topic < n_topics
        assert row[-1] == n_topics + conclusion
        others = [t for j, t in enumerate(row) if j not in (pos, seq_len - 1)]
        assert all(2 * n_topics <= t < 2 * n_topics + n_fillers for t in others)
        assert int(docs.labels[b]) == (topic + conclusion) % n_topics
    assert int(docs.tokens.max()) < document_vocab_size(n_topics, n_fillers)


def test_documents_are_reproducible_and_balanced():
    a = topic_documents(4000, 16, generator=_gen(3))
    b = topic_documents(4000, 16, generator=_gen(3))
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.labels, b.labels)
    # Neither token alone tells the label.
    for part in (a.topics, a.conclusions):
        for i in range(2):
            assert abs(a.labels[part == i].float().mean().item() - 0.5) < 0.04


def test_topic_span_is_respected():
    docs = topic_documents(500, 20, topic_span=19, generator=_gen(1))
    assert int(docs.topic_positions.max()) == 18
    docs = topic_documents(200, 20, topic_span=1, generator=_gen(1))
    assert bool((docs.topic_positions == 0).all())


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"batch_size": 0, "seq_len": 8}, ValueError, "batch_size"),
        ({"batch_size": 2, "seq_len": 1}, ValueError, "seq_len"),
        ({"batch_size": 2, "seq_len": 8, "n_topics": 1}, ValueError, "n_topics"),
        ({"batch_size": 2, "seq_len": 8, "topic_span": 8}, ValueError, "topic_span"),
        ({"batch_size": 2, "seq_len": 8, "topic_span": 0}, ValueError, "topic_span"),
        ({"batch_size": 2.0, "seq_len": 8}, TypeError, "batch_size"),
    ],
)
def test_documents_reject_bad_arguments(kwargs, error, match):
    with pytest.raises(error, match=match):
        topic_documents(**kwargs)


# ------------------------------------------------------------------------------------------
# Reading attention
# ------------------------------------------------------------------------------------------


def _manual_maps(model: SequenceClassifier, tokens: torch.Tensor) -> torch.Tensor:
    """Layer 0's weights recomputed by hand: embedding (+ positions), LayerNorm, projections,
    softmax(q kᵀ / sqrt(Dh)) in float64."""
    layer = model.encoder.layers[0]
    attn = layer.self_attn
    with torch.no_grad():
        x = model.embed(tokens)  # (B, L, D)
        if model.pos is not None:
            x = model.pos(x)
        h = layer.norm1(x) if layer.pre_ln else x
        b, l, d = h.shape
        nh = attn.num_heads
        q = attn.q_proj(h).view(b, l, nh, d // nh).transpose(1, 2).double()  # (B, H, L, Dh)
        k = attn.k_proj(h).view(b, l, nh, d // nh).transpose(1, 2).double()
        return torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d // nh), dim=-1)


@pytest.mark.parametrize(("pre_ln", "positional"), [(True, "none"), (False, "sinusoidal")])
def test_attention_maps_match_a_manual_forward_pass(pre_ln, positional):
    torch.manual_seed(0)
    model = SequenceClassifier(
        36,
        2,
        d_model=16,
        num_heads=2,
        num_layers=2,
        d_ff=32,
        max_len=30,
        positional=positional,
        pooling="last",
        pre_ln=pre_ln,
    )
    model.train()
    tokens = topic_documents(3, 30, generator=_gen(4)).tokens
    maps = attention_maps(model, tokens)
    assert maps.shape == (3, 2, 30, 30)
    torch.testing.assert_close(maps.double(), _manual_maps(model, tokens), atol=1e-5, rtol=1e-4)
    assert model.training  # the mode is restored
    assert attention_maps(model, tokens, layer=1).shape == (3, 2, 30, 30)


def test_attention_maps_refuse_efficient_kernels_and_bad_layers():
    model = SequenceClassifier(36, 2, **SMALL, attn_fn=SlidingWindowAttnFn(2, 2))
    tokens = topic_documents(2, 24, generator=_gen(0)).tokens
    with pytest.raises(ValueError, match="attn_fn=None"):
        attention_maps(model, tokens)
    model = SequenceClassifier(36, 2, **SMALL)
    with pytest.raises(ValueError, match="layer"):
        attention_maps(model, tokens, layer=1)
    with pytest.raises(TypeError, match="SequenceClassifier"):
        attention_maps(model.encoder, tokens)


def test_topic_attention_against_a_loop():
    g = _gen(7)
    b, h, l = 4, 2, 10
    weights = torch.softmax(torch.randn(b, h, l, l, generator=g), dim=-1)  # (B, H, L, L)
    positions = torch.tensor([0, 3, 8, 5])
    got = topic_attention(weights, positions)
    for i in range(b):
        for j in range(h):
            row = weights[i, j, -1]
            p = int(positions[i])
            assert math.isclose(got.topic[i, j], row[p], rel_tol=1e-6)
            assert math.isclose(got.own[i, j], row[-1], rel_tol=1e-6)
            fillers = [row[t] for t in range(l - 1) if t != p]
            assert math.isclose(got.filler[i, j], sum(fillers) / len(fillers), rel_tol=1e-5)
            assert math.isclose(got.reverse[i, j], weights[i, j, p, -1], rel_tol=1e-6)
    assert math.isclose(got.ratio, float(got.topic.mean() / got.filler.mean()), rel_tol=1e-6)
    uniform = torch.full((b, h, l, l), 1.0 / l)
    assert math.isclose(topic_attention(uniform, positions).ratio, 1.0, rel_tol=1e-5)


def test_topic_attention_rejects_bad_inputs():
    w = torch.full((2, 1, 6, 6), 1 / 6)
    with pytest.raises(ValueError, match="topic_positions"):
        topic_attention(w, torch.tensor([0, 5]))  # 5 is the conclusion's position
    with pytest.raises(ValueError, match=r"\(batch,\)"):
        topic_attention(w, torch.tensor([0]))
    with pytest.raises(ValueError, match="dimensions"):
        topic_attention(w[0], torch.tensor([0]))


# ------------------------------------------------------------------------------------------
# Reach after depth
# ------------------------------------------------------------------------------------------


def test_reach_after_against_a_loop_over_layers():
    mask = SlidingWindowAttnFn(2, 2).allowed(12)
    reach = reach_after(mask, 3)
    for i in range(12):  # a window of ±2, three layers: ±6
        want = torch.tensor([abs(i - j) <= 6 for j in range(12)])
        assert torch.equal(reach[i], want)
    glob = SlidingWindowAttnFn(1, 1, global_tokens=(5,)).allowed(12)
    assert not reach_after(glob, 1)[-1, 0] and bool(reach_after(glob, 2)[-1].all())
    with pytest.raises(ValueError, match="square bool mask"):
        reach_after(torch.ones(3, 4, dtype=torch.bool), 1)
    with pytest.raises(ValueError, match="depth must be >= 1"):
        reach_after(mask, 0)


def test_predicted_accuracy_is_half_plus_half_the_reached_share():
    row = torch.tensor([True, False, True, False, True, True])
    assert predicted_accuracy(row, 4) == 0.5 + 0.5 * 0.5
    assert predicted_accuracy(torch.zeros(6, dtype=torch.bool), 4) == 0.5
    with pytest.raises(ValueError, match="reach_row must be"):
        predicted_accuracy(row, 7)


def test_documents_of_length_are_topic_documents_with_an_optional_global_id():
    plain = documents_of_length(32, topic_span=8)(5, torch.Generator().manual_seed(3))
    docs = topic_documents(5, 32, topic_span=8, generator=torch.Generator().manual_seed(3))
    assert torch.equal(plain[0], docs.tokens) and torch.equal(plain[1], docs.labels)
    marked, labels = documents_of_length(32, topic_span=8, global_id=VOCAB)(
        5, torch.Generator().manual_seed(3)
    )
    expected = docs.tokens.clone()
    for row in range(5):  # a loop: position 16 of every row holds the dedicated id
        expected[row, 16] = VOCAB
    assert torch.equal(marked, expected) and torch.equal(labels, docs.labels)


def test_classifier_and_accuracy_against_a_loop():
    torch.manual_seed(0)
    m = classifier(num_layers=2, max_len=64)
    assert len(m.encoder.layers) == 2
    docs = topic_documents(70, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        right = sum(
            int(m(docs.tokens[i : i + 1]).argmax(-1).item() == docs.labels[i].item())
            for i in range(70)
        )
    assert accuracy(m, docs, chunk=16) == pytest.approx(right / 70)


def test_link_summary_cells_are_the_best_heads_mean_weight_per_combination():
    torch.manual_seed(0)
    m = classifier()
    docs = topic_documents(40, 24, generator=torch.Generator().manual_seed(2))
    summary = link_summary(m, docs, n_docs=40)
    weights = attention_maps(m, docs.tokens)  # (40, H, 24, 24)
    for (t, c), value in summary["cells"].items():
        rows = [i for i in range(40) if docs.topics[i] == t and docs.conclusions[i] == c]
        best = [float(weights[i, :, -1, docs.topic_positions[i]].max()) for i in rows]
        assert value == pytest.approx(sum(best) / len(best), rel=1e-5)
