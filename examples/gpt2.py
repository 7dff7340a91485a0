"""GPT-2 inference from your own weights: a Hugging Face `model.safetensors` or `pytorch_model.bin` (any GPT-2 size: the
layout comes from the checkpoint), the byte-level BPE tokenizer from your `vocab.json`/`merges.txt`, greedy or
temperature sampling, a KV cache, tokens/s. Nothing is downloaded.

  python examples/gpt2.py --weights gpt2/model.safetensors --vocab gpt2/vocab.json --merges gpt2/merges.txt \\
      --prompt "Hello, I'm a language model," --count 50 [--temperature 0.8] [--device NV] [--no-jit] [--no-cache]

The KV cache: each layer keeps keys and values for every position in a (2, batch, heads, max_context, head_dim)
buffer; a step writes its position with an in-place assign to `cache[..., start_pos:start_pos+T, :]` and attends to
`cache[..., :start_pos+T, :]`. Two ways to run a step, picked by SYMBOLIC (env GPT2_SYMBOLIC, default 1):
- SYMBOLIC (the default): `start_pos` (and the token) are bound Variables, so every step has the same symbolic shapes: one TinyJit
  capture replays for every position, and no kernel is compiled after the first steps (tinygrad's gpt2 does this).
- concrete (GPT2_SYMBOLIC=0): `start_pos` is an int; each position has its own shapes, so its kernels are compiled on first
  use (cached on disk for later runs); with the JIT on, there is one TinyJit per position, which replays from the
  third generation that reaches it (a server answering many prompts; a single run is eager).

>>> tok = Tokenizer({c: i for i, c in enumerate(BYTE_CHARS.values())}, [])
>>> tok.decode(tok.encode("héllo wörld")) == "héllo wörld"
True
"""
from __future__ import annotations
import argparse, itertools, json, math, os, re, sys, time
from dataclasses import dataclass
from typing import Any
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from frontend import Device, Tensor, TinyJit, Variable, nn
from frontend.nn.state import load_state_dict, safe_load, torch_load

SYMBOLIC = os.getenv("GPT2_SYMBOLIC", "1") == "1"   # the switch: see the module docstring

# ***** tokenizer *****
def _byte_chars() -> dict[int, str]:
  """GPT-2's byte -> printable character table: printable Latin-1 bytes stand for themselves, the other bytes (control
  characters, space, ...) take the characters from U+0100 on, in byte order."""
  keep = {*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)}
  extra = iter(range(256, 512))
  return {b: chr(b) if b in keep else chr(next(extra)) for b in range(256)}
