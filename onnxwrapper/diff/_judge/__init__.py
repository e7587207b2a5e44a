"""onnxwrapper.diff._judge: a stage of the diff pipeline (the public surface is onnxwrapper.diff)."""
