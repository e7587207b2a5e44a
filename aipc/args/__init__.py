"""Argument groups of the aipc commands (Polygraphy's ``BaseArgs`` pattern) and the plan of calls behind ``--gen-script``."""

__all__: list[str] = []
