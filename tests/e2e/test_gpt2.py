"""examples/gpt2.py on a small random GPT-2 checkpoint written by torch in the test (2 layers, Hugging Face key names,
as model.safetensors and as pytorch_model.bin): logits against a float64 numpy GPT-2, the KV cache against recomputing
the sequence, one TinyJit capture for every position on the symbolic path, the BPE tokenizer, the command line."""
import importlib.util, json, os, re, struct, sys
import numpy as np
import pytest
import torch
from frontend import Tensor, TinyJit
from frontend.jit import JitError

_spec = importlib.util.spec_from_file_location("gpt2", os.path.join(os.path.dirname(__file__), "..", "..", "examples", "gpt2.py"))
gpt2 = sys.modules["gpt2"] = importlib.util.module_from_spec(_spec)   # (dataclasses look their module up)
_spec.loader.exec_module(gpt2)

LAYERS, DIM, HEADS, CTX = 2, 32, 4, 40
MERGES = [("h", "e"), ("l", "l"), ("he", "ll"), ("Ġ", "w"), ("o", "r"), ("Ġw", "or")]
VOCAB = {c: i for i, c in enumerate([*gpt2.BYTE_CHARS.values(), *(a + b for a, b in MERGES)])}

def _checkpoint(seed: int = 0) -> dict[str, torch.Tensor]:
  """GPT-2 weights as Hugging Face's GPT2Model stores them (Conv1D weights (in, out))."""
  g = torch.Generator().manual_seed(seed)
  r = lambda *s, scale=0.2: torch.randn(*s, generator=g) * scale
  sd = {"wte.weight": r(len(VOCAB), DIM, scale=0.5), "wpe.weight": r(CTX, DIM), "ln_f.weight": 1 + r(DIM), "ln_f.bias": r(DIM)}
  for i in range(LAYERS):
    p = f"h.{i}."
    sd |= {p + "ln_1.weight": 1 + r(DIM), p + "ln_1.bias": r(DIM), p + "ln_2.weight": 1 + r(DIM), p + "ln_2.bias": r(DIM),
           p + "attn.c_attn.weight": r(DIM, 3 * DIM), p + "attn.c_attn.bias": r(3 * DIM), p + "attn.c_proj.weight": r(DIM, DIM),
           p + "attn.c_proj.bias": r(DIM), p + "mlp.c_fc.weight": r(DIM, 4 * DIM), p + "mlp.c_fc.bias": r(4 * DIM),
           p + "mlp.c_proj.weight": r(4 * DIM, DIM), p + "mlp.c_proj.bias": r(DIM)}
  return sd

def _write_safetensors(sd: dict[str, torch.Tensor], path) -> None:
  """The safetensors layout written from torch's bytes (not by our safe_save)."""
  header, blobs, off = {}, [], 0
  for k, t in sd.items():
    raw = t.contiguous().numpy().tobytes()
    header[k] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
    blobs.append(raw)
    off += len(raw)
  hj = json.dumps(header).encode()
  with open(path, "wb") as f: f.write(struct.pack("<Q", len(hj)) + hj + b"".join(blobs))

def _write_bin(sd: dict[str, torch.Tensor], path) -> None:
  """As GPT2LMHeadModel.state_dict() saves: 'transformer.' prefix, the attention mask buffers, lm_head tied to wte."""
  out = {"transformer." + k: v for k, v in sd.items()}
  for i in range(LAYERS):
    out[f"transformer.h.{i}.attn.bias"] = torch.tril(torch.ones(CTX, CTX, dtype=torch.bool)).view(1, 1, CTX, CTX)
    out[f"transformer.h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
  out["lm_head.weight"] = out["transformer.wte.weight"]
  torch.save(out, path)

@pytest.fixture(scope="module")
def ckpt(tmp_path_factory):
  d = tmp_path_factory.mktemp("gpt2")
  sd = _checkpoint()
  _write_safetensors(sd, d / "model.safetensors")
  _write_bin(sd, d / "pytorch_model.bin")
  return d, {k: v.double().numpy() for k, v in sd.items()}

@pytest.fixture(scope="module")
def model(ckpt):
  return gpt2.load_gpt2(str(ckpt[0] / "model.safetensors"), n_heads=HEADS)

def ref_logits(w: dict[str, np.ndarray], ids: list[int]) -> np.ndarray:
  """GPT-2 in float64 numpy, straight from the Hugging Face formulas: (T, vocab)."""
  def ln(x, p): return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5) * w[p + ".weight"] + w[p + ".bias"]
  def conv1d(x, p): return x @ w[p + ".weight"] + w[p + ".bias"]
  T, dh = len(ids), DIM // HEADS
  x = w["wte.weight"][ids] + w["wpe.weight"][:T]
  for i in range(LAYERS):
    q, k, v = [a.reshape(T, HEADS, dh).transpose(1, 0, 2) for a in np.split(conv1d(ln(x, f"h.{i}.ln_1"), f"h.{i}.attn.c_attn"), 3, -1)]
    s = q @ k.transpose(0, 2, 1) / np.sqrt(dh) + np.triu(np.full((T, T), -np.inf), 1)
    p = np.exp(s - s.max(-1, keepdims=True))
    o = ((p / p.sum(-1, keepdims=True)) @ v).transpose(1, 0, 2).reshape(T, DIM)
    x = x + conv1d(o, f"h.{i}.attn.c_proj")
    hdn = conv1d(ln(x, f"h.{i}.ln_2"), f"h.{i}.mlp.c_fc")
    hdn = 0.5 * hdn * (1 + np.tanh(np.sqrt(2 / np.pi) * (hdn + 0.044715 * hdn ** 3)))
    x = x + conv1d(hdn, f"h.{i}.mlp.c_proj")
  return ln(x, "ln_f") @ w["wte.weight"].T

