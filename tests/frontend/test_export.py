"""frontend.export: the exported C builds warning-free with gcc (and clang when installed), keeps every stack frame
<= 512 bytes, matches the framework within 1e-5 relative, checks its weights file, and shares scratch memory."""
import ctypes, importlib.util, pathlib, random, re, subprocess, sys
import numpy as np
import pytest
from compiler.dtypes import to_np
from frontend import Tensor, TinyJit, nn
from frontend.export import export_c, plan_arena, ExportError, ERRORS
from tests.needs import need_clang

ROOT = pathlib.Path(__file__).resolve().parents[2]
COMPILERS = ["gcc", "clang"]   # the export must build warning-free with both (clang skips where it is not installed)
WARN_FLAGS = ["-std=c99", "-Wall", "-Wextra", "-pedantic"]
_built = 0

def build(ex, d: pathlib.Path, cc: str = COMPILERS[0]):
  """Write, compile (warnings are failures) and load the export; returns (library, stack frame per function)."""
  global _built
  if cc == "clang": cc = need_clang()
  _built += 1
  d = d / f"{pathlib.Path(cc).name}{_built}"
  ex.write(d)
  r = subprocess.run([cc, *WARN_FLAGS, "-O3", "-march=native", "-fstack-usage", "-fPIC", "-c", f"{ex.name}.c", "-o", f"{ex.name}.o"],
                     cwd=d, capture_output=True, text=True)
  assert r.returncode == 0 and r.stderr.strip() == "", f"{cc} said:\n{r.stderr}"
  frames = {}
  for line in (d / f"{ex.name}.su").read_text().splitlines():
    where, size, _ = line.split("\t")
    frames[where.rsplit(":", 1)[-1]] = int(size)
  subprocess.run([cc, "-shared", "-o", f"lib{ex.name}.so", f"{ex.name}.o", "-lm"], cwd=d, check=True)
  lib = ctypes.CDLL(str(d / f"lib{ex.name}.so"))
  return lib, frames

def load_weights(lib, ex) -> int:
  data = ex.files.get(f"{ex.name}.bin", b"")
  return getattr(lib, f"{ex.name}_init")(data, ctypes.c_size_t(len(data)))

def run_c(lib, ex, *arrays) -> list[np.ndarray]:
  ins = [np.ascontiguousarray(a, dtype=to_np(dt)) for a, (_, dt) in zip(arrays, ex.inputs)]
  outs = [np.full(shape, np.nan, to_np(dt)) for shape, dt in ex.outputs]
  getattr(lib, ex.name)(*[a.ctypes.data_as(ctypes.c_void_p) for a in ins + outs])
  return outs

def assert_close(got: np.ndarray, ref: np.ndarray):
  # 1e-5 relative to the output's scale: elementwise relative error is meaningless for values crossing zero
  scale = max(float(np.abs(ref).max()), 1e-30)
  np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5 * scale)

class MLP:
  def __init__(self, rng):
    self.w1, self.b1 = Tensor(rng.standard_normal((48, 100), dtype=np.float32) * 0.1), Tensor(rng.standard_normal(48, dtype=np.float32))
    self.w2, self.b2 = Tensor(rng.standard_normal((12, 48), dtype=np.float32) * 0.3), Tensor(rng.standard_normal(12, dtype=np.float32))
  def __call__(self, x: Tensor) -> Tensor: return x.linear(self.w1.T, self.b1).tanh().linear(self.w2.T, self.b2)

