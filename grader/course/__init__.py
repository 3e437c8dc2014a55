"""The course's rules and records around grading: deadlines and late penalties, quotas and
admission, an assignment's settings, membership and roster imports, pausing grading, the
staff's adjustments and regrade workflow, the run that counts, and the one final grade."""
