"""Client commands of the `grader` CLI: talk to a kernelgrade server over its REST API v1.

    grader submit llmsys_hw4.zip --wait --min-score 80    # for CI: exit 1 below 80
    grader status 42
    grader regrade 17
    grader export --format csv --out hw4.csv
    grader counted alice --run 17 --reason "the later run hit a node fault"

`submit` sends an Idempotency-Key and, after a connection error or a 5xx, sends the upload
again with the same key, so a retry never makes a second submission.

The server and token come from --url/--token or KG_URL/KG_TOKEN. This module needs only
httpx and Typer. Exit codes: 0 ok, 1 the run failed or scored below --min-score,
2 usage error, 3 the server refused the request or could not be reached, 4 --wait timed out.
"""
from __future__ import annotations

import json
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import httpx
import typer

FINAL_STATES = frozenset({"built", "scored", "failed"})
EXIT_OK, EXIT_GRADE, EXIT_API, EXIT_TIMEOUT = 0, 1, 3, 4

Url = Annotated[str, typer.Option("--url", envvar="KG_URL", help="server base URL", show_default=True)]
# The assignment: named, or KG_ASSIGNMENT, or the server settings' first rubric (KG_RUBRICS).
AssignmentSlug = Annotated[str | None, typer.Option("--assignment", envvar="KG_ASSIGNMENT",
                                                    help="assignment slug (default: KG_RUBRICS' first)")]
Token = Annotated[str, typer.Option("--token", envvar="KG_TOKEN", help="API token (kg_...)", show_default=False)]
DEFAULT_URL = "http://127.0.0.1:8000"


