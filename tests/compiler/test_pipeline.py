"""The compile pipeline's seams: Targets reported by devices, one compile_kernel for engine/BEAM/export, the optimizer
package without import cycles, ranges numbered by their kernel, the capture slot below the engine (frontend/capture.py;
the frontend's own layering: tests/frontend/test_frontend_layers.py)."""
import ast, json, os, pathlib, re, subprocess, sys
import numpy as np
import pytest
from frontend import Tensor
import frontend.engine as engine
from frontend.devices import target_of
from frontend.capture import JitError, capture
from compiler import beam
from compiler.lower import lower
from compiler.linearize import linearize
from compiler.render_ptx import render_ptx
from compiler.opt.base import OptKind
from compiler.opt.heuristic import optimize
from compiler.pipeline import BACKENDS, compile_kernel
from compiler.target import Target

ROOT = pathlib.Path(__file__).resolve().parents[2]
OPT_MODULES = sorted(p.stem for p in (ROOT / "compiler" / "opt").glob("*.py") if p.stem != "__init__")

@pytest.fixture(autouse=True)
def on_cpu():
  from frontend import Device
  old, Device.DEFAULT = Device.DEFAULT, "CPU"
  yield
  Device.DEFAULT = old

def _kernel_si(fn):
  return [si for si in fn().schedule() if si.kind == "kernel"][-1]

def _rand(*shape, seed=0): return Tensor(np.random.default_rng(seed).standard_normal(shape).astype(np.float32)).realize()

# ***** targets *****

def test_devices_report_their_target():
  cpu = target_of("CPU")
  assert cpu.renderer == ("llvm" if os.environ.get("CPU_LLVM") == "1" else "c") and not cpu.gpu and cpu.ncores >= 1 and cpu.simd_bytes in (16, 32, 64)
  assert cpu.vector_registers == (32 if cpu.simd_bytes >= 64 else 16)
  emu = target_of("PTXEMU")
  assert emu.renderer == "ptx" and emu.gpu and emu.arch == "sm_90" and emu.warp_size == 32 and emu.buffer_alignment == 256

def test_target_report_with_unknown_field_is_an_error():
  with pytest.raises(ValueError, match="unknown field.*simd_width"): Target.from_report({"device": "X", "renderer": "c", "simd_width": 8})

def test_avx2_target_from_an_avx512_one():
  t = Target("CPU", "c", simd_bytes=64).replace(simd_bytes=32)
  assert (t.lanes, t.vector_registers) == (8, 16)

def test_unknown_renderer_names_the_device():
  si = _kernel_si(lambda: _rand(4, 4) + 1)
  with pytest.raises(NotImplementedError, match="no renderer 'metal' for device AMD"): compile_kernel(si.ast, Target("AMD", "metal"))

# a branch on a renderer's name (an attribute, a report's key or .get) or a probe of a device object
_PROBE = re.compile(r"""renderer\b["')\]]*\s*[!=]=|getattr\((dev|device)\b""")

def test_probe_pattern_catches_each_spelling():
  for line in ('if t.renderer == "c":', 'if dev.target["renderer"] == "llvm":', "x = target.get('renderer') != 'ptx'",
               "getattr(dev, 'graph', None)"):
    assert _PROBE.search(line), line
  for line in ("be = BACKENDS[target.renderer]", "renderer = report['renderer']"): assert not _PROBE.search(line), line

def test_no_renderer_or_device_probes_outside_the_registry():
  """Only compiler/pipeline.py's registry knows renderer names; no compiler or frontend code probes a device object."""
  bad = []
  for d in ("compiler", "frontend"):
    for p in sorted((ROOT / d).rglob("*.py")):
      if p == ROOT / "compiler" / "pipeline.py": continue
      for i, line in enumerate(p.read_text().splitlines(), 1):
        if _PROBE.search(line): bad.append(f"{p.relative_to(ROOT)}:{i}: {line.strip()}")
  assert not bad, "\n".join(bad)

