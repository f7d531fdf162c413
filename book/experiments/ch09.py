"""Experiments of chapter 9: frequently asked details.

- **Why softmax** (:func:`retrieval_batch`, :class:`RetrievalModel`, :func:`train_retrieval`,
  :func:`init_gradients`): one attention layer must find, among ``n`` (key, value) pairs, the
  value whose key matches the query, with each normaliser of :mod:`attention.normalizers`;
  held-out accuracy at the training length and at a longer one, and the gradients at
  initialisation.
- **C29, attention is not explanation** (:class:`DigitsAttention`, :func:`train_digits`,
  :func:`importances`, :func:`adversarial_attention`): a two-layer classifier of the digits
  (each image row a token, plus a ``[CLS]`` token) and five importance scores for the rows:
  the last layer's attention, gradient × input, leave-one-out, the norm of the weighted
  value vectors (Kobayashi et al. 2020) and attention rollout (Abnar & Zuidema 2020); rank
  correlations (:func:`mean_rank_correlation`) and attention distributions far from the
  model's own that leave its prediction unchanged (Jain & Wallace 2019).
- **C30, Pre-LN vs Post-LN** (:func:`layer_gradient_norms`, :func:`train_depth`): gradient
  norms per layer at initialisation; deep narrow stacks trained with and without warm-up.
- **Attention vs convolution vs recurrence** (:func:`layer_costs`, :func:`train_mixer`):
  FLOPs counted by torch and the path length between the two ends of a sequence; a task
  where locality helps with little data (:func:`motif_batch`) and one that needs reach
  (:func:`ends_batch`).
- The asserting functions ``assert_...`` raise ``AssertionError`` when the claim is false.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from attention.blocks import EncoderLayer
from attention.checks import check_choice, check_positive_int
from attention.heads import MultiHeadAttention, merge_heads, split_heads
from attention.normalizers import NORMALIZERS, normalized_attention
from book.data import digits
from book.experiments.seeds import spread
from book.experiments.training import fit, linear_warmup, torch_threads
from measure.flops import matmul_flop_counter

Tensor = torch.Tensor

# ------------------------------------------------------------------------------------------
# 9.1 Why softmax: a retrieval task
# ------------------------------------------------------------------------------------------

# The normalisers compared: name -> (normalizer, score_bias) for attention.normalizers.
VARIANTS: dict[str, tuple[str, float | None]] = {
    "softmax": ("softmax", None),
    "sigmoid": ("sigmoid", 0.0),
    "sigmoid −log n": ("sigmoid", None),
    "relu-normalised": ("relu", None),
    "plain-normalised": ("plain", None),
}
N_SYMBOLS = 64  # keys and values are drawn from 64 symbols each


def retrieval_batch(
    batch_size: int, generator: torch.Generator, *, n_pairs: int = 8, n_symbols: int = N_SYMBOLS
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """``n_pairs`` (key, value) pairs with distinct keys, and a query equal to one key.

    Returns ``keys (B, n)``, ``values (B, n)``, ``query (B,)`` and ``target (B,)``, the value
    paired with the query's key.
    """
    check_positive_int("n_pairs", n_pairs)
    if n_pairs > n_symbols:
        raise ValueError(f"n_pairs must be <= n_symbols ({n_symbols}), got {n_pairs}")
    keys = torch.rand(batch_size, n_symbols, generator=generator).argsort(-1)[:, :n_pairs]
    values = torch.randint(n_symbols, (batch_size, n_pairs), generator=generator)
    pick = torch.randint(n_pairs, (batch_size,), generator=generator)
    rows = torch.arange(batch_size)
    return keys, values, keys[rows, pick], values[rows, pick]


class RetrievalModel(nn.Module):
    """One attention head over (key, value) pair tokens, queried by the query's key.

    Pair token ``j`` = ``key_emb(key_j) + value_emb(value_j)``; the query token =
    ``key_emb(query)``; ``logits = out(attend(W_q q, W_k x, W_v x))`` with the normaliser
    under test. ``forward(keys, values, query) -> (logits (B, S), weights (B, n))``.
    """

    def __init__(
        self,
        normalizer: str,
        *,
        score_bias: float | None = None,
        d_model: int = 32,
        n_symbols=N_SYMBOLS,
    ):
        super().__init__()
        self.normalizer = check_choice("normalizer", normalizer, NORMALIZERS)
        self.score_bias = score_bias
        self.key_emb = nn.Embedding(n_symbols, d_model)
        self.value_emb = nn.Embedding(n_symbols, d_model)
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out = nn.Linear(d_model, n_symbols)

    def forward(self, keys: Tensor, values: Tensor, query: Tensor) -> tuple[Tensor, Tensor]:
        x = self.key_emb(keys) + self.value_emb(values)  # (B, n, D)
        q = self.q_proj(self.key_emb(query))[:, None, None]  # (B, 1, 1, D)
        k = self.k_proj(x)[:, None]  # (B, 1, n, D)
        v = self.v_proj(x)[:, None]  # (B, 1, n, D)
        out, weights = normalized_attention(
            q, k, v, normalizer=self.normalizer, score_bias=self.score_bias, need_weights=True
        )  # (B, 1, 1, D), (B, 1, 1, n)
        return self.out(out[:, 0, 0]), weights[:, 0, 0]  # (B, S), (B, n)


def _retrieval_loss(model: RetrievalModel, batch) -> Tensor:
    keys, values, query, target = batch
    return F.cross_entropy(model(keys, values, query)[0], target)


@dataclass(frozen=True)
class RetrievalRun:
    variant: str
    seed: int
    losses: list[float]
    accuracy: float  # held out, at the training length
    long_accuracy: float  # held out, at long_pairs
    diverged: bool  # a non-finite loss during training


def retrieval_accuracy(model: RetrievalModel, *, n_pairs: int, seed: int, size: int = 1000):
    """Held-out accuracy on ``size`` fresh examples with ``n_pairs`` pairs (NaN counts wrong)."""
    batch = retrieval_batch(size, torch.Generator().manual_seed(seed), n_pairs=n_pairs)
    with torch.no_grad():
        logits = model(*batch[:3])[0]
    return float((logits.argmax(-1) == batch[3]).float().mean())


def train_retrieval(
    variant: str,
    *,
    seed: int,
    n_pairs: int = 8,
    long_pairs: int = 32,
    steps: int = 400,
    lr: float = 3e-3,
    batch_size: int = 64,
) -> RetrievalRun:
    """Train :class:`RetrievalModel` with the normaliser ``variant`` (a key of
    :data:`VARIANTS`); parameters from ``seed``, batches from ``seed + 1``, held-out sets from
    ``seed + 2``."""
    check_choice("variant", variant, list(VARIANTS))
    normalizer, bias = VARIANTS[variant]
    torch.manual_seed(seed)
    model = RetrievalModel(normalizer, score_bias=bias)
    log = fit(
        model,
        lambda g: retrieval_batch(batch_size, g, n_pairs=n_pairs),
        _retrieval_loss,
        steps=steps,
        lr=lr,
        data_seed=seed + 1,
        clip=1.0,
        threads=1,
    )
    diverged = not all(math.isfinite(x) for x in log.losses)
    with torch_threads(1):
        acc = retrieval_accuracy(model, n_pairs=n_pairs, seed=seed + 2)
        long_acc = retrieval_accuracy(model, n_pairs=long_pairs, seed=seed + 2)
    return RetrievalRun(variant, seed, log.losses, acc, long_acc, diverged)


def init_gradients(variant: str, *, seed: int = 0, n_pairs: int = 8, size: int = 512) -> dict:
    """At initialisation: the gradient norm reaching the query projection, the fraction of
    examples whose scores get no gradient at all, the row sums of the weights and the largest
    absolute weight."""
    normalizer, bias = VARIANTS[variant]
    torch.manual_seed(seed)
    model = RetrievalModel(normalizer, score_bias=bias)
    keys, values, query, target = retrieval_batch(
        size, torch.Generator().manual_seed(seed + 1), n_pairs=n_pairs
    )
    x = model.key_emb(keys) + model.value_emb(values)  # (B, n, D)
    q = model.q_proj(model.key_emb(query))[:, None, None]  # (B, 1, 1, D)
    k = model.k_proj(x)[:, None]  # (B, 1, n, D)
    v = model.v_proj(x)[:, None]  # (B, 1, n, D)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (B, 1, 1, n)
    scores.retain_grad()
    from attention.normalizers import normalize_scores

    weights = normalize_scores(scores, normalizer=normalizer, score_bias=bias)  # (B, 1, 1, n)
    loss = F.cross_entropy(model.out((weights @ v)[:, 0, 0]), target)
    loss.backward()
    dead = (scores.grad.abs().amax(-1) == 0).float().mean()
    w = weights.detach()[:, 0, 0]  # (B, n)
    return {
        "grad_norm_q": float(model.q_proj.weight.grad.norm()),
        "dead_rows": float(dead),
        "row_sum_mean": float(w.sum(-1).mean()),
        "max_abs_weight": float(w.abs().max()),
    }


def assert_softmax_not_beaten(
    accuracies: Mapping[str, Sequence[float]], *, margin: float, reference: str = "softmax"
) -> None:
    """No variant's mean accuracy exceeds the reference's by more than ``margin``."""
    ref = spread(accuracies[reference]).mean
    for name, values in accuracies.items():
        mean = spread(values).mean
        assert mean <= ref + margin, (
            f"{name} ({mean:.3f}) beats {reference} ({ref:.3f}) by more than {margin}"
        )


def assert_breaks(
    accuracies: Mapping[str, Sequence[float]], broken: Sequence[str], *, gap: float
) -> None:
    """Each variant in ``broken`` has a mean accuracy at least ``gap`` below softmax's."""
    ref = spread(accuracies["softmax"]).mean
    for name in broken:
        mean = spread(accuracies[name]).mean
        assert mean <= ref - gap, (
            f"{name} ({mean:.3f}) is not {gap} below softmax ({ref:.3f}): it does not break"
        )


