"""The peers' own tests use the fixtures other test folders import."""
from tests.peers.fixtures import form_browser, lms  # noqa: F401
