"""The mock NV GPU's constant cache: the lines of constant bank 0 (kernel parameters, the launch words of c[0]) that
CTAs read stay cached until an invalidate with CONSTANT drops them; a later read of a held line returns the bytes it
held, not memory as it is now (the harmful side: a host that rewrites a cbuf at an address a grid read before and
launches without an invalidate runs on the OLD parameters, silently, as a stale constant cache would).

Facts (open-gpu-doc@c8607fe classes/compute):
- The compute class has a constant-cache invalidate on both cache-invalidate methods: INVALIDATE_SHADER_CACHES_CONSTANT
  12:12 (clc6c0.h:228, clcbc0.h:306, clcdc0.h:261, clcec0.h:269) and INVALIDATE_SHADER_CACHES_NO_WFI_CONSTANT 12:12
  (clc6c0.h:562, clcbc0.h:702, clcdc0.h:636, clcec0.h:673). The first waits for idle before it drops (the grids
  launched before it read c[0] first, then lose those lines); _NO_WFI does not: a grid queued before it reads after it
  and its lines stay (gpfifo.py Channel.execute). A launch's QMD has its own INVALIDATE_SHADER_CONSTANT_CACHE
  (V03_00 bit 191 clc6c0qmd.h:530, V04_00 bit 607 clcbc0qmd.h:447, V05_00 bit 477 clcdc0qmd.h:169). Neither the
  headers nor Mesa give its timing (nvc0 sets it in its Kepler QMD V00_06, nve4_compute.c, and says no more). The mock
  drops the cache at the launch method, when SKED takes the QMD (gpfifo.py launch_qmd), not when the grid's CTAs
  start -- an assumption, chosen as the harmful one: a constant written before the launch is read fresh either way,
  but lines other grids' CTAs fill between the launch and this grid's CTAs stay; and with the newest launch drained
  first (gpfifo.py drain), a drop at each grid's start would refresh the lines of the grids launched before it between
  their slices, where a drop at the launch refreshes nothing.
- What the headers do NOT say, and what the mock assumes (the harmful readings, under which a backend is right only if
  it invalidates itself):
  * Nothing else drops lines: not a launch (SEND_SIGNALING_PCAS_B_INVALIDATE clc6c0.h:365 and PCAS_ACTION_INVALIDATE*
    clc6c0.h:375-383 act on the QMD at SEND_PCAS_A, which SKED holds -- invalidating an active QMD is a SKED error,
    manuals/ampere/ga100/pri_sked.ref.txt:167 -- not on the SMs' constant cache), not the end of a grid, not a write
    through the compute class itself: Mesa nvc0 follows each inline upload of a constant buffer (UPLOAD_EXEC, the
    class's inline-to-memory) with method 0x1698 bit 12 (src/gallium/drivers/nouveau/nvc0/nve4_compute.c
    nve4_compute_upload_input, nve4_compute_validate_constbufs: FLUSH(NVE4_COMPUTE_FLUSH_CB); nve4_compute.xml.h
    NVE4_COMPUTE_FLUSH 0x1698, _FLUSH_CB 0x1000 = INVALIDATE_SHADER_CACHES_NO_WFI_CONSTANT), and its gp100+ QMDs
    do not set INVALIDATE_SHADER_CONSTANT_CACHE: that method is what makes its new constants visible.
  * "Auto invalidate": the QMD's DISABLE_AUTO_INVALIDATE (V03_00 bit 383 clc6c0qmd.h:565, V04_00 bit 380
    clcbc0qmd.h:397, V05_00 bit 343 clcdc0qmd.h:118) is described nowhere; the only other "auto invalidate" in the
    sources is of SKED's QMD cache (NV_PGRAPH_PRI_SKED_DEBUG_1_AUTO_INVALIDATE_QMD, manuals/volta/gv100/pri_sked.ref.txt:
    282-285, PROD value DISABLE). So the mock reads it as a QMD-cache control and drops no constant lines for it, set
    or clear. (The lenient reading -- every launch auto-invalidates the constant cache unless the bit is set -- would
    let a backend without invalidates pass: not modelled.)
  * The QMD's per-bank CONSTANT_BUFFER_INVALIDATE(i) (clc6c0qmd.h:698, clcbc0qmd.h:414, clcdc0qmd.h:273) sits with the
    bank's PREFETCH control and has no stated meaning without a prefetch: not honoured (hcqrt never sets it).
  * Scope: one cache per GPU address space (as the mock's I$, gpfifo.py execute): filled by any channel of it, dropped
    for all of it. The headers do not say whether it is per SM, per GPC or per context.
  * Line size: LINE bytes, aligned. No NVIDIA source gives the constant cache's line size; 64 B is the mock's choice
    (a whole line is fetched on a miss, so a write to bytes of a held line the grid never read is missed too).
"""
from __future__ import annotations
from collections.abc import Callable

LINE = 64

def cached_read(lines: dict[int, bytes], read: Callable[[int, int], bytes], va: int, n: int) -> bytes:
  """`n` bytes at `va` through the constant cache `lines` (line address -> the LINE bytes it holds): held lines give
  their held bytes, missing ones are fetched whole with `read(address, LINE)` and kept.

  >>> mem = bytearray(range(128)); lines = {}
  >>> cached_read(lines, lambda a, k: bytes(mem[a:a + k]), 62, 4), sorted(lines)
  (b'>?@A', [0, 64])
  >>> mem[62:66] = b"XXXX"; cached_read(lines, lambda a, k: bytes(mem[a:a + k]), 62, 4)   # held: the old bytes
  b'>?@A'
  """
  if n <= 0: return b""
  first = va - va % LINE
  out = bytearray()
  for line in range(first, va + n, LINE):
    if (held := lines.get(line)) is None: held = lines[line] = read(line, LINE)
    out += held
  return bytes(out[va - first:va - first + n])
