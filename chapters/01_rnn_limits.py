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
# # Chapter 1 — Why attention: the limits of RNNs
#
# Before Transformers, a sequence was read by a recurrent network: read one token, update a
# fixed-size memory, repeat. This chapter measures what that design costs, following one
# question — *can a model use a token it saw 500 steps ago?* — four ways: how large a
# gradient is after travelling back 500 steps, how many steps must run one after another,
# whether models of several sizes learn a task whose answer sits at the start of a 500-token
# sequence, and how many operations lie between two tokens. Each time one attention layer
# stands beside the recurrent networks. We end with the two kinds of attention the book uses
# (self-attention and encoder–decoder attention) and a tiny example of "meaning from
# context".

# %% [markdown]
# **Learning goals.** After this chapter you can
#
# - write an RNN and an LSTM as the loop over time they are, and say why step $t$ must wait
#   for step $t-1$;
# - explain, with a product of Jacobians, why a gradient shrinks geometrically with distance
#   in a recurrent network, and what the LSTM's forget gate does about it;
# - measure a model's sensitivity to an input as a function of distance, and the number of
#   operations between two tokens;
# - judge from your own experiments how well an LSTM and an attention model use information
#   500 tokens back, and how much a bigger LSTM helps;
# - tell self-attention from encoder–decoder (cross) attention by where the queries, keys
#   and values come from.

# %%
#| default_exp ch01
import functools

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from torch import nn

from attention.blocks import SequenceClassifier
from attention.dispatch import torch_sdpa
from attention.functional import scaled_dot_product_attention
from attention.heads import MultiHeadAttention
from book.claims import claims_table, record_claim
from book.claims.ch01 import (
    C1_FAR,
    C1_FIT,
    C1_NEAR,
    C3_SOLVED,
    C3_USES_SIGNAL,
    assert_c2_depth_grows_with_n,
    assert_c3_attention_and_control_solve,
    assert_c4_paths,
    c1_verdict,
    c2_verdict,
    c3_verdict,
    c4_verdict,
)
from book.diagrams.ch01 import rnn_chain_vs_attention
from book.experiments.gradients import (
    gradient_vs_distance,
    path_lengths,
    recurrence_rounds,
    sequential_depth,
)
from book.experiments.parallel import run_keyed
from book.experiments.seeds import SEEDS, make_deterministic, spread
from book.experiments.training import fit, moving_average, train_classifier
from book.plotting import plot_attention, plot_bar_spread, plot_lines, reference_line, set_style
from book.progress import progress
from book.sceptic import sweep_summary
from measure.timing import time_forward

set_style()
make_deterministic(0)
# Everything in this chapter is small and much of it sequential: on a shared two-core machine
# a second thread costs more in synchronisation than it saves (10x more, for the RNNs' many
# tiny steps). Section 1.3's timings are therefore single-threaded too.
torch.set_num_threads(1)

# %% [markdown]
# ## 1.1 Reading one token at a time
#
# A recurrent network keeps a state vector $h$ of fixed width $H$. At every position $t$ it
# combines the previous state with the new token's vector $x_t$:
#
# $$h_t = f(h_{t-1}, x_t), \qquad \text{e.g. } h_t = \tanh(x_t W_{ih}^\top + h_{t-1}
# W_{hh}^\top + b).$$
#
# Everything the network knows about tokens $0 \dots t$ has to fit into $h_t$, and the only
# road from token $0$ to position $t$ runs through $h_1, h_2, \dots, h_{t-1}$: $t$ updates,
# each applying the same weights and squashing non-linearity. The second formula is the
# plain ("Elman") RNN; as code it is a five-line loop over time, checked against PyTorch's
# `nn.RNN`.


# %%
def elman_rnn(x, w_ih, w_hh, b):
    """h_t = tanh(x_t W_ihᵀ + h_(t-1) W_hhᵀ + b) from h_(-1) = 0: x (B, L, D) -> (B, L, H)."""
    h = x.new_zeros(x.shape[0], w_hh.shape[0])  # (B, H)
    states = []
    for x_t in x.unbind(1):  # (B, D) each: strictly one after the other
        h = torch.tanh(x_t @ w_ih.T + h @ w_hh.T + b)  # (B, H)
        states.append(h)
    return torch.stack(states, 1)  # (B, L, H)


torch_rnn = nn.RNN(4, 6, batch_first=True)
x_small = torch.randn(2, 10, 4)  # (B, L, D)
mine = elman_rnn(
    x_small,
    torch_rnn.weight_ih_l0,
    torch_rnn.weight_hh_l0,
    torch_rnn.bias_ih_l0 + torch_rnn.bias_hh_l0,  # torch keeps two biases; only the sum matters
)
assert torch.allclose(mine, torch_rnn(x_small)[0], atol=1e-6)

# %% [markdown]
# The long short-term memory (LSTM) network keeps a second state, the *cell* $c_t$, and
# updates it additively under the control of three gates computed from $x_t$ and $h_{t-1}$:
#
# $$c_t = f_t \odot c_{t-1} + i_t \odot g_t, \qquad h_t = o_t \odot \tanh(c_t),$$
#
# where the forget gate $f_t$, input gate $i_t$ and output gate $o_t$ are sigmoids in
# $(0, 1)$ and $g_t$ is a tanh candidate. The gates make the memory *selective*, but each
# step still needs the previous step's $(h, c)$. `nn.LSTM` hides this loop in one fused
# call; `unrolled_lstm` writes it out with `nn.LSTMCell`, and the two agree. (Cells starting
# with `#| export` are the one definition of code that `book.pages.ch01` exports to the
# claims and tests.)

# %%
#| export
import math
from collections.abc import Sequence

import torch
from torch import nn

from attention.checks import check_float, check_positive_int, check_rank, check_tensor
from book.experiments.gradients import GradientProfile, layer_rounds


