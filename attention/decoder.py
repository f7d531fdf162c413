"""A decoder-only (GPT-style) language model, left-to-right generation, and a KV cache.

- :class:`CharDecoder`: token ids ``(B, L)`` → next-token logits ``(B, L, V)``: token and learned
  position embeddings, a stack of :class:`attention.blocks.DecoderBlock`, a final LayerNorm and
  a linear head. ``causal=False`` builds it without the causal mask (a model that can read the
  token it is asked to predict: the bug of chapter 6).
- :class:`KVCache`: the keys and values of every layer for the tokens seen so far,
  preallocated to ``max_len`` positions, ``(B, H_kv, max_len, d_head)`` per layer and tensor.
  With grouped-query (``1 < H_kv < H``) or multi-query attention (``H_kv = 1``) it is
  ``H / H_kv`` times smaller than with multi-head attention.
- :func:`generate`: greedy or sampled decoding, with the cache (one new token per step) or by
  recomputing the whole prefix at every step; for a causal model both give the same tokens.

Masks follow the package's polarity (``True`` = may attend). Torch only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ._checks import check_bool, check_positive_int, check_rank, check_tensor
from .blocks import DecoderBlock
from .functional import scaled_dot_product_attention
from .heads import merge_heads, split_heads
from .positional import LearnedPositionalEmbedding

Tensor = torch.Tensor


class KVCache:
    """Keys and values of ``num_layers`` layers, for up to ``max_len`` positions.

    ``keys[layer]`` and ``values[layer]`` are ``(B, H_kv, max_len, d_head)``; the first
    ``length`` positions are filled. :meth:`append` writes a layer's new keys and values at
    ``length`` and returns the filled part; :meth:`advance` moves ``length`` on once every layer
    has written (the model does both).
    """

    def __init__(
        self,
        num_layers: int,
        batch_size: int,
        num_kv_heads: int,
        head_dim: int,
        max_len: int,
        *,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str | None = None,
    ) -> None:
        self.num_layers = check_positive_int("num_layers", num_layers)
        self.batch_size = check_positive_int("batch_size", batch_size)
        self.num_kv_heads = check_positive_int("num_kv_heads", num_kv_heads)
        self.head_dim = check_positive_int("head_dim", head_dim)
        self.max_len = check_positive_int("max_len", max_len)
        shape = (batch_size, num_kv_heads, max_len, head_dim)
        self.keys = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.values = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.length = 0

    @property
    def nbytes(self) -> int:
        """Bytes held by the cache: ``2 · layers · B · H_kv · max_len · d_head · itemsize``."""
        return sum(t.numel() * t.element_size() for t in self.keys + self.values)

    def append(self, layer: int, key: Tensor, value: Tensor) -> tuple[Tensor, Tensor]:
        """Write ``key, value (B, H_kv, n, d_head)`` at positions ``length .. length + n - 1`` of
        ``layer``; return that layer's keys and values so far, ``(B, H_kv, length + n, d_head)``."""
        if not 0 <= layer < self.num_layers:
            raise ValueError(f"layer must be in [0, {self.num_layers}), got {layer!r}")
        want = (self.batch_size, self.num_kv_heads, self.head_dim)
        for name, t in (("key", key), ("value", value)):
            check_tensor(name, t)
            check_rank(name, t, 4, "[batch, kv_heads, new, head_dim]")
            if (t.shape[0], t.shape[1], t.shape[3]) != want:
                raise ValueError(
                    f"{name} must have shape (B, H_kv, n, d_head) = ({want[0]}, {want[1]}, n, "
                    f"{want[2]}), got {tuple(t.shape)}"
                )
        k, v = key, value
        if k.shape[2] != v.shape[2]:
            raise ValueError(
                f"key and value must hold as many positions, got {k.shape[2]}, {v.shape[2]}"
            )
        end = self.length + k.shape[2]
        if end > self.max_len:
            raise ValueError(
                f"the cache holds max_len={self.max_len} positions, got {self.length} cached + "
                f"{k.shape[2]} new"
            )
        self.keys[layer][:, :, self.length : end] = k
        self.values[layer][:, :, self.length : end] = v
        return self.keys[layer][:, :, :end], self.values[layer][:, :, :end]

    def advance(self, n: int) -> None:
        """Count ``n`` more positions as cached (after every layer has appended them)."""
        n = check_positive_int("n", n, allow_zero=True)
        if self.length + n > self.max_len:
            raise ValueError(f"cannot advance past max_len={self.max_len}")
        self.length += n


