"""How pages name things, through the real app on PostgreSQL: the run page's first error names
the source file and line the compiler names (linked into the code view at that line), not only
the log's line, and a compute-sanitizer finding links its line there too; every page says "submission N" or "run N", never a bare or #-number."""
from __future__ import annotations

import html
import re
import uuid
from urllib.parse import quote

from sqlalchemy.orm import Session, sessionmaker

from grader.auth.credentials import issue_token
from grader.course.membership import get_or_create_user
from grader.db import session_scope
from grader.models import Role, Run, RunState
from grader.passwords import set_password
from grader.service import get_assignment, record_submission
from grader.settings import Settings
from grader.storage.blobstore import StoredBlob
from tests.fixtures.feedback_runs import measurements, record_scored, scored_run
from tests.fixtures.passwords import SUITE_ARGON2
from tests.fixtures.zips import small_zip
from tests.service.test_web_settings import PASSWORD, Browser
from worker.rubric import load_rubric

BUILD_LOG = ("== combine (failed, 2.1 s)\n$ nvcc --shared -o minitorch/cuda_kernels/combine.so src/combine.cu\n"
             "src/combine.cu(226): error: explicit type is missing (\"int\" assumed)\n"
             "1 error detected in the compilation of \"src/combine.cu\".\n")
LINKER_LOG = "== combine (failed, 1 s)\n/usr/bin/ld: cannot find -lcublas: No such file or directory (error)\n"


def _people(sessions: sessionmaker[Session]) -> tuple[str, str]:
    tag = uuid.uuid4().hex[:6]
    student, prof = f"words-stu-{tag}", f"words-prof-{tag}"
    with session_scope(sessions) as session:
        hw4 = get_assignment(session, "hw4")
        set_password(get_or_create_user(session, student, Role.student, [hw4.course]), PASSWORD, SUITE_ARGON2)
        set_password(get_or_create_user(session, prof, Role.instructor, [hw4.course]), PASSWORD, SUITE_ARGON2)
    return student, prof


def _failed_run(sessions: sessionmaker[Session], student: str, log: str) -> tuple[int, int]:
    with session_scope(sessions) as session:
        sub, run = record_submission(session, get_or_create_user(session, student, Role.student),
                                     get_assignment(session, "hw4"), "broken.zip", StoredBlob("ab" * 32, 10))
        run.state, run.stages = RunState.failed, {"build": {"status": "failed", "seconds": 2.1, "log": log}}
        session.flush()
        return sub.id, run.id


def test_the_first_error_names_the_source_file_and_line(settings: Settings, sessions: sessionmaker[Session]) -> None:
    student, _prof = _people(sessions)
    sub_id, run_id = _failed_run(sessions, student, BUILD_LOG)
    page = Browser(settings, student).client.get(f"/runs/{run_id}").text
    first = re.search(r'<p class="first-error">(.*?)</p>', page, re.S)
    assert first, page[-3000:]
    assert (f'<a href="/submissions/{sub_id}/code?file=src/combine.cu#L226"><code>src/combine.cu</code>, line 226</a>'
            in first[1])
    words = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", "", first[1])))
    assert words == 'First error: src/combine.cu, line 226: explicit type is missing ("int" assumed) (line 3 of the build log)'
    assert '<a href="#log-build-3">line 3 of the build log</a>' in first[1]
    # A line that names no source file (the linker's) is quoted, with its line in the log.
    _sub, linker = _failed_run(sessions, student, LINKER_LOG)
    page = Browser(settings, student).client.get(f"/runs/{linker}").text
    first = re.search(r'<p class="first-error">(.*?)</p>', page, re.S)
    assert first and 'First error, <a href="#log-build-2">line 2 of the build log</a>: <code>/usr/bin/ld:' in first[1]


