# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#   kernelspec:
#     display_name: Python 3 (attention-book)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Chapter 4 — Positional encoding
#
# The attention of chapters 2 and 3 compares every token with every other, and nothing in that
# comparison mentions *where* a token stands: to attention, "I love you" and "you love I" are
# the same bag of words. This chapter makes that precise, then builds the three main ways of
# putting order back. The original Transformer *adds* a fixed pattern of sines and cosines to
# each token; we verify two properties claimed for it (a spread of frequencies, like a counter's
# bits, and a shift that is a rotation). BERT and GPT-2 *learn* one vector per position, which
# costs parameters and stops dead at the longest position trained. RoPE, used by LLaMA and Qwen,
# *rotates* queries and keys so that scores see only the distance between two tokens. Finally
# we train one small model with each encoding on short sequences and test it on longer ones.

# %% [markdown]
# **Learning goals.** After this chapter you can
#
# - prove that self-attention without positions is permutation-equivariant, and say what a
#   causal mask changes;
# - write the sinusoidal table from its formula, read its heat map, and compute the
#   wavelength of any channel pair;
# - build the matrix that shifts a sinusoidal code by $k$ positions, and explain why it is
#   the same for every position;
# - count the parameters of a learned position table and say what happens past its end;
# - implement RoPE as a rotation of channel pairs and show that $q\cdot k$ then depends on
#   $m-n$ only;
# - design a length-extrapolation experiment, read its result, and choose an encoding.

# %%
#| default_exp ch04
import matplotlib.pyplot as plt
import torch

from attention.heads import MultiHeadAttention
from attention.positional import (
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
    alibi_slopes,
    apply_rope,
    rope_angles,
    sinusoidal_encoding,
)
from book.claims import claims_table, record_claim
from book.claims.ch04 import (
    BETTER,
    DROP,
    LEARNED,
    assert_c14_quality_drops_past_training_length,
    assert_c15_rope_extrapolates_better,
    c11_verdict,
    c12_verdict,
    c13_verdict,
    c14_verdict,
    c15_verdict,
    learned_pe_verdict,
    lookback_accuracy_over_seeds,
)
from book.diagrams.ch04 import rope_rotation
from book.experiments.parallel import run_keyed
from book.experiments.seeds import SEEDS, make_deterministic, spread
from book.plotting import (
    plot_attention,
    plot_heads,
    plot_lines,
    plot_spread,
    reference_line,
    set_style,
)
from book.sceptic import sweep_summary

set_style()
make_deterministic(0)

# %% [markdown]
# ## 4.1 Attention is blind to order
#
# Write one attention output in full: token $i$ gets
# $z_i = \sum_j \operatorname{softmax}_j(q_i\cdot k_j/\sqrt{d_k})\, v_j$. Queries, keys and
# values come from each token on its own ($q_i = x_iW_Q$ and so on), and the sum runs over the
# *set* of keys. Permute the input rows with a permutation matrix $P$, and $Q, K, V$ become
# $PQ, PK, PV$, the score matrix becomes $PSP^\top$, the row-wise softmax commutes with that,
# and the output is $PAP^\top PV = P(AV)$
# because $P^\top P = I$. In words:
#
# > **Claim C11.** Self-attention is *permutation-equivariant*: shuffle the tokens and the
# > outputs shuffle the same way. "I love you" and "you love I" look alike without position
# > information.
#
# Our running example is that pair of sentences, with random 8-dimensional word vectors and an
# untrained two-head attention layer (an identity needs no training).

# %%
words = ["I", "love", "you"]
d_model = 8
gen = torch.Generator().manual_seed(4)
embedding = torch.randn(len(words), d_model, generator=gen)  # (V, D)
torch.manual_seed(0)
mha = MultiHeadAttention(d_model, num_heads=2).eval()


def encode(sentence: list[str]) -> torch.Tensor:
    """Word vectors of a sentence, as a batch of one: (1, L, D)."""
    return embedding[[words.index(w) for w in sentence]].unsqueeze(0)  # (1, L, D)


x_a = encode(["I", "love", "you"])  # (1, 3, D)
x_b = encode(["you", "love", "I"])  # (1, 3, D): positions 0 and 2 swapped
with torch.no_grad():
    out_a, out_b = mha(x_a)[0], mha(x_b)[0]  # (3, D) each
for word in words:
    ia, ib = ["I", "love", "you"].index(word), ["you", "love", "I"].index(word)
    print(f"{word:>5}  in 'I love you': {out_a[ia, :4].numpy().round(3)}")
    print(f"{'':>5}  in 'you love I': {out_b[ib, :4].numpy().round(3)}")

# %% [markdown]
# Each word gets the same output vector (the first four of its eight numbers are shown) in both
# sentences. We also check the identity on a ten-token sequence under 100 random permutations,
# and that the pooled *sentence* vector (the outputs' mean) is identical.

# %%
swap = torch.tensor([2, 1, 0])  # "you love I" = "I love you" read backwards
gen = torch.Generator().manual_seed(5)
x_ten = torch.randn(1, 10, d_model, generator=gen)  # (1, 10, D)
with torch.no_grad():
    out_ten = mha(x_ten)  # (1, 10, D)
    perm_errors = []
    for _ in range(100):
        perm = torch.randperm(10, generator=gen)
        perm_errors.append(float((mha(x_ten[:, perm]) - out_ten[:, perm]).abs().max()))
pooled_gap = float((out_a.mean(0) - out_b.mean(0)).abs().max())
max_perm_error = max(perm_errors)
print(
    "outputs of 'you love I' = outputs of 'I love you', reordered:",
    torch.allclose(out_b, out_a[swap], atol=1e-6),
)
print(f"max |attn(P x) - P attn(x)| over 100 permutations: {max_perm_error:.0e}")
print(f"mean-pooled sentence vectors differ by at most {pooled_gap:.0e}")

# %%
torch.testing.assert_close(out_b, out_a[swap])  # equivariance on the running example
assert max_perm_error < 1e-5  # ... and for every permutation tried (float32 rounding only)
assert pooled_gap < 1e-6  # a bag-of-words model: both sentences pool to the same vector

# %% [markdown]
# With positions — the sinusoidal table of section 4.2 added to the word vectors, or RoPE
# (section 4.5) rotating queries and keys — "I" no longer gets the same output in the two
# sentences.

