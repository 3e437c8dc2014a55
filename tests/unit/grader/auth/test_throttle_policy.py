"""The throttle's pure parts: the wait after each failure (free, doubling, capped, then the lock)
and the client address behind trusted proxies (grader/auth/client_address.py)."""
from __future__ import annotations

import pytest

from grader.auth.client_address import client_address, networks
from grader.auth.throttle import Door, Policy, account_key, policies
from grader.settings import ThrottleSettings


def test_the_wait_is_free_then_doubles_then_locks() -> None:
    policy = Policy(free=5, lock_after=10, backoff_s=1.0, lock_s=900.0, forget_s=3600.0)
    assert [policy.wait_s(n) for n in range(1, 13)] == [0, 0, 0, 0, 0, 1, 2, 4, 8, 900, 900, 900]
    assert [policy.locks(n) for n in (9, 10, 11)] == [False, True, True]


def test_the_doubling_never_outgrows_the_lock_and_zero_backoff_goes_straight_to_it() -> None:
    long = Policy(free=0, lock_after=30, backoff_s=1.0, lock_s=60.0, forget_s=3600.0)
    assert long.wait_s(7) == 60.0 and long.wait_s(29) == 60.0
    assert Policy(free=0, lock_after=3, backoff_s=0, lock_s=60.0, forget_s=1.0).wait_s(2) == 0


def test_names_share_the_account_policy_and_addresses_have_theirs() -> None:
    shipped = policies(ThrottleSettings())
    assert shipped["name"] == shipped["account"] and shipped["address"].lock_after == 100
    assert account_key(Door.login, None, "  Ada@Uni.edu ") == "login:name:ada@uni.edu"
    assert account_key(Door.forgot, 7, "whatever") == "forgot:account:7"


PROXIES = networks(("10.0.0.0/8", "2001:db8::1"))


@pytest.mark.parametrize(("peer", "forwarded", "client"), [
    ("203.0.113.5", ["1.2.3.4"], "203.0.113.5"),  # not from a proxy: the header is anyone's, ignored
    ("10.0.0.2", ["198.51.100.7"], "198.51.100.7"),  # from the proxy
    ("10.0.0.2", ["6.6.6.6, 198.51.100.7"], "198.51.100.7"),  # a forged first entry is not reached
    ("10.0.0.2", ["198.51.100.7, 10.0.0.9"], "198.51.100.7"),  # two proxies
    ("10.0.0.2", ["198.51.100.7", "10.0.0.9"], "198.51.100.7"),  # the header sent twice
    ("10.0.0.2", [], "10.0.0.2"),  # a proxy that says nothing
    ("10.0.0.2", ["10.0.0.7"], "10.0.0.7"),  # every hop a proxy: the leftmost
    ("10.0.0.2", ["not-an-ip, 198.51.100.7"], "198.51.100.7"),
    ("10.0.0.2", ["198.51.100.7, junk"], "10.0.0.2"),  # garbage from the proxy's side: the proxy
    ("2001:db8::1", ["2001:db8::beef"], "2001:db8::beef"),
    (None, ["1.2.3.4"], "unknown"),
])
def test_the_client_address(peer: str | None, forwarded: list[str], client: str) -> None:
    assert client_address(peer, forwarded, PROXIES) == client
