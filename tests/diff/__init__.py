"""aipc diff and onnxwrapper.diff: capture, metrics, verdicts, localization, model runs."""
