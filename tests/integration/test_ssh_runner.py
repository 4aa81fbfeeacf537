"""SshRunner against a real OpenSSH server on loopback (see tests/sshd.py)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time

import psutil
import pytest

import tests.sshd
from workers.hosts import (
    CommandError,
    HostKeyMismatch,
    HostKeyNotPinned,
    SshAuthError,
    SshRunner,
    close_all,
    fetch_host_key_fingerprint,
    make_runner,
)

pytestmark = pytest.mark.ssh

sshd_server = tests.sshd.sshd_server
sshd_of_two_sessions = tests.sshd.sshd_of_two_sessions

# A well-formed fingerprint that no real key has.
WRONG_FINGERPRINT = "SHA256:" + "A" * 43


@pytest.fixture(scope="session")
def host_fingerprint(sshd_server) -> str:
    """What `ssh-keygen -lf` says about the server's host key: the admin's independent check."""
    listed = subprocess.run(
        ["ssh-keygen", "-lf", str(sshd_server.host_public_key_path)],
        check=True,
        capture_output=True,
        text=True,
    )
    return listed.stdout.split()[1]


@pytest.fixture
async def runner(sshd_server, host_fingerprint):
    runner = SshRunner(
        sshd_server.host,
        sshd_server.port,
        sshd_server.username,
        client_key=sshd_server.client_key_pem,
        known_host_fingerprint=host_fingerprint,
    )
    runner.kill_grace_s = 1.0
    yield runner
    await close_all()


async def test_it_runs_a_command_and_reports_its_output_and_exit_status(runner):
    result = await runner.run(["sh", "-c", "echo out; echo err >&2; exit 3"])

    assert (result.exit_status, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert not result.ok


async def test_it_passes_arguments_through_the_remote_shell_unchanged(runner):
    tricky = ["it's", "$HOME", "a b", "; touch /tmp/should-not-exist", "*", "é"]

    result = await runner.run(["printf", "%s\\n", *tricky])

    assert result.stdout.splitlines() == tricky


async def test_it_streams_the_first_line_before_the_command_ends(runner):
    first_line_seen = asyncio.Event()
    lines = []

    def on_line(stream, line):
        lines.append((stream, line))
        if line == "first":
            first_line_seen.set()

    task = asyncio.create_task(
        runner.run(["sh", "-c", "echo first; sleep 1.5; echo second"], on_line=on_line)
    )
    await asyncio.wait_for(first_line_seen.wait(), timeout=15)

    assert not task.done()
    assert (await task).ok
    assert lines == [("stdout", "first"), ("stdout", "second")]


async def test_it_sets_env_and_cwd_for_the_command(runner, tmp_path):
    result = await runner.run(
        ["sh", "-c", 'echo "$GREETING"; pwd'], env={"GREETING": "hello; $(id) `id`"}, cwd=str(tmp_path)
    )

    assert result.stdout == f"hello; $(id) `id`\n{tmp_path}\n"


async def test_it_refuses_an_env_name_that_could_inject_shell(runner):
    with pytest.raises(ValueError, match="environment variable name"):
        await runner.run(["true"], env={"X=1; rm -rf /; Y": "1"})


async def test_it_feeds_stdin(runner):
    result = await runner.run(["wc", "-l"], stdin=b"one\ntwo\n")

    assert result.stdout.strip() == "2"


async def test_a_timeout_kills_the_remote_process_group(runner):
    child_pids = []

    result = await runner.run(
        ["sh", "-c", "sleep 300 & echo $!; wait"],
        timeout=3.0,
        on_line=lambda stream, line: child_pids.append(int(line)),
    )

    assert result.timed_out
    assert not result.ok
    assert result.duration_s < 15
    assert not await runner.is_alive(child_pids[0])


async def test_a_remote_group_ignoring_sigterm_is_killed_after_the_grace(runner):
    child_pids = []

    result = await runner.run(
        ["sh", "-c", "trap '' TERM; sleep 300 & echo $!; wait"],
        timeout=3.0,
        on_line=lambda stream, line: child_pids.append(int(line)),
    )

    assert result.timed_out
    assert result.exit_status == -signal.SIGKILL
    assert not await runner.is_alive(child_pids[0])


async def test_cancel_stops_the_remote_command(runner):
    cancel = asyncio.Event()
    asyncio.get_running_loop().call_later(0.5, cancel.set)

    result = await runner.run(["sleep", "300"], cancel=cancel)

    assert result.cancelled
    assert not result.timed_out
    # sshd reports the signal that ended the command: our SIGTERM, or SIGPIPE when the channel closed first.
    assert result.exit_status in (-signal.SIGTERM, -signal.SIGPIPE)


async def test_a_command_stopped_before_it_reports_its_pid_is_still_killed(runner):
    cancel = asyncio.Event()
    cancel.set()  # stop is asked for at once, before the remote shell has even started the program

    result = await runner.run(["sleep", "300.0417"], cancel=cancel)

    assert result.cancelled
    assert result.exit_status == -signal.SIGTERM  # our kill ended it, not a dropped channel
    assert await _eventually(lambda: not _processes_with_cmdline(["sleep", "300.0417"]))


async def test_check_raises_with_the_command_and_its_stderr(runner):
    with pytest.raises(CommandError, match=r"(?s)`sh -c 'echo broken >&2; exit 4'`.*exit status 4.*broken"):
        await runner.run(["sh", "-c", "echo broken >&2; exit 4"], check=True)


async def test_a_missing_program_reports_127(runner):
    result = await runner.run(["no-such-program-here"])

    assert result.exit_status == 127


async def test_it_reads_a_file_or_says_none_when_missing(runner, tmp_path):
    (tmp_path / "version.info").write_bytes(b"Version=8.0.0\n\xff\n")

    assert await runner.read_text(str(tmp_path / "version.info")) == "Version=8.0.0\n\ufffd\n"
    assert await runner.read_text(str(tmp_path / "absent.info")) is None


async def test_the_pinned_fingerprint_lets_commands_run(runner, host_fingerprint):
    assert (await runner.run(["true"])).ok
    assert runner.seen_host_key_fingerprint == host_fingerprint


async def test_a_wrong_fingerprint_is_refused_naming_both(sshd_server, host_fingerprint):
    runner = SshRunner(
        sshd_server.host,
        sshd_server.port,
        sshd_server.username,
        client_key=sshd_server.client_key_pem,
        known_host_fingerprint=WRONG_FINGERPRINT,
    )

    with pytest.raises(HostKeyMismatch) as refused:
        await runner.run(["true"])

    assert (refused.value.expected, refused.value.actual) == (WRONG_FINGERPRINT, host_fingerprint)
    assert WRONG_FINGERPRINT in str(refused.value)
    assert host_fingerprint in str(refused.value)


async def test_an_unpinned_host_is_refused_unless_trusted_on_first_use(sshd_server, host_fingerprint):
    credentials = dict(
        host=sshd_server.host,
        port=sshd_server.port,
        username=sshd_server.username,
        client_key=sshd_server.client_key_pem,
    )

    with pytest.raises(HostKeyNotPinned) as refused:
        await SshRunner(**credentials).run(["true"])
    assert refused.value.actual == host_fingerprint

    trusting = SshRunner(**credentials, trust_on_first_use=True)
    assert (await trusting.run(["true"])).ok
    assert trusting.seen_host_key_fingerprint == host_fingerprint

    with pytest.raises(HostKeyNotPinned):  # the trusted connection in the pool is not lent to it
        await SshRunner(**credentials).run(["true"])
    await close_all()


async def test_the_fetched_fingerprint_matches_ssh_keygen(sshd_server, host_fingerprint):
    assert await fetch_host_key_fingerprint(sshd_server.host, sshd_server.port) == host_fingerprint


async def test_runners_for_the_same_host_share_one_pooled_connection(runner, sshd_server, host_fingerprint):
    twin = make_runner(
        {
            "transport": "ssh",
            "address": sshd_server.host,
            "port": sshd_server.port,
            "username": sshd_server.username,
            "client_key": sshd_server.client_key_pem,
            "host_key_fingerprint": host_fingerprint,
        }
    )

    first = await runner.connection()
    await runner.run(["true"])
    assert await twin.connection() is first

    await runner.close()
    assert await twin.connection() is not first


async def test_a_dropped_pooled_connection_is_replaced(runner):
    first = await runner.connection()
    first.abort()
    await first.wait_closed()

    assert (await runner.run(["true"])).ok
    assert await runner.connection() is not first


async def test_commands_beyond_the_servers_session_limit_wait_for_a_session(sshd_of_two_sessions):
    # CI once lost an inventory this way: one command found sshd's sessions full, the runner closed the
    # pooled connection to start afresh, and every command running on it ended without an exit status.
    server = sshd_of_two_sessions
    runner = SshRunner(
        server.host,
        server.port,
        server.username,
        client_key=server.client_key_pem,
        known_host_fingerprint=await fetch_host_key_fingerprint(server.host, server.port),
    )
    try:
        connection = await runner.connection()
        results = await asyncio.gather(*(runner.run(["sh", "-c", f"sleep 0.3; echo {n}"]) for n in range(5)))
        assert [(done.exit_status, done.stdout) for done in results] == [(0, f"{n}\n") for n in range(5)]
        assert await runner.connection() is connection
    finally:
        await close_all()


async def test_password_login_is_refused_by_a_key_only_server(sshd_server, host_fingerprint):
    runner = SshRunner(
        sshd_server.host,
        sshd_server.port,
        sshd_server.username,
        password="hunter2",
        known_host_fingerprint=host_fingerprint,
    )

    with pytest.raises(SshAuthError, match="refused the login by password"):
        await runner.run(["true"])


async def test_a_detached_process_keeps_running_and_can_be_signalled(runner, tmp_path):
    log_path = tmp_path / "engine.log"

    pid = await runner.start_detached(
        ["sh", "-c", 'echo "started in $PWD with $MODE"; exec sleep 300'],
        env={"MODE": "serve"},
        cwd=str(tmp_path),
        log_path=str(log_path),
    )
    await runner.close()  # the SSH session that started it is gone; the process is not

    assert await runner.is_alive(pid)
    assert os.getpgid(pid) == pid  # it leads its own process group
    assert await _eventually(lambda: log_path.read_text() == f"started in {tmp_path} with serve\n")

    await runner.signal(pid, signal.SIGTERM)

    assert await _eventually_async(lambda: _not(runner.is_alive(pid)))


async def test_start_detached_fails_clearly_when_the_log_cannot_be_written(runner, tmp_path):
    with pytest.raises(CommandError, match="No such file or directory"):
        await runner.start_detached(["sleep", "1"], log_path=str(tmp_path / "missing" / "x.log"))


async def test_signalling_a_gone_process_is_a_no_op(runner):
    pid = int((await runner.run(["sh", "-c", "echo $$"])).stdout)

    await runner.signal(pid, signal.SIGTERM)


def test_run_sync_reuses_the_pooled_connection_between_calls(sshd_server, host_fingerprint):
    runner = SshRunner(
        sshd_server.host,
        sshd_server.port,
        sshd_server.username,
        client_key=sshd_server.client_key_pem,
        known_host_fingerprint=host_fingerprint,
    )
    seen = []

    def port_of_this_session():
        # SSH_CONNECTION is "client_ip client_port server_ip server_port": one client port per connection.
        result = runner.run_sync(
            ["sh", "-c", 'echo "$SSH_CONNECTION"'], on_line=lambda s, line: seen.append(line)
        )
        return result.stdout.split()[1]

    assert port_of_this_session() == port_of_this_session()
    assert len(seen) == 2


def _processes_with_cmdline(cmdline):
    # The server is on this machine, so its processes can be inspected directly.
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        if process.info["cmdline"] == cmdline and process.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(process.pid)
    return found


async def _not(coro):
    return not await coro


async def _eventually(check, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        await asyncio.sleep(0.05)
    return check()


async def _eventually_async(make_check, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await make_check():
            return True
        await asyncio.sleep(0.05)
    return await make_check()
