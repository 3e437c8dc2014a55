"""The `grader` command (Typer), one module per command family: `main` (the app, and the
service's own commands: migrate, serve, worker, reconcile, dev, ...), `accounts` (courses,
users, tokens, the roster), `ops` (schedule, extensions, pausing, similarity, Gradescope),
`staff_settings` (TA powers, quotas), `capacity`, `rescore`, `lti`, and `client` (the REST
client: httpx and Typer only, so this package imports nothing at its top)."""
