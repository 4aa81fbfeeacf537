"""Is an engine's port free on this host? Asked by the launch before it starts an engine.

The panel counts the ports it handed out; only the host knows what else listens. The probe binds the
address the engine will bind, as the engine's server does (SO_REUSEADDR, so a port in TIME_WAIT after an
engine of ours stopped counts as free): a listener on the port, on that address or on every address,
makes the bind fail as it would make the engine's fail. Nothing is read from other processes' argv.
"""

from __future__ import annotations

import errno
import socket


def port_in_use(host: str, port: int) -> bool:
    """True when something on this host already listens where an engine on `host`:`port` would."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as error:
            # Another error (an address this host does not have) is the engine's to report.
            return error.errno == errno.EADDRINUSE
    return False
