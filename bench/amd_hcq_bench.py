"""CPU-side cost of HCQ submission on the AMD backend (mock KFD): now part of bench/hcq_bench.py. Includes the host
time of an eager launch with a waiting synchronize (woken by the end-of-pipe interrupt, never by the 10 ms timeout).

  python bench/amd_hcq_bench.py [--kernels 50] [--reps 200]   ==   python bench/hcq_bench.py --device AMD ...
"""
from __future__ import annotations
import os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

if __name__ == "__main__":
  import hcq_bench
  sys.argv[1:1] = ["--device", "AMD"]
  sys.exit(hcq_bench.main())
