"""The code view and download of a submission, and a student's history page for staff, on
PostgreSQL through the real app: the owner sees the files (the graded ones marked, highlighted)
and downloads the very bytes uploaded; the assignment's staff see them too; another student,
staff of another assignment and a stranger get nothing. Hostile zips (a path that leaves its
folder, markup in a name, a file past the display cap, binary data, a .tar.gz named .zip) are
listed without being unpacked, and nothing of them runs in the page."""
from __future__ import annotations

import random
import re
import uuid
from dataclasses import dataclass
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient
from sqlalchemy.orm import Session, sessionmaker

from grader.app import create_app
from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import Assignment, Course, ProblemResult, Role, RunState, utcnow
from grader.passwords import set_password
from grader.service import get_assignment, record_submission
from grader.settings import Settings
from grader.storage.blobstore import BlobStore
from grader.storage.submitted_zip import SHOWN_MAX_BYTES
from tests.fixtures.hostile_zips import assignment_entries, make_zip, tar_gz
from tests.fixtures.passwords import SUITE_ARGON2
from tests.service.test_web_settings import PASSWORD, Browser

MARKUP_NAME = "llmsys_hw4/src/<img src=x onerror=alert(1)>.cu"
TRAVERSAL = "../../etc/kernelgrade-escape.cu"


def _long_source() -> bytes:
    """About 600 KiB of C that compresses poorly (no zip-bomb ratio): past the display cap."""
    rng = random.Random(11868)
    lines = [f"int v{i} = 0x{rng.getrandbits(64):016x}; // line {i}" for i in range(14000)]
    return ("\n".join(lines) + "\nint LAST_LINE_MARKER;\n").encode()


GOOD = make_zip([*assignment_entries("llmsys_hw4/"), ("llmsys_hw4/src/weights.bin", b"\x00\x01\x02" * 50),
                 ("llmsys_hw4/notes/<b>bold</b>.txt", b"not code </li><script>alert(2)</script>\n")])
HOSTILE = make_zip([*assignment_entries(), (TRAVERSAL, b"escaped\n"), (MARKUP_NAME, b"int x;\n")])
HUGE = make_zip([*assignment_entries()[:2], ("src/combine.cu", _long_source()), *assignment_entries()[3:]])


@dataclass
class World:
    settings: Settings
    logins: dict[str, str]
    subs: dict[str, int]
    slug: str  # an assignment with a due date already past (the late run's)

    def web(self, who: str) -> TestClient:
        return Browser(self.settings, self.logins[who]).client


@pytest.fixture(scope="module")
def world(settings: Settings, sessions: sessionmaker[Session]) -> World:
    tag = uuid.uuid4().hex[:6]
    logins = {"owner": f"code-own-{tag}", "other": f"code-oth-{tag}", "prof": f"code-prof-{tag}",
              "elsewhere": f"code-else-{tag}"}
    blobs = BlobStore(settings.blob_dir)
    subs = {}
    with session_scope(sessions) as session:
        hw4 = get_assignment(session, "hw4")
        elsewhere = Assignment(slug=f"code-else-{tag}", title="Another course", course=Course(slug=f"code-else-{tag}", title="Another course"), total_points=100)
        late = Assignment(slug=f"code-late-{tag}", title="Due this morning", course=Course(slug=f"code-late-{tag}", title="Due this morning"), total_points=100,
                          due_at=utcnow() - timedelta(hours=12), late_window_s=7 * 86400, late_penalty_per_day=0.1)
        session.add_all([elsewhere, late])
        session.flush()
        parts = {"owner": (Role.student, [hw4, late]), "other": (Role.student, [hw4]),
                 "prof": (Role.instructor, [hw4, late]), "elsewhere": (Role.instructor, [elsewhere])}
        users = {}
        for key, (role, where) in parts.items():
            users[key] = get_or_create_user(session, logins[key], role, [a.course for a in where])
            set_password(users[key], PASSWORD, SUITE_ARGON2)
        for key, data, name in (("good", GOOD, "my hw4 \"final\".zip"), ("hostile", HOSTILE, "hostile.zip"),
                                ("huge", HUGE, "huge.zip"), ("tar", tar_gz(), "renamed.zip")):
            sub, _run = record_submission(session, users["owner"], hw4, name, blobs.put_bytes(data))
            subs[key] = sub.id
        sub, run = record_submission(session, users["owner"], late, "late.zip", blobs.put_bytes(GOOD))
        run.state, run.score, run.finished_at = RunState.scored, 80.0, utcnow()
        _sub, failed = record_submission(session, users["owner"], late, "again.zip", blobs.put_bytes(HOSTILE))
        failed.state, failed.finished_at, failed.message = RunState.failed, utcnow(), "The zip was refused."
        subs["late"] = sub.id
    return World(settings, logins, subs, late.slug)