class CharDecoder(nn.Module):
    """A GPT-style decoder: token ids ``(B, L)`` → logits ``(B, L, vocab_size)``.

    Args:
        vocab_size: number of token ids.
        d_model, num_heads, num_layers, d_ff: the sizes of the :class:`DecoderBlock` stack.
        max_len: the longest sequence (learned positions; they cannot extrapolate).
        num_kv_heads: key/value heads ``H_kv`` (``None``: ``num_heads``, multi-head; ``1``:
            multi-query; in between: grouped-query).
        causal: the causal mask in every block (``False``: every token sees every other one).
        dropout: dropout in the blocks.

    ``forward(tokens, *, cache=None)``: with a :class:`KVCache` the tokens are the next
    positions after the ``cache.length`` cached ones (the cache is updated); needs
    ``causal=True``, since without the mask earlier positions would change with later tokens.
    """

    def __init__(
        self,
        vocab_size: int,
        *,
        d_model: int,
        num_heads: int,
        num_layers: int,
        d_ff: int,
        max_len: int,
        num_kv_heads: int | None = None,
        causal: bool = True,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        self.vocab_size = check_positive_int("vocab_size", vocab_size)
        self.max_len = check_positive_int("max_len", max_len)
        check_positive_int("num_layers", num_layers)
        self.causal = check_bool("causal", causal)
        self.embed = nn.Embedding(vocab_size, d_model)
        self.pos = LearnedPositionalEmbedding(d_model, max_len=max_len)
        # nn.Embedding starts tokens at N(0, 1); GPT-2's N(0, 0.02) positions would be ~50x
        # weaker and slow to learn on the book's short runs. Match the scales.
        nn.init.normal_(self.pos.weight, std=1.0)
        self.blocks = nn.ModuleList(
            DecoderBlock(
                d_model,
                num_heads,
                d_ff,
                dropout=dropout,
                causal=causal,
                num_kv_heads=num_kv_heads,
            )
            for _ in range(num_layers)
        )
        self.ln_f = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, vocab_size)
        attn = self.blocks[0].attn
        self.num_heads, self.num_kv_heads, self.head_dim = (
            attn.num_heads,
            attn.num_kv_heads,
            attn.head_dim,
        )

    def new_cache(self, batch_size: int, *, max_len: int | None = None) -> KVCache:
        """An empty :class:`KVCache` for this model (``max_len`` default: the model's)."""
        w = self.head.weight
        return KVCache(
            len(self.blocks),
            batch_size,
            self.num_kv_heads,
            self.head_dim,
            self.max_len if max_len is None else max_len,
            dtype=w.dtype,
            device=w.device,
        )

    def _check_tokens(self, tokens: Tensor) -> None:
        check_tensor("tokens", tokens)
        check_rank("tokens", tokens, 2, "[batch, seq]")
        if tokens.dtype.is_floating_point or tokens.dtype.is_complex or tokens.dtype == torch.bool:
            raise TypeError(f"tokens must be an integer tensor of ids, got dtype {tokens.dtype}")
        if tokens.shape[1] == 0:
            raise ValueError("tokens must hold at least one position, got shape (B, 0)")
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= self.vocab_size):
            raise ValueError(
                f"tokens must be ids in [0, vocab_size={self.vocab_size}), got values in "
                f"[{int(tokens.min())}, {int(tokens.max())}]"
            )

    def forward(self, tokens: Tensor, *, cache: KVCache | None = None) -> Tensor:
        """``tokens (B, L)`` → logits ``(B, L, vocab_size)``."""
        self._check_tokens(tokens)
        offset = 0
        if cache is not None:
            if not isinstance(cache, KVCache):
                raise TypeError(f"cache must be a KVCache or None, got {type(cache).__name__}")
            if not self.causal:
                raise ValueError(
                    "a KV cache needs a causal model (causal=True): without the mask, the "
                    "outputs at earlier positions change when a token is added"
                )
            if cache.batch_size != tokens.shape[0]:
                raise ValueError(
                    f"cache was made for batch size {cache.batch_size}, got tokens of batch "
                    f"size {tokens.shape[0]}"
                )
            offset = cache.length
        x = self.pos(self.embed(tokens), offset=offset)  # (B, L, D)
        for layer, block in enumerate(self.blocks):
            x = block(x) if cache is None else _cached_block(block, x, cache, layer)  # (B, L, D)
        if cache is not None:
            cache.advance(tokens.shape[1])
        return self.head(self.ln_f(x))  # (B, L, V)


