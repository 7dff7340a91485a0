"""A `tinygrad` package made of hcqrt's own objects, by name only, so tinygrad's test files import and run against us.

`install()` puts a finder first on `sys.meta_path`: `import tinygrad.X` then gets a module whose attributes are
looked up in NAMES (tinygrad name -> our object, no wrappers, no reimplemented behaviour). A name we have no
counterpart for becomes a placeholder class that raises `TinygradInternal` when it is called or used, so a test
that touches tinygrad's internals (UOps, renderers, schedules, runners) fails with that error and the runner counts
it as "internal" rather than as a missing feature. The only code here is the handful of environment helpers
tinygrad's tests read at import time (`getenv`, `CI`, `DEBUG`, ...), which say nothing about tensors.

>>> mod = make_module("tinygrad.nn.optim")
>>> mod.SGD.__module__
'frontend.optim'
>>> isinstance(mod.NotAThing, type) and issubclass(mod.NotAThing, Placeholder)
True
"""
from __future__ import annotations
import importlib, importlib.abc, importlib.machinery, os, sys, types
from typing import Any

class TinygradInternal(NotImplementedError):
  """A tinygrad name with no hcqrt counterpart was used (the test inspects tinygrad's internals)."""

class _PlaceholderMeta(type):
  def __call__(cls, *a, **kw): raise TinygradInternal(f"tinygrad name {cls.__qualname__} has no hcqrt counterpart")
  def __getattr__(cls, name: str):
    if name.startswith("__"): raise AttributeError(name)
    raise TinygradInternal(f"tinygrad name {cls.__qualname__}.{name} has no hcqrt counterpart")
  def __getitem__(cls, k): raise TinygradInternal(f"tinygrad name {cls.__qualname__}[...] has no hcqrt counterpart")

class Placeholder(metaclass=_PlaceholderMeta):
  """Base of the stand-ins for tinygrad names we lack: subclassable (tests subclass Renderer etc.), never usable."""

class _EnvVar(int):
  """tinygrad's `ContextVar` read from the environment: an int with `.value`, as its tests compare and read it."""
  def __new__(cls, key: str, default: int = 0):
    v = super().__new__(cls, int(os.environ.get(key, default))); v.key = key; return v
  @property
  def value(self) -> int: return int(self)

def getenv(key: str, default: Any = 0) -> Any:
  """tinygrad.helpers.getenv: the environment variable `key` converted to the type of `default`.

  >>> getenv("HCQRT_SURELY_UNSET_VAR", 3)
  3
  """
  return type(default)(os.environ.get(key, default))

def _env_names() -> dict[str, Any]:
  names: dict[str, Any] = {"getenv": getenv, "CI": bool(os.environ.get("CI")), "OSX": sys.platform == "darwin",
                           "WIN": sys.platform == "win32", "T": Any, "temp": lambda x: os.path.join("/tmp", x)}
  for k in ("DEBUG", "IMAGE", "JIT", "CPU_LLVM", "AMD_LLVM", "EMULATE", "NOOPT", "BEAM"): names[k] = _EnvVar(k)
  return names

# tinygrad module -> {tinygrad name: "our_module:our_name"}. Only public API with the same meaning is listed.
_OURS: dict[str, dict[str, str]] = {
  "tinygrad": {n: f"frontend:{n}" for n in ("Tensor", "Device", "dtypes", "TinyJit", "Variable", "Context",
                                              "GlobalCounters", "nn", "DType")},
  "tinygrad.tensor": {"Tensor": "frontend:Tensor", "_to_np_dtype": "compiler.dtypes:to_np"},
  "tinygrad.dtype": {"dtypes": "compiler.dtypes:dtypes", "DType": "compiler.dtypes:DType",
                     "least_upper_dtype": "compiler.dtypes:least_upper_dtype", "_to_np_dtype": "compiler.dtypes:to_np",
                     "DTYPES_DICT": "compiler.dtypes:DTYPES_DICT", "fp8_to_float": "compiler.dtypes:fp8_to_float",
                     "float_to_fp8": "compiler.dtypes:float_to_fp8", "truncate": "compiler.dtypes:truncate",
                     "_to_torch_dtype": "compiler.dtypes:to_torch"},
  "tinygrad.device": {"Device": "frontend:Device", "is_dtype_supported": "frontend.devices:is_dtype_supported"},
  "tinygrad.helpers": {"Context": "frontend:Context", "GlobalCounters": "frontend:GlobalCounters",
                       "prod": "compiler.view:prod"},
  "tinygrad.nn": {n: f"frontend.nn:{n}" for n in ("Linear", "Conv1d", "Conv2d", "ConvTranspose1d", "ConvTranspose2d",
                  "BatchNorm", "BatchNorm2d", "LayerNorm", "LayerNorm2d", "GroupNorm", "InstanceNorm", "RMSNorm",
                  "Embedding", "LSTMCell", "Dropout", "state", "optim")},
  "tinygrad.nn.optim": {n: f"frontend.optim:{n}" for n in ("Optimizer", "SGD", "Adam", "AdamW", "LAMB", "Muon",
                                                             "OptimizerGroup")},
  "tinygrad.nn.state": {n: f"frontend.nn.state:{n}" for n in ("get_parameters", "get_state_dict", "load_state_dict",
                        "safe_load", "safe_save", "torch_load", "safe_load_metadata")},
  "tinygrad.engine.jit": {"TinyJit": "frontend.jit:TinyJit", "JitError": "frontend.jit:JitError"},
}

def _resolve(target: str) -> Any:
  mod, _, name = target.partition(":")
  try: return getattr(importlib.import_module(mod), name)
  except (ImportError, AttributeError): return None

class AliasModule(types.ModuleType):
  """A tinygrad module: listed names resolve to ours, submodules import through the finder, anything else is a
  Placeholder subclass (cached, so `from X import A` twice gives the same class)."""
  def __getattr__(self, name: str):
    if name.startswith("__"): raise AttributeError(name)
    # tinygrad's modules import its public names from each other (`from tinygrad.tensor import dtypes` works there)
    ours = _OURS["tinygrad"] | _OURS.get(self.__name__, {})
    val = _resolve(ours[name]) if name in ours else None
    if val is None and self.__name__ == "tinygrad.helpers": val = _env_names().get(name)
    if val is None: val = _PlaceholderMeta(name, (Placeholder,), {"__qualname__": f"{self.__name__}.{name}"})
    setattr(self, name, val)
    return val

def make_module(fullname: str) -> AliasModule:
  """The alias module for tinygrad module `fullname` (not registered in sys.modules)."""
  m = AliasModule(fullname)
  m.__path__ = []   # every tinygrad module may have submodules: tinygrad.uop.ops, tinygrad.runtime.graph.hcq, ...
  m.__package__ = fullname
  return m

class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
  def find_spec(self, fullname, path, target=None):
    if fullname != "tinygrad" and not fullname.startswith("tinygrad."): return None
    return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
  def create_module(self, spec): return make_module(spec.name)
  def exec_module(self, module): pass

def install() -> None:
  """Make `import tinygrad...` resolve to the alias modules (ahead of any real tinygrad on sys.path)."""
  if not any(isinstance(f, _Finder) for f in sys.meta_path): sys.meta_path.insert(0, _Finder())
  for k in [k for k in sys.modules if k == "tinygrad" or k.startswith("tinygrad.")]: del sys.modules[k]
