"""Trust boundaries (docs/security.md): cache, code, console, files, fork, network, recipes, fuzzing."""
