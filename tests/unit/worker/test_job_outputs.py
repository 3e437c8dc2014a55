"""What a job leaves in its folder cannot make the grading parent, which runs as root, read a
host file for it (issue 54). A namespaced job's writes are merged back without the links,
FIFOs, sockets and devices it made (worker/sandbox/overlay.py); every read the engine and the
plug-ins make of a job's folder goes through worker/job_files.py, which refuses what a job
without namespaces leaves in place. Planted through the real sandbox, as root, in both modes:
a link to a root-only 0600 file, a link to /etc/shadow, a hard link to a file outside the
folder and a FIFO, by a plain child, by the build's nvcc, and by a vecadd submission graded
through the pipeline (whose grade then says the output was missing or refused)."""
from __future__ import annotations

import os
import shutil
import socket
import stat
import textwrap
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_build_sandbox import LIMITS as BUILD_LIMITS
from test_build_sandbox import _script

from grader.runs.engine_config import gpu_stage_for, pipeline_config
from grader.settings import Settings
from tests.fixtures import cpu_standin
from tests.unit.worker.sandbox.test_sandbox import _python
from worker.build import Confinement, KernelTarget, Toolchain, build_kernels
from worker.job_files import JobFileError, JobFileMissing, read_job_file
from worker.pipeline import grade_submission
from worker.rubric import load_rubric
from worker.sandbox import Sandbox, SandboxLimits, SandboxPolicy, namespaces
from worker.sandbox.overlay import merge_back
from worker.starter_kit import zip_tree
from worker.states import RunState

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the grading parent runs as root; so must these plants")

MiB = 1 << 20
LIMITS = SandboxLimits(wall_s=20, cpu_s=20, memory_bytes=512 * MiB, max_processes=32, file_size_bytes=16 * MiB,
                       disk_bytes=32 * MiB)
VECADD = Path(__file__).resolve().parents[2] / "assignments" / "vecadd"
SHADOW = Path("/etc/shadow")
# What the parent reports for each plant when the job ran without namespaces (the plants stay)
REFUSED = {"db": "it is a symbolic link", "shadow": "it is a symbolic link", "hard": "the file has 2 hard links",
           "pipe": "it is a FIFO"}


class Place:
    """A folder the sandbox user can traverse (a job without namespaces reaches its folder by
    the host's paths): the job folder, a root-only 0600 file beside it (the data dir's
    database, say), and a file of the sandbox user outside the folder (another job's)."""

    def __init__(self, base: Path) -> None:
        self.base, self.job, self.token = base, base / "job", f"kg-secret-{uuid.uuid4().hex}"
        self.job.mkdir()
        self.database, self.other_job = base / "kg.db", base / "other-job.bin"
        for path in (self.database, self.other_job):
            path.write_text(self.token)
            path.chmod(0o600)
        os.chown(self.other_job, 65534, 65534)  # nobody's: protected_hardlinks lets it link only its own

    def secrets(self) -> list[bytes]:
        return [self.token.encode(), *([SHADOW.read_bytes().split(b"\n")[0]] if SHADOW.is_file() else [])]


