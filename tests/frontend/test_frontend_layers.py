"""The frontend's layers: its execution core (engine, the capture slot, buffers, devices, index checks, BEAM's runner)
sits below the Tensor, the JIT, export, nn and optim, and every import between them points down. Modelled on the
compiler/opt layering test in tests/compiler/test_pipeline.py: imports are read from the source (deferred imports inside
functions included, `if TYPE_CHECKING:` blocks excluded, as they never run)."""
import ast, os, pathlib, subprocess, sys
import pytest
from tests.child_env import pythonpath

ROOT = pathlib.Path(__file__).resolve().parents[2]
FRONTEND = ROOT / "frontend"
# the execution core, lowest first where it matters; none of them may import an upper module
LOWER = ("devices", "buffer", "capture", "checks", "beam_runner", "engine", "context", "viz", "multi", "multi_cat")
# the user-facing layer: the Tensor with its mixins, and what is built on it
UPPER = ("tensor", "function", "grad_graph", "indexing", "nn_ops", "tensor_extra", "jit", "export", "nn", "optim", "distributed",
         "tensor_args", "tensor_create", "tensor_movement", "tensor_reduce", "tensor_dtype", "tensor_elementwise", "tensor_activation")
# the modules the old code tied into a cycle (engine -> jit -> engine, engine -> checks -> engine, beam_runner -> engine)
CORE = ("engine", "jit", "beam_runner", "capture", "buffer", "devices", "checks")

def _modules() -> set[str]:
  return {p.stem for p in FRONTEND.glob("*.py") if p.stem != "__init__"} | {p.name for p in FRONTEND.iterdir() if (p / "__init__.py").exists()}

def _type_checking_nodes(tree: ast.AST) -> set[int]:
  """ids of the nodes inside `if TYPE_CHECKING:` bodies (imports for annotations only)."""
  out: set[int] = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
      out |= {id(n) for b in node.body for n in ast.walk(b)}
  return out

def imports_of(mod: str, deferred: bool = True) -> set[str]:
  """The frontend modules that frontend/<mod>.py imports (with deferred=False: only those at module level, outside
  any function)."""
  path = FRONTEND / f"{mod}.py" if (FRONTEND / f"{mod}.py").exists() else FRONTEND / mod / "__init__.py"
  tree = ast.parse(path.read_text())
  skip, known = _type_checking_nodes(tree), _modules()
  if not deferred:
    skip |= {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in ast.walk(f)}
  deps: set[str] = set()
  for node in ast.walk(tree):
    if id(node) in skip: continue
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
      names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    elif isinstance(node, ast.Import): names = [a.name for a in node.names]
    else: continue
    deps |= {parts[1] for n in names if (parts := n.split("."))[0] == "frontend" and len(parts) > 1 and parts[1] in known}
  return deps - {mod}

def test_the_layer_lists_name_real_modules():
  """A module renamed or added is placed in a layer here, or the guard below would quietly check less."""
  assert set(LOWER) | set(UPPER) == _modules(), sorted(_modules() ^ (set(LOWER) | set(UPPER)))

@pytest.mark.parametrize("mod", LOWER)
def test_frontend_runtime_imports_point_down(mod):
  """The execution core never reaches up into the Tensor, the JIT or what is built on them: what it needs of them
  (the live lazy buffers) is passed in, and the capture slot it records into lives below it (frontend/capture.py)."""
  up = imports_of(mod) & set(UPPER)
  assert not up, f"frontend/{mod}.py imports the upper layer: {sorted(up)}"

def test_frontend_core_import_graph_is_acyclic():
  """engine, jit, beam_runner, capture, buffer, devices and checks import each other without a cycle (deferred
  imports included: a cycle hidden inside a function is still a cycle)."""
  graph = {m: imports_of(m) & set(CORE) for m in CORE}
  done: list[str] = []
  while len(done) < len(graph):
    ready = [m for m in graph if m not in done and graph[m] <= set(done)]
    assert ready, f"import cycle among {sorted(set(graph) - set(done))}: {[(m, sorted(graph[m])) for m in graph if m not in done]}"
    done += ready
  assert done.index("devices") < done.index("buffer") < done.index("engine") < done.index("jit")
  assert done.index("capture") < done.index("engine")

@pytest.mark.parametrize("mod", LOWER)
def test_core_imports_frontend_modules_at_module_level(mod):
  """A frontend import inside a function body of the core exists only to dodge a cycle: there are none."""
  assert imports_of(mod) == imports_of(mod, deferred=False), f"frontend/{mod}.py defers {sorted(imports_of(mod) - imports_of(mod, deferred=False))}"

