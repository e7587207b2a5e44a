"""The hot patch, the script runner and child processes (aipc_loader)."""