BYTE_CHARS = _byte_chars()
# GPT-2's pre-tokenizer needs Unicode classes (the `regex` package); without it, `re` with letters as [^\W\d_] and
# numbers as \d (the same split for text without rare numerals such as superscripts)
PRETOKEN_RE = r"""'s|'t|'re|'ve|'m|'ll|'d| ?[^\W\d_]+| ?\d+| ?(?:[^\s\w]|_)+|\s+(?!\S)|\s+"""
try:
  import regex
  _PRETOKEN = regex.compile(r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
except ImportError:
  _PRETOKEN = re.compile(PRETOKEN_RE)

class Tokenizer:
  """Byte-level BPE as GPT-2's: text is split into words by a regex, each word's UTF-8 bytes become characters
  (BYTE_CHARS), then the merges are applied best-ranked pair first, and the pieces looked up in the vocabulary."""
  def __init__(self, vocab: dict[str, int], merges: list[tuple[str, str]]):
    self.vocab, self.inv = vocab, {i: s for s, i in vocab.items()}
    self.ranks = {pair: r for r, pair in enumerate(merges)}
    self.byte_of = {c: b for b, c in BYTE_CHARS.items()}
    self.cache: dict[str, list[int]] = {}
  @staticmethod
  def from_files(vocab_json: str, merges_txt: str) -> Tokenizer:
    """vocab.json ({piece: id}) and merges.txt (a '#version' line, then one 'a b' pair per line, best first)."""
    with open(vocab_json, encoding="utf-8") as f: vocab = json.load(f)
    with open(merges_txt, encoding="utf-8") as f: lines = f.read().split("\n")
    merges = [tuple(ln.split(" ")) for ln in lines if ln and not ln.startswith("#version")]
    if bad := [m for m in merges if len(m) != 2]: raise ValueError(f"{merges_txt}: not a merges file: line {' '.join(bad[0])!r} is not one pair")
    return Tokenizer(vocab, merges)   # type: ignore[arg-type]
  def _bpe(self, word: str) -> list[int]:
    if word in self.cache: return self.cache[word]
    parts = list(word)
    while len(parts) > 1:
      rank, i = min((self.ranks.get(p, math.inf), i) for i, p in enumerate(itertools.pairwise(parts)))
      if rank == math.inf: break
      a, b, merged, j = parts[i], parts[i + 1], [], 0
      while j < len(parts):   # every occurrence of the best pair, left to right
        if j + 1 < len(parts) and parts[j] == a and parts[j + 1] == b: merged, j = merged + [a + b], j + 2
        else: merged, j = merged + [parts[j]], j + 1
      parts = merged
    if missing := [p for p in parts if p not in self.vocab]: raise KeyError(f"Tokenizer: piece {missing[0]!r} of {word!r} is not in the vocabulary")
    self.cache[word] = ids = [self.vocab[p] for p in parts]
    return ids
  def encode(self, text: str) -> list[int]:
    return [i for w in _PRETOKEN.findall(text) for i in self._bpe("".join(BYTE_CHARS[b] for b in w.encode("utf-8")))]
  def decode(self, ids: list[int]) -> str:
    return bytes(self.byte_of[c] for i in ids for c in self.inv[i]).decode("utf-8", errors="replace")

# ***** the model (names as Hugging Face's GPT2Model, so a state dict loads as is) *****
class Attention:
  def __init__(self, dim: int, n_heads: int):
    self.c_attn, self.c_proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
    self.n_heads, self.dim, self.head_dim = n_heads, dim, dim // n_heads
  def __call__(self, x: Tensor, start_pos, cache: Tensor | None) -> Tensor:
    B, T, _ = x.shape
    q, k, v = [t.reshape(B, T, self.n_heads, self.head_dim).transpose(1, 2) for t in self.c_attn(x).split(self.dim, dim=-1)]
    if cache is not None:   # this step's keys/values go to [start_pos, start_pos+T); attend to all positions up to there
      cache.shrink((None, None, None, (start_pos, start_pos + T), None)).assign(Tensor.stack(k, v)).realize()
      k, v = [cache[i].shrink((None, None, (0, start_pos + T), None)) for i in (0, 1)]
    # causal: query i (position start_pos+i) sees keys 0..start_pos+i (a prompt has a concrete start_pos)
    mask = None if T == 1 else Tensor.full((1, 1, T, start_pos + T), float("-inf"), device=x.device).triu(start_pos + 1)
    return self.c_proj(q.scaled_dot_product_attention(k, v, mask).transpose(1, 2).reshape(B, T, self.dim))

class MLP:
  def __init__(self, dim: int): self.c_fc, self.c_proj = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)
  def __call__(self, x: Tensor) -> Tensor: return self.c_proj(self.c_fc(x).gelu())   # (GPT-2's "gelu_new": tanh form)

class Block:
  def __init__(self, dim: int, n_heads: int, eps: float):
    self.ln_1, self.attn, self.ln_2, self.mlp = nn.LayerNorm(dim, eps), Attention(dim, n_heads), nn.LayerNorm(dim, eps), MLP(dim)
  def __call__(self, x: Tensor, start_pos, cache: Tensor | None) -> Tensor:
    x = x + self.attn(self.ln_1(x), start_pos, cache)
    return x + self.mlp(self.ln_2(x))

@dataclass(frozen=True)
class Config:
  n_layers: int
  dim: int
  n_heads: int
  vocab_size: int
  max_context: int
  eps: float = 1e-5

