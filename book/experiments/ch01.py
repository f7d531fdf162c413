"""Experiments of chapter 1: what an RNN cannot do that one attention layer can.

- C3, :func:`signal_batch`, :class:`LSTMClassifier`: a length-500 classification task whose
  label is one "signal" token hidden among distractors, at the start (far from the read-out)
  or at the end (next to it), and the LSTM that competes on it with an attention classifier
  (both trained by :func:`book.experiments.training.train_classifier` on the same
  batches).
- C2, :func:`unrolled_lstm`: an LSTM written as the explicit loop over time it really is.

The gradient and path-length measurements (C1, C4) are generic and live in
:mod:`book.experiments.gradients`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from attention._checks import check_float, check_positive_int, check_rank, check_tensor

Tensor = torch.Tensor

# ------------------------------------------------------------------------------------------
# C3: a long-range classification task
# ------------------------------------------------------------------------------------------


def signal_batch(
    batch_size: int,
    seq_len: int,
    *,
    n_classes: int = 4,
    n_distractors: int = 16,
    signal_positions: tuple[int, int] = (0, 5),
    n_copies: int = 1,
    generator: torch.Generator | None = None,
) -> tuple[Tensor, Tensor]:
    """A batch of the "find the signal token" task.

    Token ids ``0 .. n_classes - 1`` are signal tokens (token ``c`` means class ``c``); ids
    ``n_classes .. n_classes + n_distractors - 1`` are distractors. Every sequence is
    distractors drawn uniformly, except ``n_copies`` copies of one signal token at distinct
    positions drawn uniformly from ``signal_positions = (start, stop)`` (half-open; negative
    values count from the end). The label is the signal token's class: a model must find that
    token and carry its identity to wherever it reads out. The vocabulary size is
    ``n_classes + n_distractors``.

    Returns ``tokens (B, L)`` int64 and ``labels (B,)`` int64.
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
    )  # (B, L)
    labels = torch.randint(n_classes, (batch_size,), generator=generator)  # (B,)
    # A random permutation of the window per row, truncated: distinct positions, no loop.
    order = torch.rand(batch_size, stop - start, generator=generator).argsort(-1)  # (B, W)
    where = order[:, :n_copies] + start  # (B, n_copies)
    tokens.scatter_(1, where, labels.unsqueeze(1).expand(-1, n_copies))
    return tokens, labels


class LSTMClassifier(nn.Module):
    """Token ids ``(B, L)`` → logits ``(B, num_classes)`` from the LSTM's last hidden state.

    Embedding → ``nn.LSTM(num_layers)`` → linear read-out of the top layer's state after the
    last token: the usual RNN classifier, in which everything the model knows about token 0
    must survive ``L - 1`` state updates.
    """

    def __init__(
        self,
        vocab_size: int,
        num_classes: int,
        embed_dim: int,
        hidden_size: int,
        num_layers: int = 1,
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

    def forward(self, tokens: Tensor) -> Tensor:
        check_tensor("tokens", tokens)
        check_rank("tokens", tokens, 2, "[batch, seq]")
        if tokens.dtype.is_floating_point or tokens.dtype == torch.bool:
            raise TypeError(f"tokens must be an integer tensor of ids, got dtype {tokens.dtype}")
        x = self.embed(tokens)  # (B, L, E)
        _, (h_n, _) = self.lstm(x)  # h_n: (num_layers, B, hidden)
        return self.head(h_n[-1])  # (B, num_classes)


# ------------------------------------------------------------------------------------------
# C2: the loop over time
# ------------------------------------------------------------------------------------------


def unrolled_lstm(
    cell: nn.LSTMCell,
    x: Tensor | Sequence[Tensor],
    state: tuple[Tensor, Tensor] | None = None,
    *,
    return_state: bool = False,
) -> Tensor | tuple[Tensor, tuple[Tensor, Tensor]]:
    """Run an ``nn.LSTMCell`` over a sequence one step at a time: the loop ``nn.LSTM`` hides.

    ``x`` is ``(B, L, D)``, or a sequence of ``L`` tensors ``(B, D)`` (one leaf per token, to
    trace each token's path through the autograd graph). ``state`` is ``(h_0, c_0)``, each
    ``(B, hidden)``, zeros by default. Returns the hidden states ``(B, L, hidden)``: step ``t``
    cannot start before step ``t - 1`` has produced ``(h, c)``. With ``return_state`` also the
    final ``(h, c)``. Trace paths from the final ``h``, not from a slice of the stacked
    outputs: the stack's autograd node links every step's ``h`` to the result, a shortcut that
    carries zero gradient but counts as a path in the graph.
    """
    if not isinstance(cell, nn.LSTMCell):
        raise TypeError(f"cell must be a torch.nn.LSTMCell, got {type(cell).__name__}")
    if isinstance(x, Tensor):
        check_float("x", x)
        check_rank("x", x, 3, "[batch, seq, dim]")
        steps = x.unbind(1)
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
    h, c = state
    outputs = []
    for x_t in steps:
        h, c = cell(x_t, (h, c))  # (B, hidden) each: needs the previous step's h and c
        outputs.append(h)
    outputs = torch.stack(outputs, dim=1)  # (B, L, hidden)
    return (outputs, (h, c)) if return_state else outputs