IDS = [5, 100, 257, 7, 42, 260, 3, 99, 150, 11]

@pytest.mark.parametrize("fn", ["model.safetensors", "pytorch_model.bin"])
def test_logits_match_float64_reference(ckpt, fn):
  m = gpt2.load_gpt2(str(ckpt[0] / fn), n_heads=HEADS)
  assert m.cfg == gpt2.Config(LAYERS, DIM, HEADS, len(VOCAB), CTX)
  np.testing.assert_allclose(m(Tensor([IDS]), 0).numpy()[0], ref_logits(ckpt[1], IDS), rtol=1e-4, atol=1e-4)

def test_cached_steps_match_reference(ckpt, model):
  """The prompt through the cache at once, then one token per step at its position: each step's logits are the full
  sequence's logits at that position."""
  ref = ref_logits(ckpt[1], IDS)
  caches = gpt2.Generator(model).caches
  np.testing.assert_allclose(model(Tensor([IDS[:4]]), 0, caches, last_only=True).numpy()[0], ref[3], rtol=1e-4, atol=1e-4)
  for pos in range(4, len(IDS)):
    got = model(Tensor([[IDS[pos]]]), pos, caches, last_only=True).numpy()[0]
    np.testing.assert_allclose(got, ref[pos], rtol=1e-4, atol=1e-4, err_msg=f"position {pos}")

def _greedy_ref(w, prompt, n):
  toks = list(prompt)
  for _ in range(n): toks.append(int(ref_logits(w, toks)[-1].argmax()))
  return toks[len(prompt):]

def test_generation_with_cache_equals_without(ckpt, model):
  prompt, n = [5, 100, 257], 8
  without = gpt2.Generator(model, use_cache=False, jit=False).generate(prompt, n)
  assert without == _greedy_ref(ckpt[1], prompt, n)
  assert gpt2.Generator(model, use_cache=True, jit=False, symbolic=False).generate(prompt, n) == without

def test_symbolic_jit_one_capture_for_all_positions(ckpt, model, monkeypatch):
  """start_pos and the token as bound Variables: one capture serves every position, token for token equal to the
  recomputed sequence; with concrete positions each position is a JIT of its own."""
  captures = []
  orig = TinyJit._capture
  monkeypatch.setattr(TinyJit, "_capture", lambda self, *a: captures.append(self) or orig(self, *a))
  prompt, n = [7, 42], 14
  without = _greedy_ref(ckpt[1], prompt, n)   # (the recomputed sequence: equal to our uncached generation, test above)
  gen = gpt2.Generator(model, use_cache=True, jit=True, symbolic=True)
  assert gen.generate(prompt, n) == without
  assert list(gen.jits) == ["symbolic"] and len(captures) == 1
  assert gen.generate(prompt, n) == without and len(captures) == 1   # a second run replays from the first step
  concrete = gpt2.Generator(model, use_cache=True, jit=True, symbolic=False)
  assert concrete.generate(prompt, 4) == without[:4]
  assert sorted(concrete.jits) == [2, 3, 4]

def test_symbolic_position_out_of_range_refused(model):
  gen = gpt2.Generator(model, symbolic=True, jit=True)
  with pytest.raises(ValueError, match="exceed the context of 40"): gen.generate([1, 2, 3], CTX)
  with pytest.raises((ValueError, JitError), match="start_pos"): gen.step(1, CTX, 0.0)

def test_temperature_sampling(model):
  """Sampling draws the same random numbers with and without the cache: same seed, same tokens; and it isn't greedy."""
  prompt, n = [5, 100], 10
  runs = []
  for cache, symbolic in ((False, False), (True, True), (True, False)):
    Tensor.manual_seed(3)
    runs.append(gpt2.Generator(model, use_cache=cache, jit=symbolic, symbolic=symbolic).generate(prompt, n, temperature=1.5))
  assert runs[0] == runs[1] == runs[2]
  assert runs[0] != gpt2.Generator(model, use_cache=False, jit=False).generate(prompt, n)
  assert all(0 <= t < len(VOCAB) for t in runs[0])