class GPT2:
  """The transformer; the output projection is the token embedding (tied, as in every GPT-2)."""
  def __init__(self, cfg: Config):
    self.cfg = cfg
    self.wte, self.wpe = nn.Embedding(cfg.vocab_size, cfg.dim), nn.Embedding(cfg.max_context, cfg.dim)
    self.h = [Block(cfg.dim, cfg.n_heads, cfg.eps) for _ in range(cfg.n_layers)]
    self.ln_f = nn.LayerNorm(cfg.dim, cfg.eps)
  def __call__(self, tokens: Tensor | Any, start_pos, caches: list[Tensor] | None = None, last_only: bool = False) -> Tensor:
    """Logits (B, T, vocab) of tokens (B, T) at positions start_pos..start_pos+T-1 (last_only: (B, vocab) of the last).
    A bound Variable as tokens is one token (B=1), looked up as a row of wte: the same kernels for every token."""
    if isinstance(tokens, Tensor): T, emb = tokens.shape[1], self.wte(tokens)
    else: T, emb = 1, self.wte.weight.shrink(((tokens, tokens + 1), None)).unsqueeze(0)
    h = emb + self.wpe.weight.shrink(((start_pos, start_pos + T), None))
    for i, block in enumerate(self.h): h = block(h, start_pos, caches[i] if caches is not None else None)
    if last_only: h = h[:, -1, :]
    return self.ln_f(h) @ self.wte.weight.T

# ***** weights *****
CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")

def hf_state_dict(path: str, device: str | None = None) -> dict[str, Tensor]:
  """The state dict of a Hugging Face GPT-2 checkpoint file (.safetensors, else a torch.save file), as from_hf makes it."""
  raw = safe_load(path, device) if path.endswith(".safetensors") else torch_load(path, device)
  if not isinstance(raw, dict): raise ValueError(f"{path}: holds a {type(raw).__name__}, not a state dict")
  return from_hf(raw)

def from_hf(raw: dict[str, Tensor]) -> dict[str, Tensor]:
  """Hugging Face GPT-2 names and layout to our model's: the 'transformer.' prefix dropped, the attention mask buffers
  and the tied lm_head dropped, and the Conv1D weights (stored (in, out)) transposed to Linear's (out, in)."""
  sd = {}
  for k, v in raw.items():
    k = k.removeprefix("transformer.")
    if k.endswith((".attn.bias", ".attn.masked_bias")) or k == "lm_head.weight": continue
    sd[k] = v.T if k.endswith(CONV1D) else v
  return sd

def config_from(sd: dict[str, Tensor], n_heads: int | None = None) -> Config:
  """The layout from the weights' shapes; heads (not in the shapes) from n_heads, else dim // 64 (every GPT-2 size)."""
  for k in ("wte.weight", "wpe.weight"):
    if k not in sd: raise KeyError(f"GPT-2 checkpoint: no {k!r} (keys: {sorted(sd)[:6]}...)")
  (vocab, dim), (ctx, _) = sd["wte.weight"].shape, sd["wpe.weight"].shape
  n_layers = len({k.split(".")[1] for k in sd if re.match(r"h\.\d+\.", k)})
  heads = n_heads or dim // 64
  if dim % heads: raise ValueError(f"GPT-2 checkpoint: {heads} heads don't divide the width {dim}")
  return Config(n_layers, dim, heads, vocab, ctx)

def load_gpt2(path: str, device: str | None = None, n_heads: int | None = None) -> GPT2:
  """The model of a model.safetensors / pytorch_model.bin (n_heads: from a config.json beside it, if there is one)."""
  cfg_json = os.path.join(os.path.dirname(path), "config.json")
  if n_heads is None and os.path.exists(cfg_json):
    with open(cfg_json) as f: n_heads = json.load(f).get("n_head")
  sd = hf_state_dict(path, device)
  model = GPT2(config_from(sd, n_heads))
  load_state_dict(model, sd)
  return model

