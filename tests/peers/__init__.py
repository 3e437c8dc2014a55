"""Peers the LTI tests talk to, run inside the test process: the LMS (an LTI 1.3 Advantage
platform whose LTI logic is the lti1p3platform package; lms.py) and a browser without a browser
engine that follows a launch's redirects and auto-posting forms (form_browser.py)."""
