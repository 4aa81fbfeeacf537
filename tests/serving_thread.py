"""The thread the tests' local HTTP servers (the CLI's scripted API, the hub, the notification receivers)
run in."""

import threading
from socketserver import BaseServer

# shutdown() returns once serve_forever has looked at its flag, which it does once a poll interval: at the
# default 0.5 s every test that used a server spent up to half a second in its teardown (314 CLI unit tests:
# 100 s of the fast tier, 20 s at this interval).
POLL_S = 0.02


def serving_thread(server: BaseServer) -> threading.Thread:
    """A daemon thread running `server.serve_forever`, not started yet."""
    return threading.Thread(target=server.serve_forever, args=(POLL_S,), daemon=True)
