"""Constant bank 0 as the GPU's code reads it (issue 22, N1): the mock takes every special register and window that
SASS loads from c[0] out of the bound constant buffer's memory, not from the QMD; the backend writes them there.

Each source has a test: blockDim/gridDim (%ntid/%nctaid), %nsmid and %dynamic_smem_size from c[0]; the local window
(cvta.local) from c[0]; the shared window from c[0][0x18] on sm_8x and from SET_SHADER_SHARED_MEMORY_WINDOW on sm_90+;
%tid/%ctaid and the set of CTAs that run from the launch (the QMD). The offsets and the SASS they come from are in
hcqrt/mock/nv/gpfifo.py (CB0_SPECIALS) and hcqrt/nv/qmd_build.py (CB0_DIMS)."""
import struct
import numpy as np
import pytest
from conftest import mock_nv_device
from hcqrt.interface import GraphExec
from hcqrt.mock.nv import gpfifo as G
from hcqrt.nv import device as D
from compiler.assemble.ptx_assembler import assemble_ptx
from hw_tests import kernels as K

ARCHS = ["ampere", "ada", "hopper", "blackwell"]

# out[0..5] = ntid.xyz, nctaid.xyz; out[6] = nsmid; out[7] = dynamic_smem_size; out[8..9] = cvta.local of a local
# array, out[10..11] = cvta.shared of a shared array (u64 each); out[16] counts the threads that ran (atomically);
# out[32 + 8 * ctaid.x + 4 * tid.y + tid.x] = tid.x + 100 * ctaid.x (a layout for 4x2 blocks that needs no %ntid)
PROBE = """.visible .entry probe(.param .u64 out)
{
  .reg .b32 %r<16>; .reg .b64 %rd<10>;
  .shared .align 8 .b64 sh[4];
  .local .align 8 .b64 loc[2];
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %ntid.x; mov.u32 %r2, %ntid.y; mov.u32 %r3, %ntid.z;
  mov.u32 %r4, %nctaid.x; mov.u32 %r5, %nctaid.y; mov.u32 %r6, %nctaid.z;
  mov.u32 %r7, %nsmid; mov.u32 %r8, %dynamic_smem_size;
  mov.u64 %rd2, loc; cvta.local.u64 %rd3, %rd2; mov.u64 %rd4, sh; cvta.shared.u64 %rd5, %rd4;
  st.global.v4.u32 [%rd1], {%r1, %r2, %r3, %r4};
  st.global.v4.u32 [%rd1+16], {%r5, %r6, %r7, %r8};
  st.global.u64 [%rd1+32], %rd3; st.global.u64 [%rd1+40], %rd5;
  mov.u32 %r9, %tid.x; mov.u32 %r10, %ctaid.x; mul.lo.u32 %r11, %r10, 100; add.u32 %r11, %r11, %r9;
  mov.u32 %r12, %tid.y; mad.lo.u32 %r14, %r12, 4, %r9;
  mad.lo.u32 %r15, %r10, 8, %r14; add.u32 %r15, %r15, 32;
  atom.global.add.u32 %r13, [%rd1+64], 1;
  mul.wide.u32 %rd6, %r15, 4; add.s64 %rd7, %rd1, %rd6; st.global.u32 [%rd7], %r11;
  ret;
}"""

@pytest.fixture(params=ARCHS)
def nv(request):
  with mock_nv_device(request.param) as dev: yield dev

def probe_src(dev) -> str:   # sm_100+ refuse %dynamic_smem_size (test_dynamic_smem_size_is_refused_on_v05)
  return PROBE if dev.sm < 100 else PROBE.replace("%dynamic_smem_size", "0")

def run_probe(dev, grid=(3, 1, 1), block=(4, 2, 1)):
  p = dev.program("probe", assemble_ptx(K.head(dev.arch) + probe_src(dev), dev.arch))
  out = dev.allocator.alloc(4096)
  dev.allocator.copyin(out, memoryview(np.zeros(1024, np.uint32)))
  p(out, global_size=grid, local_size=block, wait=True)
  res = np.zeros(1024, np.uint32); dev.allocator.copyout(memoryview(res), out)
  return p, res

