"""The transformer zoo's models: GPT-2-style blocks (LayerNorm, fused QKV,
GELU MLP) and Llama-style blocks (RMSNorm, grouped-query attention with
rotary embeddings, SwiGLU), with token embeddings and an untied LM head.
Written for the benchmark: plain PyTorch, attention by SDPA."""

import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass(frozen=True)
class Shape:
    name: str
    kind: str  # "gpt2" or "llama"
    dim: int
    layers: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    seq: int
    batch: int  # micro-batch per GPU

    def params(self):
        d, f = self.dim, self.ffn
        kv = d * self.kv_heads // self.heads
        if self.kind == "gpt2":
            block = 3 * d * d + d * d + 2 * d * f
        else:
            block = d * d + 2 * d * kv + d * d + 3 * d * f
        return self.layers * block + 2 * self.vocab * d


# From host-bound (small blocks, short steps) to compute-bound.
SHAPES = {s.name: s for s in (
    Shape("gpt2-125m", "gpt2", 768, 12, 12, 12, 3072, 50304, 1024, 8),
    Shape("gpt2-350m", "gpt2", 1024, 24, 16, 16, 4096, 50304, 1024, 8),
    Shape("gpt2-770m", "gpt2", 1280, 36, 20, 20, 5120, 50304, 1024, 4),
    Shape("llama-1b", "llama", 2048, 16, 32, 8, 5632, 32000, 2048, 4),
    Shape("llama-3b", "llama", 3072, 28, 24, 8, 8192, 32000, 4096, 1),
)}

# Larger than one GPU trains without its optimizer in host memory: what
# bench/torch_offload.py tries in search of the largest model that one GPU
# trains with FSDP2's CPU offload (about 18.5 bytes of host memory a
# parameter; llama-7b is Llama 2 7B's shape). Not in the zoo's runs.
OFFLOAD_SHAPES = {s.name: s for s in (
    Shape("llama-5b", "llama", 4096, 24, 32, 32, 11008, 32000, 2048, 1),
    Shape("llama-6b", "llama", 4096, 28, 32, 32, 11008, 32000, 2048, 1),
    Shape("llama-7b", "llama", 4096, 32, 32, 32, 11008, 32000, 2048, 1),
)}


def rotary(seq, head_dim, device):
    inv = 1.0 / (10000 ** (torch.arange(0, head_dim, 2, device=device).float() / head_dim))
    angles = torch.outer(torch.arange(seq, device=device).float(), inv)
    return angles.cos(), angles.sin()


def apply_rotary(x, cos, sin):  # x: (b, h, s, d)
    x1, x2 = x[..., ::2], x[..., 1::2]
    c, s = cos[: x.shape[-2]], sin[: x.shape[-2]]
    return torch.stack((x1 * c - x2 * s, x1 * s + x2 * c), dim=-1).flatten(-2)


class GPT2Block(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.heads = s.heads
        self.ln1, self.ln2 = nn.LayerNorm(s.dim), nn.LayerNorm(s.dim)
        self.qkv = nn.Linear(s.dim, 3 * s.dim)
        self.proj = nn.Linear(s.dim, s.dim)
        self.up, self.down = nn.Linear(s.dim, s.ffn), nn.Linear(s.ffn, s.dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
        return x + self.down(F.gelu(self.up(self.ln2(x)), approximate="tanh"))


class LlamaBlock(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = s.heads, s.kv_heads, s.dim // s.heads
        kv = self.kv_heads * self.head_dim
        self.n1, self.n2 = nn.RMSNorm(s.dim), nn.RMSNorm(s.dim)
        self.q, self.kv, self.o = nn.Linear(s.dim, s.dim, bias=False), nn.Linear(
            s.dim, 2 * kv, bias=False), nn.Linear(s.dim, s.dim, bias=False)
        self.w1 = nn.Linear(s.dim, s.ffn, bias=False)
        self.w3 = nn.Linear(s.dim, s.ffn, bias=False)
        self.w2 = nn.Linear(s.ffn, s.dim, bias=False)

    def forward(self, x, cos, sin):
        b, t, d = x.shape
        h = self.n1(x)
        q = self.q(h).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(h).view(b, t, 2, self.kv_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, d))
        h = self.n2(x)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


class LM(nn.Module):
    def __init__(self, s):
        super().__init__()
        self.s = s
        self.embed = nn.Embedding(s.vocab, s.dim)
        block = GPT2Block if s.kind == "gpt2" else LlamaBlock
        self.blocks = nn.ModuleList(block(s) for _ in range(s.layers))
        self.norm = nn.LayerNorm(s.dim) if s.kind == "gpt2" else nn.RMSNorm(s.dim)
        self.head = nn.Linear(s.dim, s.vocab, bias=False)
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * s.layers))

    def forward(self, tokens):
        x = self.embed(tokens)
        if self.s.kind == "llama":
            cos, sin = rotary(tokens.shape[1], self.s.dim // self.s.heads, tokens.device)
            for blk in self.blocks:
                x = blk(x, cos.to(x.dtype), sin.to(x.dtype))
        else:
            for blk in self.blocks:
                x = blk(x)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]),
                               tokens.roll(-1, dims=1).reshape(-1))
