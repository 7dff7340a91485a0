"""The name-only tinygrad alias of tests/tinygrad_compat (run.py's shim): names map to our objects, unknown ones fail
loudly as internals, and the runner's classification."""
import sys
import pytest
from tests.tinygrad_compat import alias
from tests.tinygrad_compat.run import classify

@pytest.fixture
def tinygrad_alias():
  before = list(sys.meta_path)
  alias.install()
  yield
  sys.meta_path[:] = before
  for k in [k for k in sys.modules if k == "tinygrad" or k.startswith("tinygrad.")]: del sys.modules[k]

def test_names_map_to_ours(tinygrad_alias):
  import frontend, frontend.optim, frontend.jit
  from tinygrad import Tensor, dtypes, TinyJit   # type: ignore
  from tinygrad.nn.optim import Muon, SGD   # type: ignore
  from tinygrad.engine.jit import JitError   # type: ignore
  from tinygrad.helpers import getenv, DEBUG   # type: ignore
  assert (Tensor, dtypes, TinyJit) == (frontend.Tensor, frontend.dtypes, frontend.TinyJit)
  assert (Muon, SGD, JitError) == (frontend.optim.Muon, frontend.optim.SGD, frontend.jit.JitError)
  assert getenv("HCQRT_SURELY_UNSET", 5) == 5 and DEBUG.value == int(DEBUG)

def test_unknown_names_raise_as_internal(tinygrad_alias):
  from tinygrad.uop.ops import UOp, Ops   # type: ignore
  from tinygrad.renderer import Renderer   # type: ignore
  class Sub(Renderer): pass   # tinygrad's tests subclass internals at import time: that must still work
  with pytest.raises(alias.TinygradInternal, match="UOp"): UOp(1)
  with pytest.raises(alias.TinygradInternal, match="Ops.ADD"): _ = Ops.ADD
  with pytest.raises(alias.TinygradInternal): Sub()
  assert not isinstance(object(), Renderer)

def test_classify():
  assert classify("passed", "") == "passed" and classify("skipped", "") == "skipped"
  assert classify("failed", "AttributeError: 'Tensor' object has no attribute 'uop'") == "internal"
  assert classify("failed", "AttributeError: 'Tensor' object has no attribute 'bitwise_xor'") == "failed"
