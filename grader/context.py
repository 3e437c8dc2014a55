"""What the web app holds for its lifetime: settings, database, blob store, Celery client, the
single sign-on provider's client when KG_SSO_ISSUER is set, and the SAML service provider when
KG_SAML_IDP_METADATA_URL (or _FILE) is."""
from __future__ import annotations

from dataclasses import dataclass

from celery import Celery
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from grader.auth.saml import ServiceProvider
from grader.auth.sso import Provider
from grader.celery_app import make_celery
from grader.db import make_engine, make_session_factory
from grader.settings import Settings
from grader.storage.blobstore import BlobStore


@dataclass
class AppContext:
    settings: Settings
    engine: Engine
    sessions: sessionmaker[Session]
    blobs: BlobStore
    celery: Celery
    sso: Provider | None = None
    saml: ServiceProvider | None = None

    @property
    def default_assignment(self) -> str:
        return self.settings.rubrics[0]

    @classmethod
    def from_settings(cls, settings: Settings) -> AppContext:
        engine = make_engine(settings)
        return cls(
            settings=settings,
            engine=engine,
            sessions=make_session_factory(engine),
            blobs=BlobStore(settings.blob_dir),
            celery=make_celery(settings),
            sso=Provider(settings.sso, settings.public_url) if settings.sso.enabled else None,
            saml=ServiceProvider(settings.saml, settings.public_url, settings.data_dir) if settings.saml.enabled else None,
        )
