"""Schemathesis against the app's own OpenAPI spec, in process (ASGI), bounded: a handful of
generated requests per operation, as a student token and as staff. Every answer must be no
server error and must conform to the spec (status code, content type, body schema), and the
data of a third student must never come back to the student. Then requests the spec calls
invalid (ids out of range, control characters in text, fields no body names, ...; schemathesis'
negative mode): never a server error, always refused with a 4xx (issue 54: ids past 2^63 and a
NUL in a text were 500s)."""
from __future__ import annotations

import uuid

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import negative_data_rejection, positive_data_acceptance
from sqlalchemy.orm import Session, sessionmaker

from grader.app import create_app
from grader.auth.credentials import issue_token
from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import Role
from grader.service import get_assignment, record_submission
from grader.settings import Settings
from grader.storage.blobstore import BlobStore

MARKER = f"schema-private-{uuid.uuid4().hex[:8]}"
TOKENS: dict[str, str] = {}


@pytest.fixture(scope="module")
def api_schema(settings: Settings, sessions: sessionmaker[Session]) -> schemathesis.BaseSchema:  # type: ignore[name-defined]
    with session_scope(sessions) as session:
        victim = get_or_create_user(session, f"schema-victim-{uuid.uuid4().hex[:6]}", Role.student)
        blob = BlobStore(settings.blob_dir).put_bytes(b"PK\x05\x06" + bytes(18) + MARKER.encode())
        record_submission(session, victim, get_assignment(session, "hw4"), f"{MARKER}.zip", blob)
        TOKENS["student"] = issue_token(session, get_or_create_user(session, "schema-student", Role.student), "st")
        TOKENS["staff"] = issue_token(session, get_or_create_user(session, "schema-staff", Role.instructor), "st")
    # The rate limit would answer 429s to the generated uploads; it has its own tests.
    app = create_app(settings.model_copy(update={"upload_rate_limit": 0}))
    return schemathesis.openapi.from_asgi("/openapi.json", app)


# Known spec gap (grader/api/submissions.py): the upload route reads the raw multipart body, so the spec
# documents no request body and an empty POST looks valid to the spec while the server answers
# 415. Fixed by declaring the body in the route's openapi_extra; until then that one check is
# skipped for that one operation.
UNDOCUMENTED_BODY = {"POST /api/v1/submissions": [positive_data_acceptance]}


def _run_operation(operation: object) -> None:
    excluded = UNDOCUMENTED_BODY.get(operation.label, [])  # type: ignore[attr-defined]

    @given(case=operation.as_strategy())  # type: ignore[attr-defined]
    @settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    def run(case: schemathesis.Case) -> None:  # type: ignore[name-defined]
        for who in ("student", "staff"):
            response = case.call_and_validate(headers={"Authorization": f"Bearer {TOKENS[who]}"},
                                              excluded_checks=excluded)
            if who == "student":
                assert MARKER not in response.text

    run()


@pytest.mark.timeout(300)
def test_api_conforms_to_its_spec(api_schema: schemathesis.BaseSchema) -> None:  # type: ignore[name-defined]
    """(schemathesis' own pytest plugin, `from_fixture`, does not run under pytest 9, so each
    operation's strategy is driven by Hypothesis here.)"""
    operations = [result.ok() for result in api_schema.get_all_operations()]
    assert len(operations) >= 9
    for operation in operations:
        _run_operation(operation)


@pytest.mark.timeout(300)
def test_invalid_requests_are_refused_never_a_server_error(api_schema: schemathesis.BaseSchema) -> None:  # type: ignore[name-defined]
    fuzzed = 0
    for operation in [result.ok() for result in api_schema.get_all_operations()]:

        @given(case=operation.as_strategy(GenerationMode.NEGATIVE))  # type: ignore[attr-defined]
        @settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck), database=None)
        def run(case: schemathesis.Case) -> None:  # type: ignore[name-defined]
            case.call_and_validate(headers={"Authorization": f"Bearer {TOKENS['staff']}"},
                                   checks=[not_a_server_error, negative_data_rejection])

        try:
            run()
        except Unsatisfiable:  # nothing of it can be made invalid (no parameter, no body)
            continue
        fuzzed += 1
    assert fuzzed >= 12