class ApiFailure(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _slug(assignment: str | None) -> str:
    """The assignment asked for, else the service's default one (its settings' first rubric)."""
    if assignment:
        return assignment
    from grader.settings import get_settings  # only when none was named: the client needs no settings

    return get_settings().rubrics[0]


def _client(url: str, token: str, timeout: float = 60.0) -> httpx.Client:
    if not token:
        typer.echo("no API token: pass --token or set KG_TOKEN", err=True)
        raise typer.Exit(2)
    return httpx.Client(base_url=url.rstrip("/"), headers={"Authorization": f"Bearer {token}"}, timeout=timeout)


def _call(client: httpx.Client, method: str, path: str, **kwargs: Any) -> httpx.Response:
    try:
        response = client.request(method, path, **kwargs)
    except httpx.HTTPError as exc:
        raise ApiFailure(f"cannot reach {client.base_url}: {exc}") from exc
    return _checked(response, method, path)


class ServerFault(ApiFailure):
    """No answer, or a 5xx: the upload may or may not be stored, so it is sent again with its key."""

    def __init__(self, message: str, retry_after: str | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def _post_upload(client: httpx.Client, archive: Path, assignment: str, key: str) -> httpx.Response:
    try:
        with archive.open("rb") as fh:
            response = client.post("/api/v1/submissions", data={"assignment": assignment},
                                   files={"file": (archive.name, fh, "application/zip")},
                                   headers={"Idempotency-Key": key})
    except httpx.TransportError as exc:
        raise ServerFault(f"cannot reach {client.base_url}: {exc}") from exc
    if response.status_code >= 500:
        try:
            _checked(response, "POST", "/api/v1/submissions")
        except ApiFailure as exc:
            raise ServerFault(exc.message, response.headers.get("Retry-After")) from None
    return response


def retry_delay(attempt: int, retry_after: str | None, cap: float = 30.0) -> float:
    """Seconds before retry `attempt` (1-based): the server's Retry-After when it sent one, else 2, 4, 8, ..."""
    if retry_after is not None and retry_after.strip().isdigit():
        return min(float(retry_after), cap)
    return min(2.0 ** attempt, cap)


def upload(client: httpx.Client, archive: Path, assignment: str, retries: int,
           sleep: Callable[[float], None] = time.sleep) -> dict[str, Any]:
    """Upload once under one Idempotency-Key, sending again with the same key on a connection
    error or a 5xx: the server answers a repeat with the submission it stored, never a second."""
    key = uuid.uuid4().hex
    for attempt in range(1, retries + 2):
        try:
            response = _post_upload(client, archive, assignment, key)
        except ServerFault as exc:
            if attempt > retries:
                raise
            delay = retry_delay(attempt, exc.retry_after)
            typer.echo(f"{exc.message}; sending again in {delay:g} s (attempt {attempt + 1})", err=True)
            sleep(delay)
            continue
        return _checked(response, "POST", "/api/v1/submissions").json()  # type: ignore[no-any-return]
    raise AssertionError("unreachable: the last attempt returns or raises")


def _checked(response: httpx.Response, method: str, path: str) -> httpx.Response:
    if response.status_code >= 400:
        try:
            error = response.json()["error"]
            detail = f"{error['code']}: {error['message']}"
        except (ValueError, KeyError, TypeError):
            detail = response.text[:500]
        raise ApiFailure(f"{method} {path} -> HTTP {response.status_code} ({detail})")
    return response


def _fail(exc: ApiFailure) -> typer.Exit:
    typer.echo(f"error: {exc.message}", err=True)
    return typer.Exit(EXIT_API)


def format_run(run: dict[str, Any]) -> str:
    """The run's state, its per-problem table (plain text, fixed width; the points are raw, before
    any late penalty or staff entry) and the grades the run page shows (grade_lines)."""
    score = run.get("score")
    lines = [f"run {run['id']}: {run['state']}"
             + (f" ({run['error_class']})" if run.get("error_class") else "")
             + (f"  raw score {score:g}" if score is not None else "")]
    if run.get("message"):
        lines.append(f"  {run['message']}")
    results = run.get("results") or []
    if results:
        width = max(len("raw total"), *(len(f"{r['problem_id']} {r['title']}") for r in results))
        lines.append("")
        lines.append(f"{'problem':<{width}}  {'status':<8}  {'points':>13}  note")
        for r in results:
            name = f"{r['problem_id']} {r['title']}"
            pts = f"{r['points']:g} / {r['max_points']:g}"
            note = (r.get("message") or "").splitlines()[0][:100] if r.get("message") else ""
            lines.append(f"{name:<{width}}  {r['status']:<8}  {pts:>13}  {note}")
        total = sum(r["points"] for r in results)
        total_max = sum(r["max_points"] for r in results)
        lines.append(f"{'raw total':<{width}}  {'':<8}  {f'{total:g} / {total_max:g}':>13}")
    return "\n".join(lines + grade_lines(run))


def _grade_words(grade: dict[str, Any]) -> str:
    """A grade as the pages print it: "85 / 100", "late" when charged."""
    return f"{grade['final_score']:g} / {grade['total_points']:g}" + (" late" if grade["late"] else "")


def grade_lines(run: dict[str, Any]) -> list[str]:
    """The run's grade and the student's grade in the assignment, as the run page words them
    (after a blank line; none without either), each with why in words on the next line: the
    run that counts carries the staff's entries (a manual grade, an adjustment and its cap);
    another run names the one that counts; with none counting, a manual grade alone is the grade."""
    lines = [f"grade {_grade_words(run['grade'])}", f"  {run['grade']['reason']}"] if run.get("grade") else []
    standing = run.get("assignment_grade") or {}
    counted, mine, slug = standing.get("counted_run_id"), standing.get("grade"), standing.get("assignment")
    if counted is not None and counted == run["id"]:
        lines.append("the gradebook counts this run")
    elif counted is not None:
        lines.append(f"the gradebook counts run {counted}, not this one"
                     + (f"; the grade in {slug}: {_grade_words(mine)}" if mine else ""))
    elif mine:
        lines.append(f"no run counts: the grade in {slug} is {_grade_words(mine)}")
    if mine and counted != run["id"]:
        lines.append(f"  {mine['reason']}")
    return ["", *lines] if lines else []


def _wait(client: httpx.Client, run_id: int, timeout: float, poll: float) -> dict[str, Any] | None:
    deadline = time.monotonic() + timeout
    last_state = None
    while True:
        run = _call(client, "GET", f"/api/v1/runs/{run_id}").json()
        if run["state"] != last_state:
            typer.echo(f"run {run_id}: {run['state']}", err=True)
            last_state = run["state"]
        if run["state"] in FINAL_STATES:
            return run
        if time.monotonic() >= deadline:
            return None
        time.sleep(min(poll, max(0.0, deadline - time.monotonic())))


def _verdict(run: dict[str, Any], min_score: float | None) -> int:
    if run["state"] == "failed":
        typer.echo(f"FAIL: run {run['id']} failed ({run.get('error_class')})", err=True)
        return EXIT_GRADE
    if min_score is not None:
        score = run.get("score")
        if score is None or score < min_score:
            shown = "no score" if score is None else f"score {score:g}"
            typer.echo(f"FAIL: {shown} is below --min-score {min_score:g}", err=True)
            return EXIT_GRADE
        typer.echo(f"OK: score {score:g} >= {min_score:g}", err=True)
    return EXIT_OK


def submit(
    archive: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True, help="the zip to upload")],
    assignment: AssignmentSlug = None,
    wait: Annotated[bool, typer.Option("--wait", help="wait until the run is final and print its table")] = False,
    min_score: Annotated[float | None, typer.Option(help="with --wait: exit 1 when the score is below this")] = None,
    timeout: Annotated[float, typer.Option(help="with --wait: give up (exit 4) after this many seconds")] = 3600,
    poll: Annotated[float, typer.Option(help="seconds between status checks")] = 5.0,
    retries: Annotated[int, typer.Option(min=0, help="send again (same Idempotency-Key) this many times "
                                                     "on a connection error or a server error")] = 3,
    url: Url = DEFAULT_URL,
    token: Token = "",
) -> None:
    """Upload ZIP as a new submission; with --wait, print the per-problem table when final."""
    with _client(url, token) as client:
        try:
            created = upload(client, archive, _slug(assignment), retries)
            typer.echo(f"submission {created['submission_id']}, run {created['run_id']}: {created['message']}")
            if not wait:
                if min_score is not None:
                    typer.echo("note: --min-score is only checked with --wait", err=True)
                return
            run = _wait(client, created["run_id"], timeout, poll)
        except ApiFailure as exc:
            raise _fail(exc) from exc
    if run is None:
        typer.echo(f"timed out after {timeout:g} s; run {created['run_id']} is not final yet", err=True)
        raise typer.Exit(EXIT_TIMEOUT)
    typer.echo(format_run(run))
    raise typer.Exit(_verdict(run, min_score))