def softmax_verdict(accuracies: Mapping[str, Sequence[float]], *, margin: float) -> str:
    """``reproduced``: softmax beats every other by more than ``margin``; ``partly``: none
    beats it by more than ``margin`` but some come within it; else ``not reproduced``."""
    ref = spread(accuracies["softmax"]).mean
    others = [spread(v).mean for n, v in accuracies.items() if n != "softmax"]
    if any(m > ref + margin for m in others):
        return "not reproduced"
    if all(m < ref - margin for m in others):
        return "reproduced"
    return "partly"


# ------------------------------------------------------------------------------------------
# 9.2 C29: attention is not explanation
# ------------------------------------------------------------------------------------------

ROWS = 8  # an 8 × 8 digit is 8 row tokens of 8 pixels


class DigitsAttention(nn.Module):
    """Digits as 8 row tokens + a ``[CLS]`` token; pre-LN encoder layers; class from ``[CLS]``.

    ``forward(images (B, 8, 8)) -> logits (B, 10)``; :meth:`run` also returns every layer's
    input and its per-head weights, and can replace the ``[CLS]`` row of the last layer's
    weights (``cls_weights (B, H, L)``, L = 9 tokens).
    """

    def __init__(self, *, d_model: int = 32, num_heads: int = 2, num_layers: int = 2):
        super().__init__()
        self.embed = nn.Linear(ROWS, d_model)
        self.pos = nn.Parameter(torch.randn(ROWS + 1, d_model) * 0.1)
        self.cls = nn.Parameter(torch.randn(d_model) * 0.1)
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, num_heads, 2 * d_model, pre_ln=True) for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, 10)

    def tokens(self, images: Tensor) -> Tensor:
        b = images.shape[0]
        rows = self.embed(images)  # (B, 8, D)
        cls = self.cls.expand(b, 1, -1)  # (B, 1, D)
        return torch.cat([cls, rows], dim=1) + self.pos  # (B, 9, D)

    @staticmethod
    def last_layer(layer: EncoderLayer, x: Tensor, cls_weights: Tensor | None):
        """A pre-LN layer written out, so that the ``[CLS]`` row of its weights can be set."""
        attn: MultiHeadAttention = layer.self_attn
        h = layer.norm1(x)  # (B, L, D)
        q = split_heads(attn.q_proj(h), num_heads=attn.num_heads)  # (B, H, L, Dh)
        k = split_heads(attn.k_proj(h), num_heads=attn.num_heads)  # (B, H, L, Dh)
        v = split_heads(attn.v_proj(h), num_heads=attn.num_heads)  # (B, H, L, Dh)
        weights = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).softmax(-1)  # (B, H, L, L)
        if cls_weights is not None:
            weights = torch.cat([cls_weights[:, :, None], weights[:, :, 1:]], dim=2)
        x = x + attn.out_proj(merge_heads(weights @ v))  # (B, L, D)
        x = x + layer.ff(layer.norm2(x))  # (B, L, D)
        return x, weights, v

    def run(self, images: Tensor, *, cls_weights: Tensor | None = None) -> dict:
        x = self.tokens(images)  # (B, 9, D)
        inputs, all_weights = [], []
        for layer in self.layers[:-1]:
            inputs.append(x)
            x, w = layer(x, need_weights=True)  # (B, 9, D), (B, H, 9, 9)
            all_weights.append(w)
        inputs.append(x)
        x, w, v = self.last_layer(self.layers[-1], x, cls_weights)
        all_weights.append(w)
        logits = self.head(self.norm(x[:, 0]))  # (B, 10)
        return {"logits": logits, "weights": all_weights, "inputs": inputs, "values": v}

    def from_last_input(self, x: Tensor, cls_weights: Tensor | None = None) -> Tensor:
        """Logits from the last layer's input ``x (B, 9, D)``, with its ``[CLS]`` weights set."""
        out, _, _ = self.last_layer(self.layers[-1], x, cls_weights)
        return self.head(self.norm(out[:, 0]))  # (B, 10)

    def cls_logits(self, x: Tensor, values: Tensor, cls_weights: Tensor) -> Tensor:
        """The logits given the last layer's input ``x (B, 9, D)``, its values ``(B, H, 9, Dh)``
        and ``[CLS]`` weights ``(B, H, 9)``: only the ``[CLS]`` position is computed (the
        prediction depends on nothing else), as :meth:`from_last_input` would."""
        layer = self.layers[-1]
        a = merge_heads(cls_weights[:, :, None] @ values)  # (B, 1, D)
        y = x[:, :1] + layer.self_attn.out_proj(a)  # (B, 1, D)
        y = y + layer.ff(layer.norm2(y))  # (B, 1, D)
        return self.head(self.norm(y[:, 0]))  # (B, 10)

    def forward(self, images: Tensor) -> Tensor:
        return self.run(images)["logits"]


