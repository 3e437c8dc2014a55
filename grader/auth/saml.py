"""Single sign-on with the university's SAML 2.0 identity provider (KG_SAML_*, docs/sso.md): the
service provider behind the login page's SAML button, the pages (grader.pages.saml) being its
adapter. The protocol is pysaml2's (its Saml2Client; signatures and decryption by xmlsec1).

`ServiceProvider.start` sends the browser to the provider's single sign-on service with an
AuthnRequest (HTTP-Redirect binding, signed with this service's key); the request's id is kept
in the browser's signed session cookie, so only the browser that started a sign-in can finish
it. The provider posts its Response to <KG_PUBLIC_URL>/saml/acs (HTTP-POST binding), where
`ServiceProvider.finish` has pysaml2 check it: the provider's signature (on the response or on
its assertion, with the certificate of the provider's metadata), this service's entity id as
its audience, its InResponseTo (a request of this browser, used once), its validity window
(NotBefore, NotOnOrAfter; a minute of clock difference allowed) and its Destination (our
ACS). An assertion encrypted to this service's certificate is decrypted. The person is the pair
(provider's entity id, the persistent NameID, else the login attribute's value), their login
the login attribute's; their account is found by grader.auth.sign_in.account_for. Whatever goes
wrong is an SsoRefused, whose sentence the login page shows.

The provider's metadata is read on first use (from KG_SAML_IDP_METADATA_URL or _FILE) and again
once it is a day old, so a certificate the provider rolls over is taken up without a restart.
This service's key and certificate are KG_SAML_KEY_FILE and KG_SAML_CERT_FILE, or a pair made
on first use in <data dir>/saml-sp (0600 files in a 0700 folder).
"""
from __future__ import annotations

import base64
import binascii
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from xml.etree.ElementTree import Element

import httpx
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID
from defusedxml import ElementTree
from saml2 import BINDING_HTTP_POST, BINDING_HTTP_REDIRECT, SAMLError
from saml2.client import Saml2Client
from saml2.config import SPConfig
from saml2.metadata import create_metadata_string
from saml2.response import AuthnResponse, StatusError, UnsolicitedResponse
from saml2.saml import NAMEID_FORMAT_PERSISTENT
from saml2.sigver import SigverError
from saml2.validate import ResponseLifetimeExceed, ToEarly
from saml2.xmldsig import DIGEST_SHA256, SIG_RSA_SHA256

from grader.auth.identities import Identity
from grader.auth.sign_in import Person, SsoRefused, checked_email, checked_login
from grader.course.roster_csv import MAX_NAME
from grader.datadir import private_dir, write_private
from grader.settings import SamlSettings, refuse_exposed

START_PATH, ACS_PATH, METADATA_PATH = "/login/saml", "/saml/acs", "/saml/metadata"
CLOCK_LEEWAY_S = 60
METADATA_MAX_AGE_S = 24 * 3600.0
FETCH_TIMEOUT_S = 10.0
PENDING = "saml_requests"  # the session's AuthnRequests awaiting their answer: {id: issued at (epoch s)}
PENDING_MAX, PENDING_MAX_AGE_S = 5, 3600  # a few tabs' worth, each good for an hour
MAX_SUBJECT = 256  # external_identities.subject
_SAMLP = "{urn:oasis:names:tc:SAML:2.0:protocol}"
_STATUS_PREFIX = "urn:oasis:names:tc:SAML:2.0:status:"


def _check_failed(what: str, label: str) -> str:
    return (f"The sign-in service's answer failed its check ({what}), so nobody was logged in. Start again with "
            f"the “{label}” button.")


def _not_set_up(detail: str) -> SsoRefused:
    return SsoRefused("Single sign-on is not set up correctly on this service, so nobody was logged in. Tell its "
                      "operator.", detail=detail)


@dataclass(frozen=True)
class KeyPair:
    key_file: Path
    cert_file: Path


