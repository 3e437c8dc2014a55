"""The server-rendered pages, one module per page family; `routers` in the order the app
includes them. grader.pages.common holds what they share (templates, the page dependencies
and their one refusal, PageDenied); grader.pages.errors the HTML error pages; charts,
highlight, gradebook_view, run_view and members_view are presentation helpers (no routes) that
page modules may import; sign_in what the two single sign-on doors (sso, saml) share."""
from __future__ import annotations

from grader.pages import (
    account,
    accounts,
    bulk,
    code,
    courses,
    first_logins,
    gradebook,
    lms,
    login,
    lti,
    ops,
    requests,
    rescore,
    roster,
    runs,
    saml,
    similarity,
    sso,
    student,
    submit,
    workers,
)

routers = [login.router, sso.router, saml.router, lti.router, lms.router, submit.router, runs.router, gradebook.router,
           bulk.router, roster.router,
           account.router, accounts.router,
           courses.router, first_logins.router, ops.router, rescore.router, similarity.router, requests.router, code.router,
           student.router, workers.router]
