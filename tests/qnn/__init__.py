"""The qnn backend on the HTP simulator: compile, sessions, options, recovery, fidelity, planned runs."""
