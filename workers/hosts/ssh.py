"""SshRunner: commands on a node reached over SSH (asyncssh), for nodes that run no agent of their own.

SSH hands the remote user's shell one command string, so argv is quoted with shlex.join and env goes in as
an `env K=V` prefix; nothing unquoted reaches that shell. The command is exec'ed by the shell sshd started
in a new session, so the program's pid is also its process group id; the first stdout line reports it so a
timeout or cancel can kill the whole group.
"""

from __future__ import annotations

import asyncio
import contextlib
import shlex
import time

import asyncssh

from workers.hosts.base import (
    CommandError,
    CommandResult,
    LineCallback,
    Runner,
    check_argv,
    check_env,
    check_log_path,
    check_pid,
)
from workers.hosts.ssh_connect import (
    ConnectParams,
    HostKeyMismatch,
    HostKeyNotPinned,
    SshAuthError,
    SshConnectError,
    close_all,
    discard_connection,
    fetch_host_key_fingerprint,
    normalize_fingerprint,
    open_connection,
    pooled_connection,
)
from workers.hosts.streaming import READ_CHUNK, LineCollector, supervise, supervised_result

__all__ = [
    "HostKeyMismatch",
    "HostKeyNotPinned",
    "SshAuthError",
    "SshConnectError",
    "SshRunner",
    "close_all",
    "fetch_host_key_fingerprint",
]

PID_MARKER = b"__runner_pid__="
# Fixed messages so stderr can be matched whatever the host's language is.
C_LOCALE = {"LC_ALL": "C"}
# What cat(1) says under LC_ALL=C when there is no regular file to read.
NO_FILE_REASONS = ("No such file or directory", "Not a directory", "Is a directory")
# Bound on helper commands (kill, pid lookups) so a hung host cannot hang the caller forever.
HELPER_TIMEOUT_S = 30.0
# How long a stop waits for a just-opened command to report its pid before giving up and closing it.
PID_WAIT_S = 15.0
# Errors on opening a session: the pooled connection is gone (a fresh one is tried), or, for a channel refused
# on a connection still open, the server's sessions are full for a moment (the same one is asked again).
STALE_CONNECTION_ERRORS = (asyncssh.ChannelOpenError, asyncssh.DisconnectError, OSError)
# How often a command asks for a session before giving up, and the first wait between asks (it grows).
OPEN_ATTEMPTS = 6
SESSION_RETRY_S = 0.1


def _program(argv: list[str], env: dict[str, str]) -> list[str]:
    return ["env", *(f"{name}={value}" for name, value in env.items()), *argv] if env else argv


def remote_command(argv: list[str], env: dict[str, str], cwd: str | None) -> str:
    """The shell command that reports its pid, enters cwd, and execs argv with env."""
    steps = [f"printf '{PID_MARKER.decode()}%s\\n' \"$$\""]
    if cwd is not None:
        steps.append(f"cd -- {shlex.quote(cwd)}")
    steps.append("exec " + shlex.join(_program(argv, env)))
    return " && ".join(steps)


def detached_command(argv: list[str], env: dict[str, str], cwd: str | None, log_path: str) -> str:
    """The shell command that starts argv in its own session, appending output to log_path; prints the pid."""
    log = shlex.quote(log_path)
    # The background job is not a group leader (no job control), so setsid(1) makes it one without forking:
    # the pid printed is the program's pid and its process group id.
    steps = [f": >> {log} || exit 1"]
    if cwd is not None:
        steps.append(f"cd -- {shlex.quote(cwd)} || exit 1")
    program = _program(["setsid", *argv], env)
    steps.append(f"{shlex.join(program)} >> {log} 2>&1 < /dev/null &")
    steps.append('echo "$!"')
    return "\n".join(steps)