def test_owner_sees_the_files_graded_ones_marked_and_highlighted(world: World) -> None:
    owner = world.web("owner")
    page = owner.get(f"/submissions/{world.subs['good']}/code")
    assert page.status_code == 200, page.text[:300]
    html = page.text
    assert "the folder llmsys_hw4" in html
    for name in ("src/softmax_kernel.cu", "src/combine.cu", "src/includes/common.h", "minitorch/cuda_kernel_ops.py",
                 "README.md", "src/weights.bin"):
        assert f"llmsys_hw4/{name}</a>" in html, name
    rows = {row.split("</a>")[0].rsplit(">", 1)[-1]: row for row in html.split("<tr")[2:]}
    assert "graded" in rows["llmsys_hw4/src/combine.cu"] and "graded" in rows["llmsys_hw4/minitorch/cuda_kernel_ops.py"]
    assert "not taken" in rows["llmsys_hw4/README.md"] and "not taken" in rows["llmsys_hw4/src/weights.bin"]
    # The first graded file is open, highlighted on the server.
    assert 'aria-current="page">llmsys_hw4/src/softmax_kernel.cu' in html
    assert '<span class="tok-k">__global__</span> <span class="tok-k">void</span> softmax() {}' in html
    assert '<span class="tok-p">#include &#34;includes/common.h&#34;</span>' in html
    assert '<link rel="stylesheet" href="/static/code.css">' in html and "<script" not in html
    # Another file, by its name in the zip; its markup is text.
    notes = owner.get(f"/submissions/{world.subs['good']}/code", params={"file": "llmsys_hw4/notes/<b>bold</b>.txt"})
    assert notes.status_code == 200
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in notes.text and "<script>" not in notes.text
    assert "llmsys_hw4/notes/&lt;b&gt;bold&lt;/b&gt;.txt" in notes.text and "<b>bold</b>" not in notes.text
    binary = owner.get(f"/submissions/{world.subs['good']}/code", params={"file": "llmsys_hw4/src/weights.bin"})
    assert "This is a binary file" in binary.text and 'class="code"' not in binary.text
    missing = owner.get(f"/submissions/{world.subs['good']}/code", params={"file": "llmsys_hw4/src/nothere.cu"})
    assert missing.status_code == 404


def test_owner_and_staff_download_the_zip_byte_for_byte(world: World) -> None:
    for who in ("owner", "prof"):
        response = world.web(who).get(f"/submissions/{world.subs['good']}/download")
        assert response.status_code == 200, (who, response.text[:200])
        assert response.content == GOOD
        assert response.headers["content-type"] == "application/zip"
        disposition = response.headers["content-disposition"]
        assert disposition.startswith("attachment;") and "\n" not in disposition
        assert "my%20hw4%20%22final%22.zip" in disposition  # quoted: a quote in the name cannot end the field
        assert "no-store" in response.headers["cache-control"]
    staff_view = world.web("prof").get(f"/submissions/{world.subs['good']}/code")
    assert staff_view.status_code == 200
    assert f'href="/assignments/hw4/students/{world.logins["owner"]}" id="history-link"' in staff_view.text
    assert 'id="history-link"' not in world.web("owner").get(f"/submissions/{world.subs['good']}/code").text


