"""The command-line option blocks that several commands share, each defined
once (click decorators) and imported where used."""

from __future__ import annotations

import click


def nats_auth_options(fn):
    """The NATS connection's auth and TLS options (ship, ingest --from)."""
    for option in reversed((
        click.option("--token", "nats_token", envvar="NATS_TOKEN", default=None,
                     help="The server's auth token [default: $NATS_TOKEN]."),
        click.option("--creds", "nats_creds", type=click.Path(dir_okay=False, exists=True),
                     default=None, help="A NATS credentials file (.creds: JWT and nkey)."),
        click.option("--tls-ca", "nats_tls_ca", type=click.Path(dir_okay=False, exists=True),
                     default=None, help="Verify the server's TLS certificate with this CA "
                                        "file (use a tls:// URL)."),
    )):
        fn = option(fn)
    return fn


consumer_option = click.option(
    "--consumer", default=None, metavar="NAME",
    help="With --from: the durable consumer's name [default: session-index-central]; one "
         "per central index.")


def _hosts(ctx, param, value):
    """--hosts a,b: the host names, each non-empty."""
    if value is None:
        return None
    hosts = [h.strip() for h in value.split(",")]
    if not all(hosts):
        raise click.BadParameter("a comma-separated list of host names, none empty")
    return hosts


hosts_option = click.option(
    "--hosts", default=None, metavar="HOST,HOST", callback=_hosts,
    help="With --from: only these hosts' lines (a partition of the fleet over several "
         "central indexes); a durable consumer per host, NAME-HOST [default: every host's].")


def nats_options(url: str, auth: dict):
    """The fleet_nats.ConnectOptions of a NATS URL and the auth options."""
    from indexer.ingest import fleet_nats   # (asyncio and the fleet's modules only for its commands: start-up time)

    return fleet_nats.ConnectOptions(url, token=auth.get("nats_token"),
                                     creds=auth.get("nats_creds"),
                                     tls_ca=auth.get("nats_tls_ca"))