def status(
    run_id: Annotated[int, typer.Argument(help="run id")],
    as_json: Annotated[bool, typer.Option("--json", help="print the full run record as JSON")] = False,
    wait: Annotated[bool, typer.Option("--wait", help="wait until the run is final")] = False,
    timeout: Annotated[float, typer.Option(help="with --wait: give up (exit 4) after this many seconds")] = 3600,
    poll: Annotated[float, typer.Option(help="seconds between status checks")] = 5.0,
    url: Url = DEFAULT_URL,
    token: Token = "",
) -> None:
    """Show a run: state, score and the per-problem table."""
    with _client(url, token) as client:
        try:
            run = _wait(client, run_id, timeout, poll) if wait else _call(client, "GET", f"/api/v1/runs/{run_id}").json()
        except ApiFailure as exc:
            raise _fail(exc) from exc
    if run is None:
        typer.echo(f"timed out after {timeout:g} s; run {run_id} is not final yet", err=True)
        raise typer.Exit(EXIT_TIMEOUT)
    typer.echo(json.dumps(run, indent=2) if as_json else format_run(run))


def regrade(
    submission_id: Annotated[int, typer.Argument(help="submission id")],
    url: Url = DEFAULT_URL,
    token: Token = "",
) -> None:
    """Grade a submission again as a new run (needs the `regrade` scope)."""
    with _client(url, token) as client:
        try:
            body = _call(client, "POST", f"/api/v1/submissions/{submission_id}/regrade").json()
        except ApiFailure as exc:
            raise _fail(exc) from exc
    typer.echo(f"submission {body['submission_id']}: new run {body['run_id']}: {body['message']}")


def export(
    assignment: AssignmentSlug = None,
    fmt: Annotated[str, typer.Option("--format", help="csv (Canvas's import), detailed-csv or json")] = "csv",
    policy: Annotated[str, typer.Option(help="latest or best scored run")] = "latest",
    out: Annotated[Path | None, typer.Option(help="file to write (default: stdout)")] = None,
    url: Url = DEFAULT_URL,
    token: Token = "",
) -> None:
    """Export the gradebook (staff token): one row per student."""
    suffixes = {"csv": ".csv", "detailed-csv": "-detailed.csv", "json": ""}
    if fmt not in suffixes:
        typer.echo("--format must be csv, detailed-csv or json", err=True)
        raise typer.Exit(2)
    path = f"/api/v1/assignments/{_slug(assignment)}/gradebook" + suffixes[fmt]
    with _client(url, token) as client:
        try:
            response = _call(client, "GET", path, params={"policy": policy})
        except ApiFailure as exc:
            raise _fail(exc) from exc
    text = json.dumps(response.json(), indent=2) + "\n" if fmt == "json" else response.text
    if out is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        out.write_text(text)
        typer.echo(f"wrote {out}", err=True)


def counted(
    login: Annotated[str, typer.Argument(help="the student's login")],
    assignment: AssignmentSlug = None,
    run: Annotated[int | None, typer.Option(help="make this scored run the one that counts")] = None,
    reason: Annotated[str, typer.Option(help="with --run: why (staff; shown to staff)")] = "",
    clear: Annotated[bool, typer.Option("--clear", help="back to the score policy's pick")] = False,
    url: Url = DEFAULT_URL,
    token: Token = "",
) -> None:
    """Show, choose (--run) or clear (--clear) the run that counts for a student."""
    if run is not None and clear:
        typer.echo("give --run or --clear, not both", err=True)
        raise typer.Exit(2)
    assignment = _slug(assignment)
    path = f"/api/v1/assignments/{assignment}/students/{login}/counted-run"
    with _client(url, token) as client:
        try:
            if run is not None:
                body = _call(client, "PUT", path, json={"run_id": run, "reason": reason or None}).json()
            else:
                body = _call(client, "DELETE" if clear else "GET", path).json()
        except ApiFailure as exc:
            raise _fail(exc) from exc
    who = f"chosen by {body['chosen_by']}" if body["chosen_by"] else f"the {body['score_policy']} policy's pick"
    counts = f"run {body['run_id']}" if body["run_id"] is not None else "no scored run"
    typer.echo(f"{body['student']} in {assignment}: {counts} counts ({who})"
               + (f": {body['reason']}" if body["reason"] else ""))


def register(app: typer.Typer) -> None:
    """Add the client commands to the `grader` Typer app."""
    for fn in (submit, status, regrade, export, counted):
        app.command(fn.__name__)(fn)


app = typer.Typer(help="kernelgrade client: submit, status, regrade, export, counted.", no_args_is_help=True)
register(app)

if __name__ == "__main__":  # `python -m grader.cli.client`: needs only httpx and Typer
    app()
