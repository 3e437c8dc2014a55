"""Where a similarity base may be fetched from (grader/similarity/fetch.py; issue 54: a base of
`http://127.0.0.1:6379/...` was a port-scan oracle, a local path archived a repository of the
worker host). Every refusal names why; the one allowed fetch goes to a real HTTPS git server on
127.0.0.1 (tests/fixtures/https_git.py), reached only through the settings an operator uses for
a campus git server, and the same server is refused without them."""
from __future__ import annotations

import ipaddress
import os
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from grader.settings import Settings
from grader.similarity.fetch import (
    BaseRefused,
    Checked,
    FetchRules,
    check_repository,
    clone_checked,
    clone_command,
    fetch_clone,
    refused_address,
)
from tests.fixtures.https_git import HOST, GitServer, https_git_server, publish
from worker.unpack import BadArchive

OPEN = FetchRules(hosts=("127.0.0.1", "10.1.2.3", "192.168.1.20", "169.254.169.254", "localhost", "[::1]", "::1",
                         "224.0.0.1"),
                  private_networks=(), ca_file="", timeout_s=10, max_bytes=50 << 20)


@pytest.mark.parametrize(("url", "why"), [
    ("http://127.0.0.1:6379/x.git", "is not an https:// URL"),
    ("file:///srv/llmsys_hw4", "is not an https:// URL"),
    ("/srv/llmsys_hw4", "is not an https:// URL"),
    ("../llmsys_hw4", "is not an https:// URL"),
    ("ssh://git@github.com/llmsystem/llmsys_hw4", "is not an https:// URL"),
    ("git@github.com:llmsystem/llmsys_hw4.git", "is not an https:// URL"),
    ("https://staff:secret@github.com/x.git", "may not hold a login"),
    ("https://github.com/llmsystem/llmsys_hw4", "github.com is not a host bases may be fetched from"),
    ("https://127.0.0.1:6379/x.git", "resolves to 127.0.0.1, a loopback address"),
    ("https://localhost/x.git", "a loopback address"),
    ("https://[::1]/x.git", "resolves to ::1, a loopback address"),
    ("https://10.1.2.3/x.git", "resolves to 10.1.2.3, a private address"),
    ("https://192.168.1.20/x.git", "resolves to 192.168.1.20, a private address"),
    ("https://169.254.169.254/latest/meta-data", "resolves to 169.254.169.254, a link-local address"),
    ("https://224.0.0.1/x.git", "a multicast address"),
])
def test_refused_with_the_reason(url: str, why: str) -> None:
    with pytest.raises(BaseRefused, match=why.replace("[", r"\[").replace(".", r"\.")):
        check_repository(url, OPEN)


def test_an_empty_host_list_fetches_nothing() -> None:
    rules = FetchRules.of(Settings(_env_file=None))  # type: ignore[call-arg]
    assert rules.hosts == ()
    with pytest.raises(BaseRefused, match=r"KG_SIMILARITY_BASE_HOSTS: none"):
        check_repository("https://github.com/llmsystem/llmsys_hw4", rules)


def test_a_public_address_passes_and_is_the_one_pinned() -> None:
    checked = Checked("https://example.org/r.git", "example.org", 443, "93.184.215.14")
    assert ipaddress.ip_address(checked.address).is_global
    rules = FetchRules(("example.org",), (), "", 10, 1 << 20)
    assert refused_address("93.184.215.14", rules) is None
    command = clone_command(checked, rules, Path("/tmp/x"))
    assert "http.curloptResolve=example.org:443:93.184.215.14" in command
    assert "http.followRedirects=false" in command and "protocol.allow=never" in command


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GitServer]:
    work = tmp_path_factory.mktemp("gitserve")
    repo = work / "repo"
    git = ["git", "-C", str(repo), "-c", "user.name=Staff", "-c", "user.email=staff@example.org"]
    repo.mkdir()
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "starter.txt").write_text("the starter\n")
    (repo / "big.bin").write_bytes(os.urandom(3 << 20))  # 3 MiB that do not compress
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "starter"], check=True)
    (work / "srv").mkdir()
    publish(repo, work / "srv", "starter.git")
    with https_git_server(work / "srv", work) as server:
        yield server


def _rules(server: GitServer, **changes: object) -> FetchRules:
    rules = FetchRules.of(Settings.from_variables(server.variables()))
    return FetchRules(**{**rules.__dict__, **changes})  # type: ignore[arg-type]


def test_an_allowed_fetch_clones_and_the_same_server_is_refused_without_the_network(
        served: GitServer, tmp_path: Path) -> None:
    fetch_clone(served.url("starter.git"), _rules(served), tmp_path / "clone")
    shown = subprocess.run(["git", "-C", str(tmp_path / "clone"), "show", "HEAD:starter.txt"],
                           capture_output=True, text=True, check=True)
    assert shown.stdout == "the starter\n"
    with pytest.raises(BaseRefused, match="resolves to 127.0.0.1, a loopback address"):
        fetch_clone(served.url("starter.git"), _rules(served, private_networks=()), tmp_path / "refused")
    assert not (tmp_path / "refused").exists()  # refused before git ran


def test_the_connection_goes_to_the_checked_address_only(served: GitServer, tmp_path: Path) -> None:
    """git connects to the address the check approved, never to what the URL's host resolves to
    at connection time (no DNS rebinding between check and connection): pinned to 127.0.0.2,
    where nothing listens, the clone of a URL whose host is the server's fails."""
    port = int(served.base_url.rsplit(":", 1)[1])
    url = served.url("starter.git")
    clone_checked(Checked(url, HOST, port, HOST), _rules(served), tmp_path / "pinned")
    assert (tmp_path / "pinned" / "HEAD").is_file()
    with pytest.raises(BadArchive, match="Could not connect|Failed to connect|Connection refused"):
        clone_checked(Checked(url, HOST, port, "127.0.0.2"), _rules(served), tmp_path / "elsewhere")


def test_the_size_cap_stops_the_clone(served: GitServer, tmp_path: Path) -> None:
    with pytest.raises(BaseRefused, match="larger than the 1 MiB a base may take"):
        fetch_clone(served.url("starter.git"), _rules(served, max_bytes=1 << 20), tmp_path / "big")


def test_the_time_cap_stops_a_server_that_never_answers(tmp_path: Path, served: GitServer) -> None:
    listener = socket.socket()
    listener.bind((HOST, 0))
    listener.listen()
    held: list[socket.socket] = []
    threading.Thread(target=lambda: held.append(listener.accept()[0]), daemon=True).start()
    port = listener.getsockname()[1]
    try:
        with pytest.raises(BaseRefused, match="no complete answer in 2 s"):
            fetch_clone(f"https://{HOST}:{port}/x.git", _rules(served, timeout_s=2.0), tmp_path / "slow")
    finally:
        listener.close()
        for conn in held:
            conn.close()
