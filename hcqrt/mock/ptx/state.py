"""Execution state of one chunk of threads (one or more whole blocks run together) and the state spaces
they address: .global (through AddressSpace), .shared (per block), .local (per thread), .const, .param,
and generic addresses (shared and local live in fixed windows of the generic space).

Thread t of a chunk: block t // threads_per_block (of the chunk), linear thread id t % threads_per_block.

>>> import numpy as np
>>> from hcqrt.mock.ptx.memory import AddressSpace
>>> st = State(AddressSpace(), (2,1,1), (4,1,1), 0, 2, np.zeros(0, np.uint8), 0, 0, None)
>>> st.special("%tid.x").tolist(), st.special("%ctaid.x").tolist()
([0, 1, 2, 3, 0, 1, 2, 3], [0, 0, 0, 0, 1, 1, 1, 1])
"""
from __future__ import annotations
import numpy as np
from .memory import AddressSpace, MemoryFault

SHARED_WINDOW = 1 << 52       # generic address of shared byte 0 (cvta.shared adds this)
LOCAL_WINDOW = 2 << 52        # generic address of local byte 0 (cvta.local adds this)
WINDOW_SIZE = 1 << 32
U64 = np.dtype(np.uint64)

class FlatSpace:
  """A state space held in one host uint8 array, addressed by byte offset."""
  def __init__(self, buf: np.ndarray, name: str):
    self.buf, self.name, self._views = buf, name, {}

  def _typed(self, dt: np.dtype) -> np.ndarray:
    v = self._views.get(dt)
    if v is None: v = self._views[dt] = self.buf[:self.buf.size - self.buf.size % dt.itemsize].view(dt)
    return v

  def _idx(self, pos: np.ndarray, dt: np.dtype, vec: int) -> np.ndarray:
    pos = np.asarray(pos, U64).reshape(-1)
    if pos.size == 0: return pos.astype(np.intp)
    sz = dt.itemsize
    # element sizes are powers of two: an OR-reduction finds any misaligned offset and a shift indexes (numpy's
    # uint64 % and // are several times slower than the whole rest of an access)
    if int(np.bitwise_or.reduce(pos)) & (sz - 1):
      raise MemoryFault(f"misaligned {sz}-byte .{self.name} access at offset {int(pos[(pos & np.uint64(sz - 1)) != 0][0]):#x}")
    if int(pos.max()) + sz * vec > self.buf.size:
      raise MemoryFault(f".{self.name} access of {sz*vec} bytes at offset {int(pos.max()):#x} beyond its {self.buf.size} bytes")
    return (pos >> np.uint64(sz.bit_length() - 1)).view(np.intp)

  def gather(self, pos, dt: np.dtype, vec: int = 1, what: str = "load") -> np.ndarray:
    idx, t = self._idx(pos, dt, vec), self._typed(dt)
    return t[idx] if vec == 1 else t[idx[:, None] + np.arange(vec)]

  def scatter(self, pos, dt: np.dtype, values, vec: int = 1, what: str = "store") -> None:
    idx, t = self._idx(pos, dt, vec), self._typed(dt)
    if vec == 1: t[idx] = values
    else: t[idx[:, None] + np.arange(vec)] = values

class GlobalSpace:
  """.global through the AddressSpace."""
  name = "global"
  def __init__(self, mem: AddressSpace): self.mem = mem
  def gather(self, pos, dt, vec=1, what="load"): return self.mem.gather(pos, dt, vec, what)
  def scatter(self, pos, dt, values, vec=1, what="store"): self.mem.scatter(pos, dt, values, vec, what)

