"""A character-level language model on a paragraph of text: the PyTorch tutorial script.

Embedding -> LSTM(batch_first=True) -> two small transformer blocks (one with
``F.scaled_dot_product_attention(is_causal=True)``, one with hand-written heads masked by
a ``torch.tril`` buffer) -> LayerNorm -> Linear, the Linear layers initialised by
``self.apply(self._init_weights)``; ``F.cross_entropy`` on ``logits.view(-1, V)``, AdamW
with nanoGPT's two parameter groups (weight decay for matrices only),
``clip_grad_norm_``, and ``generate`` sampling with ``F.softmax`` + ``torch.multinomial``
+ ``torch.cat``.

Determinism, so that two runs (or two libraries) can be compared step by step:
- the initial weights: ``INIT=path`` loads them with ``load_state_dict(torch.load(path))``;
  ``SAVE_INIT=path`` saves the freshly built model's weights there first;
- the training batches: ``get_batch`` slices ``data[i:i + block_size]`` for each start
  ``i`` of an index tensor; during training the starts come from NumPy's
  ``default_rng(SEED)`` (``torch.from_numpy``), so the losses do not depend on the
  library's random numbers. ``estimate_loss`` and ``generate`` draw with
  ``torch.randint`` and ``torch.multinomial``, as usual: their results depend on the
  library's generator and are only checked for sanity, not compared;
- the compared metric is the loss on every non-overlapping window of the validation text,
  plus a greedy (argmax) continuation, neither of which draws random numbers;
- no dropout.
``LOSSES=path`` writes {"losses": [one per step], "metric": [val loss, greedy sample]}.
"""

import json
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F  # noqa: N812  (PyTorch's idiom)

TEXT = (
    "It was the best of times, it was the worst of times, it was the age of wisdom, it was "
    "the age of foolishness, it was the epoch of belief, it was the epoch of incredulity, "
    "it was the season of Light, it was the season of Darkness, it was the spring of hope, "
    "it was the winter of despair, we had everything before us, we had nothing before us, "
    "we were all going direct to Heaven, we were all going direct the other way - in short, "
    "the period was so far like the present period, that some of its noisiest authorities "
    "insisted on its being received, for good or for evil, in the superlative degree of "
    "comparison only. There were a king with a large jaw and a queen with a plain face, on "
    "the throne of England; there were a king with a large jaw and a queen with a fair face, "
    "on the throne of France. In both countries it was clearer than crystal to the lords of "
    "the State preserves of loaves and fishes, that things in general were settled for ever."
)

SEED = 0
STEPS = 50
batch_size = 16
block_size = 32
n_embd = 32
n_head = 4

torch.manual_seed(SEED)
rng = np.random.default_rng(SEED)

chars = sorted(set(TEXT))
vocab_size = len(chars)
stoi = {ch: i for i, ch in enumerate(chars)}
itos = {i: ch for i, ch in enumerate(chars)}


def encode(s):
    return [stoi[c] for c in s]


def decode(ids):
    return "".join(itos[i] for i in ids)


data = torch.tensor(encode(TEXT), dtype=torch.long)
n = int(0.9 * len(data))
train_data = data[:n]
val_data = data[n:]


