"""onnxwrapper.repair.fix: aipc fix."""
