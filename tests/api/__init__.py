"""The public API against onnxruntime: fidelity, close, feeds, the registry and its entry points, reprs, the surface."""