# %% tags=["nbval-check-output"]
sinusoidal = SinusoidalPositionalEncoding(d_model, max_len=16)
mha_rope = MultiHeadAttention(d_model, num_heads=2, rotary=RotaryEmbedding(d_model // 2)).eval()
mha_rope.load_state_dict(mha.state_dict())  # same weights; RoPE adds none
with torch.no_grad():
    gap_sin = (mha(sinusoidal(x_b))[0] - mha(sinusoidal(x_a))[0][swap]).abs().max()
    gap_rope = (mha_rope(x_b)[0] - mha_rope(x_a)[0][swap]).abs().max()
    gap_causal = (mha(x_b, causal=True)[0] - mha(x_a, causal=True)[0][swap]).abs().max()
print("largest change of a word's output when the sentence is reversed:")
print(f"  no positions {float((out_b - out_a[swap]).abs().max()):.2f}")
print(f"  sinusoidal   {float(gap_sin):.2f}")
print(f"  RoPE         {float(gap_rope):.2f}")
print(f"  causal mask  {float(gap_causal):.2f}")

# %%
assert gap_sin > 0.05 and gap_rope > 0.05  # positions break the symmetry...
assert gap_causal > 0.05  # ... and so does a causal mask
record_claim(
    "C11",
    claim="Self-attention is permutation-equivariant: shuffle the tokens and the outputs "
    "shuffle alike, so 'I love you' and 'you love I' look the same without positions",
    experiment="2-head MultiHeadAttention, d_model 8, random word vectors; the two sentences, "
    "and 100 random permutations of 10 tokens",
    verdict=c11_verdict(
        perm_error=max_perm_error,
        pooled_gap=pooled_gap,
        position_gaps={"sinusoidal": float(gap_sin), "RoPE": float(gap_rope)},
    ),
    measured=f"max |attn(Px) − P·attn(x)| = {max_perm_error:.0e}; pooled sentence vectors "
    f"differ by {pooled_gap:.0e}; with sinusoidal PE / RoPE a word's output moves by "
    f"{float(gap_sin):.2f} / {float(gap_rope):.2f}",
)

# %% [markdown]
# A sceptic would draw other word vectors, weights and tokens, and change the length and the
# width (`c11_sweep_run`, judged by the same `c11_verdict`; with several
# seeds the worst counts). Each setting also reverses its whole random sequence with positions:

# %% tags=["nbval-check-output"]
print(sweep_summary("C11", keys=[
    "max |attn(Px) - P attn(x)|",
    "smallest position gap, sentence (sin / RoPE)",
    "position gap, the tokens reversed (sin / RoPE)",
    "seeds with a position gap under 0.05",
]))  # fmt: skip

# %% [markdown]
# **Verdict on C11: reproduced as an identity in every setting tried**, from 2 to 1,000 tokens
# and up to a width of 512, to float32 rounding (1e-07 at most). Our added check, that positions
# move a word's output by more than 0.05, belongs to the random layer, not to the claim: on two
# of the four other seeds, and on two tokens, positions move it by 0.02 to 0.04, clearly above
# rounding but under the bar, and `c11_verdict` calls those settings "partly".
#
# Two remarks go beyond the claim. A decoder's *causal mask* also breaks the symmetry: token $i$
# averages over $i+1$ keys, so its position leaks, and decoder-only language models trained
# with no positional encoding do learn positions this way (Haviv et al., 2022). And a model that
# pools the outputs into one vector, like a sentence classifier, is fully *invariant* — a bag
# of words; section 4.6 trains one on a task that needs order and watches it fail.

# %% [markdown]
# ## 4.2 The sinusoidal encoding
#
# The 2017 Transformer adds to the embedding of the token at position $pos$ a vector whose
# channels come in pairs, one pair per frequency:
#
# $$\begin{gathered}
# PE_{pos,\,2i} = \sin\!\left(\frac{pos}{10000^{2i/d}}\right), \qquad
#   PE_{pos,\,2i+1} = \cos\!\left(\frac{pos}{10000^{2i/d}}\right),\\
# i = 0,\dots,d/2-1.
# \end{gathered}$$
#
# Pair $i$ is a point on the unit circle that turns by $\omega_i = 10000^{-2i/d}$ radians per
# position. The package's `sinusoidal_encoding(max_len, d_model)` returns the table; here it
# is for 100 positions and $d = 64$.

# %%
pe_table = sinusoidal_encoding(100, 64)  # (100 positions, 64 channels)
fig, axes = plt.subplots(1, 2, figsize=(12, 4.2), width_ratios=[1.1, 1.4])
image = axes[0].imshow(
    pe_table, aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest"
)
axes[0].grid(False)
axes[0].set_title("Sinusoidal table PE[pos, channel], d = 64")
axes[0].set_xlabel("channel (2i = sin, 2i+1 = cos)")
axes[0].set_ylabel("position")
fig.colorbar(image, ax=axes[0], label="PE value (no unit)")
positions = list(range(100))
plot_lines(
    positions,
    {f"channel {c} (pair {c // 2})": pe_table[:, c].tolist() for c in (0, 4, 12, 24)},
    title="Four sin channels along the sequence",
    xlabel="position",
    ylabel="PE value (no unit)",
    ax=axes[1],
    markers=False,
)
axes[1].legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, fontsize=8)
fig.tight_layout()

# %% [markdown]
# The first channels flicker from position to position while the right half barely changes over
# 100 positions. Every position gets a different row, every row has the same norm ($\sqrt{d/2}$,
# one unit circle per pair), and nothing is learned. The model adds it, $x_{pos} + PE_{pos}$,
# before the first layer.
#
# > **Claim C12.** Low dimensions have high frequencies and high dimensions low ones: a
# > multi-scale code, like the bits of a binary counter.
#
# The wavelength of pair $i$ — the number of positions before it repeats — is $\lambda_i =
# 2\pi/\omega_i = 2\pi\cdot 10000^{2i/d}$: from $2\pi \approx 6.3$ positions for pair 0 to just
# under $2\pi\cdot 10000$ for the last, growing by the factor $10000^{2/d}$ from pair to pair.
# We *measure* each channel's frequency from the table alone, counting its sign changes over
# 1,000 positions (a wave of wavelength $\lambda$ crosses zero about $2\cdot 1000/\lambda$
# times), and compare with the formula:

# %%
#| export
import math

import torch

from attention.checks import check_base, check_even, check_float, check_rank


def sinusoidal_wavelengths(d_model: int, base: float = 10000.0) -> torch.Tensor:
    """Wavelength (in positions) of each channel pair of the sinusoidal table: ``(D/2,)``
    float64. Pair ``i`` turns at ``base^(-2i/D)`` radians per position, so it repeats every
    ``2π · base^(2i/D)`` positions: a geometric progression with ratio ``base^(2/D)``."""
    d_model = check_even("d_model", d_model)
    base = check_base(base)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (D/2,)
    return 2.0 * math.pi * base ** (two_i / d_model)  # (D/2,)


def zero_crossings(signal: torch.Tensor) -> torch.Tensor:
    """Number of sign changes along dim 0 of ``signal (L, C)``, per column: ``(C,)`` int64.

    A crossing is a pair of consecutive samples with strictly opposite signs (an exact zero,
    like ``sin(0)``, neither starts nor ends one): a frequency measured from the data alone.
    """
    check_float("signal", signal)
    check_rank("signal", signal, 2, "[positions, channels]")
    sign = torch.sign(signal)  # (L, C)
    return ((sign[1:] * sign[:-1]) < 0).sum(dim=0)  # (C,)


# %% tags=["nbval-check-output"]
long_table = sinusoidal_encoding(1000, 64, dtype=torch.float64)  # (1000, 64)
crossings = zero_crossings(long_table[:, 0::2])  # (32,): one per sin channel
wavelengths = sinusoidal_wavelengths(64)  # (32,)
measured_wavelengths = 2 * 999 / crossings.clamp(min=1).double()  # (32,)
print("zero crossings per sin channel, pairs 0..31:")
print(crossings.tolist())
print("wavelength, formula vs measured (pairs with >= 20 crossings):")
for i in range(0, 32, 2):
    if crossings[i] >= 20:
        print(f"  pair {i:>2}: {wavelengths[i]:7.1f} vs {measured_wavelengths[i]:7.1f} positions")
print(f"ratio between neighbouring pairs: {float(wavelengths[1] / wavelengths[0]):.3f}")

# %%
assert torch.all(crossings[1:] <= crossings[:-1])  # frequency never rises with the channel
assert crossings[0] > 300 and crossings[-1] == 0  # from ~6-position waves to near-constants
well_sampled = crossings >= 20
rel_error = (measured_wavelengths[well_sampled] / wavelengths[well_sampled] - 1).abs()
assert rel_error.max() < 0.05  # the measured wavelengths follow 2π·10000^(2i/d)
torch.testing.assert_close(
    wavelengths[1:] / wavelengths[:-1], torch.full((31,), 10000 ** (2 / 64), dtype=torch.float64)
)

# %% [markdown]
# ### The binary-counter analogy, checked
#
# Write the position in binary: bit $j$ flips every $2^j$ steps. The fast bits tell neighbouring
# positions apart, the slow bits say roughly where in the sequence we are. The sinusoidal table
# divides the labour the same way, as the two panels below show for positions 0–63.

# %%
counter = torch.arange(64)
bits = ((counter.unsqueeze(1) >> torch.arange(6)) & 1).float()  # (64, 6): bit 0 first
small_table = sinusoidal_encoding(64, 12, base=64.0)  # (64, 12): slowest pair ~ 6 bits
fig, axes = plt.subplots(1, 2, figsize=(10, 4.2))
bit_image = axes[0].imshow(bits, aspect="auto", cmap="Greys", interpolation="nearest")
fig.colorbar(bit_image, ax=axes[0], ticks=[0, 1], label="bit value")
axes[0].set_title("Binary counter: bit j of the position")
axes[0].set_xlabel("bit j (0 = least significant)")
image = axes[1].imshow(
    small_table, aspect="auto", cmap="RdBu_r", vmin=-1, vmax=1, interpolation="nearest"
)
axes[1].set_title("Sinusoidal table, d = 12 (base 64)")
axes[1].set_xlabel("channel (2i = sin, 2i+1 = cos)")
for ax in axes:
    ax.grid(False)
    ax.set_ylabel("position")
fig.colorbar(image, ax=axes[1], label="PE value (no unit)")
fig.tight_layout()

# %% [markdown]
# (For the picture we used base 64 instead of 10,000: with $d = 12$ the wavelengths are then
# $2\pi\cdot 64^{2i/12} = 2\pi\cdot 2^i$, doubling from pair to pair like the bits' periods.)
# The analogy has limits. The standard table's wavelengths grow by $10000^{2/d}$, 1.33 for
# $d = 64$, not by doubling: many more, finer scales. And a counter is *jumpy*: from 31 to 32
# six bits flip, from 32 to 33 one, while a sinusoidal step has the same size everywhere, since
# one position turns every circle by its fixed angle (section 4.3's point).

# %% tags=["nbval-check-output"]
bit_flips = (bits[1:] != bits[:-1]).sum(dim=1)  # (63,): Hamming distance of p and p+1
step_sizes = (long_table[1:] - long_table[:-1]).norm(dim=1)  # (999,): ||PE[p+1] - PE[p]||
print(
    f"binary counter: bits flipped by one step range from {int(bit_flips.min())} to "
    f"{int(bit_flips.max())}"
)
print(
    f"sinusoidal (d = 64): step length {float(step_sizes.min()):.6f} to "
    f"{float(step_sizes.max()):.6f}"
)

# %%
assert int(bit_flips.min()) == 1 and int(bit_flips.max()) == 6  # 31 -> 32 flips 6 bits
assert float(step_sizes.max() - step_sizes.min()) < 1e-9  # every step has the same length
record_claim(
    "C12",
    claim="In the sinusoidal encoding, low dimensions have high frequency and high dimensions "
    "low frequency: a multi-scale code like a binary counter",
    experiment="zero crossings of each sin channel over 1,000 positions (d = 64) vs the "
    "wavelength formula; comparison with a 6-bit counter",
    verdict=c12_verdict(crossings.tolist(), max_rel_error=float(rel_error.max())),
    measured=f"crossings fall monotonically from {int(crossings[0])} (pair 0) to "
    f"{int(crossings[-1])} (pair 31); measured wavelengths within "
    f"{100 * float(rel_error.max()):.1f}% of 2π·10000^(2i/d); scale ratio "
    f"{float(wavelengths[1] / wavelengths[0]):.2f} per pair vs 2 per bit",
)

# %% [markdown]
# A sceptic would change the width, the window the crossings are counted over, and the base
# (`c12_sweep_run`, the same `c12_verdict`):

# %% tags=["nbval-check-output"]
print(sweep_summary("C12", keys=["crossings, first / last pair",
                                 "wavelengths off the formula by at most"]))  # fmt: skip

# %% [markdown]
# **Verdict on C12: reproduced for the standard base, at widths 64 and 512, counted over 1,000
# or 4,000 positions.** Measured from the table alone, frequency falls monotonically with the
# channel, and the wavelengths follow the formula. The two settings that fail say what the
# verdict rests on. Over 250 positions the fastest pair crosses zero only 79 times, too few to
# show the hundredfold span from fast to still that the test asks for: the table is the same,
# the window too short. With base 10 the slowest pair still crosses 34 times in 1,000
# positions (wavelengths from $2\pi$ to about $2\pi \cdot 10$): the large base is part of the
# multi-scale design.

# %% [markdown]
# ## 4.3 A shift is a rotation
#
# > **Claim C13.** For any fixed offset $k$, $PE_{pos+k}$ is a linear function of
# > $PE_{pos}$: one matrix $M_k$ works for every position.
#
# Take one pair with frequency $\omega$. The angle-addition formulas give
#
# $$\begin{pmatrix}\sin((p+k)\omega)\\ \cos((p+k)\omega)\end{pmatrix} =
#   \begin{pmatrix}\cos k\omega & \sin k\omega\\ -\sin k\omega & \cos k\omega\end{pmatrix}
#   \begin{pmatrix}\sin p\omega\\ \cos p\omega\end{pmatrix}.$$
#
# The $2\times 2$ matrix contains $k$ and $\omega$ but not $p$. Stacking one such rotation per
# pair on the diagonal gives $M_k$:


# %%
#| export
def _check_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} ({value!r})")
    return value


