"""An instructor's launch reads the LMS roster again only when its last read is older than
LAUNCH_READ_AFTER (grader/lti/roster_sync.py): not at every launch of a class's staff."""
from __future__ import annotations

from datetime import timedelta

from grader.lti.roster_sync import LAUNCH_READ_AFTER, roster_due
from grader.models import LtiContext, utcnow


def test_a_launch_reads_the_roster_when_never_read_or_read_long_ago() -> None:
    now = utcnow()
    assert roster_due(LtiContext(memberships_url="https://lms/members", roster_synced_at=None), now)
    assert not roster_due(LtiContext(memberships_url="https://lms/members", roster_synced_at=now - timedelta(minutes=1)), now)
    assert roster_due(LtiContext(memberships_url="https://lms/members", roster_synced_at=now - LAUNCH_READ_AFTER), now)
    assert not roster_due(LtiContext(memberships_url=None, roster_synced_at=None), now)  # the LMS gave no roster
