"""Which form FormBrowser takes a page to post by itself (tests/peers/form_browser.py)."""
from __future__ import annotations

import httpx

from tests.peers.form_browser import Form, auto_form

URL = "http://127.0.0.1:9/lti/launch"
LOGOUT = "<form method='post' action='/logout'><input type='hidden' name='csrf' value='c'><button>Log out</button></form>"


def page(body: str) -> httpx.Response:
    return httpx.Response(200, html=f"<!DOCTYPE html><html><body>{body}</body></html>", request=httpx.Request("GET", URL))


def test_an_inline_submit_posts_the_only_hidden_form() -> None:
    body = ("<form method='post' action='https://tool.example/dl'><input type='hidden' name='JWT' value='x.y.z'></form>"
            "<script>document.forms[0].submit()</script>")
    assert auto_form(page(body)) == Form("https://tool.example/dl", "POST", {"JWT": "x.y.z"})


def test_a_marked_form_is_taken_beside_a_logout_form() -> None:
    body = (LOGOUT + "<form data-autosubmit method='post' action='/deep'><input type='hidden' name='JWT' value='j'>"
            "</form><script src='/static/autopost.js'></script>")
    assert auto_form(page(body)) == Form("http://127.0.0.1:9/deep", "POST", {"JWT": "j"})


def test_an_ordinary_page_with_a_logout_form_is_not_posted() -> None:
    assert auto_form(page(LOGOUT + "<script src='/static/notify.js'></script><p>Your grade</p>")) is None
    assert auto_form(page("<form method='post'><input name='username'></form><script>f.submit()</script>")) is None