def unrolled_lstm(
    cell: nn.LSTMCell,
    x: torch.Tensor | Sequence[torch.Tensor],
    state: tuple[torch.Tensor, torch.Tensor] | None = None,
    *,
    return_state: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    """Run an ``nn.LSTMCell`` over a sequence one step at a time: the loop ``nn.LSTM`` hides.

    ``x`` is ``(B, L, D)``, or a sequence of ``L`` tensors ``(B, D)`` (one leaf per token, to
    trace each token's path through the autograd graph). ``state`` is ``(h_0, c_0)``, each
    ``(B, hidden)``, zeros by default. Returns the hidden states ``(B, L, hidden)``; with
    ``return_state`` also the final ``(h, c)``.
    """
    if not isinstance(cell, nn.LSTMCell):
        raise TypeError(f"cell must be a torch.nn.LSTMCell, got {type(cell).__name__}")
    if isinstance(x, torch.Tensor):
        check_float("x", x)
        check_rank("x", x, 3, "[batch, seq, dim]")
        steps = x.unbind(1)  # L tensors (B, D)
    else:
        steps = list(x)
        if not steps:
            raise ValueError("x must hold at least one step, got an empty sequence")
        for idx, t in enumerate(steps):
            check_float(f"x[{idx}]", t)
            check_rank(f"x[{idx}]", t, 2, "[batch, dim]")
    if state is None:
        zeros = steps[0].new_zeros(steps[0].shape[0], cell.hidden_size)  # (B, hidden)
        state = (zeros, zeros)
    h, c = state  # (B, hidden) each
    outputs = []
    for x_t in steps:
        h, c = cell(x_t, (h, c))  # (B, hidden) each: needs the previous step's h and c
        outputs.append(h)
    outputs = torch.stack(outputs, dim=1)  # (B, L, hidden)
    return (outputs, (h, c)) if return_state else outputs


# %%
cell = nn.LSTMCell(4, 6)
fused = nn.LSTM(4, 6, batch_first=True)
with torch.no_grad():  # give both the same weights
    for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
        getattr(fused, f"{name}_l0").copy_(getattr(cell, name))
assert torch.allclose(unrolled_lstm(cell, x_small), fused(x_small)[0], atol=1e-6)

# %% [markdown]
# The diagram is the chapter in one picture. Left, the recurrent chain: $x_0$ reaches the
# read-out only through every later state, and each state waits for the one before. Right,
# one self-attention layer: every output is computed from every token at once, so $x_0$ is
# one step from the read-out, whatever the length.

# %%
fig = rnn_chain_vs_attention()

# %% [markdown]
# **The running example.** Sequences are 500 tokens long and the model reads out at the
# *last* position. In section 1.4's task the class is written in the first five tokens,
# followed by 495 tokens of noise: the information needed is as far from the read-out as it
# can be. In the generator, ids 0–3 are the four "signal" tokens (one per class), the other
# 16 ids are distractors, and the signal's copies go to distinct positions drawn from a
# half-open window (`signal_positions`; negative values count from the end, so section 1.4's
# control can put the signal next to the read-out).


# %%
#| export
def signal_batch(
    batch_size: int,
    seq_len: int,
    *,
    n_classes: int = 4,
    n_distractors: int = 16,
    signal_positions: tuple[int, int] = (0, 5),
    n_copies: int = 1,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A batch of the "find the signal token" task: ``tokens (B, L)`` and ``labels (B,)``, int64.

    Token ``c < n_classes`` is the signal of class ``c``; ids ``n_classes ..
    n_classes + n_distractors - 1`` are distractors (the vocabulary has ``n_classes +
    n_distractors`` ids). Every sequence is distractors drawn uniformly, except ``n_copies``
    copies of its label's signal token at distinct positions drawn from ``signal_positions =
    (start, stop)``. A model must find that token and carry its identity to its read-out.
    """
    batch_size = check_positive_int("batch_size", batch_size)
    seq_len = check_positive_int("seq_len", seq_len)
    n_classes = check_positive_int("n_classes", n_classes)
    n_distractors = check_positive_int("n_distractors", n_distractors)
    if not (isinstance(signal_positions, tuple) and len(signal_positions) == 2):
        raise TypeError(f"signal_positions must be a (start, stop) tuple, got {signal_positions!r}")
    start, stop = (p + seq_len if p < 0 else p for p in signal_positions)
    if not 0 <= start < stop <= seq_len:
        raise ValueError(
            f"signal_positions must be a non-empty range inside [0, seq_len={seq_len}], got "
            f"{signal_positions}"
        )
    n_copies = check_positive_int("n_copies", n_copies)
    if n_copies > stop - start:
        raise ValueError(
            f"n_copies must be <= the number of signal positions ({stop - start}), got {n_copies}"
        )
    tokens = torch.randint(
        n_classes, n_classes + n_distractors, (batch_size, seq_len), generator=generator
    )  # (B, L): distractors everywhere
    labels = torch.randint(n_classes, (batch_size,), generator=generator)  # (B,)
    # A random permutation of the window per row, truncated: distinct positions, no loop.
    order = torch.rand(batch_size, stop - start, generator=generator).argsort(-1)  # (B, W)
    where = order[:, :n_copies] + start  # (B, n_copies)
    tokens.scatter_(1, where, labels.unsqueeze(1).expand(-1, n_copies))  # (B, L)
    return tokens, labels


# %% [markdown]
# One sequence of the running example: the class is written five times, in positions 0–4.

# %% tags=["nbval-check-output"]
SEQ_LEN, N_CLASSES, N_DISTRACTORS = 500, 4, 16
VOCAB = N_CLASSES + N_DISTRACTORS
example_tokens, example_labels = signal_batch(
    1, SEQ_LEN, signal_positions=(0, 5), n_copies=5, generator=torch.Generator().manual_seed(0)
)
print("label:", int(example_labels[0]))
print("first 12 tokens:", example_tokens[0, :12].tolist())
print("last 12 tokens: ", example_tokens[0, -12:].tolist())

# %% [markdown]
# ## 1.2 The telephone game: information fades with distance (C1)
#
# **Claim C1.** *Information from far back decays as it is passed from state to state, like
# a message whispered along a line of people; the LSTM's gating eases this but does not cure
# it.*
#
# **Why it should be true.** How much can token $j$ still influence the state at $t$? The
# chain rule answers with a product of per-step Jacobians:
#
# $$\frac{\partial h_t}{\partial x_j} = \frac{\partial h_t}{\partial h_{t-1}}
# \frac{\partial h_{t-1}}{\partial h_{t-2}} \cdots \frac{\partial h_{j+1}}{\partial h_j}
# \frac{\partial h_j}{\partial x_j}.$$
#
# For the plain RNN each factor is $\operatorname{diag}(1 - h^2)\,W_{hh}$. If these factors
# shrink vectors by about $r < 1$, the product over $d = t - j$ steps shrinks by $r^d$:
# **exponentially in the distance** ($r > 1$ gives the mirror problem, exploding gradients).
# Training uses exactly this product: it carries the gradient that tells the model how to
# use token $j$ for a decision at $t$. In the LSTM the direct path along the cell
# contributes $\partial c_t / \partial c_{t-1} = \operatorname{diag}(f_t)$, so a forget gate
# held near 1 keeps that product near 1 — the "eases" part of the claim.
#
# **Experiment.** For random inputs $x$ of length 500 we compute
# $\lVert \partial y_{499} / \partial x_j \rVert$ (the Frobenius norm of that Jacobian
# block) for every position $j$, with `gradient_vs_distance`, for five freshly initialised
# models of width 32: a plain RNN, a GRU, an LSTM, an LSTM whose forget-gate bias is raised
# by 3 ($f_t \approx \sigma(3) \approx 0.95$: an exaggerated version of the +1 that
# Jozefowicz et al., 2015, recommend), and one multi-head self-attention layer. We work in
# float64, since the numbers underflow float32. Each norm is estimated from 8 random probes
# (Hutchinson's estimator): good to some tens of percent, invisible on a scale spanning more
# than a hundred orders of magnitude.

# %% [markdown]
# The four recurrent models are built in one function that draws their weights from torch's
# global generator in a fixed order, so one seed fixes all four.


# %%
#| export
def recurrent_models(width: int, *, forget_bias: float) -> dict[str, nn.Module]:
    """Freshly initialised single-layer ``nn.RNN`` (tanh), ``nn.GRU``, ``nn.LSTM``, and an
    ``nn.LSTM`` whose forget-gate bias is raised by ``forget_bias`` (named ``"LSTM, forget
    bias +3"`` for 3), all ``batch_first`` with input and hidden width ``width``: each maps
    ``(B, L, width)`` to outputs ``(B, L, width)`` (and its final state)."""
    width = check_positive_int("width", width)
    eased = f"LSTM, forget bias +{forget_bias:g}"
    models = {
        "RNN (tanh)": nn.RNN(width, width, batch_first=True),
        "GRU": nn.GRU(width, width, batch_first=True),
        "LSTM": nn.LSTM(width, width, batch_first=True),
        eased: nn.LSTM(width, width, batch_first=True),
    }
    with torch.no_grad():  # torch orders the LSTM gates (input, forget, cell, output)
        models[eased].bias_ih_l0[width : 2 * width] += forget_bias  # f ≈ σ(b + forget_bias)
    return models


def outputs_of(rnn: nn.Module):
    """The RNN as a function ``x (B, L, D) -> outputs (B, L, H)``, dropping its final state."""
    return lambda z: rnn(z)[0]


# %%
WIDTH = 32
torch.manual_seed(0)
recurrent = recurrent_models(WIDTH, forget_bias=3.0)
self_attention = MultiHeadAttention(WIDTH, 4, attn_fn=torch_sdpa)
models = {name: outputs_of(m.double()) for name, m in recurrent.items()}
models["self-attention"] = self_attention.double()

x_probe = torch.randn(2, SEQ_LEN, WIDTH, dtype=torch.float64)  # (B, L, D)
profiles = {
    name: gradient_vs_distance(fn, x_probe, n_probes=8, generator=torch.Generator().manual_seed(1))
    for name, fn in progress(models.items(), desc="gradients")
}

# %%
distances = profiles["RNN (tanh)"].distances.flip(0).tolist()  # 0 .. 499
curves = {}
for name, p in profiles.items():
    norms = p.norms.flip(0)  # (L,) by distance 0 .. 499
    curves[name] = [v if v > 0 else None for v in norms.tolist()]  # 0 = underflow: a gap
fig, axes = plt.subplots(1, 2, figsize=(12, 4.4))
for ax, low, title in (
    (axes[0], 1e-160, "The whole range"),
    (axes[1], 1e-4, "Zoom: the top of the left panel"),
):
    plot_lines(
        distances,
        curves,
        title=title,
        xlabel="distance t − j (tokens)",
        ylabel="‖∂y_t / ∂x_j‖ (log scale)",
        logy=True,
        ax=ax,
        markers=False,
    )
    ax.set_ylim(low, 10)
axes[1].get_legend().remove()
fig.suptitle("How much the output at position 499 depends on the input at position 499 − d")
fig.tight_layout()

# %% [markdown]
# Straight lines on a log scale are exponentials. Two numbers summarise each curve: the
# per-step factor $r$, fitted over distances 1–60 (before the RNN's curve reaches float64's
# floor), and the ratio of the gradient far away (distances 400–499) to close by (1–10).


# %%
#| export
def rate_and_ratio(
    profile: GradientProfile, *, near: tuple[int, int], far: int, fit: tuple[int, int]
) -> tuple[float, float]:
    """``(per-step factor, far/near ratio)`` of a :class:`GradientProfile` of ``L`` positions
    read out at the last one: the factor fitted over distances ``fit``, and the mean norm over
    the last ``far`` distances (``L - far .. L - 1``) divided by the mean over ``near``."""
    seq_len = len(profile.norms)
    ratio = profile.band_mean(seq_len - far, seq_len - 1) / profile.band_mean(*near)
    return profile.decay_per_step(*fit), ratio


# %%
# The bands are the claim's (book.claims.ch01): C1_NEAR = (1, 10), C1_FAR = 100, C1_FIT = (1, 60).
summary = {
    name: rate_and_ratio(p, near=C1_NEAR, far=C1_FAR, fit=C1_FIT) for name, p in profiles.items()
}
for name, (rate, ratio) in summary.items():
    print(f"{name:22s} per-step factor {rate:5.3f}   far / near {ratio:9.2e}")

# %%
rnn_rate, rnn_ratio = summary["RNN (tanh)"]
lstm_rate, lstm_ratio = summary["LSTM"]
open_rate, open_ratio = summary["LSTM, forget bias +3"]
gru_rate, gru_ratio = summary["GRU"]
attn_rate, attn_ratio = summary["self-attention"]
# The thresholds are the claim's reading (book.claims.ch01, C1_*): dozens of orders lost by
# the plain RNN, the LSTM and the GRU; a slower per-step decay for the open gate, which still
# loses an order of magnitude; a flat attention layer.
c1 = c1_verdict(summary, eased="LSTM, forget bias +3", seq_len=SEQ_LEN)
print("C1:", c1)
record_claim(
    "C1",
    claim="Information from far back decays with distance in an RNN; LSTM gating eases but "
    "does not cure it",
    experiment="‖∂y_499/∂x_j‖ vs distance at init, L=500, width 32, float64: RNN, GRU, LSTM, "
    "LSTM with forget bias +3, one self-attention layer; sceptic's sweep: seeds 1 and 2, "
    "forget bias +5, an identity-initialised ReLU RNN, L=200",
    verdict=c1,
    measured=f"far/near gradient (d 400–499 vs 1–10): RNN {rnn_ratio:.0e}, GRU "
    f"{gru_ratio:.0e}, LSTM {lstm_ratio:.0e}, LSTM open gate {open_ratio:.0e}, attention "
    f"{attn_ratio:.2f}; per-step factor {rnn_rate:.2f} / {gru_rate:.2f} / {lstm_rate:.2f} / "
    f"{open_rate:.3f} / {attn_rate:.3f}",
)

# %% [markdown]
# A sceptic would ask whether this depends on our choices: the seed; the gate's opening (the
# +3 is ours, section 1.4's remedy is +5, and an RNN whose recurrent weights start as the
# identity, Le, Jaitly and Hinton's IRNN, 2015, is the other well-known way to start with a
# long memory); and the distance, the claim's own knob. So the same measurement and verdict
# were re-run on two other seeds, with the forget-gate bias raised by 5 (on two seeds), with
# an IRNN, and on shorter sequences, with the thresholds (in orders of magnitude) shrunk in
# proportion (`python -m book.sceptic --chapter 01 --claim C1`). The IRNN is the one model
# not built above:


# %%
#| export
def identity_rnn(width: int) -> nn.RNN:
    """A ReLU ``nn.RNN`` (``batch_first``, width ``width``) whose recurrent weights start as the
    identity and whose biases start at zero (Le, Jaitly and Hinton's IRNN, 2015): at
    initialisation it carries its state forward unchanged. Only ``weight_ih`` is drawn."""
    rnn = nn.RNN(width, width, nonlinearity="relu", batch_first=True)
    with torch.no_grad():
        rnn.weight_hh_l0.copy_(torch.eye(width))  # (H, H)
        rnn.bias_hh_l0.zero_()
        rnn.bias_ih_l0.zero_()
    return rnn


# %% [markdown]
# The sweep's runner is `c1_summary` in `book.claims.ch01`. For each setting the stored
# results give the far/near ratio and the per-step factor of the plain RNN, GRU, LSTM, the
# eased model and attention.

# %% tags=["nbval-check-output"]
print(sweep_summary("C1"))

# %% [markdown]
# **Verdict: reproduced, for the default initialisations and an LSTM whose forget gate is
# opened by +3; "does not cure" fails for the stronger remedies.** At torch's initialisation
# every recurrent model's sensitivity falls exponentially with distance — the plain RNN's
# fastest, until its squared gradient underflows even float64 — on every seed and at both
# lengths. The default LSTM and GRU decay more slowly, and the LSTM opened by +3 much more
# slowly, yet it still loses orders of magnitude over 500 steps: gating *eases* the problem
# without removing it. Open the gate by +5, though, and the far gradient is no longer orders
# of magnitude below the near one: on one seed it is about half of it, on another it grows
# with distance. The gateless IRNN is just as flat. So "does not cure" describes how a
# network starts, not recurrence itself; whether training then uses that memory is section
# 1.4's question.
#
# The attention layer's curve is flat: its output depends on a token 499 positions back as
# much as on its neighbour (only its own token, at distance 0, stands out). The flat level
# is low — an untrained layer gives each of 500 tokens about 1/500 of its weight — but it is
# the same at every distance, and training can raise it for the tokens that matter (section
# 1.4). Two caveats: these are untrained networks, and training can learn to hold gates
# open, which is what LSTMs were designed for; and a flat gradient says attention *can* use
# a distant token, not that it *does*.

# %% [markdown]
# ## 1.3 One step at a time: no parallelism over time (C2)
#
# **Claim C2.** *An RNN cannot be parallelised over time: step $t$ waits for step $t-1$.*
#
# This is a statement about dependencies, so we measure them on values, not on how the code
# is written (the fused `nn.LSTM` is one autograd node of depth 5 at every length, though it
# runs the same loop as the Python version). We measure depth in **rounds**. A round applies
# the model's mixing step once at every position in parallel: for attention, one layer; for
# a recurrent network, one application of its own cell to every position, fed with the state
# position $t-1$ had after the previous round (`recurrence_rounds`, which works for a fused
# `nn.LSTM` as for a Python loop). After round $k$ the first $k$ positions are exact; after
# $n$ rounds the output equals the network's own. `sequential_depth` counts the rounds
# before the last output has felt every input ($\partial y_{n-1} / \partial x_j \neq 0$,
# from per-token Jacobians): the steps that must run one after another, however many
# processors there are.
#
# One qualification first. This chapter's networks are *non-linear* recurrences. A *linear*
# recurrence, $h_t = a \odot h_{t-1} + x_t$, is different: two of its steps compose into one
# of the same form ($h_t = a^2 \odot h_{t-2} + a \odot x_{t-1} + x_t$), so a parallel scan
# (Blelloch, 1990) computes all $n$ states in $\lceil \log_2 n \rceil$ rounds, each
# combining every partial sum with the one $2^k$ positions back. Linear RNNs and state-space
# models (S4, Mamba) use that trick to train in parallel. So we test the claim for
# non-linear RNNs, with the scan as its boundary:


# %%
#| export
def linear_scan_rounds(decay: torch.Tensor, seq_len: int):
    """The rounds of a parallel (Hillis–Steele) scan computing the linear recurrence
    ``h_t = decay ⊙ h_(t-1) + x_t`` (``h_(-1) = 0``) for ``x (B, L, D)``, ``L <= seq_len``,
    ``decay (D,)``: round ``k`` adds to every position the partial sum ``2^k`` positions back,
    times ``decay^(2^k)``; after ``ceil(log2 seq_len)`` rounds every ``h_t`` is exact. Returns
    ``x -> [h after each round]`` (:func:`book.experiments.gradients.layer_rounds`)."""
    seq_len = check_positive_int("seq_len", seq_len)

    def combine(shift: int):
        def round_(h: torch.Tensor) -> torch.Tensor:  # (B, L, D) partial sums
            back = torch.zeros_like(h)  # (B, L, D)
            back[:, shift:] = h[:, :-shift]  # the partial sum `shift` positions back
            return h + decay**shift * back  # (B, L, D)

        return round_

    n_rounds = max(1, math.ceil(math.log2(seq_len)))
    return layer_rounds([combine(2**k) for k in range(n_rounds)])


# %% [markdown]
# The prediction, written before the run: $n$ rounds for every non-linear recurrent network,
# fused or not, at every length; $\lceil \log_2 n \rceil$ for the scan; one round (one layer)
# for attention at every length.

# %% tags=["nbval-check-output"]
torch.manual_seed(0)
cell_c2 = nn.LSTMCell(16, 16).double()
fused_c2 = nn.LSTM(16, 16, batch_first=True).double()
gru_c2 = nn.GRU(16, 16, batch_first=True).double()
attention_c2 = MultiHeadAttention(16, 4).double()
depth_models = {
    "LSTM, Python loop (LSTMCell)": recurrence_rounds(cell_c2),
    "LSTM, fused (nn.LSTM)": recurrence_rounds(fused_c2),
    "GRU, fused (nn.GRU)": recurrence_rounds(gru_c2),
    "self-attention, 1 layer": layer_rounds([attention_c2]),
}
depth_lengths = [8, 16, 32, 64]
depth = {name: [] for name in depth_models}
for n in progress(depth_lengths, desc="depth"):
    x_n = torch.randn(1, n, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(n))
    for name, rounds in depth_models.items():
        depth[name].append(sequential_depth(rounds, x_n, generator=torch.Generator()))
SCAN = "linear recurrence, parallel scan"
decay = torch.full((16,), 0.9, dtype=torch.float64)  # a in h_t = a ⊙ h_(t-1) + x_t
depth[SCAN] = []
for n in depth_lengths:
    x_n = torch.randn(1, n, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(n))
    depth[SCAN].append(
        sequential_depth(linear_scan_rounds(decay, n), x_n, generator=torch.Generator())
    )
# The rounds are the module's own computation: after n rounds, its own output.
x_check = torch.randn(2, 16, 16, dtype=torch.float64)  # (B, L, D)
assert torch.allclose(recurrence_rounds(fused_c2)(x_check)[-1], fused_c2(x_check)[0])
h, states = torch.zeros(2, 16, dtype=torch.float64), []  # the scan = the loop it replaces
for x_t in x_check.unbind(1):
    h = decay * h + x_t  # (B, D)
    states.append(h)
assert torch.allclose(linear_scan_rounds(decay, 16)(x_check)[-1], torch.stack(states, 1))
for name, values in depth.items():
    print(
        f"{name:32s}",
        "  ".join(f"n={n}: {d:3d}" for n, d in zip(depth_lengths, values, strict=True)),
    )

# %%
recurrent_depth = {name: d for name, d in depth.items() if "attention" not in name and name != SCAN}
attention_depth = {"self-attention, 1 layer": depth["self-attention, 1 layer"]}
assert_c2_depth_grows_with_n(depth_lengths, recurrent_depth, attention_depth)

# %% [markdown]
# Every non-linear recurrent network needs exactly $n$ rounds — the Python loop and the
# fused `nn.LSTM` and `nn.GRU` alike: a fused kernel is faster per step but cannot skip
# steps. The scan needs $\log_2 n$; attention one round at every length. Wall-clock time,
# though, also depends on the *amount* of work, and attention does $O(n^2)$ against the
# LSTM's $O(n)$. The next cell times one forward pass (batch 8, width 64) of the LSTM as a
# Python loop, PyTorch's fused `nn.LSTM`, and one attention layer using PyTorch's fused
# attention kernel. The timings depend on the machine and are shown, never asserted.

# %%
torch.manual_seed(0)
cell_t, fused_t = nn.LSTMCell(64, 64), nn.LSTM(64, 64, batch_first=True)
attention_t = MultiHeadAttention(64, 4, attn_fn=torch_sdpa)
time_lengths = [64, 128, 256, 512, 1024]
timings = {"LSTM, Python loop": [], "LSTM, fused (nn.LSTM)": [], "self-attention": []}
for n in progress(time_lengths, desc="timing"):
    x_n = torch.randn(8, n, 64)  # (B, L, D)
    for name, run in (
        ("LSTM, Python loop", functools.partial(unrolled_lstm, cell_t, x_n)),
        ("LSTM, fused (nn.LSTM)", functools.partial(fused_t, x_n)),
        ("self-attention", functools.partial(attention_t, x_n)),
    ):
        timings[name].append(time_forward(run, repeats=3))

fig, axes = plt.subplots(1, 2, figsize=(11, 4))
plot_lines(
    {name: depth_lengths for name in depth},
    depth,
    title="Sequential depth: rounds that must run one after another",
    xlabel="sequence length n (tokens)",
    ylabel="sequential depth (rounds)",
    ax=axes[0],
)
axes[0].lines[1].set_linestyle("--")  # the three recurrent lines coincide: dash two
axes[0].lines[2].set_linestyle(":")
axes[0].legend(fontsize=8, loc="upper left")
plot_lines(
    time_lengths,
    {name: [1000 * t for t in ts] for name, ts in timings.items()},
    title=f"Forward pass on this machine ({torch.get_num_threads()} CPU thread)",
    xlabel="sequence length n (tokens)",
    ylabel="time (ms, log scale)",
    logx=True,
    logy=True,
    ax=axes[1],
)
fig.tight_layout()

# %%
for name, ts in timings.items():
    print(f"{name:22s}", "  ".join(f"{1000 * t:7.1f}" for t in ts), "ms")
record_claim(
    "C2",
    claim="A (non-linear) RNN cannot parallelise over time: step t waits for step t−1 (a linear "
    "recurrence can, by a parallel scan)",
    experiment="sequential depth in rounds (per-token Jacobians) of an LSTM loop, fused nn.LSTM, "
    "fused nn.GRU, a linear recurrence by parallel scan and one attention layer, n = 8…64; "
    "forward timings n = 64…1024 (shown, not asserted)",
    verdict=c2_verdict(depth_lengths, recurrent_depth, attention_depth),
    measured="depth at n = "
    + "/".join(str(n) for n in depth_lengths)
    + ": "
    + "; ".join(f"{k} " + "/".join(str(d) for d in v) for k, v in depth.items())
    + "; at n=1024 the Python loop took "
    f"{1000 * timings['LSTM, Python loop'][-1]:.0f} ms, nn.LSTM "
    f"{1000 * timings['LSTM, fused (nn.LSTM)'][-1]:.0f} ms, attention "
    f"{1000 * timings['self-attention'][-1]:.0f} ms (this machine)",
)

# %% [markdown]
# The depths do not depend on the lengths or the width chosen: the sceptic's sweep
# (`python -m book.sceptic --claim C2`) measures them again at a longer sequence and with
# wider models, and once with the scan counted among the recurrent networks.

# %% tags=["nbval-check-output"]
print(sweep_summary("C2"))

# %% [markdown]
# **Verdict: reproduced for non-linear RNNs**, as a statement about dependencies: every tanh
# or gated recurrent network, fused or not, needs $n$ rounds one after another; attention
# needs one, at every length. "Any RNN" would be too strong: a linear recurrence needs only
# $\log_2 n$, by a scan (counted with the others, it makes the verdict "partly", as in the
# sweep). The timings, taken on one CPU thread, show attention's $O(n^2)$ work: compare its
# slope with the LSTMs' in the right panel (2 on log–log axes is quadratic, 1 linear), and
# see which line is lowest at $n = 1024$ on your machine. The Python loop pays interpreter
# overhead at each of its $n$ steps: the sequential bottleneck made visible. On a GPU a
# fixed number of large matrix products is cheap while $n$ small dependent steps leave the
# chip idle — which made Transformers fast to *train* (a decoder still generates one token
# at a time).

# %% [markdown]
# ## 1.4 A task 500 tokens long (C3)
#
# **Claim C3.** *An LSTM trained on length-500 sequences fails to use features near the
# start of the sequence; a bigger hidden size or more layers helps only marginally — a limit
# of the architecture, not of tuning.*
#
# **Experiment.** The running example's task: the class (one of 4) is a signal token
# repeated in positions 0–4; positions 5–499 are random distractors. Each model predicts
# from its *last* position, so for the LSTM the signal must survive 495 state updates. We
# train, on the same batches (batch 16, Adam, learning rate 5e-3, gradients clipped at norm
# 1, 120 steps):
#
# - a small **attention classifier** (`SequenceClassifier`: one pre-LN encoder layer, one
#   head, width 32, sinusoidal positions, read-out at the last position);
# - LSTM classifiers with hidden size 32 (one layer), 128 (one layer) and 32 (two layers);
# - the 32-unit LSTM with its **forget-gate bias raised** by 3 and by 5 at initialisation,
#   the first thing an expert tries on a long-lag task (Gers et al., 2000; Jozefowicz et
#   al., 2015): with $f \approx \sigma(5)$ the cell forgets slowly from the first step, so
#   the gradient from the read-out can reach the signal;
# - a **control**: the 32-unit LSTM with the signal in the *last* five positions. If it
#   fails too, the task or the budget is the problem, not the distance.
#
# The attention model, the default 32-unit LSTM and both forget-bias LSTMs are trained with
# seeds 0, 1 and 2; the wider, deeper and control LSTMs with seed 0 only — the budget is
# small because this book runs on two CPU cores. Chance accuracy is one in four.
#
# **Thresholds, fixed before the run** (`C3_USES_SIGNAL`, `C3_SOLVED` in
# `book.claims.ch01`): a model *uses the signal* when its held-out accuracy reaches twice
# chance, and *solves* the task at 0.9. The claim is reproduced if no LSTM run uses the
# signal; partly, if the default LSTMs fail on every seed but a tuned one uses it on some
# seeds; not reproduced, if a default LSTM uses it, or a remedy does on every seed.

# %% [markdown]
# **The LSTM classifier** embeds the tokens, runs `nn.LSTM` and reads the class off the top
# layer's state after the last token. Its `forget_bias` is added to the forget gate's bias
# in every layer.


# %%
#| export
class LSTMClassifier(nn.Module):
    """Token ids ``(B, L)`` → logits ``(B, num_classes)`` from the LSTM's last hidden state.

    Embedding → ``nn.LSTM(num_layers)`` → linear read-out of the top layer's state after the
    last token. ``forget_bias`` is added to the forget gate's bias in every layer at
    initialisation (torch orders the gates input, forget, cell, output), so that
    ``f ≈ σ(forget_bias)`` at the start: +1 is Jozefowicz et al.'s (2015) recommendation,
    larger values keep the cell's memory open for longer.
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        embed_dim: int,
        hidden_size: int,
        num_layers: int = 1,
        *,
        forget_bias: float = 0.0,
    ) -> None:
        super().__init__()
        self.vocab_size = check_positive_int("vocab_size", vocab_size)
        self.embed = nn.Embedding(vocab_size, check_positive_int("embed_dim", embed_dim))
        self.lstm = nn.LSTM(
            embed_dim,
            check_positive_int("hidden_size", hidden_size),
            check_positive_int("num_layers", num_layers),
            batch_first=True,
        )
        self.head = nn.Linear(hidden_size, check_positive_int("num_classes", num_classes))
        if isinstance(forget_bias, bool) or not isinstance(forget_bias, (int, float)):
            raise TypeError(f"forget_bias must be a number, got {forget_bias!r}")
        self.forget_bias = float(forget_bias)
        with torch.no_grad():
            for layer in range(num_layers):
                bias = getattr(self.lstm, f"bias_ih_l{layer}")  # (4·hidden,): i, f, g, o
                bias[hidden_size : 2 * hidden_size] += self.forget_bias

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        check_tensor("tokens", tokens)
        check_rank("tokens", tokens, 2, "[batch, seq]")
        if tokens.dtype.is_floating_point or tokens.dtype == torch.bool:
            raise TypeError(f"tokens must be an integer tensor of ids, got dtype {tokens.dtype}")
        x = self.embed(tokens)  # (B, L, E)
        _, (h_n, _) = self.lstm(x)  # h_n: (num_layers, B, hidden)
        return self.head(h_n[-1])  # (B, num_classes): the top layer after the last token


# %% [markdown]
# The attention classifier is `SequenceClassifier`, which chapter 2 on builds piece by
# piece: embedding plus sinusoidal positions, one pre-LN encoder layer, and a linear
# read-out at the last position.

# %%
STEPS, BATCH, LR = 120, 16, 5e-3
early_task = functools.partial(
    signal_batch, seq_len=SEQ_LEN, signal_positions=(0, 5), n_copies=5
)  # the signal is 495-499 tokens from the read-out
late_task = functools.partial(
    signal_batch, seq_len=SEQ_LEN, signal_positions=(-5, SEQ_LEN), n_copies=5
)


def batches(task):
    return lambda batch_size, generator: task(batch_size, generator=generator)


def attention_classifier():
    return SequenceClassifier(
        VOCAB,
        N_CLASSES,
        d_model=32,
        num_heads=1,
        num_layers=1,
        d_ff=64,
        max_len=SEQ_LEN,
        positional="sinusoidal",
        pooling="last",
        attn_fn=torch_sdpa,
    )


def lstm(hidden, num_layers=1, forget_bias=0.0):
    return lambda: LSTMClassifier(
        VOCAB, N_CLASSES, 16, hidden, num_layers=num_layers, forget_bias=forget_bias
    )


print(f"uses the signal: accuracy >= {C3_USES_SIGNAL}; solves: >= {C3_SOLVED}")

# %% [markdown]
# **The training step.** Every model in this book is trained by one loop, shown here in
# full: Adam on a fresh batch at every step, cross-entropy of the logits against the labels,
# gradients clipped at norm 1 (standard for LSTMs, applied to every model alike). The
# batches come from one generator seeded with `data_seed`, so two models trained with the
# same seed see the same examples in the same order.


# %%
def classification_loss(model, batch):
    """Mean cross-entropy of the logits (B, num_classes) for the labels (B,)."""
    tokens, labels = batch  # (B, L) int64, (B,) int64
    return F.cross_entropy(model(tokens), labels)  # scalar


def train_loop(model, make_batch, *, steps, lr, data_seed, clip=1.0):
    """Train ``model`` in place; ``make_batch(generator) -> batch``. Returns every step's loss."""
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    data = torch.Generator().manual_seed(data_seed)  # the same batches for every model
    losses = []
    model.train()
    for _ in range(steps):
        loss = classification_loss(model, make_batch(data))  # scalar
        opt.zero_grad(set_to_none=True)
        loss.backward()  # the gradient of every weight
        nn.utils.clip_grad_norm_(model.parameters(), clip)  # at most norm `clip` in all
        opt.step()
        losses.append(loss.item())
    model.eval()
    return losses


# %% [markdown]
# The book's `fit` (`book.experiments.training`) is this loop plus a progress bar, thread
# and learning-rate settings, and flushing of denormal floats (faster, not different); on
# three steps the two give the same losses. `train_classifier` seeds the weights with
# `seed`, draws training batches from `seed + 1` and a held-out batch of 512 from
# `seed + 2`, and reports the accuracy on it.


# %%
def first_batches(generator):
    return early_task(BATCH, generator=generator)


torch.manual_seed(0)
by_hand = train_loop(attention_classifier(), first_batches, steps=3, lr=LR, data_seed=1)
torch.manual_seed(0)
by_fit = fit(
    attention_classifier(),
    first_batches,
    classification_loss,
    steps=3,
    lr=LR,
    data_seed=1,
    clip=1.0,
).losses
torch.testing.assert_close(torch.tensor(by_hand), torch.tensor(by_fit))

# %%
# name -> (build, task, seeds)
runs_c3 = {
    "attention, signal at start": (attention_classifier, early_task, SEEDS),
    "LSTM 32, signal at end (control)": (lstm(32), late_task, (0,)),
    "LSTM 32, signal at start": (lstm(32), early_task, SEEDS),
    "LSTM 128, signal at start": (lstm(128), early_task, (0,)),
    "LSTM 32×2 layers, signal at start": (lstm(32, num_layers=2), early_task, (0,)),
    "LSTM 32, forget bias +3": (lstm(32, forget_bias=3.0), early_task, SEEDS),
    "LSTM 32, forget bias +5": (lstm(32, forget_bias=5.0), early_task, SEEDS),
}


def train_c3(setting: tuple[str, int]):
    name, seed = setting
    build, task, _ = runs_c3[name]
    return train_classifier(build, batches(task), steps=STEPS, batch_size=BATCH, lr=LR,
                            seed=seed)  # fmt: skip


def settings_c3(remedy: bool) -> list[tuple[str, int]]:
    """(name, seed) of every run, of the forget-bias remedy's runs only, or of the others."""
    return [(name, seed) for name, (_, _, seeds) in runs_c3.items()
            if ("forget bias" in name) == remedy for seed in seeds]  # fmt: skip


# every run seeds what it draws, so the runs go side by side, one per core: what a loop over
# the settings would give, bit for bit (the forget-bias runs are in the next cell)
results_c3 = run_keyed(train_c3, settings_c3(remedy=False), desc="C3 runs")

# %% [markdown]
# The expert's remedy: the same 32-unit LSTM, the same batches, the forget gate opened at
# initialisation.

# %%
results_c3 |= run_keyed(train_c3, settings_c3(remedy=True), desc="forget-bias runs")
acc_c3 = {
    name: [results_c3[name, s].accuracy for s in seeds] for name, (_, _, seeds) in runs_c3.items()
}
print(results_c3["attention, signal at start", 0].model)

# %%
fig, axes = plt.subplots(2, 1, figsize=(12, 9.5))
plot_lines(
    list(range(1, STEPS + 1)),
    {name: moving_average(results_c3[name, 0].losses, 10) for name in runs_c3},
    title="Training on length-500 sequences, seed 0 (10-step moving average)",
    xlabel="training step",
    ylabel="cross-entropy loss (nats)",
    markers=False,
    ax=axes[0],
)
reference_line(axes[0], torch.log(torch.tensor(4.0)).item(), "chance: ln 4")
axes[0].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
plot_bar_spread(
    {name.replace(", signal at", "\nsignal at").replace(", forget", "\nforget"): a
     for name, a in acc_c3.items()},
    title="Held-out accuracy (bar: mean over the seeds run; dots: each seed)",
    ylabel="accuracy",
    ax=axes[1],
    reference=(0.25, "chance (1/4)"),
)  # fmt: skip
axes[1].axhline(C3_USES_SIGNAL, color="tab:red", linestyle=":", zorder=5,
                label=f"uses the signal ({C3_USES_SIGNAL})")  # fmt: skip
axes[1].tick_params(axis="x", labelsize=9)
axes[1].set_ylim(0, 1.05)
axes[1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
fig.tight_layout()

# %%
for name, accs in acc_c3.items():
    r = results_c3[name, 0]
    print(f"{name:36s} accuracy {spread(accs).format('.2f'):44s} {r.n_params:6d} parameters   "
          f"{r.seconds:5.1f} s (seed 0)")  # fmt: skip

# %% [markdown]
# The dashed line is $\ln 4$, the loss of a uniform guess. Where does the attention model's
# last position look? We recompute its attention weights on held-out sequences (with the
# package's reference attention, which can return weights) and average them over the
# examples.

# %%
trained = results_c3["attention, signal at start", 0].model
layer = trained.encoder.layers[0]
held_tokens, _ = early_task(256, generator=torch.Generator().manual_seed(7))
with torch.no_grad():
    hidden = trained.pos(trained.embed(held_tokens))  # (B, L, D): what the layer reads
    layer.self_attn.attn_fn = None  # the reference attention returns its weights
    _, weights = layer.self_attn(layer.norm1(hidden), need_weights=True)  # (B, 1, L, L)
    layer.self_attn.attn_fn = torch_sdpa
last_row = weights[:, 0, -1, :]  # (B, L): how the read-out position spreads its attention
signal_share = float(last_row[:, :5].sum(-1).mean())
mean_row = last_row.mean(0)  # (L,)
fig, axes = plt.subplots(1, 2, figsize=(12, 3.8), gridspec_kw={"width_ratios": [1.6, 1]})
axes[0].axvspan(-0.5, 4.5, color="orange", alpha=0.3, label="signal (positions 0–4)")
axes[0].plot(range(SEQ_LEN), mean_row, label="mean attention weight of position 499")
axes[0].set(
    title="Trained attention classifier: where the read-out position looks",
    xlabel="key position (tokens)",
    ylabel="attention weight (mean over 256 sequences)",
)
axes[0].legend(fontsize=8, loc="upper right")
zoom = 20
axes[1].bar(range(zoom), mean_row[:zoom], color=["tab:orange"] * 5 + ["tab:blue"] * (zoom - 5))
reference_line(axes[1], 1 / SEQ_LEN, "uniform weight 1/500")
axes[1].set(title=f"Zoom: key positions 0–{zoom - 1}", xlabel="key position (tokens)",
            ylabel="attention weight", xticks=range(0, zoom, 2))  # fmt: skip
axes[1].legend(fontsize=8, loc="upper right")
fig.tight_layout()
print(f"share of attention on positions 0-4: {signal_share:.1%} (uniform would be 1.0%)")

# %%
assert_c3_attention_and_control_solve(
    acc_c3["attention, signal at start"], acc_c3["LSTM 32, signal at end (control)"], signal_share
)
default_c3 = {n: a for n, a in acc_c3.items() if n.endswith("signal at start") and "LSTM" in n}
tuned_c3 = {n: a for n, a in acc_c3.items() if "forget bias" in n}
verdict_c3 = c3_verdict(default_c3, tuned_c3)
rescued_c3 = {n: sum(x >= C3_USES_SIGNAL for x in a) for n, a in tuned_c3.items()}
print("verdict:", verdict_c3)
for n, k in rescued_c3.items():
    per_seed = ", ".join(f"{a:.3f}" for a in tuned_c3[n])
    print(f"{n}: uses the signal on {k} of {len(tuned_c3[n])} seeds (seeds 0-2: {per_seed}; "
          "these depend on the CPU's rounding, the verdict does not)")  # fmt: skip
record_claim(
    "C3",
    claim="An LSTM on length-500 sequences fails to use features at the start; bigger hidden "
    "size or more layers give only marginal gains (an architectural ceiling, not tuning)",
    experiment="4-class task, class token in positions 0–4 of 500, read-out at the end; "
    "120 steps × batch 16; attention, LSTM 32 and LSTM 32 with forget bias +3/+5 on seeds "
    "0–2, LSTM 128, 32×2 and the control (signal at the end) on seed 0; sceptic's sweep: "
    "seeds 3–5, 360 steps, LSTM 128 and 32×2 (each with both remedies) on seeds 0–2",
    verdict=verdict_c3,
    # The forget-bias runs are reported by what holds on every CPU (their per-seed accuracies
    # do not: see the verdict below).
    measured="; ".join(
        f"{n} above {C3_USES_SIGNAL} on "
        + {0: "no seed", len(a): "every seed"}.get(rescued_c3[n], "some seeds, not all")
        if n in tuned_c3
        else f"{n.replace(', signal at start', '')} {spread(a).format('.2f')}"
        if len(a) > 1
        else f"{n.replace(', signal at start', '')} {a[0]:.2f} (seed 0)"
        for n, a in acc_c3.items()
    )
    + f"; attention puts {signal_share:.0%} of the read-out's weight on positions 0–4",
)

# %% [markdown]
# A sceptic would retrain the LSTMs: on other seeds, for longer (120 steps is a small
# budget), and wider and deeper on three seeds rather than one. The sweep
# (`python -m book.sceptic --claim C3`) trains the default LSTM and both forget-bias
# remedies at each setting with the same verdict function; the cell prints the stored
# accuracies (default LSTM first).

# %% tags=["nbval-check-output"]
print(sweep_summary("C3"))

# %% [markdown]
# **Verdict: partly reproduced — and seed-dependent, at every setting the sweep tried.** On
# three other seeds, with three times the steps, and with the wider and deeper LSTM on three
# seeds each, every default LSTM stays at chance, and a raised forget-gate bias lifts some
# seeds above the threshold but never all. At torch's default initialisation the claim
# holds: within the same budget the attention model and the control LSTM solve their tasks
# on every seed, while every default LSTM that must carry the signal across ~495 steps stays
# at chance — the wider one (about eleven times the parameters) and the deeper one included.
# The attention map shows how: the last position looks straight at the first five tokens,
# one step away (the zoom).
#
# The forget-gate bias is where "not a tuning problem" breaks. +3 helped on no seed here (in
# the sweep, on one seed of the wider LSTM), but +5 — a gate that starts almost fully open —
# lifted the LSTM above the threshold on some seeds while others stayed at chance (the dots
# in the accuracy panel). *Which* seeds is itself fragile: under another CPU's vector
# instructions (AVX2 instead of AVX-512, as `make test` runs it) one early rounding
# difference sends a run down another path; the verdict (some seeds rescued, not all) holds
# on both. So the failure is real at default settings but not a ceiling of the architecture:
# one line of initialisation moves it, unreliably, within 120 steps, as section 1.2
# predicted. LSTMs were invented to bridge long gaps (Hochreiter & Schmidhuber, 1997), and
# with such initialisations and far more training they do. The evidence supports "hard to
# train from this far away, and fragile across seeds", not "impossible"; attention, one step
# away, needs no such care.

# %% [markdown]
# ## 1.5 Attention: one step between any two positions (C4)
#
# **Claim C4.** *Attention shortens the path between any two positions from $O(n)$ steps to
# one.*
#
# In self-attention the output at $t$ is a weighted sum over *all* positions,
# $y_t = \sum_j a_{tj}\, v_j$ with $v_j = x_j W_V$, so token $j$ enters $y_t$ through one
# layer whatever $t - j$ is. `path_lengths` reports, in section 1.3's rounds, the fewest
# after which $\partial y_t / \partial x_j \neq 0$ at the last position $t$, or *no path* if
# none does. For the LSTM the prediction is $d + 1$ rounds at distance $d = t - j$ (the cell
# that reads $x_j$, then $d$ state updates; exercise 01.1 counts only the updates); for
# attention, one layer at every distance. A measurement that can only say "short" proves
# nothing, so we add a **control that mixes nothing**: a per-token `nn.Linear`, tanh,
# `nn.Linear` stack, which must report no path from any other token.

# %% tags=["nbval-check-output"]
torch.manual_seed(0)
n_path = 64
per_token = nn.Linear(16, 16).double()
paths_by_model = {
    "LSTM (cell applications)": recurrence_rounds(cell_c2),
    "self-attention (layers)": layer_rounds([attention_c2]),
    "per-token Linear, no mixing (control)": layer_rounds([per_token, torch.tanh, per_token]),
}
x_path = torch.randn(1, n_path, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
paths = {
    name: path_lengths(rounds, x_path, generator=torch.Generator().manual_seed(4))[::-1]
    for name, rounds in paths_by_model.items()
}  # index = distance d = t - j
for name, p in paths.items():
    print(f"{name:38s}", "  ".join(f"d={d}: {p[d]}" for d in (0, 1, 10, 63)))

# %%
lstm_path = paths["LSTM (cell applications)"]
attn_path = paths["self-attention (layers)"]
control_path = paths["per-token Linear, no mixing (control)"]
assert_c4_paths(lstm_path, attn_path, control_path)
ax = plot_lines(
    list(range(n_path)),
    {name: p for name, p in paths.items() if "control" not in name},
    title="Rounds between token t − d and the output at t",
    xlabel="distance d (tokens)",
    ylabel="path length (rounds of mixing)",
    markers=False,
)
ax.scatter([0], [control_path[0]], color="tab:green", zorder=5,
           label="per-token control: a path from its own token only")  # fmt: skip
ax.legend(loc="upper left")
record_claim(
    "C4",
    claim="Attention shortens the path between any two positions from O(n) steps to 1",
    experiment="fewest rounds after which ∂y_t/∂x_j ≠ 0 (per-token Jacobians), 64 tokens: "
    "LSTM cell applications vs attention layers; control: per-token Linear stack (no mixing)",
    verdict=c4_verdict(lstm_path, attn_path, control_path),
    measured=f"LSTM {lstm_path[1]}→{lstm_path[63]} rounds from distance 1 to 63 (d + 1); "
    f"attention {attn_path[0]} round at every distance; control: no path from "
    f"{sum(p is None for p in control_path)} of {n_path - 1} other tokens; attention gradient "
    f"far/near {attn_ratio:.2f}",
)

# %% [markdown]
# The sweep (`python -m book.sceptic --claim C4`) measures the paths again on a longer
# sequence, with wider models and with two attention layers.

# %% tags=["nbval-check-output"]
print(sweep_summary("C4"))

# %% [markdown]
# **Verdict: reproduced, at every size the sweep tried.** The LSTM's path grows by one cell
# application per token of distance; attention's is one layer for every pair, and the
# control that mixes nothing reports no path from any other token — so the measurement tells
# "one step" from "no connection" (counting autograd nodes could not: `torch.stack` of the
# tokens is one node linked to all of them). With section 1.2's flat gradient curve, this is
# the chapter's argument: the recurrent model relays every token through each state in
# between, while attention reads it directly, leaving nothing for distance to wear away. The
# price is the $n \times n$ table of scores, whose cost chapter 5 measures.

# %% [markdown]
# ## 1.6 Self-attention and encoder–decoder attention
#
# Attention arrived in neural machine translation before Transformers. Bahdanau, Cho and
# Bengio (2015) let an RNN *decoder* look back at all states of an RNN *encoder* that had
# read the source sentence: at each output step the decoder's state asks the question, and
# the encoder's states are both what is searched and what is returned. In today's vocabulary
# the **queries come from the decoder, the keys and values from the encoder** —
# *cross-attention*. (Bahdanau et al. scored pairs with a small feed-forward network,
# "additive" attention; this book's dot-product score came later and is cheaper.)
# *Self-attention* takes queries, keys and values from the same sequence. The Transformer is
# built from self-attention layers, plus cross-attention from decoder to encoder in
# translation models.
#
# `MultiHeadAttention` does both: `mha(x)` is self-attention, and `mha(x, context=memory)`
# takes its keys and values from `memory`. With a three-token "decoder" and a five-token
# "encoder", the weights form a 3 × 5 table: one row per decoder position.

# %% tags=["nbval-check-output"]
torch.manual_seed(0)
mha = MultiHeadAttention(8, 2)
encoder_states = torch.randn(1, 5, 8)  # (B, Lk, D): the source sentence, read by an encoder
decoder_states = torch.randn(1, 3, 8)  # (B, Lq, D): the translation so far
out, cross_weights = mha(decoder_states, context=encoder_states, need_weights=True)
print("output:", tuple(out.shape), " weights:", tuple(cross_weights.shape), "(B, H, Lq, Lk)")

# %% [markdown]
# Two properties pin down cross-attention: each decoder position sees the decoder only
# through its own query, so changing *another* decoder token leaves its output untouched;
# and every output depends on every encoder state.

# %%
assert torch.allclose(cross_weights.sum(-1), torch.ones(1, 2, 3))  # a distribution per row
changed_decoder = decoder_states.clone()
changed_decoder[:, 2] += 1.0  # change decoder token 2 only
out_changed = mha(changed_decoder, context=encoder_states)
assert torch.allclose(out_changed[:, :2], out[:, :2])  # rows 0 and 1: unaffected
assert not torch.allclose(out_changed[:, 2], out[:, 2])
changed_encoder = encoder_states.clone()
changed_encoder[:, 4] += 1.0  # change the last encoder token
out_enc = mha(decoder_states, context=changed_encoder)
assert not torch.isclose(out_enc, out).all(-1).any()  # every decoder position feels it
assert torch.equal(mha(encoder_states), mha(encoder_states, context=encoder_states))

# %%
fig, axes = plt.subplots(1, 2, figsize=(10, 3.2))
for h in range(2):
    plot_attention(
        cross_weights[0, h],
        x_labels=[f"enc {j}" for j in range(5)],
        y_labels=[f"dec {i}" for i in range(3)],
        title=f"Cross-attention, head {h} (untrained)",
        ax=axes[h],
    )
fig.tight_layout()

# %% [markdown]
# ## 1.7 Meaning from context: the two banks
#
# Self-attention lets a word's representation depend on its sentence. A static embedding
# table (word2vec, GloVe) gives *bank* one vector whether the sentence is about money or a
# river; a self-attention layer mixes into each token some of the tokens it matches, so the
# same input leaves the layer differently in different sentences.
#
# A hand-built example shows the mechanism with nothing learned. Give every word a vector on
# three axes — *finance*, *river*, and *function word* — with *bank* exactly between the two
# senses. Use the vectors themselves as queries, keys and values (identity projections), and
# attend with `scaled_dot_product_attention`.

# %% tags=["nbval-check-output"]
AXES = ("finance", "river", "function")
lexicon = {  # hand-made coordinates on the three axes
    "bank": [1.0, 1.0, 0.0],  # ambiguous: as much finance as river
    "deposit": [2.0, 0.0, 0.0],
    "money": [2.0, 0.0, 0.0],
    "fish": [0.0, 1.5, 0.0],
    "river": [0.0, 2.0, 0.0],
    "the": [0.0, 0.0, 1.0],
    "at": [0.0, 0.0, 1.0],
    "by": [0.0, 0.0, 1.0],
}
sentences = {
    "money": ["deposit", "money", "at", "the", "bank"],
    "river": ["fish", "by", "the", "river", "bank"],
}


def contextualise(words):
    """One head of self-attention with identity projections: q = k = v = the word vectors."""
    x = torch.tensor([lexicon[w] for w in words])[None, None]  # (B=1, H=1, L, 3)
    out, w = scaled_dot_product_attention(x, x, x, need_weights=True)
    return out[0, 0], w[0, 0]  # (L, 3), (L, L)


bank_static = torch.tensor(lexicon["bank"])
bank_in = {}
for sense, words in sentences.items():
    out_s, _ = contextualise(words)
    bank_in[sense] = out_s[words.index("bank")]  # (3,)
    coords = ", ".join(f"{a} {v:.2f}" for a, v in zip(AXES, bank_in[sense].tolist(), strict=True))
    print(f"'bank' in the {sense} sentence -> {coords}")

# %%
fig, axes = plt.subplots(1, 3, figsize=(14, 3.8), gridspec_kw={"width_ratios": [1, 1, 0.9]})
for ax, (sense, words) in zip(axes[:2], sentences.items(), strict=True):
    plot_attention(
        contextualise(words)[1], words, words, title=f"Self-attention: {sense} sentence", ax=ax
    )
ax = axes[2]
ax.scatter(*bank_static[:2], color="black", zorder=3, label="bank, static embedding")
for sense, colour in (("money", "tab:green"), ("river", "tab:blue")):
    end = bank_in[sense][:2]
    ax.annotate(
        "",
        xy=end.tolist(),
        xytext=bank_static[:2].tolist(),
        arrowprops={"arrowstyle": "->", "color": colour},
    )
    ax.scatter(*end, color=colour, zorder=3, label=f"bank in the {sense} sentence")
ax.plot([0, 2], [0, 2], color="grey", linestyle=":", linewidth=1)  # the ambiguous diagonal
ax.set(
    xlim=(0.0, 1.6),
    ylim=(0.0, 1.6),
    xlabel="finance coordinate",
    ylabel="river coordinate",
    title="Where 'bank' ends up",
)
ax.set_aspect("equal")
ax.legend(fontsize=8, loc="upper left")
fig.tight_layout()

# %%
money_sense = bank_in["money"][0] - bank_in["money"][1]  # finance minus river
river_sense = bank_in["river"][0] - bank_in["river"][1]
assert bank_static[0] == bank_static[1]  # the static vector takes no side
assert money_sense > 0.1 and river_sense < -0.1  # the context decides
assert torch.allclose(contextualise(["bank"])[0][0], bank_static)  # alone, it stays put
print(f"finance - river: {money_sense:+.2f} (money sentence), {river_sense:+.2f} (river sentence)")

# %% [markdown]
# In the money sentence *bank* matches *deposit* and *money* (large dot products on the
# finance axis), takes in some of their vectors and moves to the finance side of the
# diagonal; in the river sentence it moves the other way; alone it stays put. A trained
# model does the same with learned projections $W_Q, W_K, W_V$, in hundreds of dimensions
# and over many layers — the computation chapter 2 builds.

# %% [markdown]
# ## Claims checked
#
# Every number below was measured by this notebook when it ran.

# %% tags=["nbval-check-output"] tolerance="trained"
claims_table()

# %% [markdown]
# ## Takeaways
#
# - A recurrent network carries everything through one state, one update per token: token 0
#   reaches position $t$ only through $t$ updates.
# - The gradient linking a distant input to an output is a product of one Jacobian per step,
#   so it shrinks (or explodes) exponentially with distance. At torch's initialisation LSTM
#   and GRU gates slow the decay, and a forget gate opened by +3 slows it a lot, yet over
#   500 steps it remains orders of magnitude. A gate opened by +5, or an
#   identity-initialised RNN, starts with no such loss: the decay depends on how a network
#   starts.
# - A non-linear RNN needs $n$ rounds one after another however it is implemented; a linear
#   recurrence needs $\log_2 n$, by a scan; one attention layer needs one round at every
#   length. That is about parallelism, not total work: attention does $O(n^2)$ work.
# - Dependence must be measured on values: a per-token Jacobian says whether $y_t$ depends
#   on $x_j$, and a control that mixes nothing must come out as "no path".
# - On a 500-token task with the answer at the start, default LSTMs of several sizes stayed
#   at chance within our budget while a one-layer attention model learned to look straight
#   at the signal. A raised forget-gate bias rescued the LSTM on some seeds, not all: hard
#   and fragile, not impossible.
# - Self-attention takes queries, keys and values from one sequence; cross-attention takes
#   queries from the decoder and keys and values from the encoder. Mixing in matched tokens
#   makes a word's representation depend on its context.

# %% [markdown]
# ## Exercises
#
# Your workbook `my-exercises/01_rnn_limits.py` (`make lab` copies it there) has six: count
# the path length between two positions, unroll an RNN by hand (checked against `nn.RNN`),
# derive the gradient decay of a linear recurrence, compute how far a gradient survives at
# the decay rates measured here, write cross-attention (checked against the package), and
# predict C1's verdict with the forget gate opened by +5. Check your answers with
# `make check CH=01`.
#
# ## Further reading
#
# - J. L. Elman (1990). *Finding structure in time.* Cognitive Science 14(2).
# - Y. Bengio, P. Simard, P. Frasconi (1994). *Learning long-term dependencies with gradient
#   descent is difficult.* IEEE Transactions on Neural Networks 5(2).
# - S. Hochreiter, J. Schmidhuber (1997). *Long short-term memory.* Neural Computation 9(8).
# - F. A. Gers, J. Schmidhuber, F. Cummins (2000). *Learning to forget: continual prediction
#   with LSTM.* Neural Computation 12(10).
# - R. Pascanu, T. Mikolov, Y. Bengio (2013). *On the difficulty of training recurrent
#   neural networks.* ICML.
# - K. Cho, B. van Merriënboer, C. Gulcehre, D. Bahdanau, F. Bougares, H. Schwenk, Y. Bengio
#   (2014). *Learning phrase representations using RNN encoder–decoder for statistical
#   machine translation.* EMNLP (the GRU).
# - R. Jozefowicz, W. Zaremba, I. Sutskever (2015). *An empirical exploration of recurrent
#   network architectures.* ICML (the forget-gate bias).
# - D. Bahdanau, K. Cho, Y. Bengio (2015). *Neural machine translation by jointly learning
#   to align and translate.* ICLR.
# - G. E. Blelloch (1990). *Prefix sums and their applications.* Technical report, Carnegie
#   Mellon University (the parallel scan).
# - A. Vaswani, N. Shazeer, N. Parmar, J. Uszkoreit, L. Jones, A. N. Gomez, Ł. Kaiser, I.
#   Polosukhin (2017). *Attention is all you need.* NeurIPS (its section 4 compares path
#   lengths and sequential operations of recurrent, convolutional and attention layers).
# - M. E. Peters et al. (2018). *Deep contextualized word representations.* NAACL
#   (contextual embeddings, as opposed to word2vec's and GloVe's static ones).
