"""The panel's web server: uvicorn serving panel.asgi (pages, the REST API, websockets and the /v1 gateway).

    python -m panel.web [--host 127.0.0.1] [--port 8000] [--workers 1]

One command for `make run`, the Docker image, the tests and the benches, so all of them run what production
runs. uvicorn rather than daphne: the gateway relays a chunk per generated token (128 streams at 30
tokens/s are ~4,000 a second through one process), and daphne's per-chunk cost (Twisted's HTTP channel)
was half of the web process's CPU in bench/gateway.py; uvicorn with uvloop and httptools halves the CPU a
relayed token costs, and new requests no longer queue behind the relay (added TTFT p99 ~100 ms under
daphne, a few ms under uvicorn, on a 2-core machine).
"""

from __future__ import annotations

import argparse
import os
import sys

APP = "panel.asgi:application"
# On SIGTERM open streams and websockets get this long to end before they are cut; under the supervisors'
# (panel.run, systemd, docker stop) ten seconds before SIGKILL.
GRACEFUL_SHUTDOWN_S = 5


def argv(host: str, port: int, python: str = sys.executable) -> list[str]:
    """How other programs (make run, the tests, the benches) start the web server."""
    return [python, "-m", "panel.web", "--host", host, "--port", str(port)]


def options(host: str, port: int, workers: int = 1, access_log: bool = True) -> dict:
    """uvicorn.run's arguments for the panel."""
    return {
        "host": host,
        "port": port,
        "workers": workers,
        "loop": "uvloop",
        "http": "httptools",
        "ws": "websockets-sansio",
        # Channels' router does not speak the lifespan protocol; the panel needs no start-up hook.
        "lifespan": "off",
        # The panel reads X-Forwarded-For itself, only as far as PANEL_TRUSTED_PROXIES allows
        # (panel.core.web.client_ip); uvicorn rewriting the client address first would bypass that.
        "proxy_headers": False,
        "server_header": False,
        # Dashboards send small JSON frames many times a second: compressing each costs CPU for bytes a LAN
        # does not miss.
        "ws_per_message_deflate": False,
        "timeout_graceful_shutdown": GRACEFUL_SHUTDOWN_S,
        "access_log": access_log,
        "log_level": os.environ.get("LOG_LEVEL", "INFO").lower(),
    }


def main(args: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m panel.web", description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="web processes sharing the port (the gateway and websockets keep their state in Redis)",
    )
    parser.add_argument("--no-access-log", action="store_true", help="no line per request on stderr")
    given = parser.parse_args(args)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "panel.settings")
    import uvicorn  # here: the programs that only build the command line need not import it

    uvicorn.run(APP, **options(given.host, given.port, given.workers, not given.no_access_log))


if __name__ == "__main__":
    main()