@dataclass(frozen=True)
class DigitsRun:
    seed: int
    accuracy: float  # on the held-out digits
    model: DigitsAttention


def train_digits(*, seed: int, steps: int = 400, lr: float = 3e-3, batch_size: int = 64):
    """Train :class:`DigitsAttention` on the digits' training part; accuracy on the test part."""
    data = digits()
    torch.manual_seed(seed)
    model = DigitsAttention()

    def make_batch(g):
        idx = torch.randint(len(data.train_labels), (batch_size,), generator=g)
        return data.train_images[idx], data.train_labels[idx]

    def loss_of(m, batch):
        return F.cross_entropy(m(batch[0]), batch[1])

    fit(model, make_batch, loss_of, steps=steps, lr=lr, data_seed=seed + 1, clip=1.0, threads=1)
    with torch.no_grad(), torch_threads(1):
        acc = float((model(data.test_images).argmax(-1) == data.test_labels).float().mean())
    return DigitsRun(seed, acc, model)


IMPORTANCES = ("attention", "gradient × input", "leave-one-out", "norm ‖α·f(x)‖", "rollout")


def rollout(weights: Sequence[Tensor]) -> Tensor:
    """Attention rollout (Abnar & Zuidema 2020): per layer the head-averaged weights plus the
    residual, ``0.5·A + 0.5·I`` (rows renormalised), multiplied from the first layer up.
    ``weights``: per layer ``(B, H, L, L)``; returns ``(B, L, L)``."""
    out = None
    for w in weights:
        a = w.mean(1)  # (B, L, L)
        a = 0.5 * a + 0.5 * torch.eye(a.shape[-1], dtype=a.dtype)
        a = a / a.sum(-1, keepdim=True)
        out = a if out is None else a @ out  # (B, L, L)
    return out