# ***** generation *****
class Generator:
  """Runs the model step by step with a KV cache (use_cache) or over the whole sequence each step (no cache)."""
  def __init__(self, model: GPT2, use_cache: bool = True, jit: bool = True, symbolic: bool = SYMBOLIC, batch: int = 1):
    self.model, self.use_cache, self.jit, self.symbolic = model, use_cache, jit, symbolic
    c = model.cfg
    self.caches = [Tensor.zeros(2, batch, c.n_heads, c.max_context, c.dim // c.n_heads).contiguous().realize() for _ in model.h] if use_cache else None
    self.jits: dict = {}
  def _step(self, tokens, start_pos, temperature: float) -> Tensor:
    logits = self.model(tokens, start_pos, self.caches, last_only=True)
    if temperature < 1e-6: return logits.argmax(-1).realize()
    return (logits / temperature).softmax(-1).multinomial().flatten().realize()
  def step(self, token: int, start_pos: int, temperature: float) -> int:
    """The next token after `token` at start_pos (the cache holds positions < start_pos)."""
    if self.symbolic:
      args = (Variable("token", 0, self.model.cfg.vocab_size - 1).bind(token), Variable("start_pos", 1, self.model.cfg.max_context - 1).bind(start_pos))
      key = "symbolic"
    else: args, key = (Tensor([[token]]).realize(), start_pos), start_pos
    fn = self.jits.setdefault(key, TinyJit(self._step)) if self.jit else self._step
    return int(fn(*args, temperature).item())
  def generate(self, prompt: list[int], count: int, temperature: float = 0.0) -> list[int]:
    """`count` tokens after the prompt."""
    if not prompt: raise ValueError("Generator.generate: the prompt needs at least one token")
    if len(prompt) + count > self.model.cfg.max_context:
      raise ValueError(f"Generator.generate: {len(prompt)} prompt + {count} new tokens exceed the context of {self.model.cfg.max_context}")
    toks = list(prompt)
    if not self.use_cache:
      for _ in range(count): toks.append(int(self._nocache(Tensor([toks]), temperature).item()))
      return toks[len(prompt):]
    toks.append(int(self._step(Tensor([toks]), 0, temperature).item()))   # the prompt at once, concrete shapes
    while len(toks) < len(prompt) + count: toks.append(self.step(toks[-1], len(toks) - 1, temperature))
    return toks[len(prompt):]
  def _nocache(self, tokens: Tensor, temperature: float) -> Tensor:
    caches, self.caches = self.caches, None
    try: return self._step(tokens, 0, temperature)
    finally: self.caches = caches

def main(argv: list[str] | None = None) -> list[int]:
  ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--weights", required=True, help="model.safetensors or pytorch_model.bin (Hugging Face GPT-2 layout)")
  ap.add_argument("--vocab", required=True, help="vocab.json")
  ap.add_argument("--merges", required=True, help="merges.txt")
  ap.add_argument("--prompt", default="Hello, I'm a language model,")
  ap.add_argument("--count", type=int, default=50, help="tokens to generate")
  ap.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
  ap.add_argument("--seed", type=int, default=0)
  ap.add_argument("--heads", type=int, default=None, help="attention heads (default: config.json beside the weights, else width/64)")
  ap.add_argument("--device", default=None, help="CPU, NV, AMD (default: auto)")
  ap.add_argument("--no-jit", action="store_true")
  ap.add_argument("--no-cache", action="store_true", help="recompute the whole sequence each step")
  args = ap.parse_args(argv)
  if args.device: Device.DEFAULT = args.device
  Tensor.manual_seed(args.seed)
  tok = Tokenizer.from_files(args.vocab, args.merges)
  st = time.perf_counter()
  model = load_gpt2(args.weights, n_heads=args.heads)
  c = model.cfg
  print(f"device {Device.DEFAULT}: GPT-2 {c.n_layers} layers, width {c.dim}, {c.n_heads} heads, vocab {c.vocab_size}, context {c.max_context}; "
        f"loaded in {time.perf_counter() - st:.1f} s; {'symbolic' if SYMBOLIC else 'concrete'} positions, jit {'off' if args.no_jit else 'on'}")
  prompt = tok.encode(args.prompt)
  gen = Generator(model, use_cache=not args.no_cache, jit=not args.no_jit)
  st = time.perf_counter()
  out = gen.generate(prompt, args.count, args.temperature)
  dt = time.perf_counter() - st
  print(args.prompt + tok.decode(out))
  print(f"{len(out)} tokens in {dt:.2f} s: {len(out) / dt:.2f} tokens/s (prompt {len(prompt)} tokens)")
  return out

if __name__ == "__main__": main()
