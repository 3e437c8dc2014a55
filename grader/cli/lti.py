"""`grader lti`: the LMS platforms this tool trusts and the tool's signing keys
(grader.lti.registry, grader.lti.keys). Registered on the main app by grader.cli."""
from __future__ import annotations

from typing import Annotated

import typer

from grader.db import make_engine, make_session_factory, session_scope
from grader.lti.keys import add_key, public_key_set, retire_older_keys
from grader.lti.registry import RegistryError, add_platform, platforms
from grader.settings import get_settings

app = typer.Typer(help="LTI 1.3: the LMS platforms kernelgrade is launched from (docs/lms.md)")


@app.command("add-platform")
def add(
    issuer: Annotated[str, typer.Option(help="the platform's issuer, e.g. https://canvas.instructure.com")],
    client_id: Annotated[str, typer.Option(help="the client id the platform gave this tool")],
    deployment_id: Annotated[list[str], typer.Option(help="a deployment id the platform launches from (repeatable)")],
    login_url: Annotated[str, typer.Option(help="the platform's OIDC authorization (login) address")],
    token_url: Annotated[str, typer.Option(help="the platform's OAuth2 token address")],
    jwks_url: Annotated[str, typer.Option(help="the platform's public key set (JWKS) address")],
    name: Annotated[str, typer.Option(help="how pages name the LMS, e.g. Canvas")] = "",
    allow_http: Annotated[bool, typer.Option(help="accept plain http addresses (a local test LMS only)")] = False,
) -> None:
    """Register a platform (or add deployments to one already registered with this issuer and client id)."""
    with session_scope(make_session_factory(make_engine(get_settings()))) as session:
        try:
            platform = add_platform(session, name=name, issuer=issuer, client_id=client_id, auth_login_url=login_url,
                                    auth_token_url=token_url, jwks_url=jwks_url, deployment_ids=deployment_id,
                                    allow_http=allow_http)
        except RegistryError as exc:
            typer.echo(f"error: {exc}", err=True)
            raise typer.Exit(2) from exc
        typer.echo(f"{platform.name}: {platform.issuer} client {platform.client_id}, deployments "
                   f"{', '.join(d.deployment_id for d in platform.deployments)}")


@app.command("list")
def list_platforms() -> None:
    """The registered platforms."""
    with session_scope(make_session_factory(make_engine(get_settings()))) as session:
        for p in platforms(session):
            typer.echo(f"{p.name}\t{p.issuer}\tclient {p.client_id}\tdeployments "
                       f"{','.join(d.deployment_id for d in p.deployments)}")


@app.command("rotate-key")
def rotate_key() -> None:
    """Add a signing key: it signs from now on; the older ones stay published until retired."""
    typer.echo(f"new signing key {add_key(get_settings())}; published keys: "
               f"{', '.join(k['kid'] for k in public_key_set(get_settings())['keys'])}")


@app.command("retire-keys")
def retire_keys() -> None:
    """Stop publishing every key but the newest (once the platforms have fetched it: a day after rotate-key)."""
    typer.echo(f"retired: {', '.join(retire_older_keys(get_settings())) or 'none'}")


def register(main: typer.Typer) -> None:
    main.add_typer(app, name="lti")