def _cached_block(block: DecoderBlock, x: Tensor, cache: KVCache, layer: int) -> Tensor:
    """``block(x)`` for new positions ``x (B, n, D)`` that follow the cached ones: the new keys
    and values are appended, the new queries attend over every cached and new key (the causal
    mask aligned bottom-right: the last new query sees every key)."""
    attn = block.attn
    h = block.norm1(x)  # (B, n, D)
    q = split_heads(attn.q_proj(h), num_heads=attn.num_heads)  # (B, H, n, Dh)
    k = split_heads(attn.k_proj(h), num_heads=attn.num_kv_heads)  # (B, H_kv, n, Dh)
    v = split_heads(attn.v_proj(h), num_heads=attn.num_kv_heads)  # (B, H_kv, n, Dh)
    k_all, v_all = cache.append(layer, k, v)  # (B, H_kv, T, Dh) each
    out = scaled_dot_product_attention(
        q,
        k_all,
        v_all,
        causal=True,
        causal_alignment="bottom_right",
        enable_gqa=attn.num_kv_heads != attn.num_heads,
    )  # (B, H, n, Dh)
    x = x + block.dropout(attn.out_proj(merge_heads(out)))  # (B, n, D)
    return x + block.dropout(block.ff(block.norm2(x)))  # (B, n, D)


@dataclass(frozen=True)
class Generated:
    """What :func:`generate` produced: ``tokens (B, L0 + new)`` (the prompt first) and the
    logits that chose each new token, ``(B, new, vocab_size)``."""

    tokens: Tensor
    logits: Tensor


@torch.no_grad()
def generate(
    model: CharDecoder,
    prompt: Tensor,
    *,
    max_new_tokens: int,
    use_cache: bool = True,
    temperature: float | None = None,
    generator: torch.Generator | None = None,
) -> Generated:
    """Extend ``prompt (B, L0)`` by ``max_new_tokens`` tokens, left to right.

    ``temperature=None`` is greedy decoding (the most likely token); a positive temperature
    samples from ``softmax(logits / temperature)`` with ``generator``. ``use_cache=True`` feeds
    the prompt once and then one token per step through a :class:`KVCache`; ``False``
    recomputes the whole prefix at every step (the only correct way for a model built with
    ``causal=False``, whose outputs at every position depend on the last token). The prompt plus
    the new tokens must fit in ``model.max_len``.
    """
    if not isinstance(model, CharDecoder):
        raise TypeError(f"model must be a CharDecoder, got {type(model).__name__}")
    model._check_tokens(prompt)
    new = check_positive_int("max_new_tokens", max_new_tokens)
    check_bool("use_cache", use_cache)
    if temperature is not None and (isinstance(temperature, bool) or not temperature > 0):
        raise ValueError(f"temperature must be a positive number or None, got {temperature!r}")
    total = prompt.shape[1] + new
    if total > model.max_len:
        raise ValueError(
            f"prompt length {prompt.shape[1]} + max_new_tokens {new} = {total} exceeds the "
            f"model's max_len={model.max_len}"
        )
    was_training = model.training
    model.eval()
    tokens = prompt
    chosen = []
    cache = model.new_cache(prompt.shape[0]) if use_cache else None
    step_input = prompt
    try:
        for _ in range(new):
            logits = model(step_input if use_cache else tokens, cache=cache)[:, -1]  # (B, V)
            if temperature is None:
                nxt = logits.argmax(dim=-1, keepdim=True)  # (B, 1)
            else:
                probs = torch.softmax(logits.float() / temperature, dim=-1)  # (B, V)
                nxt = torch.multinomial(probs, 1, generator=generator)  # (B, 1)
            chosen.append(logits)
            tokens = torch.cat([tokens, nxt.to(tokens.dtype)], dim=1)  # (B, L + 1)
            step_input = nxt.to(tokens.dtype)
    finally:
        model.train(was_training)
    return Generated(tokens, torch.stack(chosen, dim=1))