@pytest.fixture
def place() -> Iterator[Place]:
    base = cpu_standin.sandbox_visible_dir("kg-job-outputs-")
    yield Place(base)
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(params=["namespaces", "none"])
def policy(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> SandboxPolicy:
    """The process backend as deployed, and as KG_SANDBOX_REQUIRE_NAMESPACES=false leaves it on
    a host without namespaces (the job then writes straight into its folder)."""
    if request.param == "none":
        monkeypatch.setattr(namespaces, "namespaces_unavailable", lambda: "none, for this test")
        return SandboxPolicy(require_namespaces=False)
    if namespaces.namespaces_unavailable() is not None:
        pytest.skip("this host gives no namespaces")
    return SandboxPolicy()


def _expected_refusal(policy: SandboxPolicy, plant: str) -> str:
    """Merged back, a namespaced job's plants are gone; left in place, each is refused."""
    return "there is no such file" if policy.require_namespaces else REFUSED[plant]


def test_the_merge_back_drops_links_fifos_sockets_and_devices(tmp_path: Path, place: Place) -> None:
    upper, real = tmp_path / "upper", tmp_path / "real"
    (upper / "sub").mkdir(parents=True)
    real.mkdir()
    (real / "input.bin").write_text("ours")
    (real / "gone.txt").write_text("deleted by the job")
    (upper / "new.txt").write_text("new")
    (upper / "sub" / "deep.txt").write_text("deep")
    (upper / "db.bin").symlink_to(place.database)
    (upper / "input.bin").symlink_to(SHADOW)  # the job replaced a file of ours with a link
    os.mkfifo(upper / "pipe")
    os.mknod(upper / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    os.mknod(upper / "gone.txt", stat.S_IFCHR, 0)  # the overlay's whiteout: the job deleted it
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(upper / "sock"))
        dropped = merge_back(os.open(upper, os.O_RDONLY | os.O_DIRECTORY), real, None)
    assert dropped == Counter({"symbolic link": 2, "FIFO": 1, "socket": 1, "device": 1})
    assert sorted(p.relative_to(real).as_posix() for p in real.rglob("*")) == ["new.txt", "sub", "sub/deep.txt"]


PLANTS = f"""
    import os
    open("result.bin", "wb").write(b"ok")
    os.symlink({{database!r}}, "db")
    os.symlink({str(SHADOW)!r}, "shadow")
    os.mkfifo("pipe")
    try:
        os.link({{other_job!r}}, "hard")
    except OSError as exc:  # namespaced, the file is out of sight
        print("no hard link:", exc)
"""


def test_a_childs_plants_are_never_read(place: Place, policy: SandboxPolicy) -> None:
    code = PLANTS.format(database=str(place.database), other_job=str(place.other_job))
    child = Sandbox(LIMITS, policy).spawn([_python(), "-I", "-c", textwrap.dedent(code)], place.job, {})
    ended = child.wait()
    assert ended.reason == "exited" and ended.returncode == 0, child.output_tail()
    assert read_job_file(place.job, "result.bin", 10) == b"ok"
    for plant in REFUSED:
        with pytest.raises(JobFileError) as refused:
            read_job_file(place.job, plant, MiB)
        assert refused.value.reason.startswith(_expected_refusal(policy, plant)), refused.value
    if policy.require_namespaces:  # nothing but the plain output came back, and the exit says what did not
        assert [p.name for p in place.job.iterdir()] == ["result.bin"]
        assert ended.detail.endswith("not carried back from its folder: FIFO, symbolic link x2"), ended.detail


@pytest.fixture
def tools() -> Iterator[Path]:
    """A folder of its own for a fake nvcc: the build's view shows nvcc's folder."""
    path = cpu_standin.sandbox_visible_dir("kg-job-outputs-nvcc-")
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_builds_planted_library_and_log_are_not_read(tmp_path: Path, place: Place, tools: Path,
                                                       policy: SandboxPolicy) -> None:
    nvcc = _script(tools / "nvcc", f'rm -f .kg-build.log; ln -s {SHADOW} .kg-build.log\n'
                                        f'mkdir -p lib; ln -s {place.database} lib/k.so; exit 0')
    root = tmp_path / "sub"
    (root / "src").mkdir(parents=True)
    (root / "src" / "k.cu").write_text("int k;\n")
    [result] = build_kernels(root, [KernelTarget("k", "src/k.cu", "lib/k.so")], Toolchain(nvcc, ()),
                             confine=Confinement(Sandbox(BUILD_LIMITS, policy), place.job / "build"))
    assert not result.ok and not (root / "lib" / "k.so").exists()
    said = ("nvcc left no library at lib/k.so" if policy.require_namespaces
            else "lib/k.so was not read: it is a symbolic link")
    assert said in result.log, result.log
    assert not [s for s in place.secrets() if s in result.log.encode()]


# The student's vec_add: right sums, then, on the last case, its earlier outputs replaced
VEC_ADD = """#include <sys/stat.h>
#include <unistd.h>
extern "C" void vec_add(const float* a, const float* b, float* out, int n) {
    for (int i = 0; i < n; ++i) out[i] = a[i] + b[i];
    if (n != 4097) return;
    unlink("n1.out");
    unlink("n1000.out");
    %s;
    %s;
}
"""


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="the pipeline builds vecadd with nvcc")
@pytest.mark.parametrize("n1, n1000", [("db", "shadow"), ("hard", "pipe")])
def test_vecadd_reads_nothing_a_submission_planted_and_its_grade_says_so(
        tmp_path: Path, place: Place, policy: SandboxPolicy, n1: str, n1000: str) -> None:
    plant = {"db": f'symlink("{place.database}", "%s")', "shadow": f'symlink("{SHADOW}", "%s")',
             "hard": f'link("{place.other_job}", "%s")', "pipe": 'mkfifo("%s", 0600)'}
    tree = tmp_path / "vecadd"
    shutil.copytree(VECADD / "starter", tree)
    (tree / "src" / "vecadd.cu").write_text(VEC_ADD % (plant[n1] % "n1.out", plant[n1000] % "n1000.out"))
    variables = {} if policy.require_namespaces else {"KG_SANDBOX_REQUIRE_NAMESPACES": "false"}
    settings = Settings.from_variables(variables, gpu_grading="off", data_dir=place.base / "data")
    rubric = load_rubric("vecadd", VECADD.parent)
    outcome = grade_submission(zip_tree(tree, tmp_path / "v.zip", "vecadd"), rubric, place.job,
                               pipeline_config(settings, rubric), gpu_stage=gpu_stage_for(settings, rubric))
    assert outcome.state == RunState.scored, outcome.message
    [problem] = outcome.problems
    assert problem.points == 0
    assert f"n1.out was not read: {_expected_refusal(policy, n1)}" in problem.message, problem.message
    cases = {case["case_id"]: case for case in problem.details["measurement"]["cases"]["library"]}
    assert cases["n4097"]["ok"] and not cases["n1"]["ok"] and not cases["n1000"]["ok"]
    assert cases["n1000"]["message"].startswith(f"n1000.out was not read: {_expected_refusal(policy, n1000)}")
    assert not [s for s in place.secrets() if s in repr(outcome).encode()]
    with pytest.raises(JobFileMissing if policy.require_namespaces else JobFileError):
        read_job_file(place.job / "run" / "problem-1", "n1.out", MiB)  # the plug-in's tree, as the stage left it