def test_dims_reach_the_code(nv):
  _, r = run_probe(nv)
  assert r[:6].tolist() == [4, 2, 1, 3, 1, 1]
  # every thread of every CTA ran, with its own %tid.x/%ctaid.x (from the launch)
  assert r[16] == 24 and r[32:56].tolist() == [c * 100 + x for c in range(3) for _ in range(2) for x in range(4)]

def test_dims_come_from_constant_bank_0_not_the_qmd(nv, monkeypatch):
  """The QMD says 3 CTAs of 4x2 threads (they all run), c[0] says blockDim 7x5x3 / gridDim 9x6x2: the code sees c[0]."""
  real = D.set_cbuf_dims
  monkeypatch.setattr(D, "set_cbuf_dims", lambda cb, v, g, l: real(cb, v, (9, 6, 2), (7, 5, 3)))
  _, r = run_probe(nv)
  assert r[:6].tolist() == [7, 5, 3, 9, 6, 2]
  assert r[16] == 24 and r[32:56].tolist() == [c * 100 + x for c in range(3) for _ in range(2) for x in range(4)]   # the QMD's threads ran

def test_old_backend_without_dims_in_cbuf_fails(nv, monkeypatch):
  """The backend before the fix (dims only in the QMD): the code reads blockDim/gridDim 0 and indexes wrong."""
  monkeypatch.setattr(D, "set_cbuf_dims", lambda cb, v, g, l: None)
  _, r = run_probe(nv)
  assert r[:6].tolist() == [0] * 6
  idx = nv.program("idx3", assemble_ptx(K.head(nv.arch) + K.IDX3, nv.arch))
  out = nv.allocator.alloc(4 * 64)
  nv.allocator.copyin(out, memoryview(np.full(64, 0xFFFFFFFF, np.uint32)))
  idx(out, global_size=(2, 2, 1), local_size=(4, 2, 2), wait=True)
  got = np.zeros(64, np.uint32); nv.allocator.copyout(memoryview(got), out)
  assert got.tolist() != list(range(64))

def test_nsmid_and_dynamic_smem_size_come_from_constant_bank_0(nv, monkeypatch):
  version = nv.qmd_version
  real = D.set_cbuf_dims
  def poke(cb, v, g, l):
    real(cb, v, g, l)
    struct.pack_into("<I", cb, G.CB0_SPECIALS[version]["%nsmid"], 1234)
    if "%dynamic_smem_size" in G.CB0_SPECIALS[version]: struct.pack_into("<I", cb, G.CB0_SPECIALS[version]["%dynamic_smem_size"], 4321)
  monkeypatch.setattr(D, "set_cbuf_dims", poke)
  _, r = run_probe(nv)
  assert r[6] == 1234
  if nv.sm < 100: assert r[7] == 4321

@pytest.fixture
def blackwell():
  with mock_nv_device("blackwell") as dev: yield dev

def test_dynamic_smem_size_is_refused_on_v05(blackwell):
  """sm_100+ code reads it from c[0][SR_CgaSize+0x2ac], a word nobody writes: a launch error, not the QMD's value
  (sm_8x/sm_90 read it from c[0][0x2c]: tested above on every arch)."""
  nv = blackwell
  assert nv.qmd_version == "V05_00"
  p = nv.program("probe", assemble_ptx(K.head(nv.arch) + PROBE, nv.arch))
  out = nv.allocator.alloc(4096)
  with pytest.raises(D.NVError, match="Xid 13"): p(out, global_size=(1, 1, 1), local_size=(1, 1, 1), wait=True)
  assert "%dynamic_smem_size" in nv.drv.faults[-1] and "0x2ac" in nv.drv.faults[-1]   # the launch error the RC reported

def test_local_window_comes_from_constant_bank_0(nv):
  p, r = run_probe(nv)
  lw = nv.windows()[1]
  assert int(r[8]) | int(r[9]) << 32 == lw   # loc is the first (only) local variable: offset 0
  cb = bytearray(p.cbuf0)
  struct.pack_into("<Q", cb, G.LOCAL_WINDOW_CB0[nv.qmd_version], lw + (1 << 33))
  p.cbuf0 = bytes(cb)
  out = nv.allocator.alloc(4096)
  p(out, global_size=(1, 1, 1), local_size=(1, 1, 1), wait=True)
  res = np.zeros(16, np.uint32); nv.allocator.copyout(memoryview(res), out)
  assert int(res[8]) | int(res[9]) << 32 == lw + (1 << 33)

