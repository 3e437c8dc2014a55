"""LTI 1.3 (LTI Advantage): kernelgrade as a tool that a course's LMS (Canvas, Moodle) launches.

- registry: the platforms registered with this tool (`grader lti add-platform`) and their deployments;
- keys: the tool's own signing keys (its JWKS at /lti/jwks), rotated by adding a newer key;
- platform_keys: the platforms' key sets, fetched and cached, to check what they sign;
- launch: OIDC login initiation, then the id_token's checks, one by one, each refusal in words;
- people: who a launch is (grader.auth.identities) and their part in the linked course;
- links: the LMS course and link a launch comes from, and the course and assignment they open;
- deep_linking: the instructor's choice of assignment, signed back to the LMS;
- entry: a launch inside the LMS's frame continues in a window of our own (no third-party cookie);
- services: the platform's token endpoint, Assignment and Grade Services and Names and Roles;
- passback: the grades that count sent to the LMS gradebook; roster_sync: the LMS roster read in.
The web routes are grader/pages/lti.py; the background work runs in Celery (grader/lti/tasks.py).
"""
