"""One address in front of the stack's web servers, as the nginx service is in docker-compose: a TCP proxy
that hands each new connection to the next web server that accepts it (round robin, skipping one that is
down). A connection lives on the server it was handed to; when that server dies its clients see the
connection drop and reconnect through the proxy to a live one, which is what a browser's websocket and a
script's retry do behind a real load balancer.
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import threading

CONNECT_TIMEOUT_S = 1.0
BUFFER = 64 * 1024


class TcpProxy:
    def __init__(self, port: int, backends: list[int]):
        self.port = port
        self.backends = list(backends)
        self._turn = itertools.count()
        self._server = socket.create_server(("127.0.0.1", port), reuse_port=False)
        self._stopping = threading.Event()
        self._open: dict[int, int] = dict.fromkeys(self.backends, 0)  # backend port -> open connections
        self._open_lock = threading.Lock()
        self._thread = threading.Thread(target=self._accept_forever, name="faults-proxy", daemon=True)

    def start(self) -> TcpProxy:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        with contextlib.suppress(OSError):
            self._server.close()

    def busiest_backend(self) -> int:
        """The backend port that holds the most open connections now."""
        with self._open_lock:
            return max(self._open, key=self._open.get)

    def _accept_forever(self) -> None:
        while not self._stopping.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _connect_backend(self) -> tuple[int, socket.socket] | None:
        first = next(self._turn)
        for offset in range(len(self.backends)):
            port = self.backends[(first + offset) % len(self.backends)]
            with contextlib.suppress(OSError):
                return port, socket.create_connection(("127.0.0.1", port), timeout=CONNECT_TIMEOUT_S)
        return None

    def _serve(self, client: socket.socket) -> None:
        connected = self._connect_backend()
        if connected is None:  # every web server is down: the client sees its connection closed
            client.close()
            return
        port, backend = connected
        backend.settimeout(None)
        with self._open_lock:
            self._open[port] += 1
        try:
            back = threading.Thread(target=_pipe, args=(backend, client), daemon=True)
            back.start()
            _pipe(client, backend)
            back.join()
        finally:
            with self._open_lock:
                self._open[port] -= 1


def _pipe(source: socket.socket, sink: socket.socket) -> None:
    """Copy until either side ends; then end both, so the other direction's thread ends too."""
    try:
        while data := source.recv(BUFFER):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for side in (source, sink):
            with contextlib.suppress(OSError):
                side.shutdown(socket.SHUT_RDWR)
            side.close()
