"""The capacity model (pure: numpy and the standard library): `model` simulates a deadline's grading
queue under today's schedule and answers `grader capacity` and the run page's ETA; `split`, the
schedule that runs a grade's checks and timing as two pieces."""
