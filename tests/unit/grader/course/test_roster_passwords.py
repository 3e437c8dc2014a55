"""First passwords derived from an import's key (grader.course.roster.derived_password): the same key
and login give the same password, another key or login another one, always 12 characters of
the look-alike-free alphabet; and a job's stored result carries no password."""
from __future__ import annotations

import secrets

from grader.course.roster import PASSWORD_ALPHABET, PASSWORD_LENGTH, RosterReport, derived_password
from grader.course.roster_csv import LineError
from grader.course.roster_jobs import job_result


def test_the_same_key_and_login_give_the_same_password() -> None:
    key = secrets.token_bytes(32)
    assert derived_password(key, "ada@uni.edu") == derived_password(key, "ada@uni.edu")
    assert derived_password(key, "ada@uni.edu") != derived_password(key, "bob@uni.edu")
    assert derived_password(key, "ada@uni.edu") != derived_password(secrets.token_bytes(32), "ada@uni.edu")


def test_derived_passwords_are_long_and_of_the_alphabet() -> None:
    key = secrets.token_bytes(32)
    passwords = {derived_password(key, f"s{n:03d}") for n in range(300)}
    assert len(passwords) == 300
    assert all(len(p) == PASSWORD_LENGTH and set(p) <= set(PASSWORD_ALPHABET) for p in passwords)
    assert set("".join(passwords)) == set(PASSWORD_ALPHABET)  # every character is used


def test_a_jobs_result_keeps_logins_and_messages_not_passwords() -> None:
    report = RosterReport(created=[("ada", "Secret12abcd")], updated=["bob"], unchanged=["cy"],
                          errors=[LineError(5, "the name is empty"), LineError(2, "x is not a login")])
    result = job_result(report)
    assert result == {"summary": "1 created, 1 updated, 1 unchanged, 2 line(s) with errors", "created": ["ada"],
                      "updated": ["bob"], "errors": [[2, "x is not a login"], [5, "the name is empty"]]}
    assert "Secret12abcd" not in repr(result)
