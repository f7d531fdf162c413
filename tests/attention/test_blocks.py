"""attention.blocks against torch's own layers, and the properties the chapters rely on."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from attention.blocks import (
    DecoderBlock,
    Encoder,
    EncoderLayer,
    FeedForward,
    SequenceClassifier,
)
from attention.heads import MultiHeadAttention
from attention.masks import causal_mask, from_key_padding_mask, padding_mask
from tests.attention.inputs import close

FAST = settings(max_examples=25, deadline=None)


def _randomize_norms(module: nn.Module) -> None:
    """LayerNorms start at weight 1, bias 0: randomise so that a swapped norm would show."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.LayerNorm):
                m.weight.normal_(1.0, 0.2)
                m.bias.normal_(0.0, 0.2)


@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_feed_forward_equals_formula(activation):
    torch.manual_seed(0)
    ff = FeedForward(8, 20, activation=activation)
    x = torch.randn(2, 3, 8)  # (B, L, D)
    act = F.relu if activation == "relu" else F.gelu
    hidden = act(x @ ff.linear1.weight.T + ff.linear1.bias)  # (B, L, d_ff)
    want = hidden @ ff.linear2.weight.T + ff.linear2.bias  # (B, L, D)
    close(ff(x), want)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
def test_encoder_layer_matches_torch(dtype, norm_first, activation):
    torch.manual_seed(0)
    ref = nn.TransformerEncoderLayer(
        16,
        4,
        dim_feedforward=24,
        dropout=0.1,
        activation=activation,
        batch_first=True,
        norm_first=norm_first,
        dtype=dtype,
    ).eval()
    _randomize_norms(ref)
    mine = EncoderLayer.from_torch(ref)
    assert not mine.training  # the mode is copied too
    assert mine.pre_ln == norm_first and mine.ff.activation == activation
    assert mine.self_attn.dropout == 0.1 and mine.dropout1.p == 0.1
    x = torch.randn(3, 6, 16, dtype=dtype, generator=torch.Generator().manual_seed(1))
    kpm = ~padding_mask(torch.tensor([6, 4, 1]), 6)[:, 0, 0]  # (B, L), True = ignore
    x.requires_grad_(True)  # keeps torch on its Python path (the fused one is tested below)
    want = ref(x, src_key_padding_mask=kpm)
    got = mine(x, mask=from_key_padding_mask(kpm))
    close(got, want, dtype)
    want_causal = ref(x, src_mask=~causal_mask(6), is_causal=True)
    close(mine(x, causal=True), want_causal, dtype)


def test_encoder_layer_matches_torch_fused_fast_path():
    torch.manual_seed(0)
    ref = nn.TransformerEncoderLayer(16, 4, 24, batch_first=True, norm_first=False).eval()
    mine = EncoderLayer.from_torch(ref).eval()
    x = torch.randn(2, 5, 16)  # (B, L, D)
    lengths = torch.tensor([5, 3])
    kpm = ~padding_mask(lengths, 5)[:, 0, 0]  # (B, L), True = ignore
    with torch.no_grad():
        want = ref(x, src_key_padding_mask=kpm)
        got = mine(x, mask=from_key_padding_mask(kpm))
    close(got, want)


@pytest.mark.parametrize("pre_ln", [False, True])
def test_encoder_stack_matches_torch_encoder(pre_ln):
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(8, 2, 16, batch_first=True, norm_first=pre_ln)
    ref = nn.TransformerEncoder(
        layer, 3, norm=nn.LayerNorm(8) if pre_ln else None, enable_nested_tensor=False
    ).eval()
    for p in ref.parameters():  # the copies inside ref start equal; make every layer differ
        with torch.no_grad():
            p.add_(0.1 * torch.randn_like(p))
    mine = Encoder(8, 2, 16, num_layers=3, pre_ln=pre_ln)
    assert (mine.norm is not None) == pre_ln
    for i in range(3):
        mine.layers[i] = EncoderLayer.from_torch(ref.layers[i])
    if pre_ln:
        mine.norm.load_state_dict(ref.norm.state_dict())
    mine.eval()
    x = torch.randn(2, 5, 8, requires_grad=True)  # (B, L, D)
    kpm = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])  # (B, L), True = ignore
    close(mine(x, mask=from_key_padding_mask(kpm)), ref(x, src_key_padding_mask=kpm))


@FAST
@given(l=st.integers(2, 6), pre_ln=st.booleans(), seed=st.integers(0, 2**16))
def test_encoder_layer_is_permutation_equivariant(l, pre_ln, seed):
    torch.manual_seed(seed)
    layer = EncoderLayer(8, 2, 16, pre_ln=pre_ln).eval()
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, l, 8, generator=g)  # (B, L, D)
    perm = torch.randperm(l, generator=g)
    with torch.no_grad():
        close(layer(x[:, perm]), layer(x)[:, perm])


# --- DecoderBlock -------------------------------------------------------------------------------


def test_decoder_block_equals_torch_pre_ln_layer_with_causal_mask():
    torch.manual_seed(0)
    ref = nn.TransformerEncoderLayer(
        8, 2, 32, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
    ).eval()
    _randomize_norms(ref)
    block = DecoderBlock(8, 2, 32).eval()
    block.attn = MultiHeadAttention.from_torch(ref.self_attn)
    block.norm1.load_state_dict(ref.norm1.state_dict())
    block.norm2.load_state_dict(ref.norm2.state_dict())
    block.ff.linear1.load_state_dict(ref.linear1.state_dict())
    block.ff.linear2.load_state_dict(ref.linear2.state_dict())
    x = torch.randn(2, 7, 8, requires_grad=True)  # (B, L, D)
    want = ref(x, src_mask=~causal_mask(7), is_causal=True)
    close(block(x), want)
    out, weights = block(x, need_weights=True)
    assert weights.shape == (2, 2, 7, 7)
    assert torch.all(weights[..., ~causal_mask(7)] == 0)


