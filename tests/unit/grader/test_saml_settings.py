"""The SAML group's rules (grader.settings.SamlSettings): on with the identity provider's
metadata address or file (not both), only with the service's own address, a key only with its
certificate; its entity id is <KG_PUBLIC_URL>/saml/metadata unless set."""
from __future__ import annotations

from pathlib import Path

import pytest

from grader.auth.saml import KeyPair, ServiceProvider, key_pair
from grader.settings import ExposedSecretFile, Settings

URL = "https://idp.example.edu/idp/shibboleth"
PUBLIC = {"KG_PUBLIC_URL": "https://grader.example.edu"}


def test_saml_is_on_with_the_metadata_address_or_file() -> None:
    assert not Settings.from_variables(PUBLIC).saml.enabled
    assert Settings.from_variables({**PUBLIC, "KG_SAML_IDP_METADATA_URL": URL}).saml.enabled
    assert Settings.from_variables({**PUBLIC, "KG_SAML_IDP_METADATA_FILE": "/etc/kg/idp.xml"}).saml.enabled


@pytest.mark.parametrize(("variables", "words"), [
    ({"KG_SAML_IDP_METADATA_URL": URL}, "KG_PUBLIC_URL is not"),
    ({**PUBLIC, "KG_SAML_IDP_METADATA_URL": URL, "KG_SAML_IDP_METADATA_FILE": "/etc/kg/idp.xml"}, "both set"),
    ({**PUBLIC, "KG_SAML_IDP_METADATA_URL": "idp.example.edu/metadata"}, "is not an address"),
    ({**PUBLIC, "KG_SAML_IDP_METADATA_URL": URL, "KG_SAML_KEY_FILE": "/etc/kg/key.pem"}, "go together"),
    ({**PUBLIC, "KG_SAML_IDP_METADATA_URL": URL, "KG_SAML_LOGIN_ATTRIBUTE": " "}, "KG_SAML_LOGIN_ATTRIBUTE is empty"),
])
def test_a_setting_that_cannot_work_is_refused_at_start(variables: dict[str, str], words: str) -> None:
    with pytest.raises(ValueError, match=words):
        Settings.from_variables(variables)


def test_the_entity_id_is_the_metadata_address_unless_set(tmp_path: Path) -> None:
    default = Settings.from_variables({**PUBLIC, "KG_SAML_IDP_METADATA_URL": URL})
    sp = ServiceProvider(default.saml, default.public_url, tmp_path)
    assert (sp.entity_id, sp.acs_url) == ("https://grader.example.edu/saml/metadata",
                                          "https://grader.example.edu/saml/acs")
    named = Settings.from_variables({**PUBLIC, "KG_SAML_IDP_METADATA_URL": URL, "KG_SAML_ENTITY_ID": "urn:kg:sp"})
    assert ServiceProvider(named.saml, named.public_url, tmp_path).entity_id == "urn:kg:sp"
    assert list(tmp_path.iterdir()) == []  # nothing made before first use


def test_a_key_file_others_can_read_is_refused(tmp_path: Path) -> None:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    key.write_text("not read")
    key.chmod(0o644)
    settings = Settings.from_variables({**PUBLIC, "KG_SAML_IDP_METADATA_URL": URL, "KG_SAML_KEY_FILE": str(key),
                                        "KG_SAML_CERT_FILE": str(cert)})
    with pytest.raises(ExposedSecretFile, match="chmod 600"):
        key_pair(settings.saml, tmp_path, "grader.example.edu")
    key.chmod(0o600)
    assert key_pair(settings.saml, tmp_path, "grader.example.edu") == KeyPair(key, cert)
