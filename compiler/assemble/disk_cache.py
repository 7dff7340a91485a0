"""The on-disk cache shared by the assemblers (and BEAM): one root directory, atomic writes, a bounded size.

Layout: `$HCQRT_CACHE/<kind>/<key>.<ext>`, kind one of KINDS. A file never changes once renamed into place (its name is
a hash of everything that decides its bytes), so a reader sees a whole file or none, never a partial or another one.

The bound (HCQRT_CACHE_MAX_MB, compiler/settings.py disk_cache_max_bytes) is on disk usage: each file counts its size
rounded up to whole BLOCKs (what `du` shows on ext4, xfs and tmpfs; the cache is mostly files of 1-10 KB, whose bytes
alone undercount the disk they take by 3x).
- The ledger, `<root>/.usage`, holds the cache's usage; every write adds to it under an flock on it, so the processes
  sharing the directory (pytest -n 2, several training jobs) see each other's writes without scanning it. Scanning
  costs a stat per file (1.5 s for 200k files), so it happens only when a write takes the total past the limit, when
  the ledger is missing or unreadable, or when it was last scanned RESCAN_S ago (which catches writers that kept no
  count: an older hcqrt, a process killed between its rename and its count).
- The trim removes the least recently used files first (by mtime: a hit touches a file whose mtime is older than
  TOUCH_S, so a hot loop of hits costs no extra syscall), BEAM results last (tiny, and each one is a search of seconds
  to redo), down to LOW_WATER of the limit so that the next trim is many writes away. Temporary files younger than
  TMP_STALE_S are another process's write in flight: left alone; older ones were left by a killed process: removed.
- Races: a reader whose file a trim removed first just misses (read_cached returns None: it recompiles); one that
  opened it first reads it whole (an unlinked file lives until closed). Two trims serialize on the ledger's lock.

>>> import os
>>> from compiler.assemble.disk_cache import cache_root
>>> cache_root() == (pathlib.Path(os.environ["HCQRT_CACHE"]) if os.environ.get("HCQRT_CACHE") else cache_root().parent / "hcqrt")
True
"""
from __future__ import annotations
import fcntl, os, pathlib, shutil, stat, tempfile, time
from compiler.settings import disk_cache_max_bytes

KINDS = ("c", "cubin", "llvm", "beam")   # the subdirectories the cache's users write; a trim looks at nothing else
BLOCK = 4096              # a file takes its size rounded up to this on disk
TOUCH_S = 3600.0          # a hit marks a file used again when its mark is older than this (LRU to within an hour)
RESCAN_S = 86400.0        # the ledger is checked against the directory at least this often
TMP_STALE_S = 86400.0     # a temp file older than this is a killed writer's: no compile takes a day
LOW_WATER = 0.9           # a trim leaves the cache at this fraction of its limit
LEDGER = ".usage"

def cache_root() -> pathlib.Path:
  """$HCQRT_CACHE, else ${XDG_CACHE_HOME:-~/.cache}/hcqrt; each user of the cache takes a subdirectory (KINDS)."""
  if os.environ.get("HCQRT_CACHE"): return pathlib.Path(os.environ["HCQRT_CACHE"])
  return pathlib.Path(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")) / "hcqrt"

def usage(size: int) -> int:
  """The disk a file of `size` bytes is counted as taking.

  >>> usage(1), usage(4096), usage(4097)
  (4096, 4096, 8192)
  """
  return -(-size // BLOCK) * BLOCK

def atomic_write(path: pathlib.Path, data: bytes) -> None:
  """Write a private temp file in the same directory, then rename: readers in other processes see either
  nothing or the whole file, never a partial one."""
  path.parent.mkdir(parents=True, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
  try:
    with os.fdopen(fd, "wb") as f: f.write(data)
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp): os.unlink(tmp)
    raise

def write_cached(path: pathlib.Path, data: bytes) -> None:
  """atomic_write into the cache, counted against its bound."""
  atomic_write(path, data)
  note_written(len(data))

def read_cached(path: pathlib.Path) -> bytes | None:
  """The bytes of a cache file, or None when it is not there (never written, or trimmed by another process meanwhile:
  the caller rebuilds it). Opens, fstats, reads and closes, no more: the mtime the fstat gives decides whether the
  file is marked used again (only when older than TOUCH_S, through the open descriptor)."""
  try: fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
  except OSError: return None
  try:
    st = os.fstat(fd)
    parts, left = [], st.st_size   # the file never changes once in place, so its size is its length
    while left > 0 and (b := os.read(fd, left)):
      parts.append(b)
      left -= len(b)
    if time.time() - st.st_mtime > TOUCH_S:
      try: os.utime(fd)
      except OSError: pass   # another user's file or a read-only cache: it only ages
    return b"".join(parts)
  finally: os.close(fd)

def note_written(nbytes: int) -> None:
  """Count a file of `nbytes` just renamed into the cache in the ledger; trim when that takes the cache past its
  limit (or the ledger can't be trusted). Never raises: the bound is housekeeping, a compile must not fail over it."""
  root = cache_root()
  try: fd = os.open(root / LEDGER, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
  except OSError: return
  try:
    fcntl.flock(fd, fcntl.LOCK_EX)   # held until the close: other writers wait here, readers never take it
    total, scanned, limit, now = *_read_ledger(fd), disk_cache_max_bytes(), time.time()
    if total is None or now - scanned > RESCAN_S or total + usage(nbytes) > limit: total, scanned = trim(root, limit), now
    else: total += usage(nbytes)
    data = f"{total} {scanned:.0f}\n".encode()
    os.pwrite(fd, data, 0)
    os.ftruncate(fd, len(data))
  except OSError: pass
  finally: os.close(fd)

def _read_ledger(fd: int) -> tuple[int | None, float]:
  try:
    total, scanned = os.pread(fd, 64, 0).split()
    return int(total), float(scanned)
  except ValueError: return None, 0.0   # new, or torn by a killed writer: scan

def trim(root: pathlib.Path, max_bytes: int) -> int:
  """Scan the cache under `root`; when it takes more than `max_bytes`, remove files, least recently used first and BEAM
  results last, until it takes at most LOW_WATER * max_bytes. Returns what it takes then. Callers hold the ledger's
  lock (note_written), so two trims never overlap; readers and writers may run meanwhile (see the module doc)."""
  files: list[tuple[bool, float, int, str]] = []
  total, now = 0, time.time()
  for kind in KINDS:
    try: it = os.scandir(root / kind)
    except OSError: continue
    with it:
      for e in it:
        try: st = e.stat(follow_symlinks=False)
        except OSError: continue   # removed meanwhile
        if e.name.endswith(".tmp"):   # a write in flight (file or a compile's private directory), or a killed one's
          if now - st.st_mtime > TMP_STALE_S:
            if stat.S_ISDIR(st.st_mode): shutil.rmtree(e.path, ignore_errors=True)
            else: _unlink(e.path)
          continue
        if not stat.S_ISREG(st.st_mode): continue
        total += (u := usage(st.st_size))
        files.append((kind == "beam", st.st_mtime, u, e.path))
  if total <= max_bytes: return total
  files.sort()
  for _, _, u, path in files:
    if total <= LOW_WATER * max_bytes: break
    if _unlink(path): total -= u
  return total

def _unlink(path: str) -> bool:
  try: os.unlink(path)
  except FileNotFoundError: return True   # another process removed it first: gone all the same
  except OSError: return False
  return True
