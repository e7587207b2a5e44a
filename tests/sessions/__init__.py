"""The run path of qnn sessions: planned runs behave as ORT + the QNN EP, and long calls on the simulator say so."""