def key_pair(settings: SamlSettings, data_dir: Path, common_name: str) -> KeyPair:
    """The service's key and certificate: the configured files (ExposedSecretFile when others may
    read the key), else the pair in
    <data_dir>/saml-sp, made now when missing (a 3072-bit RSA key, a self-signed certificate
    for ten years: the provider trusts it through our metadata, not through a CA)."""
    if settings.key_file:
        refuse_exposed(Path(settings.key_file))  # a key other users of the host can read is no secret
        return KeyPair(Path(settings.key_file), Path(settings.cert_file))
    folder = Path(data_dir) / "saml-sp"
    pair = KeyPair(folder / "key.pem", folder / "cert.pem")
    if pair.key_file.exists() and pair.cert_file.exists():
        return pair
    private_dir(Path(data_dir))
    staging = Path(tempfile.mkdtemp(prefix=".saml-sp-", dir=data_dir))  # 0700
    key = rsa.generate_private_key(public_exponent=65537, key_size=3072)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name[:64])])
    now = datetime.now(UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - timedelta(minutes=5))
            .not_valid_after(now + timedelta(days=3650)).sign(key, hashes.SHA256()))
    write_private(staging / "key.pem", key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                         serialization.NoEncryption()).decode())
    write_private(staging / "cert.pem", cert.public_bytes(serialization.Encoding.PEM).decode())
    try:
        os.rename(staging, folder)  # both files at once; another process's pair, made meanwhile, wins
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
    return pair


@dataclass(frozen=True)
class _Answer:
    """What the posted Response says outside its signature, read before pysaml2 checks it: to
    consume the right pending request and to word a refusal."""

    in_response_to: str
    destination: str
    status: str  # the (second-level, else top-level) status code's last word; "" when Success


def _read(saml_response: str, label: str) -> tuple[str, _Answer]:
    """The Response's XML and its unsigned facts; SsoRefused when it is not one."""
    try:
        xml = base64.b64decode(saml_response, validate=False).decode("utf-8")
        root: Element = ElementTree.fromstring(xml)
    except (binascii.Error, UnicodeDecodeError, ElementTree.ParseError, ValueError) as exc:
        raise SsoRefused(_check_failed("it could not be read", label),
                         detail=f"SAMLResponse unreadable: {type(exc).__name__}") from exc
    if root.tag != f"{_SAMLP}Response":
        raise SsoRefused(_check_failed("it could not be read", label), detail=f"SAMLResponse is a {root.tag[:100]}")
    codes = [code.get("Value", "") for code in root.iter(f"{_SAMLP}StatusCode")]
    status = "" if codes[:1] == [_STATUS_PREFIX + "Success"] else (codes[1:2] or codes[:1] or ["?"])[0]
    return xml, _Answer(root.get("InResponseTo", ""), root.get("Destination", ""), status.rpartition(":")[2])


