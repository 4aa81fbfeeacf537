"""NPU health: the policy (ok, suspect, failed) and the state kept in step with it."""
