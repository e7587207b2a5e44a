"""Operator patches and accuracy rewrites against onnxruntime's CPU kernels."""
