"""A decoder-only (causal, pre-LN) Transformer: MultiHeadAttention, FeedForward,
TransformerLayer, DecoderLM. With use_fused_kernel the attention softmax and the LayerNorms
run as the fused hw4 ops (Tensor.attn_softmax / Tensor.layernorm) instead of composed ops."""
from __future__ import annotations

import math

import numpy as np

from .module import Module
from .modules_basic import Dropout, Embedding, LayerNorm1d, Linear
from .nn import dropout, gelu, softmax
from .tensor import Tensor
from .tensor_functions import tensor_from_numpy, zeros


def _layer_norm(ln: LayerNorm1d, x: Tensor, use_fused_kernel: bool) -> Tensor:
    """Apply `ln` to x [..., dim], fused or composed."""
    if use_fused_kernel:
        # BEGIN SOLUTION: fused LayerNorm in the Transformer
        dim = x.shape[-1]
        rows = x.size // dim
        out = x.contiguous().view(rows, dim).layernorm(ln.weights.value, ln.bias.value)
        return out.view(*x.shape)
        # END SOLUTION
    return ln(x)


class MultiHeadAttention(Module):
    def __init__(
        self,
        n_embd: int,
        n_head: int,
        causal: bool = True,
        p_dropout: float = 0.1,
        bias: bool = True,
        backend=None,
        use_fused_kernel: bool = False,
    ) -> None:
        super().__init__()
        assert n_embd % n_head == 0, "n_embd must be a multiple of n_head"
        self.backend = backend
        self.n_embd = n_embd
        self.n_head = n_head
        self.causal = causal
        self.attn_hidden_dim = n_embd // n_head
        self.use_fused_kernel = use_fused_kernel
        self.q_projection = Linear(n_embd, n_embd, bias=bias, backend=backend)
        self.k_projection = Linear(n_embd, n_embd, bias=bias, backend=backend)
        self.v_projection = Linear(n_embd, n_embd, bias=bias, backend=backend)
        self.out_projection = Linear(n_embd, n_embd, bias=bias, backend=backend)
        self.dropout = Dropout(p_dropout)

    def create_causal_mask(self, seq_len: int) -> Tensor:
        """[1, 1, T, T] additive mask: -1e9 above the diagonal (future positions), 0 elsewhere."""
        m = -1e9 * np.triu(np.ones((seq_len, seq_len), dtype=np.float32), k=1)
        return tensor_from_numpy(m.reshape(1, 1, seq_len, seq_len), backend=self.backend)

    def project_to_query_key_value(self, x: Tensor):
        """x [B, T, D] -> q [B, H, T, d], kT [B, H, d, T], v [B, H, T, d]."""
        b, t, _ = x.shape
        h, d = self.n_head, self.attn_hidden_dim
        q = self.q_projection(x).view(b, t, h, d).permute(0, 2, 1, 3)
        kT = self.k_projection(x).view(b, t, h, d).permute(0, 2, 3, 1)
        v = self.v_projection(x).view(b, t, h, d).permute(0, 2, 1, 3)
        return q, kT, v

    def self_attention(self, q: Tensor, kT: Tensor, v: Tensor) -> Tensor:
        b, h, t, d = q.shape
        scores = (q @ kT) / math.sqrt(d)
        if self.use_fused_kernel:
            # BEGIN SOLUTION: fused attention softmax
            pad_mask = zeros((b, t), backend=self.backend)
            attn = scores.attn_softmax(pad_mask, mask_future=self.causal)
            # END SOLUTION
        else:
            if self.causal:
                scores = scores + self.create_causal_mask(t)
            attn = softmax(scores, dim=3)
        attn = self.dropout(attn)
        out = attn @ v  # [B, H, T, d]
        return out.permute(0, 2, 1, 3).contiguous().view(b, t, h * d)

    def forward(self, x: Tensor) -> Tensor:
        q, kT, v = self.project_to_query_key_value(x)
        return self.out_projection(self.self_attention(q, kT, v))