def _visible(page: str) -> str:
    page = re.sub(r"<(script|style)\b.*?</\1>", "", page, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def test_every_page_says_which_id_is_a_submission_and_which_a_run(settings: Settings,
                                                                     sessions: sessionmaker[Session]) -> None:
    student, prof = _people(sessions)
    scored = scored_run(sessions, student)
    with session_scope(sessions) as session:
        run = session.get(Run, scored)
        assert run is not None
        sub_id = run.submission_id
        token = issue_token(session, get_or_create_user(session, student, Role.student), "words")
    as_student, as_prof = Browser(settings, student).client, Browser(settings, prof).client
    uploaded = as_student.post("/upload", data={"token": token}, files={"file": ("hw.zip", small_zip(student))})
    assert uploaded.status_code == 201, uploaded.text
    pages = {
        "history": as_student.get("/submissions").text,
        "run": as_student.get(f"/runs/{scored}").text,
        "code": as_student.get(f"/submissions/{sub_id}/code").text,
        "upload result": uploaded.text,
        "gradebook": as_prof.get("/gradebook?assignment=hw4&q=" + quote(student)).text,
        "staff history": as_prof.get(f"/assignments/hw4/students/{quote(student)}").text,
        "staff run": as_prof.get(f"/runs/{scored}").text,
    }
    for name, page in pages.items():
        text = _visible(page)
        assert not re.search(r"#\s*\d", text), (name, re.search(r".{40}#\s*\d.{20}", text))
        assert ">#<" not in page, name
        for target, inside in re.findall(r'<a href="/runs/(\d+)"[^>]*>(.*?)</a>', page, re.S):
            assert f"run {target}" in _visible(inside).lower(), (name, inside)
    assert f"Submission {sub_id}" in _visible(pages["history"]) and f"Run {scored}" in _visible(pages["history"])
    assert f"Submission {sub_id}" in _visible(pages["staff history"])
    assert f"Re-grade submission {sub_id} (a new run)" in _visible(pages["staff run"])
    assert f"Re-grade submission {sub_id} (graded)" in _visible(pages["gradebook"])
    assert re.search(r"Submission \d+ : the zip you uploaded", re.sub(r"\s+", " ", _visible(pages["upload result"])))


def test_a_sanitizer_finding_links_the_students_line_in_the_code_view(settings: Settings,
                                                                      sessions: sessionmaker[Session]) -> None:
    student, _prof = _people(sessions)
    measured = measurements()
    # As the H200 recorded hambone53's 2.2 (a dgamma write past its buffer), twice by two threads,
    # and a CUDA API error that names no line.
    write = {"tool": "memcheck", "kind": "Invalid __global__ write of size 4 bytes",
             "kernel": "ker_ln_bw_dgamma_dbetta<float>", "file": "src/layernorm_kernel.cu", "line": 249,
             "thread": "(0,4,0)", "block": "(0,0,0)", "detail": "1 bytes after the nearest allocation of size 16 bytes"}
    api = {"tool": "memcheck", "kind": "Program hit cudaErrorLaunchFailure (error 719) on cudaMemcpy",
           "kernel": "", "file": "", "line": None, "thread": "", "block": "", "detail": ""}
    measured[3].telemetry["sanitizer"] = {"case": "abi:lnbw-r1h4", "tool": "memcheck", "tools": ["memcheck"],
                                          "seconds": 1.7, "findings": [write, {**write, "thread": "(0,5,0)"}, api],
                                          "note": ""}
    with session_scope(sessions) as session:
        sub, run = record_submission(session, get_or_create_user(session, student, Role.student),
                                     get_assignment(session, "hw4"), "sanitized.zip", StoredBlob("cd" * 32, 10))
        record_scored(run, load_rubric("hw4"), measured)
        session.flush()
        sub_id, run_id = sub.id, run.id
    page = Browser(settings, student).client.get(f"/runs/{run_id}").text
    lines = re.search(r'<p class="sanitizer-lines">(.*?)</p>', page, re.S)
    assert lines, page[-3000:]
    assert lines[1].count("<a ") == 1  # the same bad access by two threads: one link; the API error: none
    assert (f'<a href="/submissions/{sub_id}/code?file=src/layernorm_kernel.cu#L249"><code>src/layernorm_kernel.cu'
            f'</code>, line 249</a>') in lines[1]
    words = re.sub(r"\s+", " ", html.unescape(re.sub(r"<[^>]+>", "", lines[1])))
    assert words == ("compute-sanitizer points at src/layernorm_kernel.cu, line 249 (memcheck: Invalid __global__ "
                     "write of size 4 bytes in ker_ln_bw_dgamma_dbetta<float>)")
    # the reasons name it in words too, and the API error after it
    assert "2.2: compute-sanitizer memcheck: Invalid __global__ write of size 4 bytes in ker_ln_bw_dgamma_dbetta" \
           "&lt;float&gt; at src/layernorm_kernel.cu:249" in page
    assert "2.2: compute-sanitizer memcheck: Program hit cudaErrorLaunchFailure" in page
    # a problem without a session has no such line
    assert page.count('class="sanitizer-lines"') == 1
