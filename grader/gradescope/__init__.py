"""Gradescope: `pack` writes an autograder zip of an assignment, `run` grades one submission
inside it (no GPU there: it reports the build and "not scored")."""