def importances(model: DigitsAttention, images: Tensor) -> dict[str, Tensor]:
    """Five importance scores of the 8 rows for the predicted class: ``name -> (B, 8)``.

    - attention: the last layer's ``[CLS]`` row, averaged over heads;
    - gradient × input: ``|Σ_pixels x · ∂logit/∂x|`` of each row;
    - leave-one-out: the drop of the predicted class's probability when the row is blanked
      (set to 0, the background);
    - norm ``‖α·f(x)‖`` (Kobayashi et al.): the length of what row ``j`` adds to the
      ``[CLS]`` output of the last attention, ``‖Σ_h α_h W_O^h v_h,j‖``;
    - rollout: the ``[CLS]`` row of :func:`rollout` over all layers.
    """
    model.eval()
    x = images.clone().requires_grad_(True)
    out = model.run(x)
    pred = out["logits"].argmax(-1)  # (B,)
    chosen = out["logits"].gather(1, pred[:, None]).sum()
    (grad,) = torch.autograd.grad(chosen, x)
    with torch.no_grad():
        probs = out["logits"].softmax(-1).gather(1, pred[:, None])[:, 0]  # (B,)
        loo = []
        for r in range(ROWS):
            blank = images.clone()
            blank[:, r] = 0.0
            p = model(blank).softmax(-1).gather(1, pred[:, None])[:, 0]
            loo.append(probs - p)
        last = out["weights"][-1][:, :, 0, 1:]  # (B, H, 8)
        attn = model.layers[-1].self_attn
        v = out["values"][:, :, 1:]  # (B, H, 8, Dh)
        dh = v.shape[-1]
        w_o = attn.out_proj.weight.view(attn.d_model, attn.num_heads, dh)  # (D, H, Dh)
        contrib = torch.einsum("bhj,bhjd,ehd->bje", last, v, w_o)  # (B, 8, D)
        return {
            "attention": last.mean(1),
            "gradient × input": (grad * images).sum(-1).abs(),
            "leave-one-out": torch.stack(loo, dim=1),
            "norm ‖α·f(x)‖": contrib.norm(dim=-1),
            "rollout": rollout([w.detach() for w in out["weights"]])[:, 0, 1:],
        }


def _ranks(x: Tensor) -> Tensor:
    """Ranks (0 = smallest) along the last dim, ties broken by position (continuous data)."""
    return x.argsort(-1).argsort(-1).to(torch.float64)


def spearman(a: Tensor, b: Tensor) -> Tensor:
    """Spearman rank correlation per row of ``(N, n)`` tensors -> ``(N,)``."""
    ra, rb = _ranks(a), _ranks(b)
    ra, rb = ra - ra.mean(-1, keepdim=True), rb - rb.mean(-1, keepdim=True)
    return (ra * rb).sum(-1) / (ra.norm(dim=-1) * rb.norm(dim=-1))


def kendall(a: Tensor, b: Tensor) -> Tensor:
    """Kendall's τ (τ-a: no ties expected) per row of ``(N, n)`` tensors -> ``(N,)``."""
    da = torch.sign(a[:, :, None] - a[:, None, :])  # (N, n, n)
    db = torch.sign(b[:, :, None] - b[:, None, :])
    n = a.shape[-1]
    return (da * db).sum((-2, -1)).to(torch.float64) / (n * (n - 1))


def mean_rank_correlation(a: Tensor, b: Tensor, *, kind: str = "kendall") -> float:
    check_choice("kind", kind, ("kendall", "spearman"))
    fn = kendall if kind == "kendall" else spearman
    return float(fn(a.double(), b.double()).mean())


def jensen_shannon(p: Tensor, q: Tensor) -> Tensor:
    """JSD in bits (0 … 1) between distributions along the last dim."""
    m = 0.5 * (p + q)

    def kl(a, b):
        return (a * (torch.log2(a.clamp_min(1e-12)) - torch.log2(b.clamp_min(1e-12)))).sum(-1)

    return 0.5 * kl(p, m) + 0.5 * kl(q, m)


@dataclass(frozen=True)
class Adversary:
    jsd: Tensor  # (B,) JSD (bits) between the found and the model's own [CLS] weights, head-mean
    output_change: Tensor  # (B,) total variation distance between the two output distributions
    same_prediction: Tensor  # (B,) bool
    weights: Tensor  # (B, H, L) the found [CLS] weights


def adversarial_attention(
    model: DigitsAttention, images: Tensor, *, steps: int = 200, lr: float = 0.1, tol=0.01
) -> Adversary:
    """Search, per image, for ``[CLS]`` weights of the last layer as different as possible from
    the model's own (JSD, averaged over heads) while the output distribution moves by at
    most ``tol`` in total variation (Jain & Wallace 2019's adversarial attention).

    Gradient ascent on ``JSD − 100·relu(TVD − tol/2)`` over the weights' logits, started from
    the model's own weights; the best feasible candidate seen per image is kept.
    """
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    try:
        with torch.no_grad():
            base = model.run(images)
        x_last = base["inputs"][-1]  # (B, 9, D): the earlier layers do not change
        values = base["values"]  # (B, H, 9, Dh)
        p0 = base["logits"].softmax(-1)  # (B, 10)
        w0 = base["weights"][-1][:, :, 0]  # (B, H, L)
        logits = w0.clamp_min(1e-6).log().clone().requires_grad_(True)
        noise = torch.randn(logits.shape, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            logits += noise  # start away from the model's own weights
        opt = torch.optim.Adam([logits], lr=lr)
        best_w = w0.clone()
        best_jsd = torch.zeros(len(images))
        best_tvd = torch.zeros(len(images))
        for _ in range(steps):
            w = logits.softmax(-1)
            p = model.cls_logits(x_last, values, w).softmax(-1)
            tvd = 0.5 * (p - p0).abs().sum(-1)  # (B,)
            jsd = jensen_shannon(w, w0).mean(1)  # (B,)
            with torch.no_grad():
                ok = (tvd <= tol) & (jsd > best_jsd)
                best_w[ok], best_jsd[ok], best_tvd[ok] = w[ok], jsd[ok], tvd[ok]
            loss = -(jsd - 100.0 * torch.relu(tvd - tol / 2)).sum()
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            p = model.from_last_input(x_last, best_w)
            same = p.argmax(-1) == p0.argmax(-1)
    finally:
        for p in model.parameters():
            p.requires_grad_(True)
    return Adversary(best_jsd, best_tvd, same, best_w)


def assert_c29_not_faithful(
    agreement: float,
    adversarial_fraction: float,
    *,
    max_agreement: float,
    min_fraction: float,
) -> None:
    """C29 holds when attention ranks the rows unlike leave-one-out (mean Kendall τ below
    ``max_agreement``) and, for at least ``min_fraction`` of the images, a very different
    attention distribution leaves the prediction unchanged."""
    assert agreement < max_agreement, (
        f"attention agrees with leave-one-out (mean Kendall τ {agreement:.2f} >= "
        f"{max_agreement}): here the weights do rank the rows as their removal does"
    )
    assert adversarial_fraction >= min_fraction, (
        f"only {adversarial_fraction:.2f} of the images have a different attention with the "
        f"same prediction (< {min_fraction}): the weights are not interchangeable"
    )


# ------------------------------------------------------------------------------------------
# 9.3 C30: Pre-LN vs Post-LN
# ------------------------------------------------------------------------------------------


class TokenStack(nn.Module):
    """Embedding + learned positions + ``num_layers`` encoder layers + read-out, per token.

    ``pre_ln``: Pre-LN layers and a final LayerNorm; else Post-LN layers (the 2017 layout).
    ``forward(tokens (B, L)) -> logits (B, L, vocab)``.
    """

    def __init__(
        self, num_layers: int, *, pre_ln: bool, d_model: int = 16, vocab: int = 16, length=12
    ):
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.randn(length, d_model) * 0.1)
        self.layers = nn.ModuleList(
            EncoderLayer(d_model, 2, 2 * d_model, pre_ln=pre_ln) for _ in range(num_layers)
        )
        self.norm = nn.LayerNorm(d_model) if pre_ln else nn.Identity()
        self.out = nn.Linear(d_model, vocab)

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.embed(tokens) + self.pos[: tokens.shape[1]]  # (B, L, D)
        for layer in self.layers:
            x = layer(x)  # (B, L, D)
        return self.out(self.norm(x))  # (B, L, V)


