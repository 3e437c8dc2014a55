"""Run notices (grader/notify.py) as composed, and the settings they need: the service tests
send them to a real SMTP server; here the cases those runs do not reach."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from grader.models import RunState
from grader.notify import RunNotice, compose
from grader.settings import Settings, SmtpSettings

BUILT = RunNotice(to="ada@uni.example.edu", student="ada", run_id=7, slug="hw4", title="Homework 4",
                  state=RunState.built, grade=None, raw_score=None, total_points=100, late_reason=None,
                  message="Built; no GPU stage on this worker.", problems=(), link="/runs/7")


def test_a_built_run_without_a_public_address_names_the_path() -> None:
    message = compose(BUILT, "grader@course.example.edu")
    assert message["Subject"] == "Run 7 of hw4: built, not scored"
    assert message["Auto-Submitted"] == "auto-generated" and message["Message-ID"].endswith("@course.example.edu>")
    text = message.get_content()
    assert "Your run 7 of hw4 (Homework 4) has ended.\n" in text
    assert "no score was recorded" in text
    assert "The run page, with the details and logs: /runs/7 on the grader's site\n" in text


def test_a_failed_run_without_a_message_still_says_it_was_not_graded() -> None:
    failed = RunNotice(**{**BUILT.__dict__, "state": RunState.failed, "message": None})
    message = compose(failed, "grader@course.example.edu")
    assert message["Subject"] == "Run 7 of hw4: not graded"
    assert "It was not graded: no reason was recorded.\n" in message.get_content()


def test_mail_needs_a_sender_address() -> None:
    with pytest.raises(ValidationError, match="KG_SMTP_HOST is set but KG_SMTP_FROM is not"):
        Settings.from_variables({"KG_SMTP_HOST": "mail.example.edu"})
    with pytest.raises(ValidationError, match="KG_SMTP_HOST is set but KG_SMTP_FROM is not"):
        SmtpSettings(host="mail.example.edu")
    sent = Settings.from_variables({"KG_SMTP_HOST": "mail.example.edu", "KG_SMTP_FROM": "grader@example.edu"})
    assert sent.smtp.from_ == "grader@example.edu" and sent.smtp.port == 587
