"""The test LMS's records, all in memory: people, courses, enrollments, links, line items and the
scores the tool sent. One lock guards them: the HTTP handlers run in a thread pool while the
test reads and changes the same records from its own thread."""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

# LTI role URIs (LIS v2 context roles; the TestUser system role of the LTI 1.3 spec).
INSTRUCTOR_ROLE = "http://purl.imsglobal.org/vocab/lis/v2/membership#Instructor"
TEACHING_ASSISTANT_ROLE = "http://purl.imsglobal.org/vocab/lis/v2/membership/Instructor#TeachingAssistant"
LEARNER_ROLE = "http://purl.imsglobal.org/vocab/lis/v2/membership#Learner"
TEST_USER_ROLE = "http://purl.imsglobal.org/vocab/lti/system/person#TestUser"

# The role lists enroll() takes for the usual people. A teaching assistant carries the sub-role
# with its principal role, Instructor, as platforms send it: a tool must look for the sub-role
# first. The test student (an instructor's "student view") is a Learner marked TestUser.
INSTRUCTOR = (INSTRUCTOR_ROLE,)
TEACHING_ASSISTANT = (TEACHING_ASSISTANT_ROLE, INSTRUCTOR_ROLE)
LEARNER = (LEARNER_ROLE,)
TEST_STUDENT = (LEARNER_ROLE, TEST_USER_ROLE)

COURSE_OFFERING = "http://purl.imsglobal.org/vocab/lis/v2/course#CourseOffering"


@dataclass(frozen=True)
class User:
    sub: str
    name: str
    email: str
    given_name: str
    family_name: str
    sis_id: str | None = None  # the university's id, sent as lis.person_sourcedid (roster: lis_person_sourcedid)


@dataclass(frozen=True)
class Course:
    key: int  # the platform's own number for it: its service URLs are /courses/<key>/...
    context_id: str
    title: str
    label: str


@dataclass(frozen=True)
class Link:
    """A resource link placed in a course; `lineitem` is its line item's URL, if it has one."""

    course: Course
    resource_link_id: str
    title: str
    lineitem: str | None = None
    custom: dict[str, str] = field(default_factory=dict)
    url: str | None = None  # the target link URI a deep-linked item asked for; else the tool's launch URL


@dataclass
class Enrollment:
    roles: tuple[str, ...]
    dropped: bool = False
    omitted: bool = False  # dropped and left out of the roster altogether


@dataclass(frozen=True)
class Column:
    """A gradebook column as the test reads it: the line item and every score accepted for it,
    each exactly the JSON the tool posted, in the order received."""

    id: str
    label: str
    score_maximum: float
    resource_link_id: str | None
    resource_id: str | None
    tag: str | None
    scores: tuple[dict[str, Any], ...]

    def latest(self, user: User) -> dict[str, Any] | None:
        return next((s for s in reversed(self.scores) if s.get("userId") == user.sub), None)


@dataclass
class _LineItem:
    course: int
    data: dict[str, Any]  # the line item's JSON, its id (URL) included
    scores: list[dict[str, Any]] = field(default_factory=list)