def _token_loss(model, batch):
    tokens, target = batch
    logits = model(tokens)  # (B, L, V)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def layer_gradient_norms(
    num_layers: int,
    *,
    pre_ln: bool,
    d_model: int = 16,
    seed: int = 0,
    batch_size: int = 64,
    length: int = 8,
) -> list[float]:
    """At initialisation: ‖∂loss/∂W‖ of each layer's last feed-forward matrix (the quantity
    of Xiong et al. 2020's analysis), layer 1 first, on one batch of :func:`shift_batch`."""
    torch.manual_seed(seed)
    model = TokenStack(num_layers, pre_ln=pre_ln, d_model=d_model)
    batch = shift_batch(batch_size, torch.Generator().manual_seed(seed), length=length)
    with torch_threads(1):
        _token_loss(model, batch).backward()
    return [float(layer.ff.linear2.weight.grad.norm()) for layer in model.layers]


class StackedRuns(nn.Module):
    """Several :class:`TokenStack` runs trained at once, each with its own seed and learning
    rate, by one :func:`fit` call.

    Run ``r`` starts from the weights of a :class:`TokenStack` built after
    ``torch.manual_seed(seeds[r])``; its weights are stacked along a new first dim (run),
    and the forward pass is the package's layer (:class:`attention.blocks.EncoderLayer`)
    written out with batched matrix products over runs (``tests`` check it equals each
    run's :class:`TokenStack`). Each run's parameters are *stored divided by* its learning
    rate factor ``lr_factors[r]`` and multiplied back in the forward pass: Adam's step does
    not depend on the gradient's scale, so Adam at rate ``lr`` on the stored values is Adam
    at rate ``lr · factor`` on the run's parameters (up to Adam's ε). The runs share
    nothing: their losses are summed, and a parameter only gets its own run's gradient.

    ``forward(tokens (R, B, L)) -> logits (R, B, L, vocab)``.
    """

    def __init__(
        self,
        seeds: Sequence[int],
        lr_factors: Sequence[float],
        num_layers: int,
        *,
        pre_ln: bool,
        d_model: int = 16,
        vocab: int = 16,
        length: int = 12,
    ):
        super().__init__()
        if len(seeds) != len(lr_factors) or not seeds:
            raise ValueError(
                f"seeds and lr_factors must be non-empty and of one length, got {len(seeds)} "
                f"and {len(lr_factors)}"
            )
        self.pre_ln, self.num_layers = bool(pre_ln), num_layers
        self.models = []
        for seed in seeds:
            torch.manual_seed(seed)
            self.models.append(TokenStack(num_layers, pre_ln=pre_ln, d_model=d_model,
                                          vocab=vocab, length=length))  # fmt: skip
        self.num_heads = self.models[0].layers[0].self_attn.num_heads
        self.register_buffer("factors", torch.tensor([float(f) for f in lr_factors]))
        self.stored = nn.ParameterDict()
        for name, tensor in self._gather().items():
            scale = self.factors.view(-1, *[1] * (tensor.dim() - 1))
            self.stored[name] = nn.Parameter(tensor / scale)

    def _gather(self) -> dict[str, Tensor]:
        """The runs' weights, stacked: ``name -> (R, ...)``, linear weights as ``(in, out)``."""

        def stack(get):
            return torch.stack([get(m).detach() for m in self.models])

        out = {
            "embed": stack(lambda m: m.embed.weight),
            "pos": stack(lambda m: m.pos),
            "out_w": stack(lambda m: m.out.weight.T),
            "out_b": stack(lambda m: m.out.bias),
        }
        if self.pre_ln:
            out["norm_w"] = stack(lambda m: m.norm.weight)
            out["norm_b"] = stack(lambda m: m.norm.bias)
        for i in range(self.num_layers):

            def layer(m, i=i):
                return m.layers[i]

            attn = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "out_proj"}
            for short, proj in attn.items():
                out[f"l{i}_{short}_w"] = stack(
                    lambda m, p=proj: getattr(layer(m).self_attn, p).weight.T
                )
                out[f"l{i}_{short}_b"] = stack(
                    lambda m, p=proj: getattr(layer(m).self_attn, p).bias
                )
            for short, lin in (("ff1", "linear1"), ("ff2", "linear2")):
                out[f"l{i}_{short}_w"] = stack(
                    lambda m, lin=lin: getattr(layer(m).ff, lin).weight.T
                )
                out[f"l{i}_{short}_b"] = stack(lambda m, lin=lin: getattr(layer(m).ff, lin).bias)
            for norm in ("norm1", "norm2"):
                out[f"l{i}_{norm}_w"] = stack(lambda m, n=norm: getattr(layer(m), n).weight)
                out[f"l{i}_{norm}_b"] = stack(lambda m, n=norm: getattr(layer(m), n).bias)
        return out

    def forward(self, tokens: Tensor) -> Tensor:
        w = {n: p * self.factors.view(-1, *[1] * (p.dim() - 1)) for n, p in self.stored.items()}
        r, b, l = tokens.shape
        h = self.num_heads

        def linear(x, name):  # (R, N, in) -> (R, N, out)
            return torch.baddbmm(w[f"{name}_b"][:, None], x, w[f"{name}_w"])

        def norm(x, name):  # LayerNorm over the last dim, per-run affine
            y = F.layer_norm(x, x.shape[-1:])
            return y * w[f"{name}_w"][:, None] + w[f"{name}_b"][:, None]

        def attend(x, i):  # (R, B·L, D) -> (R, B·L, D)
            d = x.shape[-1]
            q, k, v = (
                linear(x, f"l{i}_{s}").view(r * b, l, h, d // h).transpose(1, 2)
                for s in ("q", "k", "v")
            )  # (R·B, H, L, Dh) each
            scores = q @ k.transpose(-2, -1) / math.sqrt(d // h)  # (R·B, H, L, L)
            out = scores.softmax(-1) @ v  # (R·B, H, L, Dh)
            return linear(out.transpose(1, 2).reshape(r, b * l, d), f"l{i}_o")

        def ff(x, i):
            return linear(torch.relu(linear(x, f"l{i}_ff1")), f"l{i}_ff2")

        emb = w["embed"][torch.arange(r)[:, None, None], tokens]  # (R, B, L, D)
        x = (emb + w["pos"][:, None, :l]).reshape(r, b * l, -1)  # (R, B·L, D)
        for i in range(self.num_layers):
            if self.pre_ln:
                x = x + attend(norm(x, f"l{i}_norm1"), i)
                x = x + ff(norm(x, f"l{i}_norm2"), i)
            else:
                x = norm(x + attend(x, i), f"l{i}_norm1")
                x = norm(x + ff(x, i), f"l{i}_norm2")
        if self.pre_ln:
            x = norm(x, "norm")
        return linear(x, "out").view(r, b, l, -1)  # (R, B, L, V)


def shift_batch(batch_size: int, generator: torch.Generator, *, vocab: int = 16, length=12):
    """Tokens ``(B, L)`` and targets ``(B, L)``: at every position the previous token (the
    first position: itself): a task every layer stack here can learn in a few hundred steps."""
    tokens = torch.randint(vocab, (batch_size, length), generator=generator)
    target = torch.cat([tokens[:, :1], tokens[:, :-1]], dim=1)
    return tokens, target


@dataclass(frozen=True)
class DepthRun:
    pre_ln: bool
    num_layers: int
    lr: float
    warmup: int
    seed: int
    losses: list[float]

    @property
    def final(self) -> float:
        """Mean loss of the last 20 steps (inf if it ever went non-finite)."""
        if not all(math.isfinite(x) for x in self.losses):
            return math.inf
        tail = self.losses[-20:]
        return sum(tail) / len(tail)


def train_depth(
    num_layers: int,
    *,
    pre_ln: bool,
    lrs: Sequence[float],
    warmup: int,
    seeds: Sequence[int],
    steps: int = 150,
    d_model: int = 16,
    batch_size: int = 32,
    vocab: int = 16,
    length: int = 12,
) -> list[DepthRun]:
    """Train one :class:`TokenStack` per (learning rate, seed) on :func:`shift_batch` with Adam
    (no clipping: a divergence must be allowed to happen) and ``warmup`` steps of
    :func:`linear_warmup` (0: none), all at once (:class:`StackedRuns`). Run ``(lr, seed)``
    gets its parameters from ``seed`` and its batches from a generator seeded with
    ``seed + 1``, whatever the other runs."""
    runs = [(lr, seed) for lr in lrs for seed in seeds]
    top = max(lrs)
    model = StackedRuns([s for _, s in runs], [lr / top for lr, _ in runs], num_layers,
                        pre_ln=pre_ln, d_model=d_model, vocab=vocab, length=length)  # fmt: skip
    generators = [torch.Generator().manual_seed(seed + 1) for _, seed in runs]
    per_run: list[list[float]] = [[] for _ in runs]

    def make_batch(_):
        pairs = [shift_batch(batch_size, g, vocab=vocab, length=length) for g in generators]
        return torch.stack([p[0] for p in pairs]), torch.stack([p[1] for p in pairs])

    def loss_of(m, batch):
        tokens, target = batch  # (R, B, L) each
        logits = m(tokens)  # (R, B, L, V)
        losses = F.cross_entropy(logits.permute(0, 3, 1, 2), target, reduction="none")
        losses = losses.mean((1, 2))  # (R,)
        for r, value in enumerate(losses.tolist()):
            per_run[r].append(value)
        return losses.nan_to_num(nan=0.0, posinf=0.0).sum()

    fit(model, make_batch, loss_of, steps=steps, lr=top, data_seed=0, threads=1,
        schedule=linear_warmup(warmup) if warmup else None)  # fmt: skip
    return [
        DepthRun(pre_ln, num_layers, lr, warmup, seed, per_run[r])
        for r, (lr, seed) in enumerate(runs)
    ]


def diverged(run: DepthRun, *, start_loss: float, margin: float = 0.05) -> bool:
    """A run failed (diverged or never learnt) if its final loss is not at least ``margin``
    (a fraction) below ``start_loss`` — the loss of a uniform guess, ``ln vocab`` — or if it
    ever went non-finite."""
    return not run.final < (1 - margin) * start_loss


def assert_gradient_predictions(
    post_by_depth: Mapping[int, float],
    pre_by_depth: Mapping[int, float],
    post_by_width: Mapping[int, float],
    *,
    flat: float,
    shrink: float,
    grow: float,
) -> None:
    """Xiong et al. (2020)'s predictions for the last layer's gradient at initialisation
    (``depth -> norm`` or ``width -> norm``): Post-LN's does not depend on the depth (largest
    / smallest ≤ ``flat``); Pre-LN's shrinks with it (deepest / shallowest ≤ ``shrink``);
    Post-LN's grows with the width (widest / narrowest ≥ ``grow``)."""
    ratio = max(post_by_depth.values()) / min(post_by_depth.values())
    assert ratio <= flat, (
        f"Post-LN's last-layer gradient changes with depth by {ratio:.2f}x (> {flat}): "
        f"{dict(post_by_depth)}"
    )
    shallow, deep = min(pre_by_depth), max(pre_by_depth)
    ratio = pre_by_depth[deep] / pre_by_depth[shallow]
    assert ratio <= shrink, (
        f"Pre-LN's last-layer gradient does not shrink with depth: {deep} layers / {shallow} "
        f"layers = {ratio:.2f} (> {shrink})"
    )
    narrow, wide = min(post_by_width), max(post_by_width)
    ratio = post_by_width[wide] / post_by_width[narrow]
    assert ratio >= grow, (
        f"Post-LN's last-layer gradient does not grow with width: width {wide} / width "
        f"{narrow} = {ratio:.2f} (< {grow})"
    )


def assert_c30_stability(
    divergences: Mapping[tuple[str, int], int], *, total: int, min_gap: int
) -> None:
    """``divergences[(layout, warmup)]`` = diverged runs out of ``total``. Pre-LN without warm-up
    diverges at least ``min_gap`` fewer times than Post-LN without warm-up, and warm-up cuts
    Post-LN's divergences by at least ``min_gap``."""
    post0, pre0 = divergences[("Post-LN", 0)], divergences[("Pre-LN", 0)]
    warm = [v for (layout, w), v in divergences.items() if layout == "Post-LN" and w > 0]
    assert post0 - pre0 >= min_gap, (
        f"without warm-up Post-LN diverged {post0}/{total}, Pre-LN {pre0}/{total}: "
        f"Pre-LN is not more stable by {min_gap}"
    )
    assert warm and post0 - min(warm) >= min_gap, (
        f"warm-up does not rescue Post-LN: {post0}/{total} without, {warm} with"
    )


# ------------------------------------------------------------------------------------------
# 9.4 Attention vs convolution vs recurrence
# ------------------------------------------------------------------------------------------


class ElmanRNN(nn.Module):
    """``h_t = tanh(W x_t + U h_{t-1})``, written as a loop: ``(B, L, D) -> (B, L, D)``."""

    def __init__(self, d_model: int):
        super().__init__()
        self.w = nn.Linear(d_model, d_model)
        self.u = nn.Linear(d_model, d_model, bias=False)

    def forward(self, x: Tensor) -> Tensor:
        h = torch.zeros_like(x[:, 0])  # (B, D)
        wx = self.w(x)  # (B, L, D)
        out = []
        for t in range(x.shape[1]):
            h = torch.tanh(wx[:, t] + self.u(h))  # (B, D)
            out.append(h)
        return torch.stack(out, dim=1)  # (B, L, D)


class ConvLayer(nn.Module):
    """A 1-D convolution over positions, ``kernel`` wide: ``(B, L, D) -> (B, L, D)``."""

    def __init__(self, d_model: int, kernel: int = 3):
        super().__init__()
        self.conv = nn.Conv1d(d_model, d_model, kernel, padding=kernel // 2)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(x.transpose(1, 2)).transpose(1, 2)


class AttentionLayer(nn.Module):
    """Multi-head self-attention (with its projections): ``(B, L, D) -> (B, L, D)``."""

    def __init__(self, d_model: int, num_heads: int = 2):
        super().__init__()
        self.attn = MultiHeadAttention(d_model, num_heads)

    def forward(self, x: Tensor) -> Tensor:
        return self.attn(x)


MIXERS: dict[str, Callable[[int], nn.Module]] = {
    "attention": AttentionLayer,
    "convolution (k=3)": ConvLayer,
    "recurrence (Elman)": ElmanRNN,
}


def counted_flops(layer: nn.Module, x: Tensor) -> int:
    """Forward FLOPs of ``layer(x)`` as torch's FLOP counter sees them."""
    counter = matmul_flop_counter()
    with torch.no_grad(), counter:
        layer(x)
    return int(counter.get_total_flops())


def reach_per_layer(layer: nn.Module, length: int, d_model: int) -> int:
    """How many earlier positions one layer lets the last output see: the positions ``j <
    length − 1`` whose input gets a nonzero gradient from output ``length − 1``."""
    torch.manual_seed(0)
    x = torch.randn(1, length, d_model, requires_grad=True)
    (grad,) = torch.autograd.grad(layer(x)[0, -1].sum(), x)
    return int((grad[0, :-1].abs().sum(-1) > 0).sum())


def layer_costs(*, length: int = 64, d_model: int = 32) -> dict[str, dict]:
    """Per kind of layer: FLOPs counted by torch at ``length`` and ``2·length``; the longest
    chain of steps that must run one after the other; the reach of one layer
    (:func:`reach_per_layer`) and so the layers needed to connect the two ends of a
    ``length``-token sequence; the longest path between them, in steps."""
    out = {}
    for name, cls in MIXERS.items():
        torch.manual_seed(0)
        layer = cls(d_model)
        flops = [counted_flops(layer, torch.randn(1, n, d_model)) for n in (length, 2 * length)]
        reach = reach_per_layer(layer, length, d_model)
        recurrent = name.startswith("recurrence")
        layers = math.ceil((length - 1) / reach)
        out[name] = {
            "flops": flops[0],
            "flops_2x": flops[1],
            "sequential_steps": length if recurrent else 1,
            "reach": reach,
            "layers_to_connect": layers,
            "path_steps": length - 1 if recurrent else layers,
        }
    return out


def motif_batch(batch_size: int, generator: torch.Generator, *, length: int = 16, vocab=6):
    """Does the pair ``(0, 1)`` occur at two adjacent positions? Half the sequences have it
    planted once; tokens 0 and 1 appear elsewhere too, but never adjacent in that order."""
    tokens = torch.randint(vocab, (batch_size, length), generator=generator)
    # break every accidental (0, 1): a 1 right after a 0 becomes a 2
    for _ in range(2):
        follows = (tokens[:, :-1] == 0) & (tokens[:, 1:] == 1)
        tokens[:, 1:][follows] = 2
    labels = torch.randint(2, (batch_size,), generator=generator)
    where = torch.randint(length - 1, (batch_size,), generator=generator)
    rows = torch.nonzero(labels).squeeze(1)
    tokens[rows, where[rows]] = 0
    tokens[rows, where[rows] + 1] = 1
    return tokens, labels


def ends_batch(batch_size: int, generator: torch.Generator, *, length: int = 32, vocab=4):
    """Is the first token equal to the last? Half yes, half no."""
    tokens = torch.randint(vocab, (batch_size, length), generator=generator)
    labels = torch.randint(2, (batch_size,), generator=generator)
    shift = torch.randint(1, vocab, (batch_size,), generator=generator)
    tokens[:, -1] = torch.where(labels == 1, tokens[:, 0], (tokens[:, 0] + shift) % vocab)
    return tokens, labels


class MixerClassifier(nn.Module):
    """Embedding (+ learned positions) → ``num_layers`` residual blocks of one mixer (pre-LN,
    with a feed-forward network) → read-out → 2 classes.

    ``readout``: ``"mean"`` over positions (a question about the whole sequence: "does the
    motif occur anywhere?") or ``"last"`` position (a question asked at one position, as a
    sequence model answers it). Not ``max``: a max over positions compares far-apart tokens
    by itself (``max(a, b) − min(a, b) = |a − b|``), which would hide the mixer's reach.
    """

    def __init__(
        self, mixer: str, *, vocab: int, length: int, d_model=32, num_layers=2, readout="mean"
    ):
        super().__init__()
        check_choice("mixer", mixer, ("attention", "convolution"))
        self.readout = check_choice("readout", readout, ("mean", "last"))
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.randn(length, d_model) * 0.1)
        make = AttentionLayer if mixer == "attention" else ConvLayer
        self.mix = nn.ModuleList(make(d_model) for _ in range(num_layers))
        self.norms = nn.ModuleList(nn.LayerNorm(d_model) for _ in range(2 * num_layers))
        self.ffs = nn.ModuleList(
            nn.Sequential(
                nn.Linear(d_model, 2 * d_model), nn.ReLU(), nn.Linear(2 * d_model, d_model)
            )
            for _ in range(num_layers)
        )
        self.out = nn.Linear(d_model, 2)

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.embed(tokens) + self.pos  # (B, L, D)
        for i, (mix, ff) in enumerate(zip(self.mix, self.ffs, strict=True)):
            x = x + mix(self.norms[2 * i](x))  # (B, L, D)
            x = x + ff(self.norms[2 * i + 1](x))  # (B, L, D)
        pooled = x.mean(dim=1) if self.readout == "mean" else x[:, -1]  # (B, D)
        return self.out(pooled)  # (B, 2)


# task -> (batch maker, vocabulary, length, read-out)
TASKS = {"motif": (motif_batch, 6, 16, "mean"), "ends": (ends_batch, 4, 32, "last")}


@dataclass(frozen=True)
class MixerRun:
    mixer: str
    task: str
    seed: int
    accuracy: float


def train_mixer(
    mixer: str,
    task: str,
    *,
    seed: int,
    n_train: int | None = None,
    steps: int = 300,
    lr: float = 3e-3,
    batch_size: int = 32,
) -> MixerRun:
    """Train :class:`MixerClassifier` on ``task`` (``"motif"`` or ``"ends"``); ``n_train``: a
    fixed training set of that many examples (``None``: fresh examples every step); accuracy
    on 1000 fresh held-out examples."""
    check_choice("task", task, list(TASKS))
    make, vocab, length, readout = TASKS[task]
    torch.manual_seed(seed)
    model = MixerClassifier(mixer, vocab=vocab, length=length, readout=readout)
    if n_train is None:

        def batches(g):
            return make(batch_size, g)
    else:
        pool_x, pool_y = make(n_train, torch.Generator().manual_seed(seed + 1000))

        def batches(g):
            idx = torch.randint(n_train, (batch_size,), generator=g)
            return pool_x[idx], pool_y[idx]

    def loss_of(m, batch):
        return F.cross_entropy(m(batch[0]), batch[1])

    fit(model, batches, loss_of, steps=steps, lr=lr, data_seed=seed + 1, clip=1.0, threads=1)
    x, y = make(1000, torch.Generator().manual_seed(seed + 2))
    with torch.no_grad(), torch_threads(1):
        acc = float((model(x).argmax(-1) == y).float().mean())
    return MixerRun(mixer, task, seed, acc)


def assert_prior_wins(
    winner: Sequence[float], loser: Sequence[float], *, gap: float, what: str
) -> None:
    """The winner's mean accuracy is at least ``gap`` above the loser's, and its worst seed
    above the loser's best."""
    w, lo = spread(winner), spread(loser)
    assert w.mean >= lo.mean + gap, f"{what}: {w.mean:.3f} is not {gap} above {lo.mean:.3f}"
    assert w.min > lo.max, (
        f"{what}: the winner's worst seed {w.min:.3f} <= the loser's best {lo.max:.3f}"
    )