def sinusoidal_shift_matrix(k: int, d_model: int, base: float = 10000.0) -> torch.Tensor:
    """The matrix ``M_k (D, D)`` with ``PE[p + k] = M_k @ PE[p]`` for every position ``p``.

    Block diagonal, with the 2x2 rotation ``[[cos kω, sin kω], [-sin kω, cos kω]]`` for the
    pair ``(2i, 2i+1)`` of frequency ``ω = base^(-2i/D)``. It depends on ``k`` only, never on
    ``p``; ``k`` may be negative (``M_{-k} = M_k^T``). float64, in the layout of
    :func:`attention.positional.sinusoidal_encoding`.
    """
    k = _check_int("k", k)
    d_model = check_even("d_model", d_model)
    base = check_base(base)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (D/2,)
    angle = k * base ** (-two_i / d_model)  # (D/2,): k·ω_i
    c, s = torch.cos(angle), torch.sin(angle)  # (D/2,) each
    m = torch.zeros(d_model, d_model, dtype=torch.float64)  # (D, D)
    idx = torch.arange(0, d_model, 2)  # (D/2,): the sin channel of each pair
    m[idx, idx] = c
    m[idx, idx + 1] = s
    m[idx + 1, idx] = -s
    m[idx + 1, idx + 1] = c
    return m  # (D, D)


# %% [markdown]
# Here it is for $d = 4$ and $k = 1$: two rotation blocks, a fast one (angle 1 radian) and a
# slow one (0.01 radian).

# %% tags=["nbval-check-output"]
print(sinusoidal_shift_matrix(1, 4).numpy().round(4))

# %% [markdown]
# Now the claim itself, in float64 on $d = 16$ and 1,000 positions: one matrix must move
# *every* row $k$ positions down.

# %%
table16 = sinusoidal_encoding(1000, 16, dtype=torch.float64)  # (1000, 16)
shift_errors = {}
for k in (1, 5, 50):
    m_k = sinusoidal_shift_matrix(k, 16)  # (16, 16)
    shift_errors[k] = float((table16[k:] - table16[:-k] @ m_k.T).abs().max())  # over all p
    print(f"k = {k:>2}: max over all p of |PE[p+k] - M_k PE[p]| = {shift_errors[k]:.0e}")

# %%
assert max(shift_errors.values()) < 1e-12  # exact, to float64 rounding, for every p
m_5 = sinusoidal_shift_matrix(5, 16)
torch.testing.assert_close(m_5 @ m_5.T, torch.eye(16, dtype=torch.float64))  # a rotation

# %% [markdown]
# A derivation can hide a mistake, so give a least-squares fit only the pairs
# $(PE_p, PE_{p+5})$ of the table: if the claim is true, the best $M$ with
# $PE_{p+5} \approx M\,PE_p$ is $M_5$, found without the formula.

# %%
#| export
from attention.checks import check_positive_int


def fit_shift_matrix(pe: torch.Tensor, k: int) -> torch.Tensor:
    """Least-squares ``M (D, D)`` minimising ``Σ_p ||pe[p + k] - M @ pe[p]||²``, float64.

    The fit sees only the table ``pe (L, D)`` (rows = positions, at least ``k + D`` of them),
    not the formula; when the rows of ``pe[:-k]`` span all ``D`` dimensions the minimiser is
    unique, and for the sinusoidal table it is then ``M_k`` itself.
    """
    check_float("pe", pe)
    check_rank("pe", pe, 2, "[positions, d_model]")
    k = check_positive_int("k", k)
    n, d = pe.shape
    if n - k < d:
        raise ValueError(
            f"pe must have more than k + d_model = {k + d} rows to determine a ({d}, {d}) "
            f"matrix, got shape {tuple(pe.shape)}"
        )
    x = pe[:-k].double()  # (L-k, D): positions p
    y = pe[k:].double()  # (L-k, D): positions p + k
    # Row form: y = x @ M^T. lstsq solves x @ W = y for W = M^T.
    solution = torch.linalg.lstsq(x, y, driver="gelsd").solution  # (D, D)
    return solution.T.contiguous()  # (D, D)


# %%
m_fit = fit_shift_matrix(table16, 5)  # (16, 16), from the data only
fit_gap = float((m_fit - m_5).abs().max())
fit_residual = float((table16[5:] - table16[:-5] @ m_fit.T).abs().max())
print(f"d = 16: largest entry of |M_fit - M_5| = {fit_gap:.0e}, residual {fit_residual:.0e}")

# A wide table over the same 1,000 positions: its slowest pairs barely turn.
table64 = long_table  # (1000, 64)
m_fit64 = fit_shift_matrix(table64, 5)
fit_gap64 = float((m_fit64 - sinusoidal_shift_matrix(5, 64)).abs().max())
fit_residual64 = float((table64[5:] - table64[:-5] @ m_fit64.T).abs().max())
print(f"d = 64: largest entry of |M_fit - M_5| = {fit_gap64:.2f}, residual {fit_residual64:.0e}")

# %%
assert fit_gap < 1e-8 and fit_residual < 1e-12  # the fit finds the rotation itself
assert fit_residual64 < 1e-9  # at d = 64 a linear map still fits perfectly...
assert fit_gap64 > 0.1  # ... but not only M_5: the data do not pin the matrix down

# %% [markdown]
# At $d = 16$ the fit recovers $M_5$ to ten decimals. At $d = 64$ a matrix still predicts every
# shifted row perfectly, but it is not $M_5$: over 1,000 positions the slowest pairs turn by
# less than a fifth of a radian, so their channels are almost constant (cos) or almost straight
# (sin), several columns are nearly linear combinations of each other, and many matrices fit
# equally well. The linear relation is real, just not the only one the data contain.
#
# The shift also shows in attention's dot products. Since $M_k$ is a rotation,
# $PE_p\cdot PE_{p+k} = \sum_i \cos(k\omega_i)$ depends on $k$ and not on $p$: the table "knows"
# distances.

# %%
offsets = list(range(0, 200))
similarity = {
    f"from position p = {p}": [float(long_table[p] @ long_table[p + k]) for k in offsets]
    for p in (0, 300, 700)
}
ax = plot_lines(
    offsets,
    similarity,
    title="PE[p] · PE[p + k], d = 64: three starts p, one curve",
    xlabel="offset k (positions)",
    ylabel="dot product (no unit)",
    markers=False,
)
for line, style, width in zip(ax.lines, ("-", "--", ":"), (4.0, 2.5, 1.5), strict=True):
    line.set_linestyle(style)  # drawn on top of each other: thick, dashed, dotted
    line.set_linewidth(width)
