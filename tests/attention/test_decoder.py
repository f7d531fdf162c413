"""attention.decoder against an independent reference: the decoder written out in float64 with
torch's own functions (the textbook formula of tests/reference.py for attention), cached
decoding against full recomputation, the cache's size, and bad input."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from attention.decoder import CharDecoder, KVCache, generate
from tests.reference import naive_attention_float64

V = 11


def _model(seed=0, *, num_heads=4, num_kv_heads=None, causal=True, num_layers=2, max_len=24):
    torch.manual_seed(seed)
    model = CharDecoder(
        V, d_model=16, num_heads=num_heads, num_layers=num_layers, d_ff=32, max_len=max_len,
        num_kv_heads=num_kv_heads, causal=causal,
    ).eval()  # fmt: skip
    with torch.no_grad():  # non-trivial biases and norms, so that every term is exercised
        for name, p in model.named_parameters():
            if name.endswith("bias") or "ln" in name:
                p.add_(0.1 * torch.randn(p.shape))
    return model


def _tokens(b, l, seed=1):
    return torch.randint(0, V, (b, l), generator=torch.Generator().manual_seed(seed))


def reference_forward(model: CharDecoder, tokens: torch.Tensor) -> torch.Tensor:
    """The decoder in float64 from its weights: embeddings + positions, pre-LN blocks
    (attention with key/value heads repeated for GQA, GELU MLP), final LayerNorm, head."""
    sd = {k: v.double() for k, v in model.state_dict().items()}
    b, l = tokens.shape
    x = sd["embed.weight"][tokens] + sd["pos.weight"][:l]  # (B, L, D)
    d = x.shape[-1]
    h, hk = model.num_heads, model.num_kv_heads
    dh = d // h
    allowed = torch.ones(l, l).tril().bool() if model.causal else None
    for i in range(len(model.blocks)):
        p = f"blocks.{i}."

        def ln(t, name, p=p):
            return F.layer_norm(t, (d,), sd[p + name + ".weight"], sd[p + name + ".bias"])

        def lin(t, name, p=p):
            return F.linear(t, sd[p + name + ".weight"], sd[p + name + ".bias"])

        a = ln(x, "norm1")
        q = lin(a, "attn.q_proj").view(b, l, h, dh).transpose(1, 2)
        k = lin(a, "attn.k_proj").view(b, l, hk, dh).transpose(1, 2)
        v = lin(a, "attn.v_proj").view(b, l, hk, dh).transpose(1, 2)
        k = torch.cat([k[:, j // (h // hk) : j // (h // hk) + 1] for j in range(h)], dim=1)
        v = torch.cat([v[:, j // (h // hk) : j // (h // hk) + 1] for j in range(h)], dim=1)
        out = naive_attention_float64(q, k, v, allowed).transpose(1, 2).reshape(b, l, d)
        x = x + lin(out, "attn.out_proj")
        m = F.gelu(lin(ln(x, "norm2"), "ff.linear1"))
        x = x + lin(m, "ff.linear2")
    x = F.layer_norm(x, (d,), sd["ln_f.weight"], sd["ln_f.bias"])
    return F.linear(x, sd["head.weight"], sd["head.bias"])


@pytest.mark.parametrize("num_kv_heads", [None, 2, 1])
@pytest.mark.parametrize("causal", [True, False])
def test_forward_matches_the_float64_reference(num_kv_heads, causal):
    model = _model(num_kv_heads=num_kv_heads, causal=causal)
    tokens = _tokens(3, 9)
    with torch.no_grad():
        got = model(tokens)
    assert got.shape == (3, 9, V)
    torch.testing.assert_close(got.double(), reference_forward(model, tokens), atol=1e-5, rtol=0)


def test_without_the_mask_an_earlier_position_sees_a_later_token():
    tokens = _tokens(1, 8)
    changed = tokens.clone()
    changed[0, -1] = (changed[0, -1] + 1) % V
    for causal, moves in ((True, False), (False, True)):
        model = _model(causal=causal)
        with torch.no_grad():
            diff = (model(tokens)[0, 0] - model(changed)[0, 0]).abs().max().item()
        assert (diff > 1e-4) == moves, (causal, diff)


@settings(max_examples=15, deadline=None)
@given(
    st.integers(1, 3),  # batch
    st.integers(1, 6),  # prompt length
    st.integers(1, 8),  # tokens fed afterwards
    st.sampled_from([(4, None), (4, 2), (4, 1), (2, 2)]),  # (H, H_kv)
    st.integers(1, 3),  # tokens per cached step
)
def test_cached_decoding_equals_full_recomputation(b, l0, n, heads, chunk):
    num_heads, num_kv_heads = heads
    model = _model(num_heads=num_heads, num_kv_heads=num_kv_heads)
    tokens = _tokens(b, l0 + n, seed=l0 * 10 + n)
    with torch.no_grad():
        full = model(tokens)  # (B, L, V)
        cache = model.new_cache(b)
        pieces = [model(tokens[:, :l0], cache=cache)]
        for start in range(l0, l0 + n, chunk):
            pieces.append(model(tokens[:, start : start + chunk], cache=cache))
    assert cache.length == l0 + n
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, atol=1e-5, rtol=0)


@pytest.mark.parametrize("num_kv_heads", [None, 2, 1])
def test_generate_with_and_without_cache_gives_the_same_tokens(num_kv_heads):
    model = _model(num_kv_heads=num_kv_heads)
    prompt = _tokens(2, 4)
    a = generate(model, prompt, max_new_tokens=12, use_cache=True)
    b = generate(model, prompt, max_new_tokens=12, use_cache=False)
    assert torch.equal(a.tokens, b.tokens) and a.tokens.shape == (2, 16)
    assert torch.equal(a.tokens[:, :4], prompt)
    torch.testing.assert_close(a.logits, b.logits, atol=1e-5, rtol=0)
    # greedy: every new token is the argmax of a full recomputation on its prefix
    with torch.no_grad():
        for t in range(4, 16):
            assert torch.equal(model(a.tokens[:, :t])[:, -1].argmax(-1), a.tokens[:, t])


def test_sampling_is_seeded_and_matches_between_cache_and_recompute():
    model = _model()
    prompt = _tokens(2, 3)
    runs = [
        generate(model, prompt, max_new_tokens=10, temperature=1.0, use_cache=c,
                 generator=torch.Generator().manual_seed(5)).tokens
        for c in (True, False, True)
    ]  # fmt: skip
    assert torch.equal(runs[0], runs[1]) and torch.equal(runs[0], runs[2])
    other = generate(model, prompt, max_new_tokens=10, temperature=1.0,
                     generator=torch.Generator().manual_seed(6)).tokens  # fmt: skip
    assert not torch.equal(runs[0], other)


@pytest.mark.parametrize(("num_heads", "num_kv_heads"), [(4, None), (4, 2), (4, 1)])
def test_cache_size_is_two_layers_batch_kv_heads_positions_head_dim(num_heads, num_kv_heads):
    model = _model(num_heads=num_heads, num_kv_heads=num_kv_heads, num_layers=3, max_len=20)
    cache = model.new_cache(5)
    hk = num_heads if num_kv_heads is None else num_kv_heads
    assert cache.nbytes == 2 * 3 * 5 * hk * 20 * (16 // num_heads) * 4
    assert KVCache(1, 1, 1, 8, 10, dtype=torch.float16).nbytes == 2 * 8 * 10 * 2


def test_bad_input_is_refused_with_a_message():
    model = _model()
    with pytest.raises(ValueError, match="causal"):
        _model(causal=False)(_tokens(1, 3), cache=model.new_cache(1))
    with pytest.raises(ValueError, match="batch size"):
        model(_tokens(2, 3), cache=model.new_cache(1))
    with pytest.raises(TypeError, match="cache must be a KVCache"):
        model(_tokens(1, 3), cache={})
    with pytest.raises(TypeError, match="integer"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="vocab_size"):
        model(torch.full((1, 3), V))
    with pytest.raises(ValueError, match="max_len"):
        generate(model, _tokens(1, 20), max_new_tokens=5)
    with pytest.raises(ValueError, match="temperature"):
        generate(model, _tokens(1, 2), max_new_tokens=2, temperature=0.0)
    with pytest.raises(TypeError, match="CharDecoder"):
        generate(torch.nn.Linear(2, 2), _tokens(1, 2), max_new_tokens=2)
    cache = model.new_cache(1, max_len=4)
    with pytest.raises(ValueError, match="max_len=4"):
        model(_tokens(1, 5), cache=cache)
    with pytest.raises(ValueError, match=r"key must have shape \(B, H_kv, n, d_head\)"):
        cache.append(0, torch.zeros(1, 2, 1, 4), torch.zeros(1, 2, 1, 4))
    with pytest.raises(ValueError, match="layer"):
        cache.append(7, torch.zeros(1, 4, 1, 4), torch.zeros(1, 4, 1, 4))
    with pytest.raises(TypeError):
        CharDecoder(V, d_model=8, num_heads=2, num_layers=1, d_ff=8, max_len=4, causal=1)
    assert math.isfinite(float(model(_tokens(1, 2)).detach().sum()))
