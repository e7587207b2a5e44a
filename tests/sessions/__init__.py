"""qnn sessions: the run path (planned runs behave as ORT + the QNN EP, long calls on the simulator say so) and sessions of models the QNN EP takes no node of."""