ax.legend()
curves = torch.tensor(list(similarity.values()))  # (3, 200)
assert (curves - curves[0]).abs().max() < 1e-9  # depends on k only
assert curves[0, 0] == curves[0].max()  # a position is most similar to itself
record_claim(
    "C13",
    claim="PE(pos + k) is a linear function (a rotation) of PE(pos), the same for every pos",
    experiment="block-rotation M_k applied to all 1,000 rows (d = 16, k = 1, 5, 50); "
    "least-squares fit of M from the table alone (d = 16 and d = 64)",
    verdict=c13_verdict(shift_error=max(shift_errors.values()), fit_gap=fit_gap),
    measured=f"max error {max(shift_errors.values()):.0e} over all p; fitted M differs from "
    f"M_5 by {fit_gap:.0e} (d = 16); at d = 64 a fit is exact (residual "
    f"{fit_residual64:.0e}) but not unique (differs by {fit_gap64:.2f})",
)

# %% [markdown]
# The sweep (`c13_sweep_run`, the same `c13_verdict`) changes the width, the length of the
# table, the offsets and the base:

# %% tags=["nbval-check-output"]
print(sweep_summary("C13", keys=["shift error", "|M_fit - M_5|", "|M_fit - M_200|"]))

# %% [markdown]
# **Verdict on C13: reproduced, exactly, at $d = 16$** for offsets up to 900 and with base 100
# too. At $d = 64$ the shift is as exact, but the fit finds another matrix (0.99 away, and 0.64
# with ten times the positions), which `c13_verdict` scores "partly": the data pin the relation
# down only when the table is well conditioned. Why it matters:
# in the book's row-vector convention
# ($q = x W_Q$, $k = x W_K$), a score between two positional codes is $PE_p W_Q W_K^\top
# PE_n^\top$; if the model learns $W_Q W_K^\top \approx M_k^\top$ (since $PE_{n+k}^\top = M_k
# PE_n^\top$), the score becomes $PE_p\cdot PE_{n+k}$, a function of $p - n - k$ only, largest
# at $n = p - k$: "look $k$ back" is expressible by a fixed bilinear form at any position.
# *Expressible* only: in a real model $PE$ is added to a token vector, and nothing forces
# training to find that clean solution rather than one that works only for the positions it has
# seen. Section 4.6 finds out which.

# %% [markdown]
# ## 4.4 Learned position embeddings
#
# BERT and GPT-2 skip the formula: position $p$ gets its own trainable vector, row $p$ of a
# table of shape (max_len, d_model), added to the token vector like the sinusoidal code. The
# model can learn whatever positional pattern the task rewards. The price: the parameter count
# grows linearly with the longest sequence, and there is *no row at all* past max_len.

# %% tags=["nbval-check-output"]
max_lens = [128, 256, 512, 1024, 2048, 4096]
learned_params = [LearnedPositionalEmbedding(768, max_len=n).weight.numel() for n in max_lens]
for n, count in zip(max_lens, learned_params, strict=True):
    print(f"max_len {n:>5}, d_model 768: {count:>9,} parameters")
sinusoidal_module = SinusoidalPositionalEncoding(768, max_len=4096)
sinusoidal_params = sum(p.numel() for p in sinusoidal_module.parameters())
rope_params = sum(p.numel() for p in RotaryEmbedding(64).parameters())
print(f"sinusoidal table of 4096 positions: {sinusoidal_params} parameters; RoPE: {rope_params}")

# %%
assert all(c == 768 * n for c, n in zip(learned_params, max_lens, strict=True))  # linear
assert learned_params[2] == 393_216  # BERT-base: 512 positions × 768
assert sinusoidal_params == 0 and rope_params == 0

# %% [markdown]
# For BERT-base that is 393,216 parameters, well under one percent of the model (chapter 3
# counts it), so cost is not the issue; the hard limit is. Ask a table of 32 positions for a
# 33rd — directly, or through an `offset` as when generating with a cache — and the package
# refuses with an error that says why:

# %% tags=["nbval-check-output"]
table32 = LearnedPositionalEmbedding(max_len=32, d_model=16)
for attempt, call in (
    ("33 tokens", lambda: table32(torch.zeros(1, 33, 16))),
    ("1 token at offset 32", lambda: table32(torch.zeros(1, 1, 16), offset=32)),
):
    try:
        call()
    except ValueError as err:
        print(f"{attempt}: ValueError: {err}")

# %% [markdown]
# (A bare `nn.Embedding` fails too, but with an `IndexError` on the CPU, or a device-side
# assertion on a GPU, far from the line that asked for position 32.) A larger table does not
# help either: rows no training sequence reached keep their random initial values, which
# section 4.6 measures.

# %% [markdown]
# ## 4.5 RoPE: rotate the queries and keys
#
# The sinusoidal code carries relative position only indirectly (section 4.3). RoPE, the rotary
# position embedding of Su et al. (2021), builds it into the score. Nothing is added to the
# token vectors; after the projections, pair $i$ of each query and key at position $m$ is
# *rotated* by the angle $m\theta_i$, with the same frequencies as before,
# $\theta_i = 10000^{-2i/d_k}$. Treat a pair $(a, b)$ as the complex number $a + ib$, and the
# rotation is a multiplication by $e^{im\theta_i}$. Then, for one pair,
#
# $$\operatorname{Re}\!\left[(q\,e^{im\theta})\,\overline{(k\,e^{in\theta})}\right]
#   = \operatorname{Re}\!\left[q\,\bar k\, e^{i(m-n)\theta}\right],$$
#
# which contains $m$ and $n$ only through $m - n$; summed over the pairs, that is $q_m\cdot
# k_n$. In the diagram, turning the query by $m\theta$ and the key by $n\theta$ changes the
# angle between them by $(m - n)\theta$, and the dot product depends only on that angle and the
# two lengths, which a rotation keeps.

# %%
_ = rope_rotation()

# %% [markdown]
# Here is RoPE written from scratch with complex numbers, checked against the package's
# `apply_rope`.


