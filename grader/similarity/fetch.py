"""Fetching a similarity base's git repository, bounded (issue 54: an instructor's base of
`http://127.0.0.1:6379/...` answered "Empty reply from server", a port-scan oracle, and a local
path archived a repository of the worker host).

A repository is fetched only when:
- its URL is `https://` (never a folder or file of the service's machine, `file:`, `ssh:`, `git:`
  or plain `http:`), with no login in it;
- its host is on KG_SIMILARITY_BASE_HOSTS (empty by default: no base is fetched, staff upload
  the starter's zip);
- every address the host resolves to is a public one: loopback, private, link-local (the cloud
  metadata address 169.254.169.254), multicast, reserved and unspecified addresses are refused,
  unless an operator lists its network in KG_SIMILARITY_BASE_PRIVATE_NETWORKS (a course's own git
  server on the campus network; the tests' local HTTPS server).
The connection is pinned to the address checked: git gets it through `http.curloptResolve`, so
a DNS answer that changes between the check and the connection (DNS rebinding) is never asked
for. Redirects are not followed (one to another host would skip the checks), only the https
transport is allowed, no proxy is used, and nothing is prompted for. The clone runs under a time
cap (KG_SIMILARITY_BASE_TIMEOUT_S) and a size cap (KG_SIMILARITY_BASE_MAX_BYTES, the clone's
folder measured while it grows); past either, git is stopped and the base is refused, saying so.
"""
from __future__ import annotations

import ipaddress
import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from grader.settings import Settings
from worker.unpack import BadArchive

WATCH_EVERY_S = 0.1


class BaseRefused(BadArchive):
    """A base that may not be fetched from where it names, with why."""


@dataclass(frozen=True)
class FetchRules:
    hosts: tuple[str, ...]  # lower case
    private_networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]
    ca_file: str  # the certificate authorities git trusts instead of the system's; "": the system's
    timeout_s: float
    max_bytes: int

    @classmethod
    def of(cls, settings: Settings) -> FetchRules:
        return cls(tuple(host.lower() for host in settings.similarity_base_hosts),
                   tuple(ipaddress.ip_network(net, strict=False) for net in settings.similarity_base_private_networks),
                   str(settings.similarity_base_ca_file or ""), settings.similarity_base_timeout_s,
                   settings.similarity_base_max_bytes)


@dataclass(frozen=True)
class Checked:
    """A repository URL that may be fetched, and the address its connection is pinned to."""

    url: str
    host: str
    port: int
    address: str


def check_host(url: str, rules: FetchRules) -> tuple[str, int]:
    """(host, port) of `url` when it is an https URL to a listed host; BaseRefused otherwise.
    No name is resolved (the settings page shows this much without waiting)."""
    parts = urlsplit(url)
    if parts.scheme.lower() != "https" or not parts.hostname:
        raise BaseRefused(f"{url!r} is not an https:// URL: a base is fetched over https only, never read from a "
                          "folder or file of the service's machine (upload the starter's zip instead)")
    if parts.username is not None or parts.password is not None:
        raise BaseRefused("a base's URL may not hold a login: give the repository's public https:// address")
    host = parts.hostname.lower()
    if host not in rules.hosts:
        listed = ", ".join(rules.hosts) or "none"
        raise BaseRefused(f"{host} is not a host bases may be fetched from (KG_SIMILARITY_BASE_HOSTS: {listed}): ask "
                          "the service's operator to add it, or upload the starter's zip instead")
    try:
        return host, parts.port or 443
    except ValueError:  # a port that is not a number, or out of range
        raise BaseRefused(f"{url!r} names no valid port") from None


def refused_address(address: str, rules: FetchRules) -> str | None:
    """Why the fetch may not connect to `address`; None when it may."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if any(ip in network for network in rules.private_networks):
        return None
    for kind, held in (("loopback", ip.is_loopback), ("link-local", ip.is_link_local),
                       ("multicast", ip.is_multicast), ("unspecified", ip.is_unspecified),
                       ("private", ip.is_private), ("reserved", ip.is_reserved), ("non-public", not ip.is_global)):
        if held:
            return f"a {kind} address"
    return None


def check_repository(url: str, rules: FetchRules) -> Checked:
    """`url` checked: an https URL to a listed host, every address of which is public (or in a
    listed private network); the first address is the one to connect to. BaseRefused with why."""
    host, port = check_host(url, rules)
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise BaseRefused(f"{host} cannot be resolved ({exc})") from exc
    addresses = list(dict.fromkeys(str(info[4][0]) for info in found))
    for address in addresses:
        why = refused_address(address, rules)
        if why is not None:
            raise BaseRefused(f"{host} resolves to {address}, {why}: a base is never fetched from the service's own "
                              "machine or network")
    return Checked(url, host, port, addresses[0])


def clone_command(checked: Checked, rules: FetchRules, dest: Path) -> list[str]:
    """git's command line for a bare clone of `checked` into `dest`, pinned to its address."""
    pinned = f"[{checked.address}]" if ":" in checked.address else checked.address
    options = {"http.curloptResolve": f"{checked.host}:{checked.port}:{pinned}", "http.followRedirects": "false",
               "http.proxy": "", "protocol.allow": "never", "protocol.https.allow": "always",
               "credential.helper": "", "core.askPass": ""}
    return ["git", *(arg for name, value in options.items() for arg in ("-c", f"{name}={value}")),
            "clone", "--bare", "--quiet", "--", checked.url, str(dest)]


def fetch_clone(url: str, rules: FetchRules, dest: Path) -> None:
    """A bare clone of `url` at `dest` within the rules' time and size caps; BaseRefused or
    BadArchive (git's own words) when it is refused or fails."""
    clone_checked(check_repository(url, rules), rules, dest)


def clone_checked(checked: Checked, rules: FetchRules, dest: Path) -> None:
    """`fetch_clone` of a URL already checked, connecting to `checked.address` only."""
    url = checked.url
    env = {key: value for key, value in os.environ.items() if not key.lower().endswith("_proxy")}
    env.update(GIT_TERMINAL_PROMPT="0", GIT_ALLOW_PROTOCOL="https", GIT_CONFIG_NOSYSTEM="1")
    if rules.ca_file:  # git's variable: it wins over any configuration (and over one already set)
        env["GIT_SSL_CAINFO"] = rules.ca_file
    process = subprocess.Popen(clone_command(checked, rules, dest), stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    why = _watch(process, dest, rules)
    if why is not None:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        shutil.rmtree(dest, ignore_errors=True)
        raise BaseRefused(f"{url}: {why}")
    if process.returncode != 0:
        raise BadArchive(f"git clone {url}: {(process.stderr.read() if process.stderr else '').strip()}")


def _watch(process: subprocess.Popen[str], dest: Path, rules: FetchRules) -> str | None:
    """Why `process` must be stopped (past the time or size cap), or None once it has ended."""
    deadline = time.monotonic() + rules.timeout_s
    while True:
        ended = process.poll() is not None
        if _size(dest) > rules.max_bytes:  # measured once more after the end: a fast clone ends between looks
            return f"the repository is larger than the {rules.max_bytes // (1024 * 1024)} MiB a base may take"
        if ended:
            return None
        if time.monotonic() > deadline:
            return f"no complete answer in {rules.timeout_s:g} s"
        time.sleep(WATCH_EVERY_S)


def _size(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except FileNotFoundError:  # git renamed it meanwhile
                continue
    return total
