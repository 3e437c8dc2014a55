"""A browser without a browser engine, for LTI flows: it follows redirects and submits the
auto-posting forms LTI moves a person through (the platform's id_token form, the tool's
deep-linking response), keeping its cookies so a test can go on browsing the tool as that person.

Which form a page posts by itself: the one marked `data-autosubmit` (the way for a page whose
Content-Security-Policy forbids inline scripts: its own script file submits the marked form);
else, on a page whose inline script calls submit() (lti1p3platform's launch form), its only form
of hidden fields (buttons aside: a no-script "Continue" is common). A page with other forms, such
as a logout form of hidden fields, is not mistaken for one.

It does not model SameSite or third-party cookie rules (the browser tests do, in Chromium); it
does treat http://localhost and http://127.0.0.1 as secure origins for Secure cookies, as
browsers do.
"""
from __future__ import annotations

from dataclasses import dataclass
from html.parser import HTMLParser
from http.cookiejar import CookieJar, DefaultCookiePolicy
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx

LOOPBACK = {"localhost", "127.0.0.1", "[::1]", "::1"}


@dataclass(frozen=True)
class Form:
    action: str  # absolute
    method: str  # "GET" or "POST"
    fields: dict[str, str]


class _FormParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.forms: list[dict[str, Any]] = []
        self.inline_submit = False
        self._in_script = self._in_form = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = {name: value or "" for name, value in attrs}
        if tag == "script":
            self._in_script = "src" not in attributes
        elif tag == "form":
            self.forms.append({"attrs": attributes, "fields": {}, "visible": False})
            self._in_form = True
        elif self._in_form and tag in ("input", "textarea", "select"):
            kind = attributes.get("type", "text").lower() if tag == "input" else tag
            if kind == "hidden" and attributes.get("name"):
                self.forms[-1]["fields"][attributes["name"]] = attributes.get("value", "")
            elif kind not in ("submit", "button", "image", "reset"):
                self.forms[-1]["visible"] = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "script":
            self._in_script = False
        elif tag == "form":
            self._in_form = False

    def handle_data(self, data: str) -> None:
        if self._in_script and "submit()" in data:
            self.inline_submit = True


def auto_form(response: httpx.Response) -> Form | None:
    """The auto-posting form of an HTML page, if it is one."""
    if "html" not in response.headers.get("content-type", ""):
        return None
    parser = _FormParser()
    parser.feed(response.text)
    marked = [form for form in parser.forms if "data-autosubmit" in form["attrs"]]
    if len(marked) == 1:
        form = marked[0]
    elif not marked and parser.inline_submit and len(parser.forms) == 1 and not parser.forms[0]["visible"]:
        form = parser.forms[0]
    else:
        return None
    action = urljoin(str(response.url), form["attrs"].get("action") or str(response.url))
    return Form(action, form["attrs"].get("method", "GET").upper(), dict(form["fields"]))


class _LoopbackIsSecure(DefaultCookiePolicy):
    def return_ok_secure(self, cookie: Any, request: Any) -> bool:
        return urlsplit(request.get_full_url()).hostname in LOOPBACK or super().return_ok_secure(cookie, request)


class FormBrowser:
    """One person's browser. `submitted`: every form it auto-submitted, in order."""

    def __init__(self, timeout: float = 15, max_forms: int = 10) -> None:
        jar = CookieJar(policy=_LoopbackIsSecure())
        self.client = httpx.Client(follow_redirects=True, timeout=timeout, cookies=httpx.Cookies(jar))
        self.max_forms = max_forms
        self.submitted: list[Form] = []

    def open(self, url: str) -> httpx.Response:
        """GET `url`, then submit each auto-posting form reached; the first other page."""
        return self._follow(self.client.get(url))

    def submit(self, form: Form) -> httpx.Response:
        """Submit `form` (and the auto-posting forms after it)."""
        return self._follow(self._send(form))

    def _send(self, form: Form) -> httpx.Response:
        self.submitted.append(form)
        if form.method == "POST":
            return self.client.post(form.action, data=form.fields)
        return self.client.get(form.action, params=form.fields)

    def _follow(self, response: httpx.Response) -> httpx.Response:
        for _ in range(self.max_forms):
            form = auto_form(response)
            if form is None:
                return response
            response = self._send(form)
        raise RuntimeError(f"more than {self.max_forms} auto-posting forms in a row, the last at {response.url}")

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> FormBrowser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
