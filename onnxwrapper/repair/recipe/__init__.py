"""onnxwrapper.repair.recipe: the recipe format."""
