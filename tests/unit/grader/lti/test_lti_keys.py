"""The tool's signing keys (grader/lti/keys.py): made on first use, private to the service,
rotated by adding a newer key that signs while the older stays published, then retired."""
from __future__ import annotations

import stat
from pathlib import Path

from joserfc import jwt
from joserfc.jwk import KeySet

from grader.lti.keys import add_key, public_key_set, retire_older_keys, sign
from grader.settings import Settings


def _settings(tmp_path: Path) -> Settings:
    return Settings.from_variables({"KG_DATA_DIR": str(tmp_path)})


def test_a_rotation_publishes_both_keys_signs_with_the_new_one_and_retiring_keeps_only_it(tmp_path: Path) -> None:
    settings = _settings(tmp_path)
    first = public_key_set(settings)["keys"]
    assert len(first) == 1 and "d" not in first[0]  # the public half only
    (pem,) = (tmp_path / "lti-keys").glob("*.pem")
    assert stat.S_IMODE(pem.stat().st_mode) == 0o600
    old_kid = first[0]["kid"]
    new_kid = add_key(settings)
    published = KeySet.import_key_set(public_key_set(settings))
    assert {k.kid for k in published.keys} == {old_kid, new_kid}
    token = sign(settings, {"iss": "tool"})
    assert jwt.decode(token, published).header["kid"] == new_kid  # the newest signs, and checks out
    assert retire_older_keys(settings) == [old_kid]
    assert [k["kid"] for k in public_key_set(settings)["keys"]] == [new_kid]