def test_bad_checkpoint_lists_every_problem(ckpt, tmp_path):
  sd = _checkpoint()
  del sd["h.1.mlp.c_fc.bias"]
  sd["h.0.ln_1.weight"] = torch.ones(DIM + 1)
  sd["h.0.attn.extra"] = torch.ones(2)
  _write_safetensors(sd, tmp_path / "model.safetensors")
  with pytest.raises(RuntimeError, match=r"3 problems: missing keys \['h.1.mlp.c_fc.bias'\]; unexpected keys \['h.0.attn.extra'\]; "
                                         r"shape mismatch for h.0.ln_1.weight: checkpoint \(33,\) vs model \(32,\)"):
    gpt2.load_gpt2(str(tmp_path / "model.safetensors"), n_heads=HEADS)

def _tokenizer_files(d) -> tuple[str, str]:
  (d / "vocab.json").write_text(json.dumps(VOCAB), encoding="utf-8")
  (d / "merges.txt").write_text("#version: 0.2\n" + "\n".join(f"{a} {b}" for a, b in MERGES) + "\n", encoding="utf-8")
  return str(d / "vocab.json"), str(d / "merges.txt")

def test_tokenizer(tmp_path):
  tok = gpt2.Tokenizer.from_files(*_tokenizer_files(tmp_path))
  # "hello": h e l l o -> he l l o -> he ll o -> hell o; " world": Ġ w o r l d -> Ġw o r l d -> Ġw or l d -> Ġwor l d
  assert tok.encode("hello world") == [VOCAB["hell"], VOCAB["o"], VOCAB["Ġwor"], VOCAB["l"], VOCAB["d"]]
  assert tok.encode(" \n") == [VOCAB["Ġ"], VOCAB["Ċ"]]   # space and newline are bytes 32 and 10: U+0120, U+010A
  for text in ["hello world", "Héllo, wörld! 123 numbers\n\n  spaces\ttabs", "emoji 🤖 and 中文 and ﬁ", "don't we'll", ""]:
    assert tok.decode(tok.encode(text)) == text, text
  with pytest.raises(KeyError, match="not in the vocabulary"): gpt2.Tokenizer({"a": 0}, []).encode("ab")
  # without the regex package the pre-tokenizer is an `re` pattern: the same split on ordinary text
  texts = ["Hello, world! it's 2026: __init__ x_y  \n\n é中文 naïve 'll 'VE", "a  b\t\tc   ", "3.14 + 2e-5 = ?!"]
  assert [re.findall(gpt2.PRETOKEN_RE, t) for t in texts] == [gpt2._PRETOKEN.findall(t) for t in texts]
  (tmp_path / "bad.txt").write_text("#version: 0.2\na b c\n")
  with pytest.raises(ValueError, match="is not one pair"): gpt2.Tokenizer.from_files(str(tmp_path / "vocab.json"), str(tmp_path / "bad.txt"))

def test_command_line(ckpt, tmp_path, capsys, monkeypatch):
  from frontend import Device
  # `--device CPU` makes CPU the process's default (examples/gpt2.py main): put the default back after the test, or
  # every later test of this process runs on the CPU (NV=1: "tensors on different devices: NV and CPU")
  monkeypatch.setattr(Device, "DEFAULT", Device.DEFAULT)
  vocab, merges = _tokenizer_files(tmp_path)
  (tmp_path / "config.json").write_text(json.dumps({"n_head": HEADS}))
  os.link(ckpt[0] / "pytorch_model.bin", tmp_path / "pytorch_model.bin")   # heads from the config.json beside it
  out = gpt2.main(["--weights", str(tmp_path / "pytorch_model.bin"), "--vocab", vocab, "--merges", merges, "--prompt", "hello world",
                   "--count", "5", "--device", "CPU", "--no-jit"])
  text = capsys.readouterr().out
  assert len(out) == 5 and "GPT-2 2 layers, width 32, 4 heads" in text and "5 tokens in " in text and "tokens/s" in text
  assert out == _greedy_ref(ckpt[1], gpt2.Tokenizer.from_files(vocab, merges).encode("hello world"), 5)

@pytest.mark.parametrize("name", ["NV", "AMD"])
def test_runs_on_mock_gpus(ckpt, name, monkeypatch):
  """The same model on NV and AMD (their mock drivers: PTX interpreted, gfx1100 code emulated): the logits, and the
  symbolic KV-cache steps through the captured graph (eager step, capture, replay)."""
  from frontend import Device
  from hcqrt.device import Device as Devices
  monkeypatch.setenv("MOCKGPU", "1")   # the registry opens the device through its mock driver (no-op if already open)
  Devices[name]
  monkeypatch.setattr(Device, "DEFAULT", name)
  m = gpt2.load_gpt2(str(ckpt[0] / "model.safetensors"), n_heads=HEADS)
  assert m.wte.weight.device == name
  np.testing.assert_allclose(m(Tensor([IDS[:4]]), 0).numpy()[0], ref_logits(ckpt[1], IDS[:4]), rtol=1e-4, atol=1e-4)
  gen = gpt2.Generator(m, symbolic=True, jit=True)
  assert gen.generate(IDS[:4], 4) == _greedy_ref(ckpt[1], IDS[:4], 4) and gen.jits["symbolic"].cnt == 2