@pytest.mark.parametrize("who", ["other", "elsewhere"])
def test_another_student_and_other_staff_get_the_404_page(world: World, who: str) -> None:
    client = world.web(who)
    for path in (f"/submissions/{world.subs['good']}/code", f"/submissions/{world.subs['good']}/download",
                 f"/submissions/{world.subs['good']}/code?file=llmsys_hw4/src/combine.cu"):
        response = client.get(path)
        assert response.status_code == 404, (who, path)
        assert "softmax" not in response.text and "final" not in response.text
    sub = world.subs["good"]
    nothing = client.get("/submissions/999999999/code")  # no such submission: the very same page
    assert client.get(f"/submissions/{sub}/code").text == nothing.text.replace("999999999", str(sub))


def test_a_stranger_is_asked_to_log_in(world: World) -> None:
    stranger = TestClient(create_app(world.settings))
    for path in (f"/submissions/{world.subs['good']}/code", f"/submissions/{world.subs['good']}/download"):
        response = stranger.get(path, follow_redirects=False)
        assert response.status_code == 303 and response.headers["location"].startswith("/login?next=")


def test_a_zip_with_a_path_out_of_its_folder_is_listed_never_read(world: World) -> None:
    owner = world.web("owner")
    page = owner.get(f"/submissions/{world.subs['hostile']}/code")
    assert page.status_code == 200
    assert "The grader takes no file from this zip." in page.text
    assert "The zip contains a path that leaves its folder" in page.text
    assert "../../etc/kernelgrade-escape.cu" in page.text and 'href="?file=..' not in page.text
    assert "&lt;img src=x onerror=alert(1)&gt;.cu" in page.text and "<img" not in page.text
    assert 'class="code"' not in page.text  # no file is opened: the engine would unpack none
    assert owner.get(f"/submissions/{world.subs['hostile']}/code", params={"file": TRAVERSAL}).status_code == 404
    assert not (world.settings.blob_dir.parent / "etc" / "kernelgrade-escape.cu").exists()
    assert owner.get(f"/submissions/{world.subs['hostile']}/download").content == HOSTILE


def test_a_file_past_the_cap_is_cut_and_says_so(world: World) -> None:
    page = world.web("owner").get(f"/submissions/{world.subs['huge']}/code", params={"file": "src/combine.cu"})
    assert page.status_code == 200
    assert f"Only the first {SHOWN_MAX_BYTES // 1024} KiB of this file are shown" in page.text
    assert '<span class="tok-c">// line 0</span>' in page.text
    assert "LAST_LINE_MARKER" not in page.text and len(page.text) < 8 * SHOWN_MAX_BYTES


def test_an_upload_that_is_not_a_zip_says_what_it_is(world: World) -> None:
    page = world.web("owner").get(f"/submissions/{world.subs['tar']}/code")
    assert page.status_code == 200 and "The upload is a gzip file (a .tar.gz, say), not a zip file." in page.text