def test_registry_has_every_renderer_the_devices_report():
  assert {target_of("CPU").renderer, target_of("PTXEMU").renderer} <= set(BACKENDS)

@pytest.mark.parametrize("cpu_llvm", ["0", "1"])
def test_cpu_runner_is_built_by_the_registry_entry_of_its_renderer(cpu_llvm, monkeypatch):
  """The CPU's native runner goes through the same compiler as its kernels, chosen by the registry (CPU_LLVM=1: the
  LLVM IR runner built in-process, so a machine without a C compiler still gets it), not by a name test in the frontend."""
  if cpu_llvm == "1": pytest.importorskip("llvmlite")
  import dataclasses
  import hcqrt.cpu.device as cpu
  from frontend import devices
  monkeypatch.setattr(cpu, "_runner", cpu._runner)   # (put back after the test: the runner the session had)
  monkeypatch.setenv("CPU_LLVM", cpu_llvm)
  dev = devices.open_device("CPU")
  name, built = Target.from_report(dev.target).renderer, []
  be = BACKENDS[name]
  monkeypatch.setitem(BACKENDS, name, dataclasses.replace(be, assemble_host=lambda src, n: (built.append(src), be.assemble_host(src, n))[1]))
  devices._install_cpu_runner(dev)
  assert built == [cpu.runner_llvm.RUNNER_LLVM if cpu_llvm == "1" else cpu.RUNNER_C]
  assert cpu._runner is not None and cpu._runner is cpu._kept[be.assemble_host(built[0], "hcqrt_runner")]

# ***** the optimizer package *****

@pytest.mark.parametrize("mod", OPT_MODULES)
def test_each_opt_module_imports_on_its_own(mod):
  """A module that only works when another was imported first hides a cycle: import each one in a fresh process."""
  r = subprocess.run([sys.executable, "-c", f"import compiler.opt.{mod}"], cwd=ROOT, capture_output=True, text=True, check=False)
  assert r.returncode == 0, r.stderr[-2000:]

def test_opt_import_graph_is_acyclic():
  """Every import between compiler/opt modules (deferred ones inside functions included) points down the layers."""
  graph: dict[str, set[str]] = {}
  for mod in OPT_MODULES:
    deps = set()
    for node in ast.walk(ast.parse((ROOT / "compiler" / "opt" / f"{mod}.py").read_text())):
      if isinstance(node, ast.ImportFrom) and node.module:
        names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
      elif isinstance(node, ast.Import): names = [a.name for a in node.names]
      else: continue
      deps |= {n.split(".")[2] for n in names if n.startswith("compiler.opt.") and n.split(".")[2] in OPT_MODULES}
      assert not any(n.startswith(("compiler.beam", "compiler.pipeline")) for n in names), f"{mod} imports an upper layer"
    graph[mod] = deps - {mod}
  done: list[str] = []
  while len(done) < len(graph):
    ready = [m for m in graph if m not in done and graph[m] <= set(done)]
    assert ready, f"import cycle among {sorted(set(graph) - set(done))}: {[(m, sorted(graph[m])) for m in graph if m not in done]}"
    done += ready
  assert done.index("base") < done.index("apply") < done.index("heuristic")

def test_applied_opts_are_named_by_opt_kinds():
  """Every step the default opts record carries the name of an OptKind."""
  t = target_of("CPU")
  a, b = _rand(32, 48), _rand(48, 64, seed=1)
  x, w = _rand(1, 3, 12, 28), _rand(8, 3, 3, 3, seed=2)
  for fn in (lambda: a @ b, lambda: a.softmax(), lambda: a + 1, lambda: x.conv2d(w, padding=1), lambda: a.sum(axis=1)):
    si = _kernel_si(fn)
    for step in optimize(lower(si.ast, si.name), t).applied_opts: assert step[0] in OptKind.__members__, step

