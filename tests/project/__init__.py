"""House rules that tools check: import contracts, docstrings, the typed package."""
