"""onnxwrapper.diff._runs: a stage of the diff pipeline (the public surface is onnxwrapper.diff)."""
