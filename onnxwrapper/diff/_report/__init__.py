"""onnxwrapper.diff._report: a stage of the diff pipeline (the public surface is onnxwrapper.diff)."""
