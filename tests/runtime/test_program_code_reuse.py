"""A dropped program's code memory is reused for the next program (hcqrt/amd/device.py AMDProgram, hcqrt/nv/device.py
NVProgram free it when dropped: frontend/engine.py's bounded kernel cache). The GPU's instruction cache may still hold
the old program's lines at that address, so the first launch of the new one must come after an I$ invalidate: the mock
AMD CP keeps the lines (hcqrt/mock/amd/cp.py execute) and refuses to run code that changed under them; the mock NV
compute engine keeps the kernel it fetched per program address (hcqrt/mock/nv/gpfifo.py fetch_code) and runs it again.
NV frees a dropped program's code from its finalizer only at the allocator's next call (NVAllocator.free_later)."""
import gc, struct
import pytest
from hcqrt.mock.amd import install_mock_amd, uninstall_mock_amd, set_executor
from hcqrt.amd.device import AMDDevice, AMDProgram

pytestmark = pytest.mark.usefixtures("gc_walks_only_this_modules_objects")   # (its tests gc.collect() 18 times)

@pytest.fixture(params=[("gfx942", None), ("gfx1100", "1"), ("gfx1100", None)], ids=["gfx942-aql", "gfx1100-aql", "gfx1100-pm4"])
def dev(request, monkeypatch):
  arch, aql_env = request.param
  if aql_env is None: monkeypatch.delenv("AMD_AQL", raising=False)
  else: monkeypatch.setenv("AMD_AQL", aql_env)
  drv = install_mock_amd(arch)
  d = AMDDevice("AMD"); d.drv = drv; d.wait_timeout_s = 5.0
  yield d
  uninstall_mock_amd(drv)

def _program(dev, fill: bytes) -> AMDProgram:
  props = (1 << 3) | ((1 << 10) if dev.gfx.wave32 else 0)   # kernarg pointer in s[0:1]
  desc = struct.pack("<III4xq20xIIIHH4x", 0, 0, 8, 0, 0, 0, 2 << 1, props, 0)
  return AMDProgram(dev, "k", fill * 16, desc, [(0, 8)])

def test_new_code_at_a_freed_programs_address_runs_after_an_icache_invalidate(dev):
  ran = []
  def executor(d, vm): ran.append(bytes(vm.read(d.program, 8)))   # (stands in for the machine code: records what ran)
  prev = set_executor(executor)
  try:
    buf = dev.allocator.alloc(64)
    old = _program(dev, b"\x00\x00\x81\xbf")   # s_endpgm
    old(buf, global_size=(1, 1, 1), local_size=(dev.wave_size, 1, 1), wait=True)
    va = old.image.va
    del old; gc.collect()   # dropped (as an evicted kernel): its code is freed once the timeline has passed it
    dev.synchronize()
    new = _program(dev, b"\x00\x00\x80\xbf")   # s_nop 0 ...: other code, same size
    assert new.image.va == va   # (the point of the test: the freed code's address is reused)
    new(buf, global_size=(1, 1, 1), local_size=(dev.wave_size, 1, 1), wait=True)
  finally: set_executor(prev)
  assert ran == [b"\x00\x00\x81\xbf" * 2, b"\x00\x00\x80\xbf" * 2]

def test_nv_code_freed_under_a_held_launch_is_overwritten_only_after_it():
  """NV: a dropped program's code goes back to the allocator (hcqrt/nv/device.py _free_program, at its next call) while its launch
  may still wait in the GPFIFO; the next buffer of that size gets the memory, and the copy engine writing it must run
  behind the timeline (the launch), not when its own channel gets to it (the mock takes up the latest doorbell first)."""
  import numpy as np
  from conftest import mock_nv_device
  from compiler.assemble.ptx_assembler import assemble_ptx
  from hw_tests.kernels import INC, head
  from tests.held_gpu import held_until_the_host_waits
  with mock_nv_device() as nv:
    a = nv.allocator
    out = a.alloc(4); a.copyin(out, memoryview(np.array([5], np.uint32)))
    prog = nv.program("inc", assemble_ptx(head(nv.arch) + INC, nv.arch))
    lib, junk = prog.lib, a.alloc(prog.lib.size)
    a.copyin(junk, memoryview(np.zeros(prog.lib.size, np.uint8)))
    with held_until_the_host_waits(nv.drv, 0):
      prog(out, global_size=(1, 1, 1), local_size=(1, 1, 1))   # queued: the doorbell is held
      del prog; gc.collect()                                     # dropped while its launch waits
      reuse = a.alloc(lib.size)
      assert reuse.va == lib.va   # (the point of the test: the code's memory is handed out again)
      a.transfer(reuse, junk, lib.size)                          # overwrite it on the copy engine
      nv.synchronize()
    got = np.empty(1, np.uint32); a.copyout(memoryview(got), out)
    assert got[0] == 6

