#!/usr/bin/env bash
# The first run on a GPU machine in one call (see hw_tests/first_run.py and GPU.md):
#   bash hw_tests/first_run.sh [--mock] [--with-fault] [--cap-scale F] [--slow-cap S] [--skip STEP,...]   (output under $OUT or ./first_run_out)
# Puts .site (wheels installed from .whl/ when a package below is missing) and the project on PYTHONPATH.
# Offline wheels: GPU.md's download list (cffi pycparser pyelftools) lacks what the `ops` step needs (pytest runs
# tests/frontend/test_ops.py), so download all of these on a machine with an index (add --python-version/--platform as GPU.md shows):
#   python3 -m pip download --no-deps --only-binary=:all: -d .whl cffi pycparser pyelftools pytest iniconfig pluggy packaging
set -u
cd "$(dirname "$0")/.." || exit 2
PY=${PYTHON:-python3}
export PYTHONPATH="$PWD/.site:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
missing=$("$PY" -c 'from hcqrt.deps import missing; print(" ".join(missing()))' 2>/dev/null)
for m in pytest iniconfig pluggy packaging; do   # the ops step's test runner and its dependencies
  "$PY" -c "import $m" 2>/dev/null || missing="${missing:+$missing }$m"
done
if [ -n "$missing" ]; then
  if ls .whl/*.whl >/dev/null 2>&1; then
    echo "first_run: installing $missing from .whl/ into .site"
    "$PY" -m pip install -q --no-index --no-deps --target .site .whl/*.whl || echo "first_run: installing .whl/*.whl failed"
  else
    echo "first_run: missing $missing and no .whl/ wheels to install them from (GPU.md: offline install)"
  fi
fi
exec "$PY" -m hw_tests --first-run "$@"
