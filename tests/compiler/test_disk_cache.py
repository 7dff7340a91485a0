"""The on-disk cache is bounded (compiler/assemble/disk_cache.py, HCQRT_CACHE_MAX_MB): past the limit the least recently
used files go, BEAM results last; a hit marks a file used without a syscall per hit; a trim in one process never gives
another a wrong or partial kernel, only a miss (it recompiles)."""
import hashlib, json, os, pathlib, subprocess, sys, time
import pytest
from compiler.assemble import c_compiler as cc, disk_cache as dc
from compiler.assemble.c_compiler import compile_c
from tests.child_env import pythonpath

REPO = pathlib.Path(__file__).resolve().parents[2]
FLAGS = ["-march=x86-64-v3"]   # a named target: the same object on any host
MB_PER_BLOCK = 4096 / (1 << 20)

def kernel(i: int) -> str: return f"void E_{i}(int *out, int core) {{ out[core] = {i} * core + {i * 7 + 1}; }}"

def used(root: pathlib.Path, tmp: bool = True) -> int:
  """What the cache's files take on disk, each counted in whole 4 KiB blocks (the bound's unit), the ledger aside (and
  without `tmp`, the temp files of writes in flight)."""
  return sum(-(-p.stat().st_size // 4096) * 4096 for p in root.rglob("*")
             if p.is_file() and p.name != ".usage" and (tmp or not p.name.endswith(".tmp")))

def obj_path(root: pathlib.Path, i: int) -> pathlib.Path:
  c, flags = cc.c_compiler(FLAGS)
  return root / "c" / f"{cc.cache_key(kernel(i), c, cc.compiler_version(c), flags)}.o"

_utime = os.utime   # the test's own, not the one a test counts

def age(path: pathlib.Path, seconds: float) -> None:
  t = time.time() - seconds
  _utime(path, (t, t))

@pytest.fixture
def cache(tmp_path, monkeypatch):
  monkeypatch.setenv("HCQRT_CACHE", str(tmp_path))
  monkeypatch.delenv("CACHE", raising=False)
  return tmp_path

@pytest.fixture
def compiles(monkeypatch):
  """The C compiler runs (each a list of argv) while the test runs."""
  calls, real = [], subprocess.run
  def counting(cmd, *a, **k):
    if "-c" in cmd: calls.append(cmd)
    return real(cmd, *a, **k)
  monkeypatch.setattr(cc.subprocess, "run", counting)
  return calls

def test_cache_stays_under_its_limit(cache, monkeypatch):
  monkeypatch.setenv("HCQRT_CACHE_MAX_MB", str(8 * MB_PER_BLOCK))
  written = 0
  for i in range(20):
    written += -(-len(compile_c(kernel(i), f"E_{i}", FLAGS)) // 4096) * 4096
    assert used(cache) <= 8 * 4096, (i, used(cache))
  assert written > 2 * 8 * 4096 and obj_path(cache, 19).is_file()   # wrote over twice the limit; the newest stays

def test_most_recently_used_survive_a_trim(cache, monkeypatch, compiles):
  monkeypatch.setenv("HCQRT_CACHE_MAX_MB", str(10 * MB_PER_BLOCK))
  objs = [compile_c(kernel(i), f"E_{i}", FLAGS) for i in range(6)]
  for i in range(6): age(obj_path(cache, i), 7200 + 600 * (6 - i))   # E_0 the least recently used, E_5 the most
  assert compile_c(kernel(0), "E_0", FLAGS) == objs[0] and len(compiles) == 6   # a hit: marks E_0 used now
  for i in range(6, 16):
    compile_c(kernel(i), f"E_{i}", FLAGS)
    if not all(obj_path(cache, j).is_file() for j in range(6)): break
  kept = [j for j in range(1, 6) if obj_path(cache, j).is_file()]
  assert obj_path(cache, 0).is_file(), "the kernel used last went in the trim"
  assert len(kept) < 5 and kept == list(range(6 - len(kept), 6)), f"the trim did not take the least recently used first: kept {kept}"

def test_hit_after_trim_recompiles(cache, monkeypatch, compiles):
  monkeypatch.setenv("HCQRT_CACHE_MAX_MB", str(6 * MB_PER_BLOCK))
  first = compile_c(kernel(0), "E_0", FLAGS)
  age(obj_path(cache, 0), 7200)
  for i in range(1, 7): compile_c(kernel(i), f"E_{i}", FLAGS)
  assert not obj_path(cache, 0).exists()
  n = len(compiles)
  assert compile_c(kernel(0), "E_0", FLAGS) == first and len(compiles) == n + 1   # built again, the same bytes
  assert obj_path(cache, 0).is_file()

def test_a_hit_marks_use_without_a_syscall_per_hit(cache, monkeypatch, compiles):
  touches = []
  monkeypatch.setattr(os, "utime", lambda *a, **k: (touches.append(a), _utime(*a, **k))[1])
  obj = compile_c(kernel(0), "E_0", FLAGS)
  for _ in range(50): assert compile_c(kernel(0), "E_0", FLAGS) == obj
  assert touches == [] and len(compiles) == 1   # fresh: no hit touches it
  age(obj_path(cache, 0), 7200)
  for _ in range(50): assert compile_c(kernel(0), "E_0", FLAGS) == obj
  assert len(touches) == 1 and time.time() - obj_path(cache, 0).stat().st_mtime < 600   # the first hit after an hour, only

def test_beam_results_go_last_and_writes_in_flight_stay(cache, monkeypatch):
  monkeypatch.setenv("HCQRT_CACHE_MAX_MB", str(8 * MB_PER_BLOCK))
  beams = [cache / "beam" / f"{i}.json" for i in range(3)]
  for p in beams: dc.write_cached(p, b'{"opts": null}')
  for p in beams: age(p, 10 * 86400)   # older than any kernel, yet kept
  young_tmp, stale_tmp = cache / "cubin" / "a.cubin.123.tmp", cache / "cubin" / "b.cubin.456.tmp"
  for p in (young_tmp, stale_tmp): dc.atomic_write(p, b"x" * 5000)
  age(stale_tmp, 2 * 86400)   # a killed writer's
  for i in range(10): dc.write_cached(cache / "cubin" / f"{i}.cubin", bytes([i]) * 3000)
  assert all(p.is_file() for p in beams) and young_tmp.is_file() and not stale_tmp.exists()
  assert not (cache / "cubin" / "0.cubin").exists() and (cache / "cubin" / "9.cubin").is_file()
  assert used(cache, tmp=False) <= 8 * 4096 < used(cache)   # the young temp file is not the cache's to count

def test_ledger_counts_other_writers_and_a_torn_one_rescans(cache, monkeypatch):
  monkeypatch.setenv("HCQRT_CACHE_MAX_MB", str(6 * MB_PER_BLOCK))
  for i in range(4): dc.write_cached(cache / "llvm" / f"{i}.o", b"o" * 100)
  assert (cache / ".usage").read_text().split()[0] == str(4 * 4096)
  for i in range(4, 8): dc.atomic_write(cache / "llvm" / f"{i}.o", b"o" * 100)   # a writer that kept no count
  (cache / ".usage").write_text("12")   # torn by a killed writer
  dc.write_cached(cache / "llvm" / "8.o", b"o" * 100)   # rescans: 9 files, trimmed to at most 0.9 of 6
  assert used(cache) <= 5 * 4096 and (cache / "llvm" / "8.o").is_file()

# the race: one process writes entries with a limit so small that nearly every write trims (the reader's objects are
# the oldest files), while another compiles kernels through the cache and reads the writer's entries; every object must
# be the right one, every entry whole or missing
WRITER = """
import os, pathlib, sys
from compiler.assemble.disk_cache import write_cached
root, done = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
for j in range(100_000):
  if done.exists() and j > 200: break
  write_cached(root / "llvm" / f"{j}.o", (str(j).encode() + b":") * 1000)
print("wrote", j)
"""
READER = """
import hashlib, json, os, pathlib, sys
from compiler.assemble.c_compiler import compile_c
from compiler.assemble.disk_cache import read_cached
root, (srcs, want, flags) = pathlib.Path(sys.argv[1]), json.loads(sys.argv[2])
entries = missed = 0
for it in range(16):
  k = it % len(want)
  assert hashlib.sha256(compile_c(srcs[k], f"E_{k}", flags)).hexdigest() == want[k], f"wrong object for E_{k}"
  for _ in range(25):
    for name in sorted((n for n in os.listdir(root / "llvm") if not n.endswith(".tmp")), key=lambda n: int(n[:-2])):
      data = read_cached(root / "llvm" / name)
      if data is None: missed += 1; continue
      assert data == (name[:-2].encode() + b":") * 1000, f"entry {name} not whole: {len(data)} bytes"
      entries += 1
print("ok", entries, missed)
"""

def test_concurrent_trim_and_read_never_give_a_wrong_kernel(cache, tmp_path_factory):
  limit_mb = 16 * MB_PER_BLOCK
  want = [hashlib.sha256(compile_c(kernel(k), f"E_{k}", FLAGS)).hexdigest() for k in range(4)]
  done = tmp_path_factory.mktemp("flag") / "reader-done"
  env = {**os.environ, "HCQRT_CACHE": str(cache), "HCQRT_CACHE_MAX_MB": str(limit_mb), "PYTHONPATH": pythonpath(REPO)}
  env.pop("CACHE", None)
  writer = subprocess.Popen([sys.executable, "-c", WRITER, str(cache), str(done)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  reader = subprocess.run([sys.executable, "-c", READER, str(cache), json.dumps([[kernel(k) for k in range(4)], want, FLAGS])],
                          env=env, capture_output=True, text=True, timeout=300)
  done.touch()
  w_out, w_err = writer.communicate(timeout=300)
  assert reader.returncode == 0 and reader.stdout.startswith("ok"), reader.stderr[-3000:]
  print(reader.stdout, w_out)   # (with -s) how often the race was met: entries read whole, entries trimmed under it
  assert writer.returncode == 0, w_err[-3000:]
  assert used(cache) <= 16 * 4096, (used(cache), reader.stdout, w_out)
