"""Conformance suite for HCQ devices: `python -m hw_tests --device NV` (see __main__.py)."""
