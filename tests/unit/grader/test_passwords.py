"""Password hashes (grader/passwords.py) at the cost the settings give (KG_ARGON2_*): the
production default is RFC 9106's low-memory Argon2id profile whatever the suite runs at, a hash
records its cost, and a right password whose hash was made at another cost is hashed again."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from grader.models import User
from grader.passwords import set_password, verify_password
from grader.settings import Argon2Settings, Settings

PASSWORD = "correct horse battery"
CHEAP = Argon2Settings(time_cost=1, memory_kib=8, parallelism=1)
DEARER = Argon2Settings(time_cost=2, memory_kib=16, parallelism=2)


@pytest.fixture
def no_suite_cost(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without the suite's KG_ARGON2_* (tests/conftest.py): the settings as a deployment reads them."""
    for field in Argon2Settings.model_fields:
        monkeypatch.delenv(f"KG_ARGON2_{field.upper()}", raising=False)


def test_the_production_default_is_rfc_9106_low_memory(no_suite_cost: None) -> None:
    user = User(username="prod")
    set_password(user, PASSWORD, Settings.from_variables({}).argon2)
    assert user.password_hash is not None and user.password_hash.startswith("$argon2id$")
    assert "$m=65536,t=3,p=4$" in user.password_hash


def test_each_cost_variable_sets_its_own_field(no_suite_cost: None) -> None:
    cost = Settings.from_variables({"KG_ARGON2_TIME_COST": "2", "KG_ARGON2_MEMORY_KIB": "32"}).argon2
    assert (cost.time_cost, cost.memory_kib, cost.parallelism) == (2, 32, 4)


def test_too_little_memory_for_the_lanes_is_refused_with_the_variables_names(no_suite_cost: None) -> None:
    with pytest.raises(ValidationError, match="KG_ARGON2_MEMORY_KIB=16 is too little: Argon2 needs 8 KiB per lane, 32 for "
                                                "KG_ARGON2_PARALLELISM=4"):
        Settings.from_variables({"KG_ARGON2_MEMORY_KIB": "16", "KG_ARGON2_PARALLELISM": "4"})


def test_a_right_password_at_another_cost_is_hashed_again_at_the_current_one() -> None:
    user = User(username="moving")
    set_password(user, PASSWORD, CHEAP)
    old = user.password_hash
    assert old is not None and "$m=8,t=1,p=1$" in old
    assert verify_password(user, PASSWORD, CHEAP) is user and user.password_hash == old  # same cost: kept
    assert verify_password(user, "wrong password!", DEARER) is None and user.password_hash == old
    assert verify_password(user, PASSWORD, DEARER) is user
    assert user.password_hash != old and "$m=16,t=2,p=2$" in user.password_hash
    assert verify_password(user, PASSWORD, DEARER) is user  # the new hash checks the same password


def test_no_user_and_no_hash_are_refused_at_any_cost() -> None:
    assert verify_password(None, PASSWORD, DEARER) is None
    assert verify_password(User(username="no-hash"), PASSWORD, CHEAP) is None