@pytest.mark.parametrize("mod", CORE)
def test_each_core_module_imports_on_its_own(mod):
  """A module that only works when another was imported first hides a cycle: import each one in a fresh process."""
  r = subprocess.run([sys.executable, "-c", f"import frontend.{mod}"], cwd=ROOT, capture_output=True, text=True, check=False)
  assert r.returncode == 0, r.stderr[-2000:]

def test_the_guard_sees_deferred_and_skips_type_checking_imports(tmp_path, monkeypatch):
  """The reader itself: an import inside a function counts, one under `if TYPE_CHECKING:` does not."""
  fake = tmp_path / "frontend"
  fake.mkdir()
  for m in ("tensor", "engine", "jit"): (fake / f"{m}.py").write_text("")
  (fake / "lowmod.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING: from frontend.tensor import Tensor\n"
                                  "def f():\n  from frontend.jit import capture\nfrom frontend import engine\n")
  monkeypatch.setattr(sys.modules[__name__], "FRONTEND", fake)
  assert imports_of("lowmod") == {"jit", "engine"} and imports_of("lowmod", deferred=False) == {"engine"}

# frontend/tensor.py keeps the Tensor's state, realization, autograd and operators; its other methods live in mixin
# modules by topic (structure review, section 3). The budget leaves room for a few fixes, not for a section moving back.
TENSOR_PY_LINES = 800
# the modules whose classes Tensor inherits its methods from (each imports frontend.tensor only for type annotations)
MIXINS = ("tensor_create", "tensor_movement", "tensor_reduce", "tensor_dtype", "tensor_elementwise", "tensor_activation",
          "nn_ops", "tensor_extra")

def test_tensor_py_stays_within_its_line_budget():
  n = len((FRONTEND / "tensor.py").read_text().splitlines())
  assert n <= TENSOR_PY_LINES, f"frontend/tensor.py has {n} lines, over its budget of {TENSOR_PY_LINES}: put new methods in a mixin module"

@pytest.mark.parametrize("mod", MIXINS + ("tensor_args",))
def test_tensor_mixins_do_not_import_tensor_at_module_level(mod):
  """tensor.py imports its mixins to build the class: a mixin importing tensor.py back at module level is a cycle that
  works only in one import order. tensor_args, below them all, imports no frontend module."""
  deps = imports_of(mod, deferred=False)
  assert "tensor" not in deps, f"frontend/{mod}.py imports frontend.tensor at module level"
  if mod == "tensor_args": assert not deps, f"frontend/tensor_args.py imports {sorted(deps)}"

def test_every_mixin_is_a_base_of_tensor_and_is_bound():
  """The tensor_* mixin modules' methods name `Tensor` and `_wrap` as their globals, which tensor.py binds there
  (MIXIN_MODULES): a mixin left out of the bases or of the binding would fail only when one of its methods runs."""
  from frontend import tensor
  assert {c.__module__ for c in tensor.Tensor.__mro__[1:-1]} == {f"frontend.{m}" for m in MIXINS}
  assert {m.__name__ for m in tensor.MIXIN_MODULES} == {f"frontend.{m}" for m in MIXINS if m.startswith("tensor_") and m != "tensor_extra"}
  for m in tensor.MIXIN_MODULES:
    assert m.Tensor is tensor.Tensor and m._wrap is tensor._wrap, m.__name__
    assert ">>>" in (m.__doc__ or ""), f"{m.__name__}: the module docstring has no example"

def test_tensor_instances_have_no_dict():
  """Every class in Tensor's bases declares empty __slots__: one without would give each tensor a __dict__ (memory per
  tensor, and a misspelt attribute set silently)."""
  from frontend import Tensor
  assert not hasattr(Tensor([1.0]), "__dict__")
  assert all("__slots__" in vars(c) for c in Tensor.__mro__[:-1]), [c.__name__ for c in Tensor.__mro__[:-1] if "__slots__" not in vars(c)]

@pytest.mark.parametrize("mod", MIXINS[:6])
def test_each_tensor_mixin_module_imports_on_its_own(mod):
  """Imported first in a fresh process, a mixin module still gets a working Tensor (frontend/__init__ builds it)."""
  code = f"import frontend.{mod} as m; from frontend import Tensor; assert m.Tensor is Tensor; print((Tensor([1.0, 2.0]) * 2).tolist())"
  env = {**os.environ, "PYTHONPATH": pythonpath(ROOT)}
  r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=False)
  assert r.returncode == 0 and r.stdout.strip() == "[2.0, 4.0]", r.stderr[-2000:]

