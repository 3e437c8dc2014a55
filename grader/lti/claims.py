"""The LTI 1.3 claim names kernelgrade reads and writes, and the role vocabulary it maps."""
from __future__ import annotations

from grader.roles import CourseRole

LTI = "https://purl.imsglobal.org/spec/lti/claim/"
MESSAGE_TYPE = LTI + "message_type"
VERSION = LTI + "version"
DEPLOYMENT_ID = LTI + "deployment_id"
TARGET_LINK_URI = LTI + "target_link_uri"
RESOURCE_LINK = LTI + "resource_link"
ROLES = LTI + "roles"
CONTEXT = LTI + "context"
CUSTOM = LTI + "custom"
LIS = LTI + "lis"
DEEP_LINKING_SETTINGS = "https://purl.imsglobal.org/spec/lti-dl/claim/deep_linking_settings"
DEEP_LINKING_DATA = "https://purl.imsglobal.org/spec/lti-dl/claim/data"
CONTENT_ITEMS = "https://purl.imsglobal.org/spec/lti-dl/claim/content_items"
AGS_ENDPOINT = "https://purl.imsglobal.org/spec/lti-ags/claim/endpoint"
NRPS = "https://purl.imsglobal.org/spec/lti-nrps/claim/namesroleservice"

RESOURCE_LINK_REQUEST = "LtiResourceLinkRequest"
DEEP_LINKING_REQUEST = "LtiDeepLinkingRequest"
DEEP_LINKING_RESPONSE = "LtiDeepLinkingResponse"

MEMBERSHIP = "http://purl.imsglobal.org/vocab/lis/v2/membership"
TEST_USER = "http://purl.imsglobal.org/vocab/lti/system/person#TestUser"


def _membership_roles(roles: list[str]) -> set[str]:
    """The context roles named (full URIs, or the short names some platforms send), as their
    last word: "Instructor", "TeachingAssistant", "Learner"..."""
    named = set()
    for role in roles:
        if role.startswith(MEMBERSHIP) or "/" not in role:
            named.add(role.rsplit("#", 1)[-1].rsplit("/", 1)[-1])
    return named


def course_role(roles: list[str]) -> CourseRole | None:
    """The part a launch's context roles give in the linked course: a teaching assistant (also
    when the platform adds Instructor, of which it is a sub-role) is a TA, an instructor an
    instructor, a learner a student; any other role none."""
    named = _membership_roles(roles)
    if "TeachingAssistant" in named:
        return CourseRole.ta
    if "Instructor" in named:
        return CourseRole.instructor
    if "Learner" in named:
        return CourseRole.student
    return None


def is_test_user(roles: list[str]) -> bool:
    """The LMS's own test student (Canvas's Student View): never sent a grade, never enrolled."""
    return TEST_USER in roles