class SshRunner(Runner):
    """Runs commands over a pooled SSH connection with a pinned host key.

    With no known_host_fingerprint every connection is refused (HostKeyNotPinned carries the key seen)
    unless trust_on_first_use=True, in which case the first key seen is accepted and kept in
    seen_host_key_fingerprint for the caller to store.
    """

    def __init__(
        self,
        host: str,
        port: int = 22,
        username: str | None = None,
        *,
        client_key: str | None = None,
        password: str | None = None,
        known_host_fingerprint: str | None = None,
        keepalive_interval: float = 15,
        connect_timeout: float = 10,
        trust_on_first_use: bool = False,
    ):
        if not host:
            raise ValueError("host is required: the node's address")
        if not username:
            raise ValueError("username is required: the account the panel logs in as on the node")
        if not isinstance(port, int) or not 0 < port < 65536:
            raise ValueError(f"port must be a TCP port number, got {port!r}")
        if client_key is None and password is None:
            raise ValueError("give client_key (PEM text of a private key) or password to log in with")
        key = None
        if client_key is not None:
            try:
                key = asyncssh.import_private_key(client_key)
            except (asyncssh.KeyImportError, ValueError) as error:
                raise ValueError(
                    f"client_key is not a usable private key ({error}); paste the whole unencrypted PEM "
                    "or OpenSSH private key, including its BEGIN and END lines"
                ) from error
        fingerprint = normalize_fingerprint(known_host_fingerprint) if known_host_fingerprint else None
        self._params = ConnectParams(
            host=host,
            port=port,
            username=username,
            client_key=key,
            password=password,
            known_host_fingerprint=fingerprint,
            trust_on_first_use=trust_on_first_use,
            keepalive_interval=keepalive_interval,
            connect_timeout=connect_timeout,
        )
        # A connection accepted on first use must never serve a runner that would have refused it.
        self._pool_key = (
            host,
            port,
            username,
            fingerprint or ("trust-on-first-use" if trust_on_first_use else None),
        )
        self.seen_host_key_fingerprint: str | None = None

    def __repr__(self) -> str:
        return f"SshRunner({self._params.target})"

    async def connection(self) -> asyncssh.SSHClientConnection:
        """The pooled connection for this host (opened on first use), e.g. for SFTP."""
        connection, fingerprint = await pooled_connection(self._pool_key, self._open)
        self.seen_host_key_fingerprint = fingerprint
        return connection

    async def _open(self) -> tuple[asyncssh.SSHClientConnection, str]:
        return await open_connection(self._params)

    async def _open_process(self, command: str, encoding: str | None = None) -> asyncssh.SSHClientProcess:
        for attempt in range(1, OPEN_ATTEMPTS + 1):
            connection = await self.connection()
            try:
                return await connection.create_process(command, encoding=encoding)
            except STALE_CONNECTION_ERRORS as error:
                if attempt == OPEN_ATTEMPTS:
                    raise
                if isinstance(error, asyncssh.ChannelOpenError) and not connection.is_closed():
                    # A live connection refused a session: sshd's MaxSessions is full, because sessions
                    # are freed a moment after their channels close. Closing it would end the commands
                    # others run on it, so wait for a slot instead.
                    await asyncio.sleep(SESSION_RETRY_S * attempt)
                else:
                    # The pooled connection died between uses (host rebooted, sshd restarted): open anew.
                    await discard_connection(self._pool_key, connection)
        raise AssertionError("unreachable")

    async def _shell(self, command: str) -> asyncssh.SSHCompletedProcess:
        """Run a helper command string built here from quoted parts; bounded in time."""
        process = await self._open_process(command, encoding="utf-8")
        try:
            return await process.wait(check=False, timeout=HELPER_TIMEOUT_S)
        finally:
            process.close()

    async def _execute(
        self,
        argv: list[str],
        *,
        env: dict[str, str],
        cwd: str | None,
        timeout: float | None,
        on_line: LineCallback | None,
        cancel: asyncio.Event | None,
        stdin: bytes | None,
    ) -> CommandResult:
        started = time.monotonic()
        process = await self._open_process(remote_command(argv, env, cwd))
        stdout = LineCollector("stdout", on_line)
        stderr = LineCollector("stderr", on_line)
        pid: int | None = None
        pid_reported = asyncio.Event()

        async def read_pid_then_stdout() -> None:
            nonlocal pid
            head = b""
            try:
                while b"\n" not in head:
                    data = await process.stdout.read(READ_CHUNK)
                    if not data:
                        break
                    head += data
            finally:
                pid_reported.set()
            first, newline, rest = head.partition(b"\n")
            if newline and first.startswith(PID_MARKER):
                pid = int(first[len(PID_MARKER) :])
                stdout.feed(rest)
            else:
                stdout.feed(head)
            await stdout.pump(process.stdout.read)

        async def feed_stdin() -> None:
            try:
                if stdin:
                    process.stdin.write(stdin)
                    await process.stdin.drain()
                process.stdin.write_eof()
            except (BrokenPipeError, ConnectionResetError, asyncssh.DisconnectError):
                pass  # the program exited without reading all of its input; its exit status tells why

        async def finished() -> None:
            await asyncio.gather(
                feed_stdin(),
                read_pid_then_stdout(),
                stderr.pump(process.stderr.read),
                process.wait_closed(),
            )

        async def stop(sig: int) -> None:
            # A slow host may not have started the command yet: wait for its pid rather than closing the
            # channel, which would leave a program that never writes running.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(pid_reported.wait(), PID_WAIT_S)
            if pid is None:
                process.close()
                return
            try:
                await self._kill(pid, sig)
            except (asyncssh.Error, OSError, TimeoutError):
                process.close()

        try:
            stopped = await supervise(
                finished(), timeout=timeout, cancel=cancel, stop=stop, kill_grace_s=self.kill_grace_s
            )
        finally:
            process.close()
        return supervised_result(argv, process.returncode, stdout, stderr, started, stopped)

    async def _kill(self, pid: int, sig: int) -> asyncssh.SSHCompletedProcess:
        """kill(1) the process group led by pid, or pid alone if it leads none."""
        group = shlex.join(["kill", "-s", str(int(sig)), "--", f"-{pid}"])
        alone = shlex.join(["kill", "-s", str(int(sig)), "--", str(pid)])
        return await self._shell(f"export LC_ALL=C; {group} 2>/dev/null || {alone}")

    async def read_text(self, path: str) -> str | None:
        result = await self.run(["cat", "--", path], env=C_LOCALE)
        if result.ok:
            return result.stdout
        if any(reason in result.stderr for reason in NO_FILE_REASONS):
            return None
        raise CommandError(result)

    async def start_detached(
        self, argv: list[str], *, env: dict[str, str] | None = None, cwd: str | None = None, log_path: str
    ) -> int:
        argv = check_argv(argv)
        env = check_env(env)
        check_log_path(log_path)
        started = time.monotonic()
        completed = await self._shell(detached_command(argv, env, cwd, log_path))
        output = (completed.stdout or "").strip()
        if completed.exit_status != 0 or not output.isdigit():
            raise CommandError(_as_result(argv, completed, started))
        return int(output)

    async def is_alive(self, pid: int) -> bool:
        # /proc tells zombies apart from running processes, which `kill -0` does not.
        stat = await self.read_text(f"/proc/{check_pid(pid)}/stat")
        if stat is None:
            return False
        state = stat.rpartition(")")[2].split()[:1]
        return bool(state) and state[0] not in ("Z", "X")

    async def signal(self, pid: int, sig: int) -> None:
        started = time.monotonic()
        completed = await self._kill(check_pid(pid), sig)
        if completed.exit_status != 0 and "No such process" not in (completed.stderr or ""):
            raise CommandError(_as_result(["kill", "-s", str(int(sig)), "--", str(pid)], completed, started))

    async def close(self) -> None:
        """Close this host's pooled connection on the current loop; the next command reconnects."""
        await discard_connection(self._pool_key)


def _text(output: bytes | str | None) -> str:
    """A completed process's output as text (runs ask asyncssh for text; bytes would be a binary run)."""
    if isinstance(output, bytes):
        return output.decode("utf-8", errors="replace")
    return output or ""


def _as_result(argv: list[str], completed: asyncssh.SSHCompletedProcess, started: float) -> CommandResult:
    return CommandResult(
        argv=argv,
        exit_status=completed.returncode,
        stdout=_text(completed.stdout),
        stderr=_text(completed.stderr),
        duration_s=time.monotonic() - started,
    )