def _nv_kernels(arch: str) -> tuple[bytes, bytes]:
  """Two cubins of the same size: `inc` (out[0] += 1) and `inc` adding 7 (other code, same length)."""
  from compiler.assemble.ptx_assembler import assemble_ptx
  from hw_tests.kernels import INC, head
  assert "add.u32 %r2, %r1, 1;" in INC
  return assemble_ptx(head(arch) + INC, arch), assemble_ptx(head(arch) + INC.replace("add.u32 %r2, %r1, 1;", "add.u32 %r2, %r1, 7;"), arch)

def _collect_inside_an_allocation(monkeypatch, a, before=lambda: None) -> list[int]:
  """Patch the NV allocator `a` so that its next cache lookup (`_take`) runs `before()` and a cyclic GC in the middle of
  the allocation; returns the list that collects the address of each buffer freed into the cache (`_keep`) meanwhile."""
  inside, reentered = [], []
  real_take, real_keep = a._take, a._keep
  def take(key):
    inside.append(1)
    try: before(); gc.collect(); return real_take(key)
    finally: inside.pop()
  def keep(key, item):
    if inside: reentered.append(item.va)
    return real_keep(key, item)
  monkeypatch.setattr(a, "_take", take); monkeypatch.setattr(a, "_keep", keep)
  return reentered

def test_nv_program_dropped_inside_the_allocator_is_freed_after_it(monkeypatch):
  """A program dropped while the allocator is mid-call (a cyclic GC can run its finalizer at any bytecode) must not
  re-enter the allocator there (alloc_cache.py _keep iterates the cache; gpu_free synchronizes and calls RM/UVM):
  its code goes back to the cache at the allocator's next call, and is reused (no leak)."""
  from conftest import mock_nv_device
  with mock_nv_device() as nv:
    a = nv.allocator
    holder = [nv.program("inc", _nv_kernels(nv.arch)[0])]
    lib = holder[0].lib
    reentered = _collect_inside_an_allocation(monkeypatch, a, before=holder.clear)   # the program's last reference goes
    other = a.alloc(4)
    assert reentered == [], "the finalizer freed into the cache while an allocation was under way"
    assert other.va != lib.va
    assert a.alloc(lib.size).va == lib.va   # drained at the next call: the code's memory is reused

@pytest.mark.parametrize("arch", ["ampere", "hopper", "blackwell"])   # QMD V03_00, V04_00, V05_00: the bit differs
@pytest.mark.parametrize("method,qmd", [(True, True), (True, False), (False, True), (False, False)],
                         ids=["both", "method-only", "qmd-only", "neither"])
def test_nv_new_code_at_a_freed_programs_address_runs_after_an_icache_invalidate(monkeypatch, method, qmd, arch):
  """The backend invalidates the I$ for every launch (INVALIDATE_SHADER_CACHES_NO_WFI INSTRUCTION and the QMD's
  INVALIDATE_INSTRUCTION_CACHE); either alone makes new code at a freed program's address run. With neither, the
  mock's instruction cache (hcqrt/mock/nv/gpfifo.py fetch_code) still holds the old program's code there: it runs."""
  import numpy as np
  import hcqrt.nv.device as nvd
  from conftest import mock_nv_device
  if not method:   # the launch's INVALIDATE_SHADER_CACHES_NO_WFI without its INSTRUCTION bit (bit 0)
    real_methods = nvd._launch_methods
    def no_inst(v):
      inval, a, b = real_methods(v)
      return [inval[0], inval[1] & ~1], a, b
    monkeypatch.setattr(nvd, "_launch_methods", no_inst)
  if not qmd:
    real_qmd = nvd.launch_qmd
    monkeypatch.setattr(nvd, "launch_qmd", lambda *a, **k: real_qmd(*a, **k).set("INVALIDATE_INSTRUCTION_CACHE", 0))
  with mock_nv_device(arch) as nv:
    inc1, inc7 = _nv_kernels(nv.arch)
    out = nv.allocator.alloc(4); nv.allocator.copyin(out, memoryview(np.array([0], np.uint32)))
    old = nv.program("inc", inc1)
    old(out, global_size=(1, 1, 1), local_size=(1, 1, 1)); nv.synchronize()
    va = old.lib.va
    del old; gc.collect()
    new = nv.program("inc", inc7)
    assert new.lib.va == va   # (the point of the test: the freed code's address is reused)
    new(out, global_size=(1, 1, 1), local_size=(1, 1, 1)); nv.synchronize()
    got = np.empty(1, np.uint32); nv.allocator.copyout(memoryview(got), out)
  assert got[0] == (8 if method or qmd else 2)   # neither: the stale I$ ran `inc` (+1) again

