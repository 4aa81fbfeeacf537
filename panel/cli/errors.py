"""Exit codes scripts can trust, and the one exception every command raises to end with one of them."""

OK = 0
FAILED = 1  # the API refused or failed the request, or the deployment failed
USAGE = 2  # wrong arguments, an unreadable spec file, not signed in (argparse's own code too)
TIMEOUT = 3  # a wait ran out of time (the API answers 408 on a server-side wait)
INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT


class CliError(Exception):
    """Ends the command: `message` (and `details`, one per line) on stderr, exit with `code`."""

    def __init__(self, message: str, code: int = FAILED, details: list[str] | None = None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.details = details or []


class UsageError(CliError):
    def __init__(self, message: str):
        super().__init__(message, USAGE)
