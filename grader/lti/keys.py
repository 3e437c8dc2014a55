"""The tool's signing keys: RSA keys kept as PEM files (0600) in the data dir's `lti-keys`
folder, named by their key id. The newest signs (deep-linking responses, service client
assertions); every key there is published at /lti/jwks, so a platform that cached the previous
key still checks what it signed while a rotation takes effect. `grader lti rotate-key` adds a
key, `grader lti retire-keys` removes all but the newest once platforms have refetched."""
from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

from joserfc import jwt
from joserfc.jwk import RSAKey

from grader.datadir import private_dir, write_private
from grader.settings import Settings

ALGORITHM = "RS256"


def _folder(settings: Settings) -> Path:
    return private_dir(settings.data_dir / "lti-keys")


def _load(path: Path) -> RSAKey:
    return RSAKey.import_key(path.read_bytes(), parameters={"kid": path.stem, "alg": ALGORITHM, "use": "sig"})


def _paths(settings: Settings) -> list[Path]:
    """Key files, oldest first (the name starts with the creation time)."""
    return sorted(_folder(settings).glob("*.pem"))


def add_key(settings: Settings) -> str:
    """A new signing key; its id."""
    kid = f"{time.time_ns():020d}-{secrets.token_hex(4)}"  # sorts by creation, also within a second
    key = RSAKey.generate_key(2048, parameters={"kid": kid, "alg": ALGORITHM, "use": "sig"})
    write_private(_folder(settings) / f"{kid}.pem", key.as_pem(private=True).decode())
    return kid


def signing_key(settings: Settings) -> RSAKey:
    """The newest key, made on first use."""
    paths = _paths(settings)
    return _load(paths[-1]) if paths else _load(_folder(settings) / f"{add_key(settings)}.pem")


def retire_older_keys(settings: Settings) -> list[str]:
    """Remove every key but the newest; the ids removed."""
    paths = _paths(settings)[:-1]
    for path in paths:
        path.unlink()
    return [p.stem for p in paths]


def public_key_set(settings: Settings) -> dict[str, Any]:
    """The JWKS this tool publishes: every key's public half."""
    signing_key(settings)
    return {"keys": [_load(p).as_dict(private=False) for p in _paths(settings)]}


def sign(settings: Settings, claims: dict[str, Any]) -> str:
    key = signing_key(settings)
    return jwt.encode({"alg": ALGORITHM, "kid": key.kid, "typ": "JWT"}, claims, key)