def digits_net():
  """examples/train_digits.py's DigitsNet (conv-relu-conv-relu-maxpool-linear); the same layers if it can't be imported."""
  try:
    spec = importlib.util.spec_from_file_location("train_digits", ROOT / "examples" / "train_digits.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.DigitsNet()
  except ImportError:
    class DigitsNet:
      def __init__(self):
        self.c1, self.c2, self.fc = nn.Conv2d(1, 16, 3, padding=1), nn.Conv2d(16, 32, 3, padding=1), nn.Linear(32 * 4 * 4, 10)
      def __call__(self, x): return self.fc(self.c2(self.c1(x).relu()).relu().max_pool2d(2).flatten(1))
    return DigitsNet()

@pytest.fixture(scope="module")
def mlp_export():
  model = MLP(np.random.default_rng(0))
  return model, export_c(model, np.zeros((1, 100), np.float32), name="mlp")

@pytest.mark.parametrize("cc", COMPILERS)
def test_mlp_matches_framework(mlp_export, tmp_path, cc):
  model, ex = mlp_export
  assert ex.inputs == [((1, 100), ex.inputs[0][1])] and ex.outputs[0][0] == (1, 12)
  lib, frames = build(ex, tmp_path, cc)
  assert max(frames.values()) <= 512, frames
  assert load_weights(lib, ex) == ERRORS["OK"]
  rng = np.random.default_rng(1)
  for _ in range(4):
    x = rng.standard_normal((1, 100), dtype=np.float32)
    assert_close(run_c(lib, ex, x)[0], model(Tensor(x)).numpy())
  h = ex.files["mlp.h"].decode()
  assert "int mlp_init(const void *weights, size_t size);" in h and "void mlp(const float *in0, float *out0);" in h

def assert_plain_loops(ex):
  """Reductions stay loops with at most 8 accumulators; the .c needs nothing but C99 library headers."""
  src = ex.files[f"{ex.name}.c"].decode()
  assert set(re.findall(r"#include <(\w+\.h)>", src)) <= {"math.h", "stdint.h", "string.h"}
  assert "__builtin" not in src and "__attribute__" not in src and "_Float16" not in src
  kernels = re.split(rf"\nstatic void {ex.name}_k", src)[1:]
  assert 1 <= len(kernels) <= ex.kernels   # a kernel launched twice is written once
  reductions = 0
  for fn in kernels:
    body = fn.split("\n}\n")[0]
    assert "for (" in body
    assert len(re.findall(r"float acc\d+ = ", body)) <= 8, body
    reductions += "acc0" in body
  assert reductions >= 1   # (elementwise kernels, such as a conv's padded copy of its input, have no accumulator)

def test_mlp_code_shape(mlp_export): assert_plain_loops(mlp_export[1])

@pytest.mark.parametrize("cc", COMPILERS)
def test_digits_cnn(tmp_path, cc):
  Tensor.manual_seed(3)
  model = digits_net()
  ex = export_c(model, Tensor.rand(1, 1, 8, 8), name="digits")
  assert_plain_loops(ex)
  lib, frames = build(ex, tmp_path, cc)
  assert max(frames.values()) <= 512, frames
  assert load_weights(lib, ex) == ERRORS["OK"]
  for x in np.random.default_rng(2).random((3, 1, 1, 8, 8), dtype=np.float32):
    assert_close(run_c(lib, ex, x)[0], model(Tensor(x)).numpy())
  m = ex.memory
  assert m["peak_live_bytes"] <= m["scratch_bytes"] < m["unshared_bytes"]
  assert m["weight_bytes"] == 4 * (16 * 9 + 16 + 32 * 16 * 9 + 32 + 10 * 512 + 10)

def test_two_inputs_two_outputs(tmp_path):
  rng = np.random.default_rng(4)
  w = Tensor(rng.standard_normal((5, 7), dtype=np.float32))
  def fn(a: Tensor, b: Tensor):
    return (a.relu() @ w + b.sum()).sigmoid(), (a * b).exp().max(axis=1)
  a, b = rng.standard_normal((3, 5), dtype=np.float32), rng.standard_normal(5, dtype=np.float32)
  ex = export_c(fn, a, Tensor(b), name="two")
  assert [s for s, _ in ex.inputs] == [(3, 5), (5,)] and [s for s, _ in ex.outputs] == [(3, 7), (3,)]
  assert "void two(const float *in0, const float *in1, float *out0, float *out1);" in ex.files["two.h"].decode()
  lib, frames = build(ex, tmp_path)
  assert max(frames.values()) <= 512 and load_weights(lib, ex) == 0
  for _ in range(3):
    a, b = rng.standard_normal((3, 5), dtype=np.float32), rng.standard_normal(5, dtype=np.float32)
    got, ref = run_c(lib, ex, a, b), fn(Tensor(a), Tensor(b))
    for g, r in zip(got, ref): assert_close(g, r.numpy())

def test_outputs_that_are_inputs_views_or_weights(tmp_path):
  w = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
  ex = export_c(lambda x: (x, x.T, w, x + 1), np.zeros((2, 3), np.float32), name="alias")
  lib, _ = build(ex, tmp_path)
  assert load_weights(lib, ex) == 0
  x = np.random.default_rng(5).standard_normal((2, 3), dtype=np.float32)
  got = run_c(lib, ex, x)
  for g, r in zip(got, (x, x.T, w.numpy(), x + 1)): np.testing.assert_array_equal(g, r)

def test_bad_weights_file_is_rejected(mlp_export, tmp_path):
  model, ex = mlp_export
  lib, _ = build(ex, tmp_path)
  init = lib.mlp_init
  good = ex.files["mlp.bin"]
  def try_init(data: bytes) -> int: return init(data, ctypes.c_size_t(len(data)))
  flip = bytearray(good); flip[len(good) // 2] ^= 0x10
  assert try_init(bytes(flip)) == ERRORS["ERR_CHECKSUM"]
  assert try_init(good[:-4]) == ERRORS["ERR_SIZE"]
  assert init(None, ctypes.c_size_t(0)) == ERRORS["ERR_SIZE"]
  assert try_init(b"XXXX" + good[4:]) == ERRORS["ERR_MAGIC"]
  assert try_init(good[:4] + b"\x09" + good[5:]) == ERRORS["ERR_VERSION"]
  other = export_c(lambda x: x.linear(Tensor.ones(48, 99).T), np.zeros((1, 99), np.float32), name="mlp")   # another model's weights
  assert try_init(other.files["mlp.bin"]) == ERRORS["ERR_LAYOUT"]
  # a failed init leaves the weights alone; a good one loads them
  assert try_init(good) == ERRORS["OK"]
  x = np.ones((1, 100), np.float32)
  assert_close(run_c(lib, ex, x)[0], model(Tensor(x)).numpy())

def test_weights_file_format(mlp_export):
  """Little-endian: 'HCQW', version, count, layout hash, payload bytes (u64), CRC-32, then the raw weights."""
  import struct, zlib
  model, ex = mlp_export
  data = ex.files["mlp.bin"]
  magic, version, count, _, nbytes, crc, _ = struct.unpack("<4sIIIQII", data[:32])
  assert (magic, version, count, nbytes) == (b"HCQW", 1, 4, len(data) - 32) and crc == zlib.crc32(data[32:])
  np.testing.assert_array_equal(np.frombuffer(data, "<f4", 4800, 32).reshape(48, 100), model.w1.numpy())

def test_embedded_weights(tmp_path):
  model = MLP(np.random.default_rng(6))
  ex = export_c(model, np.zeros((1, 100), np.float32), name="emb", embed_weights=True)
  assert sorted(ex.files) == ["emb.c", "emb.h"]
  lib, frames = build(ex, tmp_path)
  assert max(frames.values()) <= 512 and lib.emb_init(None, ctypes.c_size_t(0)) == 0
  x = np.random.default_rng(7).standard_normal((1, 100), dtype=np.float32)
  assert_close(run_c(lib, ex, x)[0], model(Tensor(x)).numpy())

def test_after_training_with_jit(tmp_path):
  """Train a few steps through TinyJit, then export the jitted inference function (already replaying)."""
  model = MLP(np.random.default_rng(8))
  params = [model.w1, model.w2, model.b1, model.b2]
  for p in params: p.requires_grad = True
  rng = np.random.default_rng(9)
  @TinyJit
  def step(x: Tensor, y: Tensor) -> Tensor:
    loss = ((model(x) - y) ** 2).mean()
    loss.backward()
    for p in params:
      p.assign((p - 0.05 * p.grad).detach())
      p.grad = None
    return loss.realize()
  losses = [step(Tensor(rng.standard_normal((8, 100), dtype=np.float32)), Tensor(rng.standard_normal((8, 12), dtype=np.float32))).item() for _ in range(4)]
  assert all(np.isfinite(losses))
  infer = TinyJit(lambda x: model(x))
  for _ in range(3): infer(Tensor(np.ones((1, 100), np.float32)).realize())
  ex = export_c(infer, np.zeros((1, 100), np.float32), name="trained")
  lib, _ = build(ex, tmp_path)
  assert load_weights(lib, ex) == 0
  x = rng.standard_normal((1, 100), dtype=np.float32)
  assert_close(run_c(lib, ex, x)[0], model(Tensor(x)).numpy())
  assert ex.files == export_c(infer, np.zeros((1, 100), np.float32), name="trained").files   # exporting again changes nothing

def test_model_on_another_device(tmp_path):
  """Weights on the (mock) GPU device: copied to the CPU for the trace, left where they were."""
  rng = np.random.default_rng(10)
  w1, b1, w2 = rng.standard_normal((48, 100), dtype=np.float32) * 0.1, rng.standard_normal(48, dtype=np.float32), rng.standard_normal((12, 48), dtype=np.float32)
  W1, B1, W2 = Tensor(w1, device="PTXEMU"), Tensor(b1, device="PTXEMU"), Tensor(w2, device="PTXEMU")
  ex = export_c(lambda x: x.linear(W1.T, B1).tanh().linear(W2.T), np.zeros((1, 100), np.float32), name="gpu")
  assert W1.device == "PTXEMU" and W1.lazydata.realized
  assert [n for n, _, _ in ex.weights] == ["W1", "B1", "W2"]
  lib, _ = build(ex, tmp_path)
  assert load_weights(lib, ex) == 0
  x = rng.standard_normal((1, 100), dtype=np.float32)
  assert_close(run_c(lib, ex, x)[0], np.tanh(x @ w1.T + b1) @ w2.T)

def test_scratch_is_shared_by_liveness(tmp_path):
  rng = np.random.default_rng(11)
  ws = [Tensor(rng.standard_normal((64, 64), dtype=np.float32) * 0.2) for _ in range(6)]
  def deep(a: Tensor) -> Tensor:
    for w in ws: a = (a @ w).relu()
    return a
  ex = export_c(deep, np.ones((1, 64), np.float32), name="deep")
  m = ex.memory
  # six layers, five intermediates of 256 bytes, at most two alive at once
  assert ex.kernels == 6 and m["unshared_bytes"] == 5 * 256 and m["scratch_bytes"] == m["peak_live_bytes"] == 2 * 256
  lib, _ = build(ex, tmp_path)
  assert load_weights(lib, ex) == 0
  x = rng.standard_normal((1, 64), dtype=np.float32)
  assert_close(run_c(lib, ex, x)[0], deep(Tensor(x)).numpy())

def test_plan_arena_never_overlaps_live_buffers():
  rnd = random.Random(0)
  for _ in range(200):
    life = []
    for _ in range(rnd.randint(1, 12)):
      s = rnd.randint(0, 10)
      life.append((s, s + rnd.randint(0, 4), rnd.randint(1, 50)))
    offs, arena, peak = plan_arena(life)
    assert peak <= arena <= sum(sz for _, _, sz in life)
    for i, (s1, e1, z1) in enumerate(life):
      assert offs[i] + z1 <= arena
      for j, (s2, e2, z2) in enumerate(life[:i]):
        if s1 <= e2 and s2 <= e1: assert offs[i] + z1 <= offs[j] or offs[j] + z2 <= offs[i], (life, offs)

def test_stateful_function_is_refused():
  acc = Tensor(np.zeros(4, np.float32)).realize()
  def bad(x: Tensor) -> Tensor:
    acc.assign(acc + x)
    return acc * 2
  with pytest.raises(ExportError, match=r"updates state \(acc\)"): export_c(bad, np.ones(4, np.float32))
  def bad_realized(x: Tensor) -> Tensor:
    acc.assign(acc + x).realize()
    return acc * 2
  with pytest.raises(ExportError, match=r"kernel \S+ writes into an existing tensor, acc\)"): export_c(bad_realized, np.ones(4, np.float32))
  assert acc.tolist() == [0.0] * 4   # refused before the write ran
  with pytest.raises(ValueError, match="C identifier"): export_c(bad, np.ones(4, np.float32), name="1net")

def test_command_line(tmp_path):
  mod = tmp_path / "mymodel.py"
  mod.write_text("import numpy as np\nfrom frontend import Tensor\n"
                 "W = Tensor(np.full((3, 4), 0.5, np.float32))\n"
                 "def net(x): return (x @ W).relu()\n"
                 "def factory(): return net, np.zeros((2, 3), np.float32)\n")
  for args, files in ((["factory", "--name", "fac"], {"fac.c", "fac.h", "fac.bin"}), (["net", "--input", "2,3", "--embed-weights", "--name", "emb"], {"emb.c", "emb.h"})):
    out = tmp_path / args[-1]
    r = subprocess.run([sys.executable, "-m", "frontend.export", f"{mod}:{args[0]}", "--out", str(out), *args[1:]], cwd=ROOT,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert {p.name for p in out.iterdir()} == files and "bytes of scratch" in r.stdout
    assert f"void {args[-1]}(const float *in0, float *out0);" in (out / f"{args[-1]}.h").read_text()

def test_packed_product_with_padded_rows(tmp_path):
  """A big product is packed (compiler/pack.py) and computes its rows padded to the tile into room past its output's
  end: the exported code keeps that room in its scratch and never writes past the caller's array."""
  rng = np.random.default_rng(8)
  w = Tensor(rng.standard_normal((256, 256), dtype=np.float32))
  fn = lambda a: a @ w
  a = rng.standard_normal((301, 256), dtype=np.float32)
  ex = export_c(fn, a, name="pk")
  lib, _ = build(ex, tmp_path)
  assert load_weights(lib, ex) == 0
  out = np.full(301 * 256 + 4096, np.nan, np.float32)   # the caller's array, then a guard region
  lib.pk(np.ascontiguousarray(a).ctypes.data_as(ctypes.c_void_p), out.ctypes.data_as(ctypes.c_void_p))
  assert np.isnan(out[301 * 256:]).all()
  assert_close(out[:301 * 256].reshape(301, 256), fn(Tensor(a)).numpy())

@pytest.mark.parametrize("realize_stats", [False, True])
def test_batchnorm_in_training_mode_is_refused_and_the_model_untouched(realize_stats):
  """BatchNorm in training mode updates its running statistics: pending (the outputs don't read them) or realized
  inside the function, the export is refused and the live model keeps its state and keeps working."""
  Tensor.manual_seed(0)
  bn, ref = nn.BatchNorm2d(3), nn.BatchNorm2d(3)
  x = np.random.default_rng(0).standard_normal((2, 3, 2, 2)).astype(np.float32)
  def train_fn(inp: Tensor) -> Tensor:
    with Tensor.train(): y = bn(inp)
    if realize_stats: Tensor.realize(y, bn.running_mean, bn.running_var, bn.num_batches_tracked)
    return y
  with pytest.raises(ExportError, match=r"updates state \(.*bn\.running_mean, bn\.running_var, bn\.num_batches_tracked\).*BatchNorm in training mode"):
    export_c(train_fn, x)
  for name in ("running_mean", "running_var", "num_batches_tracked"):
    assert getattr(bn, name).lazydata.realized, name   # nothing left pending
    np.testing.assert_array_equal(getattr(bn, name).numpy(), getattr(ref, name).numpy())
  with Tensor.train(): a, b = bn(Tensor(x)).numpy(), ref(Tensor(x)).numpy()
  np.testing.assert_array_equal(a, b)
  np.testing.assert_array_equal(bn.running_mean.numpy(), ref.running_mean.numpy())
  assert bn.num_batches_tracked.item() == 1
  assert export_c(bn, x).kernels > 0   # in eval mode (export's default) the same model exports

@pytest.mark.parametrize("ret,where,what", [(lambda y: (y, 3.0), r"\[1\]", "float 3.0"), (lambda y: {"a": y, "b": None}, r"\['b'\]", "NoneType None"),
                                            (lambda y: [y, [y, "s"]], r"\[1\]\[1\]", "str 's'"), (lambda y: 5, "", "int 5")])
def test_non_tensor_return_values_are_refused(ret, where, what):
  with pytest.raises(ExportError, match=rf"the return value{where} is not a Tensor but the {what}"): export_c(lambda x: ret(x * 2), np.ones(3, np.float32))