def test_staff_see_one_students_whole_history_with_the_final_grade(world: World) -> None:
    path = f"/assignments/{world.slug}/students/{world.logins['owner']}"
    page = world.web("prof").get(path)
    assert page.status_code == 200, page.text[:300]
    html = page.text
    assert f"History of {world.logins['owner']}" in html
    assert html.count("<tr>\n    <th scope=\"row\">") == 2  # both submissions, newest first
    assert html.index("again.zip") < html.index("late.zip")
    assert f'href="/submissions/{world.subs["late"]}/code"' in html
    assert f'href="/submissions/{world.subs["late"]}/download"' in html
    assert "The zip was refused." in html and 'class="flag late-badge">Late' in html
    assert '<strong class="counts">counts</strong>' in html
    assert "Raw score 80, late penalty 8 points." in html  # one started day late, 10% a day
    assert '<strong class="final-grade">72</strong> / 100' in html
    code = world.web("prof").get(f"/submissions/{world.subs['late']}/code")  # an assignment without a rubric
    assert code.status_code == 200 and "has no rubric that can be read" in code.text
    gradebook = world.web("prof").get("/gradebook", params={"assignment": world.slug})
    assert f'href="{path}"' in gradebook.text  # the Uploads count links here
    for who, status in (("owner", 403), ("other", 404), ("elsewhere", 404)):  # a student of its course: 403
        refused = world.web(who).get(path)
        assert refused.status_code == status and "late.zip" not in refused.text, who
    unknown = world.web("prof").get(f"/assignments/{world.slug}/students/nobody-{uuid.uuid4().hex[:6]}")
    assert unknown.status_code == 404
    not_there = world.web("prof").get(f"/assignments/{world.slug}/students/{world.logins['other']}")
    assert not_there.status_code == 404  # neither enrolled there nor a submitter


def _opened(html: str) -> str:
    found = re.search(r'<h2 id="file-title" class="path">([^<]*)</h2>', html)
    assert found, "no file is open"
    return found[1]


def test_the_code_view_opens_the_file_that_matters(world: World, sessions: sessionmaker[Session],
                                                    settings: Settings) -> None:
    """A zip listed alphabetically, as `zip -r` writes it (the bindings, then combine.cu, first):
    without a run the
    assignment's own kernel opens (not the HW3 combine.cu every problem needs); with a run, the
    file of its first compiler error, else the kernel of its first failing problem. A file
    asked for by its path in the assignment folder opens too, its lines anchored."""
    alphabetical = make_zip(sorted(assignment_entries("llmsys_hw4/")))
    names = [name for name, _ in sorted(assignment_entries("llmsys_hw4/"))]
    assert names.index("llmsys_hw4/src/combine.cu") < names.index("llmsys_hw4/src/softmax_kernel.cu")
    blob = BlobStore(settings.blob_dir).put_bytes(alphabetical)
    subs = {}
    with session_scope(sessions) as session:
        owner = get_or_create_user(session, world.logins["owner"], Role.student)
        hw4 = get_assignment(session, "hw4")
        for case in ("no run", "build error", "2.1 failed"):
            sub, run = record_submission(session, owner, hw4, f"{case}.zip", blob)
            subs[case] = sub.id
            if case == "build error":
                run.state, run.stages = RunState.failed, {"build": {"status": "failed", "log": (
                    "$ nvcc -o minitorch/cuda_kernels/combine.so src/combine.cu\n"
                    "src/combine.cu(1): error: expected a declaration\n")}}
            if case == "2.1 failed":
                run.state, run.stages = RunState.scored, {"build": {"status": "ok", "log": "== combine (ok, 3 s)"}}
                run.results = [ProblemResult(problem_id=pid, title=pid, status="ok", points=points, max_points=20,
                                             message="", details={})
                               for pid, points in (("1.1", 20.0), ("1.2", 20.0), ("2.1", 6.0), ("2.2", 0.0))]
    owner_web = world.web("owner")
    opened = {case: _opened(owner_web.get(f"/submissions/{sub}/code").text) for case, sub in subs.items()}
    assert opened == {"no run": "llmsys_hw4/src/softmax_kernel.cu", "build error": "llmsys_hw4/src/combine.cu",
                      "2.1 failed": "llmsys_hw4/src/layernorm_kernel.cu"}
    by_path = owner_web.get(f"/submissions/{subs['no run']}/code", params={"file": "src/combine.cu"}).text
    assert _opened(by_path) == "llmsys_hw4/src/combine.cu"
    assert '<li id="L1"><code>' in by_path
    assert owner_web.get(f"/submissions/{subs['no run']}/code", params={"file": "src/nothere.cu"}).status_code == 404