# %%
def rope_from_scratch(x: torch.Tensor) -> torch.Tensor:
    """RoPE on (B, H, L, Dh) with channels (2i, 2i+1) as the pairs, via complex numbers."""
    b, h, seq, dh = x.shape
    angles = rope_angles(torch.arange(seq), head_dim=dh)  # (L, Dh/2): m · θ_i
    pairs = torch.view_as_complex(x.reshape(b, h, seq, dh // 2, 2))  # (B, H, L, Dh/2)
    turned = pairs * torch.polar(torch.ones_like(angles), angles)  # (B, H, L, Dh/2)
    return torch.view_as_real(turned).reshape(b, h, seq, dh)  # (B, H, L, Dh)


gen = torch.Generator().manual_seed(6)
x_heads = torch.randn(2, 3, 10, 16, generator=gen)  # (B, H, L, Dh)
torch.testing.assert_close(rope_from_scratch(x_heads), apply_rope(x_heads, interleaved=True))

# The package's default pairs channel i with channel i + Dh/2 ("rotate half", the layout of
# GPT-NeoX and of Hugging Face's Llama port; Meta's reference Llama code pairs adjacent
# channels, as rope_from_scratch does). It is the same rotation after reordering the channels.
to_interleaved = torch.stack([torch.arange(8), torch.arange(8) + 8], dim=1).flatten()  # (16,)
torch.testing.assert_close(
    apply_rope(x_heads)[..., to_interleaved],
    apply_rope(x_heads[..., to_interleaved], interleaved=True),
)
print("from scratch = apply_rope(interleaved=True); rotate-half = the same up to channel order")

# %% [markdown]
# The claim to test:
#
# > **Claim C15.** RoPE rotates $Q$ and $K$ by position so that $q\cdot k$ depends only on the
# > relative offset; it adds no parameters, and it extrapolates better (LLaMA, Qwen).
#
# The first two parts can be checked exactly. Place one query and one key at every pair of
# positions $(m, n)$ with $0 \le m, n < 64$, rotate, and score: if the score depends on $m - n$
# only, the $64\times 64$ matrix is constant along each diagonal. Rotations also preserve
# lengths.

# %%
gen = torch.Generator().manual_seed(7)
q_vec, k_vec = torch.randn(2, 16, generator=gen, dtype=torch.float64)  # (Dh,) each
n_pos = 64
q_at = apply_rope(q_vec.expand(1, 1, n_pos, 16))[0, 0]  # (64, Dh): q at positions 0..63
k_at = apply_rope(k_vec.expand(1, 1, n_pos, 16))[0, 0]  # (64, Dh): k at positions 0..63
rope_scores = q_at @ k_at.T  # (64, 64): score[m, n] = q_m · k_n

diagonal_spread = max(
    float(rope_scores.diagonal(offset=d).max() - rope_scores.diagonal(offset=d).min())
    for d in range(-(n_pos - 1), n_pos)
)
norm_change = float((q_at.norm(dim=1) - q_vec.norm()).abs().max())
ax = plot_attention(
    rope_scores,
    title="RoPE: score q_m · k_n for one q and one k",
    vmin=None,
    cmap="RdBu_r",
    colorbar=False,
)
_ = ax.figure.colorbar(ax.images[0], ax=ax, label="score q·k (no unit)")

# %%
print(f"largest spread of the score along any diagonal m - n = const: {diagonal_spread:.0e}")
print(f"largest change of a vector's norm under rotation: {norm_change:.0e}")

# %%
assert diagonal_spread < 1e-12  # the score is a function of m - n alone
assert norm_change < 1e-12  # rotations keep lengths
assert rope_params == 0  # nothing to learn (section 4.4)

# %% [markdown]
# The stripes run parallel to the diagonal: every entry with the same $m - n$ has the same
# score. Two consequences. A model with RoPE and no other position signal is
# *translation-invariant*: moving a whole sequence to later positions changes nothing. And a
# score at a distance never seen in training comes from rotation angles $(m-n)\theta_i$ the
# model has never met; whether it handles them is an empirical question.

# %% [markdown]
# ## 4.6 Train short, test long
#
# > **Claim C14.** The sinusoidal encoding needs no parameters and can in principle
# > extrapolate to longer sequences, but in practice quality drops past the training length.
#
# With C15's "RoPE extrapolates better", this calls for one experiment: train on short
# sequences, test on longer ones, change nothing but the positional encoding.
#
# **The task** must need *relative* position, or any encoding would do: *which token stood three
# places before the last one?* Tokens are random among 16; the answer is one of 16 classes
# (chance: 1/16 ≈ 0.06). A model that learned "attend three back from the last token" can
# answer at any length; one that learned "from position 31, attend to the position three before
# it" cannot. To rule out that shortcut, training lengths vary uniformly from 8 to 32 tokens,
# padded at the end.

# %%
#| export
from attention.blocks import POSITIONAL_KINDS, SequenceClassifier
from attention.checks import check_choice, check_tensor
from attention.masks import padding_mask


def lookback_batch(
    batch_size: int,
    min_len: int,
    max_len: int,
    *,
    offset: int = 3,
    vocab_size: int = 16,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Random sequences whose label is the token ``offset`` places before the last one.

    Lengths are uniform in ``[min_len, max_len]``, tokens uniform in ``[0, vocab_size)``.
    Returns tokens ``(B, L)`` int64 (``L`` = the longest length drawn; after each sequence's
    end, padding that holds token 0), lengths ``(B,)`` and labels ``(B,)`` with
    ``labels[b] = tokens[b, lengths[b] - 1 - offset]``.
    """
    batch_size = check_positive_int("batch_size", batch_size)
    offset = check_positive_int("offset", offset)
    vocab_size = check_positive_int("vocab_size", vocab_size)
    min_len = check_positive_int("min_len", min_len)
    max_len = check_positive_int("max_len", max_len)
    if min_len <= offset:
        raise ValueError(
            f"min_len must be > offset={offset} (the answer must exist), got min_len={min_len}"
        )
    if max_len < min_len:
        raise ValueError(f"max_len must be >= min_len={min_len}, got max_len={max_len}")
    lengths = torch.randint(min_len, max_len + 1, (batch_size,), generator=generator)  # (B,)
    longest = int(lengths.max())
    tokens = torch.randint(0, vocab_size, (batch_size, longest), generator=generator)  # (B, L)
    real = torch.arange(longest) < lengths.unsqueeze(1)  # (B, L): True = real token
    tokens = torch.where(real, tokens, 0)  # (B, L): padding holds token 0
    labels = tokens[torch.arange(batch_size), lengths - 1 - offset]  # (B,)
    return tokens, lengths, labels


# %% [markdown]
# **The model** is the package's `SequenceClassifier`: one pre-LN encoder layer, 2 heads,
# $d_\text{model} = 32$, reading the answer off the last real token (`pooling="last"`; the
# batch's `lengths` mask the padding out). The variants differ only in `positional=`: none;
# sinusoidal; learned with a table of 32 positions (the training maximum); learned with a table
# of 128 (rows 32–127 exist but no training sequence reaches them); RoPE. A learned table starts
# at the scale of the token vectors, as BERT initialises both tables alike: `build_lookback_model`
# redraws it at the token table's measured spread (a bare `LearnedPositionalEmbedding` starts at
# GPT-2's far smaller scale).


# %%
#| export
def build_lookback_model(
    positional: str,
    max_len: int,
    *,
    vocab_size: int = 16,
    d_model: int = 32,
    num_heads: int = 2,
    num_layers: int = 1,
    seed: int = 0,
) -> SequenceClassifier:
    """A small :class:`SequenceClassifier` for the look-back task, pooling the last token.

    ``max_len``: the longest input; for ``"learned"`` the size of its position table
    (positions past it raise), for the others just a bound. One class per token id.
    """
    check_choice("positional", positional, POSITIONAL_KINDS)
    torch.manual_seed(_check_int("seed", seed))
    model = SequenceClassifier(
        vocab_size,
        vocab_size,  # the answer is a token: one class per token id
        d_model=d_model,
        num_heads=num_heads,
        num_layers=num_layers,
        d_ff=2 * d_model,
        max_len=max_len,
        positional=positional,
        pooling="last",
        pre_ln=True,
    )
    if positional == "learned":  # at the token table's measured scale (std ≈ 1)
        with torch.no_grad():
            model.pos.weight.normal_(0.0, model.embed.weight.std().item())
    return model


# %% [markdown]
# A fifth variant was built for this very test: **ALiBi** (section 4.7). It adds no vector to
# the tokens; every attention score gets a penalty $-s_h\,|i-j|$ growing with the distance, a
# fixed slope $s_h$ per head. `ALiBiClassifier` is a `SequenceClassifier` with no positions
# whose forward adds `alibi_bias` to the padding mask (a float mask is an additive bias).


# %%
#| export
from attention.masks import padding_mask_from_keep, to_additive
from attention.positional import alibi_bias


class ALiBiClassifier(SequenceClassifier):
    """A ``SequenceClassifier(positional="none", pooling="last")`` whose every layer adds
    ALiBi's bias ``-slope_h * |i - j|`` to its scores; ``forward(tokens (B, L), *,
    lengths=None, keep=None)`` as the parent's (``keep``: True = real token)."""

    def forward(self, tokens: torch.Tensor, *, lengths=None, keep=None, causal=False):
        keep = self._keep_mask(tokens, lengths, keep)  # (B, L): True = real token
        heads = self.encoder.layers[0].self_attn.num_heads
        bias = alibi_bias(heads, tokens.shape[1], device=tokens.device)  # (H, L, L)
        mask = to_additive(padding_mask_from_keep(keep)) + bias  # (B, H, L, L): -inf = padding
        x = self.encoder(self.embed(tokens), mask=mask, causal=causal)  # (B, L, D)
        last = torch.where(keep, torch.arange(keep.shape[1]), -1).amax(dim=1)  # (B,)
        return self.head(x[torch.arange(x.shape[0]), last])  # (B, vocab)


def build_alibi_lookback_model(
    max_len: int,
    *,
    vocab_size: int = 16,
    d_model: int = 32,
    num_heads: int = 2,
    num_layers: int = 1,
    seed: int = 0,
) -> ALiBiClassifier:
    """:func:`build_lookback_model`'s model with ALiBi in place of position vectors."""
    torch.manual_seed(_check_int("seed", seed))
    model = ALiBiClassifier(
        vocab_size,
        vocab_size,
        d_model=d_model,
        num_heads=num_heads,
        num_layers=num_layers,
        d_ff=2 * d_model,
        max_len=max_len,
        positional="none",
        pooling="last",
        pre_ln=True,
    )
    model.positional = "alibi"  # what train_lookback's progress bar shows
    return model


# %% [markdown]
# **Training** is the book's one loop, `fit`: AdamW at learning rate $3\cdot10^{-3}$, 400 steps
# of 64 sequences, cross-entropy of the answer at the last real token. Batches come from a
# generator seeded with `seed + 1000`, so every variant trained with the same seed sees the same
# sequences.

# %%
#| export
import torch.nn.functional as F


def lookback_loss(model: SequenceClassifier, batch) -> torch.Tensor:
    """Cross-entropy of the answer; ``batch`` = (tokens (B, L), lengths (B,), labels (B,))."""
    tokens, lengths, labels = batch
    logits = model(tokens, lengths=lengths)  # (B, vocab): read at each last real token
    return F.cross_entropy(logits, labels)


def train_lookback(
    model: SequenceClassifier,
    *,
    steps: int = 400,
    batch_size: int = 64,
    min_len: int = 8,
    max_len: int = 32,
    offset: int = 3,
    lr: float = 3e-3,
    seed: int = 0,
    progress: bool = False,
):
    """Train ``model`` in place on :func:`lookback_batch` data; returns ``fit``'s ``TrainLog``
    (``.losses``: every step's loss)."""
    # Imported here, not at the top: importing book.pages.ch04 loads no book.experiments module.
    from book.experiments.training import fit

    return fit(
        model,
        lambda generator: lookback_batch(
            batch_size,
            min_len,
            max_len,
            offset=offset,
            vocab_size=model.vocab_size,
            generator=generator,
        ),
        lookback_loss,
        steps=steps,
        lr=lr,
        data_seed=_check_int("seed", seed) + 1000,
        optimizer="adamw",
        progress=progress,
        desc=f"{model.positional}, seed {seed}",
    )


# %% [markdown]
# `lookback_accuracy` also offers a *window*: only the last `window` tokens are visible (the
# earlier ones masked like padding), which places a short sequence at far positions —
# section 4.6's way to tell "new absolute positions" from "new distances".


# %%
#| export
@torch.no_grad()
def lookback_accuracy(
    model: SequenceClassifier,
    length: int,
    *,
    n: int = 512,
    offset: int = 3,
    seed: int = 7,
    window: int | None = None,
) -> float | None:
    """Accuracy on ``n`` fresh sequences of exactly ``length`` tokens (only the last
    ``window`` visible, if given); ``None`` when ``length > model.max_len``, where the model
    cannot run at all (a learned table has no row for those positions)."""
    length = check_positive_int("length", length)
    if length > model.max_len:
        return None
    if window is not None:
        window = check_positive_int("window", window)
        if not offset < window <= length:
            raise ValueError(
                f"window must be in (offset, length] = ({offset}, {length}], got {window}"
            )
    generator = torch.Generator().manual_seed(_check_int("seed", seed))
    tokens, _, labels = lookback_batch(
        n, length, length, offset=offset, vocab_size=model.vocab_size, generator=generator
    )  # tokens (n, L), labels (n,)
    keep = torch.ones(n, length, dtype=torch.bool)  # (n, L): True = visible
    if window is not None:
        keep[:, : length - window] = False
    model.eval()
    predictions = model(tokens, keep=keep).argmax(dim=-1)  # (n,)
    return float((predictions == labels).float().mean())


# %% [markdown]
# Each variant is then tested on fresh sequences of 16 to 128 tokens, up to four times the
# training length. The variants whose verdicts rest on training (sinusoidal, learned with a
# table of 128, RoPE) and ALiBi are trained once per seed of `SEEDS` (three;
# `lookback_accuracy_over_seeds`); the two controls (no positions, which
# cannot express the task, and the table of 32, which cannot run past it) once, with seed 0.
# Every run seeds what it draws, so the fourteen runs go side by side, one per core
# (`run_keyed(f, settings)` returns what `{s: f(s) for s in settings}` would, bit for bit).
#
# **The tests, fixed before the run.** C14 ("quality drops past the training length"): every
# seed of the sinusoidal model reaches `LEARNED` = 0.9 at 32 tokens, and its mean accuracy at
# twice the training length and beyond is at least `DROP` = 0.3 lower. C15 ("extrapolates
# better"): just past the training length (48 and 64 tokens) RoPE's mean accuracy beats the
# sinusoidal model's by at least `BETTER` = 0.1; it "extrapolates" outright if it also keeps its
# accuracy (within `DROP`) at four times the training length.

# %%
# Models this small run fastest on one thread: waking a second thread for every tiny matrix
# costs more than it saves (on a busy machine we measured 2 threads 10x slower than 1).
torch.set_num_threads(1)
TRAIN_MIN, TRAIN_MAX, OFFSET, STEPS, SEED = 8, 32, 3, 400, 0
TEST_LENGTHS = [16, 24, 32, 48, 64, 96, 128]
assert (LEARNED, DROP, BETTER) == (0.9, 0.3, 0.1)  # book.claims.ch04: the thresholds above
MULTI_SEED = ("sinusoidal", "learned, table 128", "RoPE", "ALiBi")
variants = {  # name: (positional, max_len)
    "none": ("none", 128),
    "sinusoidal": ("sinusoidal", 128),
    "learned, table 32": ("learned", 32),
    "learned, table 128": ("learned", 128),
    "RoPE": ("rope", 128),
    "ALiBi": ("alibi", 128),
}


def run(name: str, seed: int):
    """Build variant ``name`` with ``seed`` and train it on that seed's batches."""
    positional, max_len = variants[name]
    if positional == "alibi":
        model = build_alibi_lookback_model(max_len, seed=seed)
    else:
        model = build_lookback_model(positional, max_len, seed=seed)
    log = train_lookback(
        model, steps=STEPS, min_len=TRAIN_MIN, max_len=TRAIN_MAX, offset=OFFSET, seed=seed,
        progress=True,
    )  # fmt: skip
    return model, log


def accuracies_of(model) -> list[float | None]:
    return [lookback_accuracy(model, n, offset=OFFSET) for n in TEST_LENGTHS]


def train_and_test(setting: tuple[str, int]):
    """The trained model, its losses and its accuracy at each of TEST_LENGTHS."""
    model, log = run(*setting)
    return model, log.losses, accuracies_of(model)


settings = [(name, SEED) for name in variants]
settings += [(name, seed) for name in MULTI_SEED for seed in SEEDS if seed != SEED]
trained = run_keyed(train_and_test, settings, desc="variant x seed")
models = {name: trained[name, SEED][0] for name in variants}
losses = {name: trained[name, SEED][1] for name in variants}
accuracy = {name: trained[name, SEED][2] for name in variants}
# accuracy_seeds[name][n]: one accuracy per seed at test length n
accuracy_seeds = {
    name: lookback_accuracy_over_seeds(
        lambda seed, name=name: trained[name, seed][2], TEST_LENGTHS, seeds=SEEDS
    )
    for name in MULTI_SEED
}

# %% [markdown]
# The variants differ only in the position table a learned one adds:

# %%
for name, model in models.items():
    print(f"{name:>20}: {sum(p.numel() for p in model.parameters()):,} parameters")

# %% [markdown]
# First, did every variant learn the task at the lengths it was trained on?

# %%
window = 20
smoothed = {
    name: [sum(ls[i : i + window]) / window for i in range(len(ls) - window + 1)]
    for name, ls in losses.items()
}
ax = plot_lines(
    list(range(window, STEPS + 1)),
    smoothed,
    title="Training loss (moving average over 20 steps)",
    xlabel="training step",
    ylabel="cross-entropy (nats)",
    logy=True,
    markers=False,
)
reference_line(ax, math.log(16), "chance: ln 16")
_ = ax.legend(fontsize=8, loc="lower left")

# %% tags=["nbval-check-output"] tolerance="trained"
print("accuracy on fresh sequences, seed 0; training lengths were 8-32 ('-' = the model refuses)")
print(f"{'test length':>20}" + "".join(f"{n:>7}" for n in TEST_LENGTHS))
for name, accs in accuracy.items():
    cells = "".join(f"{'-':>7}" if a is None else f"{a:>7.2f}" for a in accs)
    print(f"{name:>20}{cells}")
print(f"\nmean (min-max) over seeds {SEEDS}")
for name in MULTI_SEED:
    print(f"{name:>20}: " + "; ".join(
        f"{n}: {spread(accuracy_seeds[name][n]).format('.2f').removesuffix(' over 3 seeds')}"
        for n in TEST_LENGTHS
    ))  # fmt: skip

# %%
fig, ax = plt.subplots(figsize=(9, 4.5))
plot_spread(
    TEST_LENGTHS,
    {name: [accuracy_seeds[name][n] for n in TEST_LENGTHS] for name in MULTI_SEED},
    title="Look-back task: trained on 8-32 tokens, tested longer",
    xlabel="test sequence length (tokens)",
    ylabel="accuracy",
    ax=ax,
)
for name in ("none", "learned, table 32"):  # the two controls, seed 0
    points = [(n, a) for n, a in zip(TEST_LENGTHS, accuracy[name], strict=True) if a is not None]
    ax.plot(*zip(*points, strict=True), ls=":", marker="x", label=f"{name} (seed 0)")
ax.axvspan(TRAIN_MIN, TRAIN_MAX, color="grey", alpha=0.12, label="training lengths")
reference_line(ax, 1 / 16, "chance (1/16)")
ax.set_ylim(0, 1.05)
ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
fig.tight_layout()

# %% [markdown]
# Inside the grey band, every model with positions but ALiBi solves the task, and the model
# without positions is stuck near chance — C11 in a trained model. The sinusoidal model learned
# slowest.
# **ALiBi** did not learn the task on any seed, even inside the band: its bias is the same for a
# key three back and three ahead and only falls with distance, so the last token can favour
# *near* keys but never single out the one exactly three back. (In decoders a causal mask adds a
# direction, and ALiBi models do learn to locate tokens; untested here.) Past the band, the
# others diverge.

# %%
acc = {name: dict(zip(TEST_LENGTHS, accs, strict=True)) for name, accs in accuracy.items()}
mean_acc = {
    name: {n: sum(v) / len(v) for n, v in accuracy_seeds[name].items()} for name in MULTI_SEED
}
assert all(acc["learned, table 32"][n] is None for n in TEST_LENGTHS if n > 32)  # cannot run
assert acc["none"][32] < 0.3  # blind to order: near chance (C11)
assert max(max(accuracy_seeds["ALiBi"][n]) for n in TEST_LENGTHS) < 0.3  # ALiBi never learns it
assert_c14_quality_drops_past_training_length(
    accuracy_seeds["sinusoidal"], train_max=TRAIN_MAX, learned=LEARNED, drop=DROP
)
# The learned table of 128: the same test (rows 32-127 untrained).
assert_c14_quality_drops_past_training_length(
    accuracy_seeds["learned, table 128"], train_max=TRAIN_MAX, learned=LEARNED, drop=DROP
)
assert_c15_rope_extrapolates_better(
    accuracy_seeds["RoPE"], accuracy_seeds["sinusoidal"], lengths=[48, 64], margin=BETTER
)
print(f"RoPE mean accuracy at 128 tokens (4x the training length): {mean_acc['RoPE'][128]:.2f}")

# %% [markdown]
# - The **learned table of 32** cannot be run past 32 tokens at all.
# - The **learned table of 128** runs, and is at chance as soon as the sequence reaches rows
#   training never touched: an untrained row is noise, not a position.
# - The **sinusoidal** model runs at any length, but collapses from perfect to near chance
#   already at 1.5 times the training length.
# - **RoPE** holds up best just past the training lengths (mean 0.78 at 48 tokens over three
#   seeds, the worst seed 0.67), with a wide spread between seeds further out (0.34 to 0.84
#   at 64 tokens), and it too falls towards chance by four times the training length.
#
# Why does the sinusoidal model fail sooner, and why does RoPE fail at all: *new absolute
# positions* or *new distances*? To tell them apart, take 128-token sequences but let the model
# see only the **last 32 tokens**: they sit at positions 96–127, never seen in training, but
# never more than 31 apart — no new distances.

# %%
far_window = {
    name: lookback_accuracy(models[name], 128, offset=OFFSET, window=32)
    for name in ("sinusoidal", "learned, table 128", "RoPE")
}
for name, a in far_window.items():
    print(f"{name:>20}: accuracy {a:.2f} on 32 tokens placed at positions 96-127")

# %%
assert far_window["RoPE"] > 0.99  # translation-invariant: the same as a 32-token sequence
assert far_window["sinusoidal"] < far_window["RoPE"] - 0.1  # new absolute positions hurt
assert far_window["learned, table 128"] < 0.3

# %% [markdown]
# RoPE does not care where the window sits: it answers perfectly, as it must, since its scores
# see only distances. The sinusoidal model only partly transfers: it has learned partly in terms
# of absolute positions. For RoPE, the problem at long lengths must be the new *distances*.
# Where does its last token look? Below, the first layer's attention of the last token (each
# head), averaged over 256 sequences, by distance, at 32 and at 128 tokens
# (`last_query_attention` reruns the first layer for its weights):


# %%
#| export
@torch.no_grad()
def last_query_attention(model: SequenceClassifier, tokens: torch.Tensor) -> torch.Tensor:
    """First-layer attention of the last token, by distance: ``(B, H, L)``.

    ``tokens (B, L)`` are full-length sequences (no padding). Entry ``[b, h, d]`` is the
    weight head ``h`` puts, from the last position ``L - 1`` (the query that ``"last"``
    pooling reads), on the key at distance ``d`` (position ``L - 1 - d``).
    """
    check_tensor("tokens", tokens)
    check_rank("tokens", tokens, 2, "[batch, seq]")
    if not isinstance(model, SequenceClassifier) or model.pooling != "last":
        raise TypeError("model must be a SequenceClassifier with pooling='last'")
    b, l = tokens.shape
    if l > model.max_len:
        raise ValueError(f"tokens has seq length {l}, expected at most max_len={model.max_len}")
    model.eval()
    x = model.embed(tokens)  # (B, L, D)
    if model.pos is not None:
        x = model.pos(x)  # (B, L, D)
    keep = padding_mask(torch.full((b,), l), l)  # (B, 1, 1, L): every token real
    _, weights = model.encoder.layers[0](x, mask=keep, need_weights=True)  # (B, H, L, L)
    return weights[:, :, -1, :].flip(-1)  # (B, H, L): index d = distance from the last token


# %%
rope_model = models["RoPE"]
looks = {}
for n in (32, 128):
    tokens, _, _ = lookback_batch(256, n, n, generator=torch.Generator().manual_seed(11))
    looks[n] = last_query_attention(rope_model, tokens).mean(dim=0)  # (H, n): by distance
fig, axes = plt.subplots(1, 2, figsize=(12, 3.8), sharey=True)
for ax, n in zip(axes, (32, 128), strict=True):
    plot_lines(
        list(range(n)),
        {f"head {h}": looks[n][h].tolist() for h in range(looks[n].shape[0])},
        title=f"RoPE model, sequences of {n} tokens",
        xlabel="distance from the last token (positions)",
        ylabel="attention weight",
        ax=ax,
        markers=False,
    )
    ax.axvline(OFFSET, color="0.3", linestyle="--", linewidth=1.2, zorder=5,
               label=f"distance {OFFSET}: the answer")  # fmt: skip
    if n > TRAIN_MAX:
        ax.axvspan(TRAIN_MAX, n - 1, color="red", alpha=0.08, label="distances never trained")
    ax.legend(fontsize=8, loc="upper right")
fig.tight_layout()

# %%
at_target = {n: looks[n][:, OFFSET].tolist() for n in looks}
unseen_mass = looks[128][:, TRAIN_MAX:].sum(dim=1).tolist()  # (H,)
print(
    "weight on the answer (distance 3), per head: "
    f"{[round(w, 2) for w in at_target[32]]} at 32 tokens, "
    f"{[round(w, 2) for w in at_target[128]]} at 128 tokens"
)
print(f"weight on distances >= 32 at 128 tokens, per head: {[round(w, 2) for w in unseen_mass]}")

# %%
assert min(at_target[32]) > 0.5  # in range, both heads look three back
assert max(at_target[128]) < 0.5 * min(at_target[32])  # at 128 the answer loses its weight
assert min(unseen_mass) > 0.5  # ... to keys at distances never seen in training

# %% [markdown]
# At 32 tokens both heads put most of their weight exactly three back. At 128 tokens most goes
# to distances of 32 and more, never compared in training: their angles $(m-n)\theta_i$ give
# scores the model never learned to push down, and some happen to be large. That is RoPE's known
# weakness outside its training range, and why long-context models stretch it (position
# interpolation, "NTK-aware" or YaRN rescaling of the frequencies) or train on longer sequences.

# %%
record_claim(
    "C14",
    claim="The sinusoidal encoding needs no parameters and can in principle extrapolate, but "
    "quality drops past the training length",
    experiment="1-layer, 2-head classifier, d_model 32, 'which token stood 3 before the last', "
    "trained 400 steps on lengths 8-32, tested at 16-128; 3 seeds; drop >= 0.3 at >= 64 tokens",
    verdict=c14_verdict(
        accuracy_seeds["sinusoidal"], train_max=TRAIN_MAX, params=sinusoidal_params
    ),
    measured="0 parameters; mean (min-max) accuracy over 3 seeds "
    + "; ".join(
        f"{n} tokens {mean_acc['sinusoidal'][n]:.2f} ({min(accuracy_seeds['sinusoidal'][n]):.2f}"
        f"-{max(accuracy_seeds['sinusoidal'][n]):.2f})"
        for n in (32, 48, 64, 128)
    )
    + f" (chance 0.06); seed 0, 32 tokens moved to positions 96-127: "
    f"{far_window['sinusoidal']:.2f}",
)
record_claim(
    "§4 learned PE",
    claim="Learned position embeddings are locked to the trained maximum length, with "
    "parameters growing linearly in it",
    experiment="parameter count vs max_len; the same look-back experiment with tables of 32 "
    "and 128 positions",
    verdict=learned_pe_verdict(
        params=dict(zip(max_lens, learned_params, strict=True)),
        d_model=768,
        refuses_past_table=all(acc["learned, table 32"][n] is None for n in TEST_LENGTHS if n > 32),
        in_range=accuracy_seeds["learned, table 128"][TRAIN_MAX],
        past_trained=accuracy_seeds["learned, table 128"][48],
    ),
    measured=f"768·max_len parameters (393,216 for BERT-base); table 32: ValueError past 32 "
    f"tokens; table 128 (mean of 3 seeds): {mean_acc['learned, table 128'][32]:.2f} at 32 "
    f"tokens, {mean_acc['learned, table 128'][48]:.2f} at 48 (untrained rows)",
)
record_claim(
    "C15",
    claim="RoPE makes q·k depend only on the relative offset, adds no parameters, and "
    "extrapolates better",
    experiment="scores of one q and one k at all 64×64 position pairs; parameter count; the "
    "look-back experiment, 3 seeds, RoPE must beat sinusoidal by >= 0.1 at 48 and 64 tokens",
    verdict=c15_verdict(
        diagonal_spread=diagonal_spread,
        params=rope_params,
        rope=accuracy_seeds["RoPE"],
        other=accuracy_seeds["sinusoidal"],
        near=[48, 64],
        far=4 * TRAIN_MAX,
        train_max=TRAIN_MAX,
    ),
    measured=f"score spread along diagonals {diagonal_spread:.0e}; 0 parameters; mean accuracy "
    f"{mean_acc['RoPE'][48]:.2f} vs sinusoidal {mean_acc['sinusoidal'][48]:.2f} at 48 tokens, "
    f"{mean_acc['RoPE'][64]:.2f} vs {mean_acc['sinusoidal'][64]:.2f} at 64, but "
    f"{mean_acc['RoPE'][128]:.2f} at 128; seed 0: {max(unseen_mass):.0%} of a head's weight on "
    "untrained distances at 128",
)

# %% [markdown]
# A sceptic would not stop at three seeds, 400 steps and one small model. Both claims were
# re-run with one change at a time — three other seeds, a 3× longer budget, a wider model
# ($d_\text{model} = 64$) and a deeper and wider one (2 layers, $d_\text{model} = 64$) — and
# judged by the same functions (`c14_sweep_run`, `c15_sweep_run`; `make sceptic CH=04`). Mean
# accuracy over each setting's three seeds:

# %% tags=["nbval-check-output"]
print("C14, sinusoidal:")
print(sweep_summary("C14", keys=["mean accuracy at 32/48/64/96/128 tokens"]))
print("\nC15, RoPE against sinusoidal:")
print(sweep_summary("C15", keys=["RoPE mean accuracy at 32/48/64/128 tokens", "sinusoidal"]))

# %% [markdown]
# The learned table of 128 under the same changes (`learned_pe_sweep_run`,
# `learned_pe_verdict`):

# %% tags=["nbval-check-output"]
print(sweep_summary("§4 learned PE", keys=["mean accuracy at 32/48/64/96/128 tokens"]))

# %% [markdown]
# **Verdict on C14: reproduced, under every change of the sweep.** The sinusoidal model has no
# positional parameters and runs at every length, but past the training lengths its accuracy
# falls to near chance.
#
# **Verdict on the learned encodings: reproduced, under every change of the sweep.** The
# parameter count is linear in max_len, and the table is a hard wall; a bigger table moves the
# wall without making the rows behind it useful: perfect at 32 tokens, at chance from 48 on
# (rows no training sequence reached get no gradient, however long the training).
#
# **Verdict on C15: partly reproduced, under every change of the sweep; how far RoPE falls at
# four times the training length depends on the model's size.** The exact parts hold exactly:
# scores depend on $m - n$ only, and RoPE has no parameters. "Extrapolates better" holds
# *relative to the other encodings* in every setting: just past the training lengths RoPE keeps
# most of its accuracy (0.78 at 48 tokens, against 0.11 for the sinusoidal model), by an amount
# that depends on the seed, and a mere shift of positions does not affect it. At four times the
# training length the small model fails, with attention drifting to distances never trained, as
# the ALiBi paper (Press et al., 2022) and later studies report for RoPE models trained without
# a length-extension trick. That half softens with size: with $d_\text{model} = 64$, in one
# layer or two, RoPE keeps about two thirds of its accuracy at 128 tokens and almost all of it
# at 48 and 64; a longer budget changed nothing. It still falls by more than `DROP` there, so it
# does not extrapolate outright at any size we tried.

# %% [markdown]
# ## 4.7 ALiBi, and choosing an encoding
#
# ALiBi (Press, Smith and Lewis, 2022) was designed for section 4.6's experiment, train short and
# test long, yet there it could not learn the task at all. Its slopes $s_h$ form a geometric
# sequence over the heads, so that some heads look far and others near. The package's
# `alibi_bias(num_heads, L)` is the penalty $-s_h\,|i-j|$ as an additive float mask.

# %%
bias = alibi_bias(4, 12)  # (H, Lq, Lk)
fig = plot_heads(
    bias,
    title="ALiBi: bias −slope·|i − j| added to the scores, one colour scale",
    ncols=4,
    head_titles=[f"head {h}, slope {s:.3g}" for h, s in enumerate(alibi_slopes(4).tolist())],
    vmin=float(bias.min()),
    vmax=0.0,
)
for ax in fig.axes[1:4]:
    ax.set_ylabel("")  # one label for the row is enough
fig.suptitle("ALiBi: bias −slope·|i − j| added to the scores, one colour scale", y=1.04)
_ = fig.axes[-1].set_ylabel("bias added to the score (no unit)")

# %%
longer = alibi_bias(4, 48)  # (H, 48, 48)
torch.testing.assert_close(longer[:, :12, :12], bias)  # a longer input only adds entries...
assert float(longer.max()) == 0.0 and float(longer.min()) < float(bias.min())  # ... more negative

# %% [markdown]
# A longer input adds only *more negative* entries: attention meets nothing new at long lengths
# except stronger penalties on far keys — why Press et al. found it to extrapolate gracefully
# where sinusoidal and rotary encodings degraded (on language modelling, with a causal mask).
# The price is a built-in preference for nearby tokens, which cost it section 4.6's task.
#
# **Which encoding, then?** From the article, and consistent with what we measured:
#
# - *Fixed, short lengths* (classifying inputs of a known maximum length, say): a learned table
#   learned our task as well as any inside its range, and its one weakness never comes up.
# - *Variable or longer lengths*: RoPE degraded least just past the training range. At many
#   times its training length, extend it (position interpolation, frequency rescaling) or train
#   on the lengths you need.
# - *Extrapolation with no fine-tuning*, where a recency bias is acceptable and the task does
#   not hinge on exact offsets (ours does, and ALiBi failed it): ALiBi.
#
# These are defaults, not theorems: the right choice passes a test like section 4.6's on *your*
# task and lengths.

# %% [markdown]
# ## Claims checked

# %% tags=["nbval-check-output"] tolerance="trained"
claims_table()

# %% [markdown]
# ## Takeaways
#
# - Attention without positions is permutation-equivariant (a pooled model is invariant): it
#   sees a bag of tokens. A causal mask alone already leaks some order.
# - The sinusoidal table turns each channel pair on a circle at its own frequency, wavelengths
#   from $2\pi$ positions to nearly $2\pi\cdot 10000$: a smooth, multi-scale code, finer than a
#   binary counter.
# - Shifting by $k$ positions is one block rotation $M_k$, the same for every position; a
#   least-squares fit finds it from a well-conditioned table alone.
# - A learned table costs max_len × d_model parameters and stops at max_len; rows training
#   never reached are noise.
# - RoPE makes scores depend on $m - n$ only, with no parameters. It is translation-invariant
#   and extrapolated best just past the training length; at 4× the small model failed
#   (attention drifted to untrained distances), wider ones lost part of their accuracy.
# - Choose by measuring: learned for fixed short inputs, RoPE for variable lengths (extended
#   for long ones), ALiBi for extrapolation with a recency bias where exact offsets do not
#   matter.

# %% [markdown]
# ## Exercises
#
# Your workbook `my-exercises/04_positional_encoding.py` (`make lab` copies it there) has five:
# build the sinusoidal table from its formula; compute the wavelength of a channel pair; build
# the shift matrix $M_k$; implement RoPE's rotate-half rotation; and count BERT-base's position
# parameters. Check your answers in the notebook, or all at once with `make check CH=04`.
#
# ## Further reading
#
# - Vaswani, Shazeer, Parmar, Uszkoreit, Jones, Gomez, Kaiser, Polosukhin (2017), *Attention
#   Is All You Need* — the sinusoidal encoding and the remark that a shift is linear.
# - Gehring, Auli, Grangier, Yarats, Dauphin (2017), *Convolutional Sequence to Sequence
#   Learning* — learned position embeddings; Devlin, Chang, Lee, Toutanova (2019), *BERT* —
#   the learned table of 512 positions.
# - Shaw, Uszkoreit, Vaswani (2018), *Self-Attention with Relative Position
#   Representations* — relative positions inside the attention scores.
# - Su, Lu, Pan, Murtadha, Wen, Liu (2021), *RoFormer: Enhanced Transformer with Rotary
#   Position Embedding* — RoPE.
# - Press, Smith, Lewis (2022), *Train Short, Test Long: Attention with Linear Biases
#   Enables Input Length Extrapolation* — ALiBi, and extrapolation tests of the others.
# - Haviv, Ram, Press, Izsak, Levy (2022), *Transformer Language Models without Positional
#   Encodings Still Learn Positional Information* — what the causal mask leaks.
# - Chen, Wong, Chen, Tian (2023), *Extending Context Window of Large Language Models via
#   Positional Interpolation*; Peng, Quesnelle, Fan, Shippole (2023), *YaRN: Efficient
#   Context Window Extension of Large Language Models* — stretching RoPE.
# - Kazemnejad, Padhi, Natesan Ramamurthy, Das, Reddy (2023), *The Impact of Positional
#   Encoding on Length Generalization in Transformers* — a systematic version of section 4.6.
