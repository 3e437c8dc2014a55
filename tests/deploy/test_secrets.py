"""Secrets the docs tell operators to write are theirs alone (issue 36: a `.env` holding the
database password was left 0644 in the service folder): the deploy guide's `.env` recipe, run
for real, makes a 0600 file even over an older 0644 one; every `.env` a doc writes is made 0600
first; and the images make the data dir owner-only."""
from __future__ import annotations

import os
import re
import stat
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MAKE_PRIVATE = re.compile(r"install -m 600\b.*\s\.env\b|umask 0?077")
WRITES_DOTENV = re.compile(r">>?\s*\.env\b")


def _shell_blocks(doc: Path) -> list[list[str]]:
    return [block.splitlines() for block in re.findall(r"```(?:sh|bash|shell)\n(.*?)```", doc.read_text(), re.S)]


def _dotenv_recipe() -> str:
    """The deploy guide's lines from making `.env` private to the end of the here-document
    that fills it."""
    for lines in _shell_blocks(ROOT / "docs" / "deploy.md"):
        start = next((i for i, line in enumerate(lines) if MAKE_PRIVATE.search(line)), None)
        if start is not None:
            end = next(i for i in range(start, len(lines)) if lines[i].strip() == "EOF")
            return "\n".join(lines[start:end + 1]) + "\n"
    raise AssertionError("docs/deploy.md has no recipe that makes .env private before filling it")


def test_the_deploy_guides_dotenv_recipe_makes_a_file_only_its_owner_reads(tmp_path: Path) -> None:
    recipe = _dotenv_recipe()
    assert "cat > .env" in recipe and "POSTGRES_PASSWORD" in recipe and "KG_SECRET_KEY" in recipe
    stale = tmp_path / ".env"
    stale.write_text("POSTGRES_PASSWORD=old\n")
    stale.chmod(0o644)  # an older deployment's
    done = subprocess.run(["bash", "-c", f"umask 022\n{recipe}"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, env={"PATH": os.environ["PATH"]})
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(stale.stat().st_mode) == 0o600
    values = dict(line.split("=", 1) for line in stale.read_text().splitlines())
    assert re.fullmatch(r"[0-9a-f]{32}", values["POSTGRES_PASSWORD"]), values
    assert re.fullmatch(r"[0-9a-f]{64}", values["KG_SECRET_KEY"]), values


def test_every_dotenv_a_doc_writes_is_made_private_first() -> None:
    written = 0
    for doc in DOCS:
        for lines in _shell_blocks(doc):
            for i, line in enumerate(lines):
                if WRITES_DOTENV.search(line):
                    written += 1
                    assert any(MAKE_PRIVATE.search(before) for before in lines[:i]), (
                        f"{doc.name}: `{line.strip()}` writes a .env that was not made 0600 first")
    assert written >= 1, "the deploy guide writes a .env: this check must see it"


def test_the_images_make_the_data_dir_owner_only() -> None:
    for dockerfile in sorted((ROOT / "docker").glob("*.Dockerfile")):
        runs = [r for r in re.findall(r"^RUN (.*?)(?<!\\)$", dockerfile.read_text(), re.M | re.S)
                if "mkdir -p /var/lib/kernelgrade" in r]
        assert runs, f"{dockerfile.name} makes no data dir"
        for run in runs:
            assert re.search(r"chmod -R go-rwx /var/lib/kernelgrade\b", run), (dockerfile.name, run)
