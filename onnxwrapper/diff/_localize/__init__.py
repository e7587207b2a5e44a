"""onnxwrapper.diff._localize: a stage of the diff pipeline (the public surface is onnxwrapper.diff)."""
