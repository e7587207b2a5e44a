"""The aipc command line as a user runs it."""