def test_ranges_are_numbered_by_their_kernel():
  """The same kernel makes the same source whatever was compiled before it (no process-wide range counter)."""
  t = target_of("CPU")
  si1, si2 = _kernel_si(lambda: _rand(32, 48) @ _rand(48, 64, seed=1)), _kernel_si(lambda: _rand(1, 3, 12, 28).conv2d(_rand(8, 3, 3, 3), padding=1))
  first = compile_kernel(si1.ast, t, name="a", assemble=False).src
  for _ in range(3): compile_kernel(si2.ast, t, name="b", assemble=False)
  assert compile_kernel(si1.ast, t, name="a", assemble=False).src == first

# ***** one pipeline for the engine and BEAM *****

def test_beam_times_the_binary_the_engine_runs(tmp_path, monkeypatch):
  """BEAM builds its candidates with compile_kernel, the engine builds the winner with it: the winner's timed binary is
  byte for byte the one the engine loads and runs (float64 rewrites, hooks and peeling included)."""
  monkeypatch.setenv("HCQRT_CACHE", str(tmp_path))
  monkeypatch.setenv("BEAM", "1")
  monkeypatch.setenv("BEAM_MIN_US", "0")   # search even this small kernel
  monkeypatch.setattr(beam, "MAX_DEPTH", 1)
  found: list = []
  real = beam.beam_search
  def spy(*a, **kw):
    st = kw.setdefault("stats", {})
    out = real(*a, **kw)
    found.append(st)
    return out
  monkeypatch.setattr(beam, "beam_search", spy)
  x, y = np.random.default_rng(5).standard_normal((24, 40)).astype(np.float32), np.random.default_rng(6).standard_normal((40, 16)).astype(np.float32)
  engine._kernel_cache.clear()
  si = _kernel_si(lambda: Tensor(x) @ Tensor(y))
  kern = engine.get_kernel(si, "CPU")
  assert len(found) == 1 and not found[0]["cache_hit"]
  best = found[0]["best"]
  assert kern.compiled.opts == best.opts and kern.compiled.src == best.src and kern.compiled.binary == best.binary
  np.testing.assert_allclose((Tensor(x) @ Tensor(y)).numpy(), x @ y, rtol=1e-4, atol=1e-4)
  assert json.loads(next((tmp_path / "beam").glob("*.json")).read_text())["opts"] == (None if best.opts is None else [o.to_json() for o in best.opts])

# ***** capture *****

def test_capture_records_launches_and_refuses_nesting():
  a = _rand(4, 4)
  with capture() as items:
    (a + 1).realize()
    with pytest.raises(JitError, match="nested"):
      with capture("inner"): pass
  assert [ei.kind for ei in items] == ["kernel"]
  with capture() as items2: pass
  assert items2 == []   # the outer capture ended: a new one starts empty

def test_capture_refuses_host_reads():
  with capture():
    with pytest.raises(JitError, match="during TinyJit capture"): _rand(2).numpy()

def test_beam_builds_ptx_candidates_with_the_target_rewrites():
  """float64 transcendentals are spelled out in arithmetic for PTX, and GPU reductions are peeled after the opts: BEAM's
  candidates get both, as the engine's kernels do (before the pipeline BEAM built them without either, so it timed
  code other than what the engine then ran)."""
  t = target_of("PTXEMU")
  f64 = _kernel_si(lambda: Tensor(np.linspace(-3, 3, 33), device="PTXEMU").exp())
  padded = _kernel_si(lambda: Tensor(np.ones((4, 8), np.float32), device="PTXEMU").pad(((0, 0), (2, 1))).sum(1))
  for si in (f64, padded):
    b = beam.build(lower(si.ast, si.name), (), t)
    assert b is not None and b.binary == compile_kernel(si.ast, t, (), name=si.name).binary
  assert any(step[0] == "PEEL" for step in beam.build(lower(padded.ast, padded.name), (), t).ck.applied_opts)
  k = lower(f64.ast, f64.name)
  plain, _ = render_ptx(k, t.arch, linearize(k), t.buffer_alignment)   # the kernel without the target rewrite
  assert beam.build(k, (), t).src != plain
