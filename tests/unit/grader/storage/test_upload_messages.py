"""What an upload's answer says after an ambiguous database failure (grader/storage/uploads.py): never
"nothing was stored", and only the ways of sending again that the door offers."""
from __future__ import annotations

from grader.storage.uploads import earlier_upload_message, maybe_stored_message


def test_the_api_names_the_key_and_the_window() -> None:
    message = maybe_stored_message(120.0)
    assert "may or may not have been stored" in message
    assert "(with the same Idempotency-Key or the same file within 120 s)" in message
    assert "nothing" not in message.lower()


def test_a_browser_form_is_not_told_about_keys() -> None:
    message = maybe_stored_message(120.0, keyed=False)
    assert "Idempotency-Key" not in message and "(the same file within 120 s)" in message


def test_without_a_window_the_form_says_to_check_first() -> None:
    message = maybe_stored_message(0.0, keyed=False)
    assert "Check your submissions before sending it again." in message and "within" not in message


def test_the_earlier_upload_names_its_submission_and_run() -> None:
    assert earlier_upload_message(4, 9) == ("This is the same upload as your submission 4 (sent again), so nothing "
                                            "new was stored: run 9 grades it.")
