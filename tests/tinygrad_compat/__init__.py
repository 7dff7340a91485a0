"""Run tinygrad's own test files against hcqrt through a name-only `tinygrad` alias (see run.py)."""
