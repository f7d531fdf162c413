"""Experiments of chapter 5: how attention links distant tokens, and what the link costs.

- C16 uses the generic helpers of :mod:`book.experiments.gradients` (path lengths in the
  autograd graph, gradient norm against distance); nothing chapter-specific is needed here.
- C17, :func:`topic_documents`: the chapter's running example, a long "document" whose label
  depends on a topic token near its start and a conclusion token at its very end, with filler
  in between. :func:`attention_maps` reads a trained model's attention weights and
  :func:`topic_attention` summarises how the conclusion spreads its attention.
- C18 measures with :func:`measure.cost.measure_cost` (exact bytes and FLOPs of an attention
  call, and its median time) and fits exponents with :func:`measure.cost.fit_power`; nothing
  chapter-specific is needed here.
- C19: the efficient variants as ``attn_fn`` come from the library
  (:mod:`attention.efficient.adapters`); here, :func:`reach_after` (what a stack of layers
  can see) and the chapter's verdicts on what each pattern learns.

No attention is implemented here: the chapter calls the package's kernels.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from attention.blocks import SequenceClassifier
from attention.checks import check_positive_int, check_rank, check_tensor

Tensor = torch.Tensor

# ------------------------------------------------------------------------------------------
# The running example: a long document whose label needs its first and its last token
# ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Documents:
    """A batch of :func:`topic_documents`.

    ``tokens (B, L)`` int64 ids; ``labels (B,)``; ``topic_positions (B,)`` where each topic
    token sits; ``topics (B,)`` and ``conclusions (B,)`` their indices in ``0 .. T - 1``.
    """

    tokens: Tensor
    labels: Tensor
    topic_positions: Tensor
    topics: Tensor
    conclusions: Tensor


def document_vocab_size(n_topics: int, n_fillers: int) -> int:
    """Vocabulary of :func:`topic_documents`: ``n_topics`` topic ids, as many conclusion ids,
    then the fillers."""
    return 2 * check_positive_int("n_topics", n_topics) + check_positive_int("n_fillers", n_fillers)


def topic_documents(
    batch_size: int,
    seq_len: int,
    *,
    n_topics: int = 2,
    n_fillers: int = 32,
    topic_span: int | None = None,
    generator: torch.Generator | None = None,
) -> Documents:
    """Random documents: a topic token near the start, filler, a conclusion token at the end.

    Ids ``0 .. T-1`` are topic tokens, ``T .. 2T-1`` conclusion tokens, ``2T .. 2T+F-1``
    fillers (``T = n_topics``, ``F = n_fillers``). Every document is fillers drawn uniformly,
    except one topic token at a position drawn uniformly from ``[0, topic_span)`` (default
    ``seq_len // 4``: the opening quarter) and one conclusion token at position ``L - 1``.
    The label is ``(topic + conclusion) mod T``: the same conclusion means different things
    under different topics, so neither token alone tells anything about the label (each
    label is equally likely given either one), and a model must bring the two together
    across the whole document.
    """
    batch_size = check_positive_int("batch_size", batch_size)
    seq_len = check_positive_int("seq_len", seq_len)
    n_topics = check_positive_int("n_topics", n_topics)
    n_fillers = check_positive_int("n_fillers", n_fillers)
    if n_topics < 2:
        raise ValueError("n_topics must be >= 2 (one topic makes the label trivial), got 1")
    if seq_len < 2:
        raise ValueError(f"seq_len must be >= 2 (a topic and a conclusion), got {seq_len}")
    span = max(1, seq_len // 4) if topic_span is None else topic_span
    span = check_positive_int("topic_span", span)
    if span > seq_len - 1:
        raise ValueError(
            f"topic_span must be <= seq_len - 1 = {seq_len - 1} (the last position holds the "
            f"conclusion), got {span}"
        )
    first_filler = 2 * n_topics
    tokens = torch.randint(
        first_filler, first_filler + n_fillers, (batch_size, seq_len), generator=generator
    )  # (B, L)
    topics = torch.randint(n_topics, (batch_size,), generator=generator)  # (B,)
    conclusions = torch.randint(n_topics, (batch_size,), generator=generator)  # (B,)
    positions = torch.randint(span, (batch_size,), generator=generator)  # (B,)
    rows = torch.arange(batch_size)
    tokens[rows, positions] = topics
    tokens[:, -1] = n_topics + conclusions
    labels = (topics + conclusions) % n_topics  # (B,)
    return Documents(tokens, labels, positions, topics, conclusions)


# ------------------------------------------------------------------------------------------
# Reading a trained model's attention
# ------------------------------------------------------------------------------------------


def attention_maps(model: SequenceClassifier, tokens: Tensor, *, layer: int = 0) -> Tensor:
    """The attention weights ``(B, H, L, L)`` of encoder layer ``layer`` on ``tokens (B, L)``.

    The model runs as usual (eval mode, no gradients); a hook catches the input of the layer's
    attention module and runs that module once more with ``need_weights=True`` on the same
    input and mask. Needs the reference attention (``attn_fn=None``): efficient kernels do
    not form the weights. Row ``i`` of a map is how query ``i`` spreads over the keys.
    """
    if not isinstance(model, SequenceClassifier):
        raise TypeError(
            f"model must be an attention.blocks.SequenceClassifier, got {type(model).__name__}"
        )
    n_layers = len(model.encoder.layers)
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < n_layers:
        raise ValueError(f"layer must be an int in [0, {n_layers}), got {layer!r}")
    attn = model.encoder.layers[layer].self_attn
    if attn.attn_fn is not None:
        raise ValueError(
            "attention_maps needs the reference attention (attn_fn=None): an efficient kernel "
            "does not form the weights"
        )
    caught: list[Tensor] = []

    def hook(module, args, kwargs, output):
        if caught:  # the call below re-enters the hook
            return
        caught.append(torch.empty(0))  # mark as running
        mask = kwargs.get("mask")
        _, weights = module(
            args[0], mask=mask, causal=kwargs.get("causal", False), need_weights=True
        )
        caught[0] = weights  # (B, H, L, L)

    was_training = model.training
    handle = attn.register_forward_hook(hook, with_kwargs=True)
    try:
        model.eval()
        with torch.no_grad():
            model(tokens)
    finally:
        handle.remove()
        model.train(was_training)
    return caught[0]


@dataclass(frozen=True)
class TopicAttention:
    """How the conclusion (the last query) spreads its attention, per document and head.

    ``topic (B, H)``: weight on the topic token; ``filler (B, H)``: mean weight on one filler
    token; ``own (B, H)``: weight on itself; ``reverse (B, H)``: the topic token's weight on
    the conclusion (the other direction of the link).
    """

    topic: Tensor
    filler: Tensor
    own: Tensor
    reverse: Tensor

    @property
    def ratio(self) -> float:
        """Mean weight on the topic over mean weight on a filler token (all documents and
        heads): 1 for attention that ignores content."""
        return float(self.topic.mean() / self.filler.mean())


def topic_attention(weights: Tensor, topic_positions: Tensor) -> TopicAttention:
    """Summarise attention maps ``weights (B, H, L, L)`` of documents whose topic sits at
    ``topic_positions (B,)`` and whose conclusion is the last token."""
    check_tensor("weights", weights)
    check_rank("weights", weights, 4, "[batch, heads, queries, keys]")
    check_tensor("topic_positions", topic_positions)
    b, _, lq, lk = weights.shape
    if lq != lk or lk < 3:
        raise ValueError(
            f"weights must be self-attention maps (L, L) with L >= 3, got shape "
            f"{tuple(weights.shape)}"
        )
    if topic_positions.shape != (b,):
        raise ValueError(
            f"topic_positions must have shape (batch,) = ({b},), got {tuple(topic_positions.shape)}"
        )
    if int(topic_positions.min()) < 0 or int(topic_positions.max()) >= lk - 1:
        raise ValueError(
            f"topic_positions must lie in [0, {lk - 2}], got {topic_positions.tolist()}"
        )
    rows = torch.arange(b)
    last = weights[:, :, -1, :]  # (B, H, L): the conclusion's row
    topic = last[rows, :, topic_positions]  # (B, H)
    own = last[:, :, -1]  # (B, H)
    filler = (last.sum(-1) - topic - own) / (lk - 2)  # (B, H): the other L - 2 keys
    reverse = weights[rows, :, topic_positions, -1]  # (B, H): topic query, conclusion key
    return TopicAttention(topic=topic, filler=filler, own=own, reverse=reverse)


# ------------------------------------------------------------------------------------------
# Reach after several layers, and the asserting functions of C16 and C19
# ------------------------------------------------------------------------------------------


def reach_after(allowed: Tensor, depth: int) -> Tensor:
    """``(L, L)`` bool: output ``i`` can depend on input ``j`` after ``depth`` layers that each
    use the may-attend mask ``allowed (L, L)`` (with residual connections, so a position
    always keeps its own input). One layer moves information one mask-step; ``depth`` layers
    compose the mask with itself ``depth`` times (a boolean matrix power)."""
    check_tensor("allowed", allowed)
    if allowed.dtype != torch.bool or allowed.dim() != 2 or allowed.shape[0] != allowed.shape[1]:
        raise ValueError(
            f"allowed must be a square bool mask (L, L), got {allowed.dtype} {tuple(allowed.shape)}"
        )
    depth = check_positive_int("depth", depth)
    step = (allowed | torch.eye(allowed.shape[0], dtype=torch.bool)).double()  # (L, L)
    reach = torch.eye(allowed.shape[0], dtype=torch.float64)  # (L, L): before any layer
    for _ in range(depth):
        reach = ((step @ reach) > 0).double()  # (L, L)
    return reach.bool()


def predicted_accuracy(reach_row: Tensor, topic_span: int) -> float:
    """Accuracy of a model that uses every topic its read-out can reach and guesses (1/2)
    otherwise: ``1/2 + 1/2 · (share of positions 0 .. topic_span - 1 reached)``."""
    check_tensor("reach_row", reach_row)
    topic_span = check_positive_int("topic_span", topic_span)
    if reach_row.dim() != 1 or reach_row.numel() < topic_span:
        raise ValueError(
            f"reach_row must be a (L,) row with L >= topic_span = {topic_span}, got shape "
            f"{tuple(reach_row.shape)}"
        )
    return 0.5 + 0.5 * float(reach_row[:topic_span].float().mean())


def assert_c16_paths(
    rnn: Sequence[int | None],
    attention: dict[str, Sequence[int | None]],
    control: Sequence[int | None],
) -> None:
    """C16, paths in rounds indexed by distance ``d``: the RNN crosses ``d + 1`` cell
    applications, every attention model one layer at every distance, and the per-token control
    (no mixing) has no path from any other token."""
    assert all(p == d + 1 for d, p in enumerate(rnn)), f"RNN path is not d + 1: {list(rnn)}"
    for name, paths in attention.items():
        assert all(p == 1 for p in paths), f"{name}: path is not one layer everywhere: {paths}"
    assert control[0] == 1 and all(p is None for p in control[1:]), (
        f"the no-mixing control must reach its own token only, got {list(control)}"
    )


# C19's thresholds, set from the claim before the runs: chance is 1/2; a model "is at chance"
# when its mean accuracy over seeds is below 0.6, "solves" the task when above 0.9; a run
# "matches" the prediction from reach when it is within 0.1 of it.
# C17's thresholds, from the claim ("the topic and the conclusion attend to each other while
# filler gets little weight"), fixed before the runs.
C17_SOLVED, C17_TOPIC_OVER_FILLER, C17_SHARP, C17_REVERSE_MAX = 0.95, 10.0, 0.9, 3.0


def c17_link_failures(
    cells: dict[tuple[int, int], float],
    *,
    accuracy: float,
    topic_over_filler: float,
    reverse_per_uniform: float,
    filler_mass_linked: float,
    filler_mass_unlinked: float,
) -> list[str]:
    """What contradicts C17 in one trained model at one length; empty when the claim holds.

    ``cells``: the conclusion's weight on the topic (in the head that looks hardest) per
    (topic, conclusion) combination; ``topic_over_filler``: the mean weight on the topic over
    that on one filler token; ``reverse_per_uniform``: the topic token's weight on the
    conclusion in units of 1/L; ``filler_mass_*``: the conclusion's total weight on filler in
    documents with and without the link (NaN when every document has it).

    The claim holds when the model solves the task (> :data:`C17_SOLVED`), the topic stands
    far above filler (> :data:`C17_TOPIC_OVER_FILLER` ×), each combination's link is sharp
    or absent (> :data:`C17_SHARP` or < 1 - C17_SHARP) with at least two sharp ones, and filler
    gets most of the weight only where the link is absent. The reverse direction must stay
    below :data:`C17_REVERSE_MAX` / L: the chapter's "partly" rests on its absence (the
    claim's "each other" does not hold), so a model that learned it must fail this check and
    send the reader back to the verdict.
    """
    if not cells:
        raise ValueError("cells must hold at least one (topic, conclusion) combination")
    failures = []
    if accuracy <= C17_SOLVED:
        failures.append(f"accuracy {accuracy:.3f} does not solve the task")
    if topic_over_filler <= C17_TOPIC_OVER_FILLER:
        failures.append(f"the topic gets only {topic_over_filler:.1f}x a filler token's weight")
    fuzzy = {c: v for c, v in cells.items() if 1 - C17_SHARP <= v <= C17_SHARP}
    if fuzzy:
        failures.append(f"links neither sharp nor absent: {fuzzy}")
    if sum(v > C17_SHARP for v in cells.values()) < 2:
        failures.append(f"fewer than two sharp links: {cells}")
    if reverse_per_uniform >= C17_REVERSE_MAX:
        failures.append(f"the reverse link is {reverse_per_uniform:.1f}/L")
    if not math.isnan(filler_mass_unlinked) and not (
        filler_mass_unlinked > 0.5 > filler_mass_linked
    ):
        failures.append(
            f"filler gets {filler_mass_linked:.2f} of the weight with the link and "
            f"{filler_mass_unlinked:.2f} without it"
        )
    return failures


def assert_c17_links(cells: dict[tuple[int, int], float], *, where: str, **measured) -> None:
    """C17 on one model and length (``where`` names them): fails with every contradiction
    :func:`c17_link_failures` finds."""
    failures = c17_link_failures(cells, **measured)
    assert not failures, f"C17 does not hold ({where}): " + "; ".join(failures)


C19_CHANCE_BELOW = 0.6
C19_SOLVED_ABOVE = 0.9
C19_MATCH = 0.1


def assert_c19_blind_at_chance(
    accuracies: dict[str, Sequence[float]], predicted: dict[str, float]
) -> None:
    """Every configuration whose read-out cannot reach the topic (predicted 1/2) is at chance
    on every seed: nothing leaks past the mask."""
    blind = [name for name, p in predicted.items() if p == 0.5]
    if not blind:
        raise ValueError("no configuration is predicted blind: nothing to check")
    for name in blind:
        assert max(accuracies[name]) < C19_CHANCE_BELOW, (
            f"{name} cannot reach the topic yet scored {list(accuracies[name])}"
        )


def c19_reach_verdict(accuracies: dict[str, Sequence[float]], predicted: dict[str, float]) -> str:
    """``"reproduced"`` when every configuration's mean accuracy over seeds is within
    :data:`C19_MATCH` of the prediction from its reach; ``"partly"`` when the blind ones are
    at chance but a configuration that can reach the topic falls short (reach is necessary,
    not sufficient within the budget); ``"not reproduced"`` when a blind one beats chance."""
    blind = [n for n, p in predicted.items() if p == 0.5]
    if any(sum(accuracies[n]) / len(accuracies[n]) >= C19_CHANCE_BELOW for n in blind):
        return "not reproduced"
    if all(
        abs(sum(accuracies[n]) / len(accuracies[n]) - predicted[n]) < C19_MATCH for n in predicted
    ):
        return "reproduced"
    return "partly"


def c19_reach_verdict_at_lengths(
    by_length: dict[int, tuple[dict[str, Sequence[float]], dict[str, float]]],
) -> str:
    """:func:`c19_reach_verdict` at every length of ``by_length`` (length -> accuracies over
    seeds, predictions), combined: ``"reproduced"`` only when it is at every length, ``"not
    reproduced"`` when it is not reproduced at any, ``"partly"`` otherwise."""
    if not by_length:
        raise ValueError("by_length must hold at least one length, got none")
    verdicts = {c19_reach_verdict(acc, pred) for acc, pred in by_length.values()}
    if "not reproduced" in verdicts:
        return "not reproduced"
    return "reproduced" if verdicts == {"reproduced"} else "partly"


def assert_c19_linear_learns_slower(
    full_solved: Sequence[int | None],
    linear_solved: Sequence[int | None],
    linear_accuracy: Sequence[float],
) -> None:
    """C19 linear, "optimisation speed, not a ceiling", over seeds: every linear seed solves
    the task later than every full-attention seed (``None``: not within the budget), and at
    least one linear seed solves it (accuracy above :data:`C19_SOLVED_ABOVE`)."""
    never = float("inf")
    full = [never if s is None else s for s in full_solved]
    linear = [never if s is None else s for s in linear_solved]
    assert max(full) < never, f"full attention did not solve every seed: {list(full_solved)}"
    assert min(linear) > max(full), (
        f"a linear seed solved as fast as full attention: linear {list(linear_solved)}, full "
        f"{list(full_solved)}"
    )
    assert max(linear_accuracy) > C19_SOLVED_ABOVE, (
        f"no linear seed learned the task: {list(linear_accuracy)} (a ceiling, not speed)"
    )


def c19_global_verdict(accuracies: dict[str, Sequence[float]], predicted: dict[str, float]) -> str:
    """The verdict on "global tokens restore the reach": ``"not reproduced"`` when a blind
    configuration beats chance (the mask leaks) or no seed of any configuration that can
    reach the topic beats chance (the remedy gave nothing within the budget);
    ``"reproduced"`` when every seed of every such configuration solves the task (above
    :data:`C19_SOLVED_ABOVE`); ``"partly"`` in between."""
    blind = [n for n, p in predicted.items() if p == 0.5]
    sighted = [n for n, p in predicted.items() if p > 0.5]
    if not sighted:
        raise ValueError("no configuration can reach the topic: nothing to judge")
    if any(max(accuracies[n]) >= C19_CHANCE_BELOW for n in blind):
        return "not reproduced"
    seeds = [a for n in sighted for a in accuracies[n]]
    if all(a < C19_CHANCE_BELOW for a in seeds):
        return "not reproduced"
    if all(a > C19_SOLVED_ABOVE for a in seeds):
        return "reproduced"
    return "partly"
