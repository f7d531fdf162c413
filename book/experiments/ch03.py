"""Experiments of chapter 3: what splitting attention into heads costs and buys.

- C8, :func:`mha_flops`: an analytic FLOP count of multi-head self-attention, term by term
  (the matrix products are checked against ``torch.utils.flop_counter`` in the tests).
- C9 and C10, :class:`PairModel`, :func:`train_pairs`: a one-layer Transformer that learns
  the two-relation task of :mod:`book.experiments.tasks` (the previous token, and a partner
  found by content, at every position), and :func:`head_relation_mass` to measure which
  relation each head attends to.
- MQA/GQA (the memory of their key/value cache: :func:`measure.memory.kv_cache_bytes`).

Attention itself is never re-implemented here: the model is the package's
:class:`attention.blocks.EncoderLayer` (hence :class:`attention.heads.MultiHeadAttention`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from attention.blocks import EncoderLayer
from attention.checks import check_choice, check_positive_int, check_rank, check_tensor
from attention.positional import (
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    SinusoidalPositionalEncoding,
)
from book.experiments.tasks import (
    RELATIONS,
    pairs_batch,
    pairs_loss,
    pairs_vocab_size,
    relation_accuracy,
)
from book.experiments.training import fit, torch_threads

Tensor = torch.Tensor

# ------------------------------------------------------------------------------------------
# C8: the cost of h heads versus one head of full width
# ------------------------------------------------------------------------------------------

# Elementwise work per attention score: the scale, the row max, subtract, exp, the row sum
# and the division. A nominal count (kernels differ), kept separate from the matrix products.
SOFTMAX_FLOPS_PER_SCORE = 6


@dataclass(frozen=True)
class FlopCount:
    """FLOPs of one multi-head self-attention forward pass (a multiply-add counts as 2)."""

    q_proj: int
    kv_proj: int  # K and V projections together
    scores: int  # Q Kᵀ, all heads
    weighted_sum: int  # A V, all heads
    out_proj: int
    softmax: int  # elementwise: SOFTMAX_FLOPS_PER_SCORE per score

    @property
    def matmul(self) -> int:
        """The matrix products: what ``torch.utils.flop_counter.FlopCounterMode`` counts."""
        return self.q_proj + self.kv_proj + self.scores + self.weighted_sum + self.out_proj

    @property
    def total(self) -> int:
        return self.matmul + self.softmax


def mha_flops(
    seq_len: int,
    d_model: int,
    num_heads: int,
    *,
    num_kv_heads: int | None = None,
    batch_size: int = 1,
) -> FlopCount:
    """Analytic FLOPs of ``MultiHeadAttention(d_model, num_heads, num_kv_heads=...)`` on
    ``(batch_size, seq_len, d_model)`` tokens (self-attention, no mask).

    Head width ``d_head = d_model // num_heads``. Projections ``2 L D · width`` each (W_Q and
    W_O of width ``D``; W_K, W_V of width ``H_kv · d_head``); scores and ``A V`` cost
    ``2 L² d_head`` per head, i.e. ``2 L² D`` in total whatever ``H`` is; the softmax is
    ``SOFTMAX_FLOPS_PER_SCORE · H · L²``. Biases (``L · width`` adds) are not counted.
    """
    seq_len = check_positive_int("seq_len", seq_len)
    d_model = check_positive_int("d_model", d_model)
    num_heads = check_positive_int("num_heads", num_heads)
    batch_size = check_positive_int("batch_size", batch_size)
    kv = num_heads if num_kv_heads is None else check_positive_int("num_kv_heads", num_kv_heads)
    if d_model % num_heads:
        raise ValueError(f"d_model ({d_model}) must be divisible by num_heads ({num_heads})")
    if num_heads % kv:
        raise ValueError(f"num_heads ({num_heads}) must be divisible by num_kv_heads ({kv})")
    d_head = d_model // num_heads
    tokens = batch_size * seq_len
    scores_per_head = batch_size * seq_len * seq_len
    return FlopCount(
        q_proj=2 * tokens * d_model * d_model,
        kv_proj=2 * 2 * tokens * d_model * kv * d_head,
        scores=2 * num_heads * scores_per_head * d_head,
        weighted_sum=2 * num_heads * scores_per_head * d_head,
        out_proj=2 * tokens * d_model * d_model,
        softmax=SOFTMAX_FLOPS_PER_SCORE * num_heads * scores_per_head,
    )


def attention_parameter_count(d_model: int) -> int:
    """Weights and biases of one multi-head attention layer of width ``d_model``, by hand.

    Four ``d_model × d_model`` matrices (W_Q, W_K, W_V, W_O) and four bias vectors; the head
    count does not appear.
    """
    d_model = check_positive_int("d_model", d_model)
    return 4 * (d_model * d_model + d_model)


def assert_c9a_heads_split_without_new_parameters(
    d_model: int, counts: dict[str, int], independent: int
) -> None:
    """C9a, a configuration fact: splitting ``d_model`` into heads adds no parameters.

    ``counts`` maps a label (e.g. ``"12 heads"``, ``"1 head"``) to the parameter count of an
    attention layer of width ``d_model`` built with that many heads; ``independent`` is the
    count of an implementation written by others (``torch.nn.MultiheadAttention``). Fails when
    any count differs from the others or from :func:`attention_parameter_count`.
    """
    expected = attention_parameter_count(d_model)
    if independent != expected:
        raise AssertionError(
            f"the independent layer has {independent:,} parameters, the hand count of 4 "
            f"matrices and 4 biases at d_model {d_model} is {expected:,}"
        )
    wrong = {label: n for label, n in counts.items() if n != independent}
    if wrong:
        raise AssertionError(
            f"parameter counts {wrong} differ from the independent count {independent:,}: the "
            "head count changed the number of parameters"
        )


# ------------------------------------------------------------------------------------------
# C9, C10: heads on the two-relation task (book.experiments.tasks)
# ------------------------------------------------------------------------------------------

POSITIONAL = ("rope", "sinusoidal", "learned")


class PairModel(nn.Module):
    """Embedding + learned positions → one pre-LN :class:`EncoderLayer` → two digit read-outs.

    ``forward(tokens (B, L), need_weights=False)`` returns logits ``(B, L, 2, n_values)``
    (relation 0: the previous token's digit, relation 1: the partner's), and with
    ``need_weights`` the per-head attention weights ``(B, H, L, L)``. Bidirectional (no
    causal mask): a partner may come later.
    """

    def __init__(
        self,
        n_keys: int,
        n_values: int,
        seq_len: int,
        d_model: int,
        num_heads: int,
        d_ff: int | None = None,
        positional: str = "rope",
    ) -> None:
        super().__init__()
        self.n_values = check_positive_int("n_values", n_values)
        check_choice("positional", positional, POSITIONAL)
        self.embed = nn.Embedding(pairs_vocab_size(n_keys, n_values), d_model)
        rotary = None
        if positional == "sinusoidal":
            self.pos = SinusoidalPositionalEncoding(d_model, max_len=seq_len)
        elif positional == "learned":
            self.pos = LearnedPositionalEmbedding(d_model, max_len=seq_len)
        else:
            self.pos = None
            rotary = RotaryEmbedding(d_model // num_heads)
        self.layer = EncoderLayer(
            d_model, num_heads, d_ff or 2 * d_model, pre_ln=True, rotary=rotary
        )
        self.norm = nn.LayerNorm(d_model)
        self.readout = nn.Linear(d_model, len(RELATIONS) * n_values)

    def forward(self, tokens: Tensor, need_weights: bool = False):
        x = self.embed(tokens)  # (B, L, D)
        if self.pos is not None:
            x = self.pos(x)  # (B, L, D)
        if need_weights:
            x, weights = self.layer(x, need_weights=True)  # (B, L, D), (B, H, L, L)
        else:
            x, weights = self.layer(x), None
        logits = self.readout(self.norm(x))  # (B, L, 2 * n_values)
        logits = logits.unflatten(-1, (len(RELATIONS), self.n_values))  # (B, L, 2, n_values)
        return (logits, weights) if need_weights else logits


def head_relation_mass(weights: Tensor, partner: Tensor) -> Tensor:
    """How much each head attends to each relation: ``(H, 2)``.

    ``weights (B, H, L, L)``, ``partner (B, L)``. Column 0 is the mean weight a query puts on
    the previous position ``t - 1``, column 1 the mean weight on its partner. Only queries
    whose previous token is not also their partner (and ``t >= 1``) count, so that one head
    cannot score on both.
    """
    check_tensor("weights", weights)
    check_rank("weights", weights, 4, "[batch, heads, q_len, k_len]")
    check_tensor("partner", partner)
    b, h, lq, lk = weights.shape
    if partner.shape != (b, lq):
        raise ValueError(f"partner must have shape (B, Lq) = {(b, lq)}, got {tuple(partner.shape)}")
    t = torch.arange(lq)
    prev = (t - 1).clamp_min(0).expand(b, lq)  # (B, L)
    on_prev = weights.gather(-1, prev[:, None, :, None].expand(b, h, lq, 1))[..., 0]  # (B, H, L)
    on_partner = weights.gather(-1, partner[:, None, :, None].expand(b, h, lq, 1))[..., 0]
    valid = (t >= 1) & (partner != t - 1)  # (B, L)
    n = valid.sum()
    mass_prev = (on_prev * valid[:, None]).sum((0, 2)) / n  # (H,)
    mass_partner = (on_partner * valid[:, None]).sum((0, 2)) / n  # (H,)
    return torch.stack([mass_prev, mass_partner], dim=-1)  # (H, 2)


@dataclass(frozen=True)
class PairsRun:
    """What :func:`train_pairs` measured (on a held-out batch after training)."""

    num_heads: int
    d_model: int
    seed: int
    losses: list[float]  # training loss at every step
    accuracy: tuple[float, float]  # (previous, partner)
    head_mass: Tensor  # (H, 2): mean weight on (previous, partner) per head
    model: PairModel

    @property
    def mean_accuracy(self) -> float:
        return sum(self.accuracy) / len(self.accuracy)


def train_pairs(
    *,
    num_heads: int,
    d_model: int = 32,
    n_pairs: int = 6,
    n_values: int = 8,
    n_keys: int | None = None,
    steps: int = 300,
    batch_size: int = 64,
    lr: float = 1e-2,
    seed: int = 0,
    eval_size: int = 512,
    progress: bool = False,
    positional: str = "rope",
) -> PairsRun:
    """Train :class:`PairModel` with Adam on fresh batches and evaluate it on held-out ones.

    Parameters come from ``torch.manual_seed(seed)``; training batches from a generator seeded
    with ``seed + 1`` and the held-out batch from ``seed + 2``, so runs that differ only in
    ``num_heads`` see the same examples in the same order. Runs on one thread (see
    :func:`book.experiments.training.torch_threads`).
    """
    torch.manual_seed(seed)
    model = PairModel(
        n_keys or n_pairs, n_values, 2 * n_pairs, d_model, num_heads, positional=positional
    )
    log = fit(
        model,
        lambda generator: pairs_batch(
            batch_size, n_pairs, n_values, n_keys=n_keys, generator=generator
        ),
        lambda model, batch: pairs_loss(model(batch.tokens), batch.targets),
        steps=steps,
        lr=lr,
        data_seed=seed + 1,
        threads=1,  # tiny matrices: threads would only add synchronisation
        progress=progress,
        desc=f"h={num_heads}, seed {seed}",
    )
    held_out_data = torch.Generator().manual_seed(seed + 2)
    held_out = pairs_batch(eval_size, n_pairs, n_values, n_keys=n_keys, generator=held_out_data)
    with torch.no_grad(), torch_threads(1):
        logits, weights = model(held_out.tokens, need_weights=True)
    return PairsRun(
        num_heads=num_heads,
        d_model=d_model,
        seed=seed,
        losses=log.losses,
        accuracy=relation_accuracy(logits, held_out.targets),
        head_mass=head_relation_mass(weights, held_out.partner),
        model=model,
    )


# ------------------------------------------------------------------------------------------
# MQA / GQA: the key/value cache
# ------------------------------------------------------------------------------------------


def assert_c10_rises_then_falls(accuracy_by_heads: dict[int, list[float]], *, margin: float) -> int:
    """C10: at fixed width, quality first rises, then falls, with the head count.

    ``accuracy_by_heads`` maps each head count ``h`` to its held-out accuracies, one per seed.
    The claim holds when the head count with the best mean accuracy is neither the smallest
    nor the largest tried, and its mean beats the mean at *both* ends by at least ``margin``
    (a margin fixed from the claim before the run, not from the numbers). Returns the best
    head count.
    """
    if len(accuracy_by_heads) < 3:
        raise ValueError(
            f"accuracy_by_heads needs at least 3 head counts, got {len(accuracy_by_heads)}"
        )
    if any(len(v) == 0 for v in accuracy_by_heads.values()):
        raise ValueError("accuracy_by_heads: every head count needs at least one seed")
    means = {h: sum(v) / len(v) for h, v in sorted(accuracy_by_heads.items())}
    heads = list(means)
    best = max(heads, key=means.get)
    if best in (heads[0], heads[-1]):
        raise AssertionError(
            f"the best mean accuracy is at h = {best}, an end of the range {heads}: quality "
            "does not rise and then fall"
        )
    for end in (heads[0], heads[-1]):
        if means[best] - means[end] < margin:
            raise AssertionError(
                f"h = {best} ({means[best]:.3f}) beats h = {end} ({means[end]:.3f}) by less than "
                f"the margin {margin}"
            )
    return best


# C9b's thresholds, from the claim, fixed before the runs (see c9b_specialisation_failures).
C9B_THRESHOLDS = {
    "solved": 0.97,  # accuracy on a relation the heads are meant to solve
    "on relation": 0.8,  # weight a specialised head puts on its relation...
    "off relation": 0.05,  # ...and at most on the other one
    "one head solves": 0.95,  # one head: the relation it picked
    "one head misses": 0.4,  # one head: the other relation (chance is 1/8)
    "one head focus": 0.6,  # one head: its weight on the relation it picked
    "one head ignores": 0.1,  # one head: its weight on the other
    "partner lead": 0.6,  # four heads: the head leading the partner search
}


def c9b_specialisation_failures(run_1: PairsRun, run_2: PairsRun, run_4: PairsRun) -> list[str]:
    """What contradicts C9b ("different heads learn different patterns") in one seed's runs
    with 1, 2 and 4 heads on the pairs task; an empty list when the pattern holds.

    With :data:`C9B_THRESHOLDS` ``t``: with two heads both relations are solved (accuracy >
    ``t["solved"]``) by one head each (> ``t["on relation"]`` of its weight on its relation,
    < ``t["off relation"]`` on the other); one head solves one relation and misses the other,
    focusing on the one it solves; four heads solve both, one head on the previous token and
    one leading the partner search.
    """
    t = C9B_THRESHOLDS
    for name, run, h in (("run_1", run_1, 1), ("run_2", run_2, 2), ("run_4", run_4, 4)):
        if run.num_heads != h:
            raise ValueError(f"{name} must be a run with {h} head(s), got {run.num_heads}")
    failures = []
    if min(run_2.accuracy) <= t["solved"]:
        failures.append(f"2 heads: accuracy {run_2.accuracy} does not solve both relations")
    prev_head = int(run_2.head_mass[:, 0].argmax())
    partner_head = 1 - prev_head
    prev, partner = run_2.head_mass[prev_head].tolist(), run_2.head_mass[partner_head].tolist()
    on, off = t["on relation"], t["off relation"]
    if not (prev[0] > on and prev[1] < off and partner[1] > on and partner[0] < off):
        failures.append(
            f"2 heads: head masses (previous, partner) {prev} and {partner}: not one head per "
            "relation"
        )
    if not (
        max(run_1.accuracy) > t["one head solves"] and min(run_1.accuracy) < t["one head misses"]
    ):
        failures.append(f"1 head: accuracy {run_1.accuracy}, not one relation solved and one not")
    if not (
        run_1.head_mass.max() > t["one head focus"]
        and run_1.head_mass.min() < t["one head ignores"]
    ):
        failures.append(f"1 head: masses {run_1.head_mass.tolist()} do not focus on one relation")
    if min(run_4.accuracy) <= t["solved"]:
        failures.append(f"4 heads: accuracy {run_4.accuracy} does not solve both relations")
    if not (run_4.head_mass[:, 0].max() > on and run_4.head_mass[:, 1].max() > t["partner lead"]):
        failures.append("4 heads: no head on the previous token or none leading the partner search")
    return failures


def assert_c9b_heads_specialise(run_1: PairsRun, run_2: PairsRun, run_4: PairsRun) -> None:
    """C9b on one seed: fails with every contradiction :func:`c9b_specialisation_failures`
    finds."""
    failures = c9b_specialisation_failures(run_1, run_2, run_4)
    assert not failures, "C9b does not hold: " + "; ".join(failures)