class FeedForward(Module):
    def __init__(self, n_embd: int, middle_dim: int = 256, p_dropout: float = 0.1, bias: bool = True, backend=None) -> None:
        super().__init__()
        self.linear_in = Linear(n_embd, middle_dim, bias=bias, backend=backend)
        self.linear_out = Linear(middle_dim, n_embd, bias=bias, backend=backend)
        self.dropout = Dropout(p_dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.dropout(self.linear_out(gelu(self.linear_in(x))))


class TransformerLayer(Module):
    """Pre-LN block: x + attn(ln_1(x)), then + ff(ln_2(.))."""

    def __init__(
        self,
        n_embd: int,
        n_head: int,
        p_dropout: float = 0.1,
        ln_eps: float = 1e-5,
        bias: bool = True,
        backend=None,
        use_fused_kernel: bool = False,
    ) -> None:
        super().__init__()
        self.use_fused_kernel = use_fused_kernel
        self.ln_1 = LayerNorm1d(n_embd, eps=ln_eps, backend=backend)
        self.ln_2 = LayerNorm1d(n_embd, eps=ln_eps, backend=backend)
        self.attention = MultiHeadAttention(
            n_embd, n_head, causal=True, p_dropout=p_dropout, bias=bias, backend=backend,
            use_fused_kernel=use_fused_kernel,
        )
        self.ff = FeedForward(n_embd, middle_dim=4 * n_embd, p_dropout=p_dropout, bias=bias, backend=backend)

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attention(_layer_norm(self.ln_1, x, self.use_fused_kernel))
        return x + self.ff(_layer_norm(self.ln_2, x, self.use_fused_kernel))


class DecoderLM(Module):
    """Token + position embeddings, 4 TransformerLayers, a final LayerNorm and the LM head."""

    n_layers = 4

    def __init__(
        self,
        n_vocab: int,
        n_embd: int,
        n_head: int,
        n_positions: int,
        p_dropout: float = 0.1,
        ln_eps: float = 1e-5,
        bias: bool = True,
        backend=None,
        use_fused_kernel: bool = False,
    ) -> None:
        super().__init__()
        self.backend = backend
        self.n_embd = n_embd
        self.n_vocab = n_vocab
        self.n_positions = n_positions
        self.use_fused_kernel = use_fused_kernel
        self.token_embeddings = Embedding(n_vocab, n_embd, backend=backend)
        self.position_embeddings = Embedding(n_positions, n_embd, backend=backend)
        layer_args = dict(p_dropout=p_dropout, ln_eps=ln_eps, bias=bias, backend=backend, use_fused_kernel=use_fused_kernel)
        self.t_layer_1 = TransformerLayer(n_embd, n_head, **layer_args)
        self.t_layer_2 = TransformerLayer(n_embd, n_head, **layer_args)
        self.t_layer_3 = TransformerLayer(n_embd, n_head, **layer_args)
        self.t_layer_4 = TransformerLayer(n_embd, n_head, **layer_args)
        self.dropout = Dropout(p_dropout)
        self.ln = LayerNorm1d(n_embd, eps=ln_eps, backend=backend)
        self.lm_head = Linear(n_embd, n_vocab, bias=False, backend=backend)

    def forward(self, idx) -> Tensor:
        """idx: integer ids [batch, seq] -> logits [batch, seq, n_vocab]."""
        ids = idx.to_numpy() if isinstance(idx, Tensor) else np.asarray(idx)
        ids = ids.astype(np.int64)
        b, t = ids.shape
        assert t <= self.n_positions, f"sequence of {t} exceeds n_positions={self.n_positions}"
        pos = np.broadcast_to(np.arange(t, dtype=np.int64), (b, t))
        x = self.token_embeddings(ids) + self.position_embeddings(pos)
        x = self.dropout(x)
        for layer in (self.t_layer_1, self.t_layer_2, self.t_layer_3, self.t_layer_4):
            x = layer(x)
        x = _layer_norm(self.ln, x, self.use_fused_kernel)
        return self.lm_head(x)
