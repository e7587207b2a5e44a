"""onnxwrapper.diff._capture: a stage of the diff pipeline (the public surface is onnxwrapper.diff)."""