def test_nv_mock_refuses_code_overlapping_stale_icache_lines():
  """Code at another address whose bytes overlap lines the I$ holds (with different bytes there) would run a mix of
  both kernels: the mock refuses it by name rather than guess."""
  import types
  from hcqrt.mock.nv.gpfifo import Channel
  from hcqrt.mock.nv.kernels import cubin_facts
  inc1, inc7 = _nv_kernels("sm_90")
  t1, t7 = cubin_facts(inc1)["inc"][0], cubin_facts(inc7)["inc"][0]
  base, mem = 0x10000, bytearray(0x2000)
  vs = types.SimpleNamespace(icache={}, read=lambda va, n: bytes(mem[va - base:va - base + n]))
  ch = types.SimpleNamespace(vs=vs)
  mem[:len(t1)] = t1
  assert Channel.fetch_code(ch, base, 0x1000, RuntimeError).text == t1
  mem[0x10:0x10 + len(t7)] = t7   # other code loaded 16 bytes in, over the held lines, no invalidate
  with pytest.raises(RuntimeError, match="stale instruction-cache lines"): Channel.fetch_code(ch, base + 0x10, 0x1000, RuntimeError)
  vs.icache.clear()               # after an invalidate it runs
  assert Channel.fetch_code(ch, base + 0x10, 0x1000, RuntimeError).text == t7

def test_nv_buffer_freed_by_a_finalizer_inside_the_allocator_is_freed_after_it(monkeypatch):
  """frontend/buffer.py's finalizer calls allocator.free itself (not free_later): a frontend Buffer collected by a
  cyclic GC in the middle of an allocation must not re-enter the cache there either; its memory is reused after."""
  import weakref
  from conftest import mock_nv_device
  with mock_nv_device() as nv:
    a = nv.allocator
    buf = a.alloc(4096)
    class Owner: pass
    owner = Owner(); owner.me = owner   # a cycle: only the cyclic GC frees it
    weakref.finalize(owner, a.free, buf)
    del owner
    reentered = _collect_inside_an_allocation(monkeypatch, a)
    other = a.alloc(4)
    assert reentered == [], "a finalizer's free went into the cache while an allocation was under way"
    assert other.va != buf.va
    assert a.alloc(4096).va == buf.va   # drained at the next call: reused

def test_nv_allocator_from_two_threads_loses_and_corrupts_nothing():
  """Buffers are freed on any thread (a Buffer's finalizer runs where the GC does: a data loader's, a mock GPU's), while
  another allocates: one thread at a time updates the cache; a free that finds another thread inside is deferred, and
  every buffer freed ends in the cache or back with the driver exactly once."""
  from conftest import mock_nv_device
  from thread_race import race
  with mock_nv_device() as nv:
    a = nv.allocator
    a.cache_limit = 3 * (2 << 20)   # (a few buffers: frees evict, _keep walks the cache)
    def loop(n: int):
      for i in range(300): a.free(a.alloc((2 << 20) * (1 + (i + n) % 3)))
    errors = race(loop)
    assert errors == [], errors[:1]
    nv.synchronize()   # a safe point: deferred frees are done
    assert not a._dropped and a._busy == 0
    held = [b for items in a.cache.values() for b in items]
    assert len({b.va for b in held}) == len(held), "one buffer's memory is cached twice"
    assert a.cached_bytes == sum(b.size for b in held)

def test_nv_buffer_freed_while_an_allocation_runs_out_of_memory_is_given_to_it():
  """A free deferred during an allocation (a cyclic GC inside it runs a Buffer's finalizer; another thread frees) is
  memory that allocation may need: when the driver refuses it for lack of memory, the deferred frees go back too."""
  import dataclasses
  from conftest import mock_nv_device
  with mock_nv_device() as nv:
    a, gpu = nv.allocator, nv.drv.gpus[0]
    nv.drv.chip = dataclasses.replace(nv.drv.chip, fb_size=gpu.vidmem_used + (4 << 20))   # room for one 4 MiB buffer
    big = a.alloc(4 << 20)
    real = nv.gpu_alloc
    def gpu_alloc(*args, **kw):   # the finalizer of the buffer holding `big` runs here, inside the allocator call
      if not big.freed and big not in a._dropped: a.free(big)
      return real(*args, **kw)
    nv.gpu_alloc = gpu_alloc
    got = a.alloc(4 << 20)   # not NV_ERR_NO_MEMORY: the deferred free went back to the driver first
    assert not got.freed and gpu.vidmem_used <= nv.drv.chip.fb_size and not a._dropped and a.cached_bytes == 0

def test_nv_allocator_flush_with_deferred_frees_releases_all_once():
  """flush releases each cached buffer (gpu_free synchronizes, and synchronize reaps): a deferred free that lands in
  the cache while flush walks it must not break the walk nor leave a released buffer in the cache to be handed out."""
  from conftest import mock_nv_device
  with mock_nv_device() as nv:
    a = nv.allocator
    for b in [a.alloc(4096 * (1 + i)) for i in range(3)]: a.free(b)
    dropped = a.alloc(1 << 20); a.free_later(dropped)   # a dropped program's code, not yet reaped
    a.flush()
    assert a.cache == {} and a.cached_bytes == 0 and not a._dropped and dropped.freed
    assert not a.alloc(4096).freed