class State:
  """Registers and state spaces of `nblocks` consecutive blocks (linear ids from `block0`) run as one array of threads."""
  def __init__(self, mem: AddressSpace, grid: tuple[int, int, int], block: tuple[int, int, int], block0: int, nblocks: int,
               params: np.ndarray, shared_size: int, local_size: int, const: FlatSpace | None,
               specials: dict[str, int] | None = None, windows: tuple[int | None, int | None] | None = None):
    self.grid, self.block, self.block0, self.nblocks = grid, block, block0, nblocks
    # special registers the GPU's code reads from constant bank 0, not from the launch (a GPU model passes them)
    self.cb_specials = specials or {}
    # generic-address windows of shared and local memory; each reaches up to 4 GiB or to the other window's base
    sw0, lw0 = windows or (None, None)
    self.shared_window, self.local_window = SHARED_WINDOW if sw0 is None else sw0, LOCAL_WINDOW if lw0 is None else lw0
    sw, lw = self.shared_window, self.local_window
    self.shared_end = min(sw + WINDOW_SIZE, lw if lw > sw else 1 << 64)
    self.local_end = min(lw + WINDOW_SIZE, sw if sw > lw else 1 << 64)
    self.tpb = block[0] * block[1] * block[2]
    self.n = self.tpb * nblocks
    self.R: dict = {}
    self.gmem = GlobalSpace(mem)
    self.param = FlatSpace(params, "param")
    self.const = const
    # per-block shared and per-thread local memory, padded to 16 bytes so typed views line up
    self.shared_size, self.local_size = shared_size, local_size
    sstride, lstride = -(-shared_size // 16) * 16, -(-local_size // 16) * 16
    self.shared = FlatSpace(np.zeros(sstride * nblocks, np.uint8), "shared") if shared_size else None
    self.local = FlatSpace(np.zeros(lstride * self.n, np.uint8), "local") if local_size else None
    t = np.arange(self.n, dtype=np.uint64)
    self.sbase = np.uint64(0) if nblocks == 1 else (t // np.uint64(self.tpb)) * np.uint64(sstride)
    self.lbase = t * np.uint64(lstride) if self.n > 1 else np.uint64(0)
    self._spec: dict = {}

  def special(self, name: str):
    """Value of a special register (uint32; scalar when uniform over the chunk)."""
    v = self._spec.get(name)
    if v is None: v = self._spec[name] = self._compute_special(name)
    return v

  def _compute_special(self, name: str):
    u = np.uint32
    if name in self.cb_specials: return u(self.cb_specials[name])
    base, _, comp = name.partition(".")
    ax = "xyz".index(comp) if comp in ("x", "y", "z") else 0
    bx, by, _bz = self.block
    if base == "%ntid": return u(self.block[ax])
    if base == "%nctaid": return u(self.grid[ax])
    tl = np.arange(self.n, dtype=np.uint32) % u(self.tpb) if self.n > 1 else u(0)
    if base == "%tid":
      if self.block[ax] == 1: return u(0)
      return [tl % u(bx), (tl // u(bx)) % u(by), tl // u(bx * by)][ax]
    if base == "%ctaid":
      lb = (np.uint32(self.block0) + np.arange(self.n, dtype=np.uint32) // u(self.tpb)) if self.nblocks > 1 else u(self.block0)
      gx, gy, _ = self.grid
      return [lb % u(gx), (lb // u(gx)) % u(gy), lb // u(gx * gy)][ax]
    if base == "%laneid": return tl % u(32)
    if base == "%warpid": return tl // u(32)
    if base == "%nwarpid": return u(-(-self.tpb // 32))
    if base in ("%lanemask_eq", "%lanemask_lt", "%lanemask_le", "%lanemask_gt", "%lanemask_ge"):
      lane = (tl % u(32)).astype(np.uint64)
      eq = np.uint64(1) << lane
      return {"%lanemask_eq": eq, "%lanemask_lt": eq - np.uint64(1), "%lanemask_le": (eq << np.uint64(1)) - np.uint64(1),
              "%lanemask_gt": ~((eq << np.uint64(1)) - np.uint64(1)), "%lanemask_ge": ~(eq - np.uint64(1))}[base].astype(np.uint32)
    if base == "%dynamic_smem_size": return u(getattr(self, "dynamic_smem", 0))
    if base == "%total_smem_size": return u(self.shared_size)
    return u(0)  # %smid, %gridid, %clock...: constant in an emulator

  # *** addressing ***
  def resolve(self, space: str, addr, mask, nbytes: int):
    """Turn addresses (uint64 scalar or per-thread array) in `space` into [(space object, positions of the active
    threads, selection mask)]. Generic addresses are split by window."""
    if space == "generic":
      wins = ((self.shared_window, self.shared_end, "shared"), (self.local_window, self.local_end, "local"))
      if np.ndim(addr) == 0:
        a = int(addr)
        for win, end, sp in wins:
          if win <= a < end: return self.resolve(sp, np.uint64(a - win), mask, nbytes)
        return self.resolve("global", addr, mask, nbytes)
      (sw, se, _), (lw, le, _) = wins
      sh = (addr >= np.uint64(sw)) & (addr < np.uint64(se))
      lo = (addr >= np.uint64(lw)) & (addr < np.uint64(le))
      if mask is not None: sh, lo = sh & mask, lo & mask
      if not sh.any() and not lo.any(): return self.resolve("global", addr, mask, nbytes)
      gl = ~(sh | lo) if mask is None else (mask & ~(sh | lo))
      out = []
      if sh.any(): out += self.resolve("shared", addr - np.uint64(sw), sh, nbytes)
      if lo.any(): out += self.resolve("local", addr - np.uint64(lw), lo, nbytes)
      if gl.any(): out += self.resolve("global", addr, gl, nbytes)
      return out
    if space == "global": sp, pos = self.gmem, addr
    elif space in ("shared", "local"):
      sp, size, base = (self.shared, self.shared_size, self.sbase) if space == "shared" else (self.local, self.local_size, self.lbase)
      a = addr if mask is None or np.ndim(addr) == 0 else addr[mask]
      if sp is None or (np.size(a) and int(np.max(a)) + nbytes > size):
        bad = int(np.max(a)) if np.size(a) else 0
        raise MemoryFault(f".{space} access of {nbytes} bytes at offset {bad:#x} beyond the {size} bytes declared")
      pos = base + addr
    elif space == "const":
      if self.const is None: raise MemoryFault("ld.const but the module declares no .const data")
      sp, pos = self.const, addr
    elif space == "param": sp, pos = self.param, addr
    else: raise MemoryFault(f"unsupported state space .{space}")
    if mask is not None and np.ndim(pos) > 0: pos = pos[mask]
    return [(sp, pos, mask)]

  def load(self, parts, dt: np.dtype, vec: int) -> list:
    """Gather `vec` elements per active thread; returns `vec` values (scalars when uniform, else (n,) arrays;
    inactive threads read 0, the register writer keeps their old value)."""
    if len(parts) == 1:
      sp, pos, sel = parts[0]
      if np.ndim(pos) == 0:
        v = sp.gather(np.array([pos], U64), dt, vec)
        return [v[0]] if vec == 1 else [v[0, k] for k in range(vec)]
      if sel is None:
        v = sp.gather(pos, dt, vec)
        return [v] if vec == 1 else [v[:, k] for k in range(vec)]
    out = [np.zeros(self.n, dt) for _ in range(vec)]
    for sp, pos, sel in parts:
      cnt = int(np.count_nonzero(sel)) if sel is not None else self.n
      v = sp.gather(np.broadcast_to(np.asarray(pos, U64), (cnt,)), dt, vec)
      for k in range(vec): out[k][sel if sel is not None else slice(None)] = v if vec == 1 else v[:, k]
    return out

  def store(self, parts, dt: np.dtype, vec: int, vals: list) -> None:
    """Scatter `vec` values per active thread (values scalar or (n,) arrays)."""
    for sp, pos, sel in parts:
      comps = [v if np.ndim(v) == 0 or sel is None else v[sel] for v in vals]
      if np.ndim(pos) == 0:   # one address for everyone: the last active thread's value wins
        comps = [c if np.ndim(c) == 0 else c[-1] for c in comps]
        pos = np.array([pos], U64)
      if vec == 1: V = np.broadcast_to(np.asarray(comps[0], dt), pos.shape)
      else: V = np.stack([np.broadcast_to(np.asarray(c, dt), pos.shape) for c in comps], axis=1)
      sp.scatter(pos, dt, V, vec)
