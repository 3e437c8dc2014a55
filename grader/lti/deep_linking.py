"""The deep-linking response: the assignment an instructor chose, as one LTI resource link the
LMS adds to its course, signed with the tool's key. The link carries the assignment's slug as
a custom parameter (so its launches open it) and asks for a gradebook column (line item) of
the assignment's points."""
from __future__ import annotations

import secrets
import time
from typing import Any

from grader.lti import claims as c
from grader.lti.keys import sign
from grader.models import Assignment, LtiPlatform
from grader.settings import Settings

RESPONSE_LIFETIME_S = 300


def response_token(settings: Settings, platform: LtiPlatform, deployment_id: str, data: str | None,
                   assignment: Assignment, launch_url: str) -> str:
    item: dict[str, Any] = {
        "type": "ltiResourceLink", "title": assignment.title, "url": launch_url,
        "custom": {"kernelgrade_assignment": assignment.slug},
        "lineItem": {"scoreMaximum": assignment.total_points, "label": assignment.title,
                     "resourceId": assignment.slug},
    }
    now = int(time.time())
    claims: dict[str, Any] = {
        "iss": platform.client_id, "aud": platform.issuer, "iat": now, "exp": now + RESPONSE_LIFETIME_S,
        "nonce": secrets.token_urlsafe(16), c.MESSAGE_TYPE: c.DEEP_LINKING_RESPONSE, c.VERSION: "1.3.0",
        c.DEPLOYMENT_ID: deployment_id, c.CONTENT_ITEMS: [item],
    }
    if data is not None:
        claims[c.DEEP_LINKING_DATA] = data
    return sign(settings, claims)