def test_shared_window_source(nv):
  """sm_8x adds c[0][0x18]; sm_90+ uses the window the SET_SHADER_SHARED_MEMORY_WINDOW method programmed."""
  p, r = run_probe(nv)
  sw = nv.windows()[0]
  assert int(r[10]) | int(r[11]) << 32 == sw
  cb = bytearray(p.cbuf0)
  struct.pack_into("<Q", cb, 188 * 4 if nv.qmd_version == "V05_00" else 0x18, sw + (1 << 34))   # where the backend writes it
  p.cbuf0 = bytes(cb)
  out = nv.allocator.alloc(4096)
  p(out, global_size=(1, 1, 1), local_size=(1, 1, 1), wait=True)
  res = np.zeros(16, np.uint32); nv.allocator.copyout(memoryview(res), out)
  assert int(res[10]) | int(res[11]) << 32 == (sw + (1 << 34) if nv.sm < 90 else sw)

def test_update_exec_rewrites_the_dims_in_constant_bank_0(nv):
  p = nv.program("probe", assemble_ptx(K.head(nv.arch) + probe_src(nv), nv.arch))
  out = nv.allocator.alloc(4096)
  from hcqrt.hcq import GraphReplay
  g = GraphReplay(nv, [GraphExec(p, [out], [], (3, 1, 1), (4, 2, 1))])
  g.replay(wait=True)
  q, c = g.where[0]
  q.update_exec(c, global_size=(5, 1, 1), local_size=(2, 3, 1))
  g.replay(wait=True)
  r = np.zeros(16, np.uint32); nv.allocator.copyout(memoryview(r), out)
  assert r[:6].tolist() == [2, 3, 1, 5, 1, 1]

@pytest.mark.parametrize("arch", ["ampere", "hopper", "blackwell"])   # QMD V03_00, V04_00, V05_00: the QMD bit differs
@pytest.mark.parametrize("method,qmd", [(True, True), (True, False), (False, True), (False, False)],
                         ids=["both", "method-only", "qmd-only", "neither"])
def test_a_replay_reads_its_new_args_after_a_constant_cache_invalidate(monkeypatch, method, qmd, arch):
  """A graph replay patches its arguments in place: the second replay's kernel reads new parameters at the same
  constant bank 0 address as the first. The backend invalidates the constant cache for every launch
  (INVALIDATE_SHADER_CACHES_NO_WFI CONSTANT and the QMD's INVALIDATE_SHADER_CONSTANT_CACHE); either alone makes the
  new value reach the code. With neither, the mock's constant cache (hcqrt/mock/nv/constcache.py) still holds the line
  the first replay read: the kernel runs on the OLD argument."""
  from hcqrt.hcq import GraphReplay
  if not method:   # the launch's INVALIDATE_SHADER_CACHES_NO_WFI without its CONSTANT bit (bit 12)
    real_methods = D._launch_methods
    def no_const(v):
      inval, a, b = real_methods(v)
      return [inval[0], inval[1] & ~(1 << 12)], a, b
    monkeypatch.setattr(D, "_launch_methods", no_const)
  if not qmd:
    real_qmd = D.launch_qmd
    monkeypatch.setattr(D, "launch_qmd", lambda *a, **k: real_qmd(*a, **k).set("INVALIDATE_SHADER_CONSTANT_CACHE", 0))
  with mock_nv_device(arch) as nv:
    p = nv.program("setv", assemble_ptx(K.head(nv.arch) + K.SETV, nv.arch))
    out = nv.allocator.alloc(4)
    g = GraphReplay(nv, [GraphExec(p, [out], [11], (1, 1, 1), (1, 1, 1))])
    got = []
    for v in (11, 22):
      g.replay(vals={(0, 0): v}, wait=True)
      r = np.zeros(1, np.uint32); nv.allocator.copyout(memoryview(r), out); got.append(int(r[0]))
  assert got == ([11, 22] if method or qmd else [11, 11])   # neither: the stale constant cache gave the first replay's 11