def get_batch(split, ix=None):
    data = train_data if split == "train" else val_data
    if ix is None:
        ix = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([data[i : i + block_size] for i in ix])
    y = torch.stack([data[i + 1 : i + block_size + 1] for i in ix])
    return x, y


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.qkv(x).split(n_embd, dim=2)
        q = q.view(b, t, n_head, c // n_head).transpose(1, 2)
        k = k.view(b, t, n_head, c // n_head).transpose(1, 2)
        v = v.view(b, t, n_head, c // n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        return self.proj(y)


class Head(nn.Module):
    """One head of self-attention, masked with a lower-triangular buffer."""

    def __init__(self, head_size):
        super().__init__()
        self.key = nn.Linear(n_embd, head_size, bias=False)
        self.query = nn.Linear(n_embd, head_size, bias=False)
        self.value = nn.Linear(n_embd, head_size, bias=False)
        self.register_buffer("tril", torch.tril(torch.ones(block_size, block_size)))

    def forward(self, x):
        _, t, _ = x.shape
        k = self.key(x)
        q = self.query(x)
        wei = q @ k.transpose(-2, -1) * k.shape[-1] ** -0.5
        wei = wei.masked_fill(self.tril[:t, :t] == 0, float("-inf"))
        wei = F.softmax(wei, dim=-1)
        return wei @ self.value(x)


class MultiHeadAttention(nn.Module):
    def __init__(self, num_heads, head_size):
        super().__init__()
        self.heads = nn.ModuleList([Head(head_size) for _ in range(num_heads)])
        self.proj = nn.Linear(num_heads * head_size, n_embd)

    def forward(self, x):
        return self.proj(torch.cat([h(x) for h in self.heads], dim=-1))


class Block(nn.Module):
    def __init__(self, attention):
        super().__init__()
        self.ln1 = nn.LayerNorm(n_embd)
        self.attn = attention
        self.ln2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(
            nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd)
        )

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        x = x + self.mlp(self.ln2(x))
        return x


class CharModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab_size, n_embd)
        self.position_embedding = nn.Embedding(block_size, n_embd)
        self.lstm = nn.LSTM(n_embd, n_embd, batch_first=True)
        self.blocks = nn.Sequential(
            Block(CausalSelfAttention()),
            Block(MultiHeadAttention(n_head, n_embd // n_head)),
        )
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.apply(self._init_weights)

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)

    def forward(self, idx, targets=None):
        _, t = idx.shape
        x = self.token_embedding(idx) + self.position_embedding(torch.arange(t))
        x, _ = self.lstm(x)
        x = self.blocks(x)
        logits = self.lm_head(self.ln_f(x))
        if targets is None:
            return logits, None
        loss = F.cross_entropy(logits.view(-1, vocab_size), targets.view(-1))
        return logits, loss


@torch.no_grad()
def estimate_loss(model, eval_iters=4):
    model.eval()
    out = {}
    for split in ["train", "val"]:
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            x, y = get_batch(split)
            _, loss = model(x, y)
            losses[k] = loss.item()
        out[split] = losses.mean().item()
    model.train()
    return out


@torch.no_grad()
def generate(model, idx, max_new_tokens, greedy=False):
    for _ in range(max_new_tokens):
        idx_cond = idx[:, -block_size:]
        logits, _ = model(idx_cond)
        logits = logits[:, -1, :]
        if greedy:
            idx_next = torch.argmax(logits, dim=-1, keepdim=True)
        else:
            probs = F.softmax(logits, dim=-1)
            idx_next = torch.multinomial(probs, num_samples=1)
        idx = torch.cat((idx, idx_next), dim=1)
    return idx


model = CharModel()
if os.environ.get("SAVE_INIT"):
    torch.save(model.state_dict(), os.environ["SAVE_INIT"])
if os.environ.get("INIT"):
    model.load_state_dict(torch.load(os.environ["INIT"]))
print(f"{sum(p.numel() for p in model.parameters())} parameters, vocabulary {vocab_size}")

params = {name: p for name, p in model.named_parameters() if p.requires_grad}
decay = [p for p in params.values() if p.dim() >= 2]
no_decay = [p for p in params.values() if p.dim() < 2]
optim_groups = [
    {"params": decay, "weight_decay": 0.1},
    {"params": no_decay, "weight_decay": 0.0},
]
optimizer = torch.optim.AdamW(optim_groups, lr=1e-2)
losses = []
model.train()
for step in range(1, STEPS + 1):
    ix = torch.from_numpy(rng.integers(0, len(train_data) - block_size, size=batch_size))
    xb, yb = get_batch("train", ix)
    logits, loss = model(xb, yb)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    losses.append(loss.item())
    print(f"step {step} loss {loss.item()!r}")

estimate = estimate_loss(model)
print(f"train loss {estimate['train']:.4f}, val loss {estimate['val']:.4f} (random batches)")
assert all(np.isfinite(v) for v in estimate.values()), estimate

model.eval()
with torch.no_grad():
    starts = range(0, len(val_data) - block_size - 1, block_size)
    x, y = get_batch("val", torch.tensor(list(starts)))
    _, val_loss = model(x, y)
val_loss = val_loss.item()
print(f"val loss {val_loss!r} (every window)")
assert val_loss < losses[0], (val_loss, losses[0])

context = torch.tensor([encode("it was the ")], dtype=torch.long)
greedy = decode(generate(model, context, 40, greedy=True)[0].tolist())
sample = decode(generate(model, context, 80)[0].tolist())
print(f"greedy: {greedy!r}")
print(f"sample: {sample!r}")
assert len(sample) == len("it was the ") + 80 and set(sample) <= set(chars)

if os.environ.get("LOSSES"):
    with open(os.environ["LOSSES"], "w") as f:
        json.dump({"losses": losses, "metric": [val_loss, greedy]}, f)
