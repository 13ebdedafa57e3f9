"""The HTTP API of ``memledger serve`` (FastAPI): ``create_app`` builds it over a
:class:`workers.gateway.Gateway`."""

from workers.api.app import create_app, parse_positions

__all__ = ["create_app", "parse_positions"]