def _jacobian_norms(block: nn.Module, l: int, seed: int) -> torch.Tensor:
    """``|d out_i / d x_j|`` summed over features and batch: ``(L_out, L_in)``."""
    torch.manual_seed(seed)
    x = torch.randn(1, l, 8, dtype=torch.float64)  # (B, L, D)
    jac = torch.autograd.functional.jacobian(block, x)  # (B, L, D, B, L, D)
    return jac[0, :, :, 0].abs().sum(dim=(1, 3))  # (L, L)


@settings(max_examples=20, deadline=None)
@given(l=st.integers(2, 5), seed=st.integers(0, 2**16))
def test_decoder_block_output_has_no_gradient_from_future_tokens(l, seed):
    torch.manual_seed(seed)
    block = DecoderBlock(8, 2, 16).double()
    jac = _jacobian_norms(block, l, seed)
    future = torch.triu(torch.ones(l, l, dtype=torch.bool), diagonal=1)
    assert torch.all(jac[future] == 0)
    assert torch.all(jac[~future] > 0)


def test_decoder_block_without_causal_mask_leaks_the_future():
    torch.manual_seed(0)
    block = DecoderBlock(8, 2, 16, causal=False).double()
    jac = _jacobian_norms(block, 5, 0)
    future = torch.triu(torch.ones(5, 5, dtype=torch.bool), diagonal=1)
    assert torch.all(jac[future] > 0)


# --- SequenceClassifier -------------------------------------------------------------------------


def _classifier(positional, pooling, seed=0, **kw):
    torch.manual_seed(seed)
    sizes = dict(d_model=16, num_heads=2, num_layers=2, d_ff=32, max_len=16)
    return SequenceClassifier(20, 3, **sizes, positional=positional, pooling=pooling, **kw).eval()


@pytest.mark.parametrize("positional", ["sinusoidal", "learned", "rope", "none"])
@pytest.mark.parametrize("pooling", ["mean", "cls", "last"])
def test_classifier_ignores_right_padding(positional, pooling):
    model = _classifier(positional, pooling)
    g = torch.Generator().manual_seed(1)
    a = torch.randint(0, 20, (1, 5), generator=g)  # (1, 5)
    b = torch.randint(0, 20, (1, 9), generator=g)  # (1, 9)
    batch = torch.cat([F.pad(a, (0, 4), value=7), b])  # (2, 9): a padded with junk token 7
    with torch.no_grad():
        logits = model(batch, lengths=torch.tensor([5, 9]))  # (2, C)
        keep = torch.arange(9) < torch.tensor([[5], [9]])  # (2, 9)
        by_keep = model(batch, keep=keep)
        alone = torch.cat([model(a), model(b)])  # (2, C)
    assert logits.shape == (2, 3)
    close(logits, alone)
    close(by_keep, alone)


@pytest.mark.parametrize("positional", ["rope", "none"])
def test_relative_or_no_positions_ignore_left_padding(positional):
    # RoPE only sees relative positions: shifting every real token right changes nothing.
    model = _classifier(positional, "last")
    a = torch.randint(0, 20, (1, 6), generator=torch.Generator().manual_seed(2))  # (1, 6)
    left = F.pad(a, (3, 0), value=5)  # (1, 9)
    keep = torch.arange(9).unsqueeze(0) >= 3  # (1, 9)
    with torch.no_grad():
        close(model(left, keep=keep), model(a))


def test_absolute_positions_do_see_left_padding():
    model = _classifier("sinusoidal", "last")
    a = torch.randint(0, 20, (1, 6), generator=torch.Generator().manual_seed(2))  # (1, 6)
    left = F.pad(a, (3, 0), value=5)  # (1, 9)
    keep = torch.arange(9).unsqueeze(0) >= 3  # (1, 9)
    with torch.no_grad():
        assert not torch.allclose(model(left, keep=keep), model(a), atol=1e-4)


@FAST
@given(l=st.integers(2, 8), seed=st.integers(0, 2**16))
def test_classifier_without_positions_is_order_blind(l, seed):
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 20, (2, l), generator=g)  # (B, L)
    perm = torch.randperm(l, generator=g)
    blind = _classifier("none", "mean", seed=seed % 7)
    with torch.no_grad():
        close(blind(tokens[:, perm]), blind(tokens))


def test_classifier_with_positions_is_not_order_blind():
    tokens = torch.randint(0, 20, (2, 8), generator=torch.Generator().manual_seed(3))  # (B, L)
    for positional in ("sinusoidal", "learned", "rope"):
        model = _classifier(positional, "mean")
        with torch.no_grad():
            assert not torch.allclose(model(tokens.flip(1)), model(tokens), atol=1e-4)


def test_classifier_learns_a_toy_task_in_a_few_steps():
    # Label: is token 1 present? Mean pooling with no positions can represent it exactly.
    torch.manual_seed(0)
    model = SequenceClassifier(
        6, 2, d_model=16, num_heads=2, num_layers=1, d_ff=32, max_len=8, positional="none"
    ).train()
    opt = torch.optim.Adam(model.parameters(), lr=2e-2)
    tokens = torch.randint(2, 6, (32, 8))  # (N, L)
    tokens[:16, 3] = 1
    labels = (tokens == 1).any(dim=1).long()  # (N,)
    losses = []
    for _ in range(15):
        loss = F.cross_entropy(model(tokens), labels)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.3 * losses[0]
