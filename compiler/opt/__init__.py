"""The kernel optimizer: explicit opts and the heuristics built from them. Layers, bottom to top (each module imports
only modules below it; tests/compiler/test_pipeline.py checks the graph): base, pressure -> peel -> apply -> matmul, conv, tc,
gpu -> heuristic. This file imports nothing, so importing one module loads only what it needs."""
