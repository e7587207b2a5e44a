"""Repair recipes and aipc fix."""
