"""What every reader uses and no reader owns: name rules, exact times, plausibility checks, the per-file result."""