class ServiceProvider:
    """The service at the identity provider. Nothing is read or made when it is built: the
    key pair on first use, the provider's metadata on the first sign-in (and daily after)."""

    def __init__(self, settings: SamlSettings, public_url: str, data_dir: Path) -> None:
        self.settings = settings
        self.acs_url = public_url + ACS_PATH
        self.entity_id = settings.entity_id or public_url + METADATA_PATH
        self._public_url, self._data_dir = public_url, data_dir
        self._lock = threading.Lock()  # pysaml2's client keeps state: one call at a time
        self._client: Saml2Client | None = None
        self._idp = ""
        self._loaded_at = 0.0

    # -- this service's side --------------------------------------------------------------

    def _config(self, idp_metadata: str | None) -> SPConfig:
        pair = key_pair(self.settings, self._data_dir, urlsplit(self._public_url).hostname or "kernelgrade")
        config = SPConfig()
        config.load({
            "entityid": self.entity_id,
            "key_file": str(pair.key_file),
            "cert_file": str(pair.cert_file),
            # An IdP that encrypts assertions does so to the certificate of our metadata
            "encryption_keypairs": [{"key_file": str(pair.key_file), "cert_file": str(pair.cert_file)}],
            "accepted_time_diff": CLOCK_LEEWAY_S,
            "allow_unknown_attributes": True,
            "metadata": {"inline": [idp_metadata]} if idp_metadata else {},
            "service": {"sp": {
                "endpoints": {"assertion_consumer_service": [(self.acs_url, BINDING_HTTP_POST)]},
                "allow_unsolicited": False,
                "authn_requests_signed": True,
                # Shibboleth signs the assertion only, others the response: either will do, none will not
                "want_response_signed": False,
                "want_assertions_signed": False,
                "want_assertions_or_response_signed": True,
                "signing_algorithm": SIG_RSA_SHA256,
                "digest_algorithm": DIGEST_SHA256,
            }},
        })
        return config

    def metadata(self) -> str:
        """This service's metadata (entity id, ACS, certificate), for the provider's administrators."""
        with self._lock:
            return create_metadata_string("", config=self._config(None)).decode()

    # -- the identity provider's side ----------------------------------------------------

    def _fetch_metadata(self) -> str:
        if self.settings.idp_metadata_file:
            try:
                return Path(self.settings.idp_metadata_file).read_text(encoding="utf-8")
            except OSError as exc:
                raise _not_set_up(f"KG_SAML_IDP_METADATA_FILE: {exc}") from exc
        try:
            answer = httpx.get(self.settings.idp_metadata_url, timeout=FETCH_TIMEOUT_S, follow_redirects=True)
            answer.raise_for_status()
        except httpx.HTTPError as exc:
            raise SsoRefused("The university's sign-in service could not be reached, so nobody was logged in. Try "
                             "again in a few minutes.",
                             detail=f"{self.settings.idp_metadata_url}: {type(exc).__name__}: {exc}") from exc
        return answer.text

    def _ready(self) -> tuple[Saml2Client, str]:
        """The client and the provider's entity id, the metadata (re)read when missing or a day
        old; a metadata that names no provider, or several, is refused. Call with the lock held."""
        if self._client is not None and time.monotonic() - self._loaded_at < METADATA_MAX_AGE_S:
            return self._client, self._idp
        text = self._fetch_metadata()
        try:
            client = Saml2Client(config=self._config(text))
            providers = list(client.metadata.identity_providers())
        except (SAMLError, SigverError, ValueError, SyntaxError) as exc:
            raise _not_set_up(f"the identity provider's metadata: {type(exc).__name__}: {exc}") from exc
        if len(providers) != 1:
            raise _not_set_up(f"the identity provider's metadata names {len(providers)} identity providers, not one")
        self._client, self._idp, self._loaded_at = client, providers[0], time.monotonic()
        return client, self._idp

    # -- a sign-in ----------------------------------------------------------------------

    def start(self, session: MutableMapping[str, Any]) -> str:
        """The address of the provider's sign-in page, an AuthnRequest in it; the request's id
        kept in `session` (the browser's) until its answer comes."""
        with self._lock:
            client, idp = self._ready()
            try:
                request_id, info = client.prepare_for_authenticate(
                    entityid=idp, binding=BINDING_HTTP_REDIRECT, sign=True, sigalg=SIG_RSA_SHA256)
            except (SAMLError, SigverError, ValueError) as exc:
                raise _not_set_up(f"AuthnRequest: {type(exc).__name__}: {exc}") from exc
        now = time.time()
        pending = {rid: at for rid, at in _pending(session).items() if now - at < PENDING_MAX_AGE_S}
        pending[request_id] = now
        session[PENDING] = dict(sorted(pending.items(), key=lambda item: item[1])[-PENDING_MAX:])
        return str(dict(info["headers"])["Location"])

    def finish(self, session: MutableMapping[str, Any], saml_response: str) -> Person:
        """The person the posted Response names, once pysaml2 found it right for a request of
        this browser (which is used up, answered or not)."""
        label = self.settings.label
        if not saml_response:
            raise SsoRefused(_check_failed("it could not be read", label), detail="no SAMLResponse in the post")
        xml, answer = _read(saml_response, label)
        pending = _pending(session)
        started = pending.pop(answer.in_response_to, None)
        session[PENDING] = pending
        if started is None or time.time() - started >= PENDING_MAX_AGE_S:
            raise SsoRefused("This answer from the sign-in service is not for a sign-in this browser started (or it "
                             f"was used already), so nobody was logged in. Start again with the “{label}” button.",
                             detail=f"unknown InResponseTo {answer.in_response_to[:64]!r}")
        if answer.status:
            raise SsoRefused(f"The sign-in service ended the sign-in with {answer.status[:64]}, so nobody was "
                             f"logged in. Start again with the “{label}” button.", detail=f"status {answer.status}")
        if answer.destination and answer.destination != self.acs_url:
            raise SsoRefused(_check_failed("it was sent to another address", label),
                             detail=f"Destination {answer.destination[:200]!r}, not {self.acs_url!r}")
        with self._lock:
            client, idp = self._ready()
            response = self._checked(client, saml_response, answer.in_response_to)
        if response.issuer() != idp:
            raise SsoRefused(_check_failed("it comes from another provider", label),
                             detail=f"issuer {response.issuer()[:200]!r}, not {idp!r}")
        return self._person(idp, response)

    def _checked(self, client: Saml2Client, saml_response: str, request_id: str) -> AuthnResponse:
        """pysaml2's checked Response; its refusals in words."""
        label = self.settings.label
        try:
            response = client.parse_authn_request_response(saml_response, BINDING_HTTP_POST,
                                                           outstanding={request_id: "/"})
        except SigverError as exc:
            raise SsoRefused(_check_failed("its signature is not the sign-in service's", label),
                             detail=f"signature: {type(exc).__name__}: {exc}"[:400]) from exc
        except UnsolicitedResponse as exc:  # the assertion answers another request than its envelope
            raise SsoRefused(_check_failed("it answers another sign-in", label), detail=str(exc)[:400]) from exc
        except (ResponseLifetimeExceed, ToEarly) as exc:
            raise SsoRefused(_check_failed("it has expired, or is not valid yet", label),
                             detail=str(exc)[:400]) from exc
        except StatusError as exc:
            raise SsoRefused(_check_failed("the sign-in did not succeed", label), detail=str(exc)[:400]) from exc
        except Exception as exc:  # pysaml2 raises bare Exceptions for some checks (the audience's)
            what = ("it was issued to another service" if "AudienceRestriction" in str(exc)
                    else "it could not be read")
            raise SsoRefused(_check_failed(what, label), detail=f"{type(exc).__name__}: {exc}"[:400]) from exc
        if response is None or response.assertion is None:
            raise SsoRefused(_check_failed("it could not be read", label),
                             detail="pysaml2 found no valid response (its destination, or its assertion)")
        try:  # pysaml2 keeps each person it read in memory, for logouts this service does not do
            client.users.remove_person(response.name_id)
        except KeyError:
            pass
        return response

    def _person(self, idp: str, response: AuthnResponse) -> Person:
        wanted = self.settings.login_attribute
        values = _values(response, wanted)
        name_id = response.name_id
        whose = f"{idp} NameID {getattr(name_id, 'text', None)!r}"
        login = checked_login(values[0] if values else None, wanted, whose)
        persistent = name_id is not None and name_id.format == NAMEID_FORMAT_PERSISTENT and (name_id.text or "").strip()
        subject = name_id.text.strip() if persistent else login
        if len(subject) > MAX_SUBJECT:
            raise _not_set_up(f"{whose}: a subject over {MAX_SUBJECT} characters")
        name = _first(response, "displayName", "cn") or " ".join(
            part for part in (_first(response, "givenName"), _first(response, "sn")) if part)
        return Person(Identity(idp, subject, "saml"), login, name[:MAX_NAME] or None,
                      checked_email(_first(response, "mail")))


def _pending(session: Mapping[str, Any]) -> dict[str, float]:
    kept = session.get(PENDING)
    return {str(k): float(v) for k, v in kept.items()} if isinstance(kept, dict) else {}


def _values(response: AuthnResponse, wanted: str) -> list[str]:
    """The values of the attribute named `wanted`: by the friendly name pysaml2 gives it (an
    urn:oid: name it knows), by its Name (urn:oid:…) or by the FriendlyName the provider sent."""
    want = wanted.strip().lower()
    for key, values in (response.ava or {}).items():
        if key.lower() == want:
            return [str(value) for value in values if value]
    for statement in response.assertion.attribute_statement:
        for attribute in statement.attribute:
            if want in ((attribute.name or "").lower(), (attribute.friendly_name or "").lower()):
                return [value.text for value in attribute.attribute_value if value.text]
    return []


def _first(response: AuthnResponse, *names: str) -> str:
    """The first value of the first of `names` the response carries ("" when none does)."""
    for name in names:
        values = [value.strip() for value in _values(response, name) if value.strip()]
        if values:
            return values[0]
    return ""