class Store:
    """Every record of one platform. Line item ids are URLs under `base_url`."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.lock = threading.RLock()
        self.users: dict[str, User] = {}
        self.courses: dict[int, Course] = {}
        self.enrollments: dict[tuple[int, str], Enrollment] = {}
        self.links: dict[tuple[int, str], Link] = {}
        self._items: dict[int, _LineItem] = {}
        self._next_item = 1

    # URLs of a course's services
    def lineitems_url(self, course: Course) -> str:
        return f"{self.base_url}/courses/{course.key}/lineitems"

    def lineitem_url(self, course: Course, key: int) -> str:
        return f"{self.lineitems_url(course)}/{key}"

    def memberships_url(self, course: Course) -> str:
        return f"{self.base_url}/courses/{course.key}/memberships"

    # people and courses
    def add_course(self, context_id: str, title: str, label: str) -> Course:
        with self.lock:
            course = Course(len(self.courses) + 1, context_id, title, label)
            self.courses[course.key] = course
            return course

    def add_user(self, user: User) -> User:
        with self.lock:
            if user.sub in self.users:
                raise ValueError(f"user {user.sub!r} exists")
            self.users[user.sub] = user
            return user

    def enroll(self, course: Course, user: User, roles: tuple[str, ...]) -> None:
        with self.lock:
            self.enrollments[(course.key, user.sub)] = Enrollment(roles)

    def drop(self, course: Course, user: User, omit: bool) -> None:
        with self.lock:
            enrollment = self.enrollments[(course.key, user.sub)]
            enrollment.dropped, enrollment.omitted = True, omit

    def roles(self, course: Course, user: User) -> tuple[str, ...]:
        """The roles a launch carries: none for someone not (or no longer) in the course."""
        with self.lock:
            enrollment = self.enrollments.get((course.key, user.sub))
            return enrollment.roles if enrollment and not enrollment.dropped else ()

    def members(self, course: Course) -> list[dict[str, Any]]:
        """The course's roster as NRPS shows it: a dropped member is Inactive (or absent)."""
        with self.lock:
            rows = []
            for (key, sub), enrollment in self.enrollments.items():
                if key != course.key or enrollment.omitted:
                    continue
                user = self.users[sub]
                rows.append({"user_id": sub, "roles": list(enrollment.roles),
                             "status": "Inactive" if enrollment.dropped else "Active",
                             "name": user.name, "given_name": user.given_name, "family_name": user.family_name,
                             "email": user.email, **({"lis_person_sourcedid": user.sis_id} if user.sis_id else {})})
            return rows

    def is_member(self, course: Course, sub: str) -> bool:
        with self.lock:
            return (course.key, sub) in self.enrollments

    # links
    def add_link(self, link: Link) -> Link:
        with self.lock:
            key = (link.course.key, link.resource_link_id)
            if key in self.links:
                raise ValueError(f"link {link.resource_link_id!r} exists in {link.course.context_id!r}")
            self.links[key] = link
            return link

    def has_link(self, course: Course, resource_link_id: str) -> bool:
        with self.lock:
            return (course.key, resource_link_id) in self.links

    def course_links(self, course: Course) -> list[Link]:
        with self.lock:
            return [link for (key, _), link in self.links.items() if key == course.key]

    # line items and scores
    def create_lineitem(self, course: Course, data: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            key, self._next_item = self._next_item, self._next_item + 1
            item = _LineItem(course.key, {**data, "id": self.lineitem_url(course, key)})
            self._items[key] = item
            return dict(item.data)

    def lineitems(self, course: Course) -> list[dict[str, Any]]:
        with self.lock:
            return [dict(item.data) for item in self._items.values() if item.course == course.key]

    def _item(self, course: Course, key: int) -> _LineItem | None:
        item = self._items.get(key)
        return item if item is not None and item.course == course.key else None

    def lineitem(self, course: Course, key: int) -> dict[str, Any] | None:
        with self.lock:
            item = self._item(course, key)
            return dict(item.data) if item else None

    def update_lineitem(self, course: Course, key: int, data: dict[str, Any]) -> dict[str, Any] | None:
        with self.lock:
            item = self._item(course, key)
            if item is None:
                return None
            item.data = {**data, "id": self.lineitem_url(course, key)}
            return dict(item.data)

    def delete_lineitem(self, course: Course, key: int) -> bool:
        with self.lock:
            return self._items.pop(key, None) is not None if self._item(course, key) else False

    def add_score(self, course: Course, key: int, score: dict[str, Any]) -> bool:
        with self.lock:
            item = self._item(course, key)
            if item is not None:
                item.scores.append(dict(score))
            return item is not None

    def scores(self, course: Course, key: int) -> list[dict[str, Any]] | None:
        with self.lock:
            item = self._item(course, key)
            return [dict(s) for s in item.scores] if item else None

    def gradebook(self, course: Course) -> list[Column]:
        with self.lock:
            return [Column(item.data["id"], item.data.get("label", ""), item.data.get("scoreMaximum", 0),
                           item.data.get("resourceLinkId"), item.data.get("resourceId"), item.data.get("tag"),
                           tuple(dict(s) for s in item.scores))
                    for item in self._items.values() if item.course == course.key]
