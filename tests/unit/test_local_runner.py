"""LocalRunner with real subprocesses: output, env, cwd, streaming, stopping, detached processes."""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest

from workers.hosts import CommandError, LocalRunner

PYTHON = sys.executable
REPO_ROOT = Path(__file__).resolve().parents[2]


def python(code: str) -> list[str]:
    return [PYTHON, "-c", textwrap.dedent(code)]


@pytest.fixture
def runner():
    runner = LocalRunner()
    runner.kill_grace_s = 0.5
    return runner


def process_is_gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def eventually(check, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        await asyncio.sleep(0.05)
    return check()


async def test_it_reports_output_and_exit_status(runner):
    result = await runner.run(["sh", "-c", "echo out; echo err >&2; exit 3"])

    assert (result.exit_status, result.stdout, result.stderr) == (3, "out\n", "err\n")
    assert not result.ok
    assert not result.timed_out
    assert not result.cancelled


async def test_a_successful_command_is_ok(runner):
    result = await runner.run(["true"])

    assert result.ok
    assert result.exit_status == 0
    assert result.argv == ["true"]


async def test_a_missing_program_reports_127_like_a_shell(runner):
    lines = []

    result = await runner.run(["no-such-program-here"], on_line=lambda stream, line: lines.append(stream))

    assert result.exit_status == 127
    assert "no-such-program-here" in result.stderr
    assert lines == ["stderr"]


async def test_a_file_that_is_not_executable_reports_126(runner, tmp_path):
    script = tmp_path / "script.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    script.chmod(0o644)

    assert (await runner.run([str(script)])).exit_status == 126


async def test_env_is_merged_over_the_process_environment_and_base_env(monkeypatch):
    monkeypatch.setenv("RUNNER_TEST_INHERITED", "from-os")
    runner = LocalRunner(base_env={"RUNNER_TEST_BASE": "base", "RUNNER_TEST_OVERRIDE": "base"})

    result = await runner.run(
        ["sh", "-c", 'echo "$RUNNER_TEST_INHERITED $RUNNER_TEST_BASE $RUNNER_TEST_OVERRIDE"'],
        env={"RUNNER_TEST_OVERRIDE": "call"},
    )

    assert result.stdout == "from-os base call\n"


async def test_it_refuses_env_names_that_are_not_plain_identifiers(runner):
    with pytest.raises(ValueError, match="environment variable name '1BAD'"):
        await runner.run(["true"], env={"1BAD": "x"})


async def test_it_refuses_a_string_where_an_argv_list_belongs(runner):
    with pytest.raises(TypeError, match="not a single string"):
        await runner.run("echo hi")


async def test_it_runs_in_the_given_cwd(runner, tmp_path):
    assert (await runner.run(["pwd"], cwd=str(tmp_path))).stdout == f"{tmp_path}\n"


async def test_it_feeds_stdin(runner):
    result = await runner.run(["wc", "-l"], stdin=b"one\ntwo\nthree\n")

    assert result.stdout.strip() == "3"


async def test_the_first_line_arrives_before_the_program_ends(runner):
    first_line_seen = asyncio.Event()

    def on_line(stream, line):
        if line == "first":
            first_line_seen.set()

    task = asyncio.create_task(
        runner.run(
            python("""
                import time
                print("first", flush=True)
                time.sleep(1.5)
                print("second")
            """),
            on_line=on_line,
        )
    )
    await asyncio.wait_for(first_line_seen.wait(), timeout=5)

    assert not task.done()
    assert (await task).stdout == "first\nsecond\n"


async def test_each_redraw_of_a_progress_line_arrives_while_the_program_runs(runner, tmp_path):
    # rsync --info=progress2 and other meters redraw one line, each redraw starting with \r and none ending
    # it, and print \n only when done; each redraw must reach the callback (the operation's progress) as it
    # is drawn, not when the next one ends it: the program draws 50% and waits until the test saw it.
    lines = []
    last_redraw_seen = asyncio.Event()
    seen = tmp_path / "seen"

    def on_line(stream, line):
        lines.append(line)
        if line == "50%":
            last_redraw_seen.set()

    task = asyncio.create_task(
        runner.run(
            python(f"""
                import os, sys, time
                sys.stdout.write("\\r10%\\r50%")
                sys.stdout.flush()
                while not os.path.exists({str(seen)!r}):
                    time.sleep(0.05)
                sys.stdout.write("\\r100%\\n")
            """),
            on_line=on_line,
            timeout=30,
        )
    )
    try:
        await asyncio.wait_for(last_redraw_seen.wait(), timeout=10)
    finally:
        seen.touch()

    assert (await task).stdout == "\r10%\r50%\r100%\n"
    assert lines == ["", "10%", "50%", "100%"]  # each redraw once


async def test_lines_reach_the_callback_in_order_per_stream(runner):
    lines = []

    result = await runner.run(
        python("""
            import sys, time
            for i in range(3000):
                print(f"line {i}")
            sys.stdout.flush()
            time.sleep(0.2)
            print("problem", file=sys.stderr, flush=True)
            time.sleep(0.2)
            print("last", flush=True)
        """),
        on_line=lambda stream, line: lines.append((stream, line)),
    )

    expected_stdout = [("stdout", f"line {i}") for i in range(3000)] + [("stdout", "last")]
    assert [entry for entry in lines if entry[0] == "stdout"] == expected_stdout
    assert lines[3000:] == [("stderr", "problem"), ("stdout", "last")]
    assert result.stdout.count("\n") == 3001


async def test_undecodable_bytes_are_replaced_not_fatal(runner):
    lines = []

    result = await runner.run(
        ["printf", "caf\\303\\251 \\377\\376 ok\\r\\nno newline"],
        on_line=lambda stream, line: lines.append(line),
    )

    assert result.stdout == "café \ufffd\ufffd ok\r\nno newline"
    assert lines == ["café \ufffd\ufffd ok", "no newline"]


async def test_a_very_long_line_is_collected_whole(runner):
    result = await runner.run(python("import sys; sys.stdout.write('x' * 3_000_000)"))

    assert result.stdout == "x" * 3_000_000


async def test_a_timeout_kills_the_whole_process_group(runner):
    child_pids = []

    result = await runner.run(
        ["sh", "-c", "sleep 300 & echo $!; wait"],
        timeout=1.0,
        on_line=lambda stream, line: child_pids.append(int(line)),
    )

    assert result.timed_out
    assert not result.ok
    assert result.exit_status == -signal.SIGTERM
    assert result.duration_s < 10
    assert await eventually(lambda: process_is_gone(child_pids[0]))


async def test_a_program_ignoring_sigterm_is_killed_after_the_grace(runner):
    result = await runner.run(
        python("""
            import signal, time
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            print("ignoring SIGTERM", flush=True)
            time.sleep(300)
        """),
        timeout=3.0,
    )

    assert result.timed_out
    assert result.exit_status == -signal.SIGKILL
    assert result.stdout == "ignoring SIGTERM\n"
    assert result.duration_s < 10


async def test_cancel_stops_the_command_and_says_so(runner):
    cancel = asyncio.Event()

    def on_line(stream, line):
        if line == "working":
            cancel.set()

    result = await runner.run(["sh", "-c", "echo working; exec sleep 300"], cancel=cancel, on_line=on_line)

    assert result.cancelled
    assert not result.timed_out
    assert result.exit_status == -signal.SIGTERM
    assert result.stdout == "working\n"


async def test_cancelling_the_caller_kills_the_command(runner):
    pids = []
    started = asyncio.Event()

    def on_line(stream, line):
        pids.append(int(line))
        started.set()

    task = asyncio.create_task(runner.run(["sh", "-c", "echo $$; exec sleep 300"], on_line=on_line))
    await asyncio.wait_for(started.wait(), timeout=5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert await eventually(lambda: process_is_gone(pids[0]))


async def test_check_raises_naming_the_command_status_and_last_stderr_lines(runner):
    script = "for i in $(seq 1 30); do echo problem $i >&2; done; exit 2"

    with pytest.raises(CommandError) as failed:
        await runner.run(["sh", "-c", script], check=True)

    message = str(failed.value)
    assert message.startswith(f"command `sh -c '{script}'` failed with exit status 2")
    assert message.endswith("\n".join(f"problem {i}" for i in range(21, 31)))
    assert "problem 20\n" not in message
    assert failed.value.result.exit_status == 2


async def test_a_command_error_survives_pickling(runner):
    with pytest.raises(CommandError) as failed:
        await runner.run(["sh", "-c", "echo broken >&2; exit 5"], check=True)

    copy = pickle.loads(pickle.dumps(failed.value))  # noqa: S301 - our own bytes, made just above

    assert copy.result == failed.value.result
    assert str(copy) == str(failed.value)


async def test_check_reports_a_timeout(runner):
    with pytest.raises(CommandError, match=r"`sleep 30` timed out after"):
        await runner.run(["sleep", "30"], timeout=0.2, check=True)


def test_run_sync_works_without_a_running_loop():
    lines = []

    result = LocalRunner().run_sync(["echo", "from sync"], on_line=lambda stream, line: lines.append(line))

    assert result.stdout == "from sync\n"
    assert lines == ["from sync"]


async def test_run_sync_refuses_to_block_a_running_loop(runner):
    with pytest.raises(RuntimeError, match="await runner.run"):
        runner.run_sync(["true"])


async def test_read_text_returns_text_or_none(runner, tmp_path):
    (tmp_path / "version.info").write_bytes(b"Version=8.0.RC1\n\xff\n")

    assert await runner.read_text(str(tmp_path / "version.info")) == "Version=8.0.RC1\n\ufffd\n"
    assert await runner.read_text(str(tmp_path / "absent")) is None
    assert await runner.read_text(str(tmp_path / "version.info" / "below-a-file")) is None


async def test_a_detached_process_survives_the_process_that_started_it(tmp_path):
    log_path = tmp_path / "engine.log"
    starter = f"""
        import asyncio
        from workers.hosts import LocalRunner
        pid = asyncio.run(LocalRunner().start_detached(
            ["sh", "-c", 'echo "serving from $PWD as $ROLE"; exec sleep 300'],
            env={{"ROLE": "engine"}}, cwd={str(tmp_path)!r}, log_path={str(log_path)!r},
        ))
        print(pid)
    """
    started = subprocess.run(python(starter), cwd=REPO_ROOT, capture_output=True, text=True, timeout=30)
    assert started.returncode == 0, started.stderr
    pid = int(started.stdout)
    runner = LocalRunner()

    try:
        assert await runner.is_alive(pid)
        assert os.getpgid(pid) == pid
        assert await eventually(lambda: log_path.read_text() == f"serving from {tmp_path} as engine\n")
    finally:
        await runner.signal(pid, signal.SIGKILL)
    assert await eventually(lambda: process_is_gone(pid))
    assert not await runner.is_alive(pid)


async def test_signal_reaches_the_whole_detached_group(runner, tmp_path):
    log_path = tmp_path / "group.log"
    pid = await runner.start_detached(["sh", "-c", "sleep 300 & echo $!; wait"], log_path=str(log_path))
    assert await eventually(lambda: log_path.read_text().strip().isdigit())
    child = int(log_path.read_text())

    await runner.signal(pid, signal.SIGTERM)

    assert await eventually(lambda: process_is_gone(child))
    assert await eventually(lambda: process_is_gone(pid))
    assert not await runner.is_alive(pid)


async def test_detached_output_is_appended_to_the_log(runner, tmp_path):
    log_path = tmp_path / "append.log"
    log_path.write_text("earlier run\n")

    pid = await runner.start_detached(["sh", "-c", "echo out; echo err >&2"], log_path=str(log_path))

    assert await eventually(lambda: not psutil.pid_exists(pid) or process_is_gone(pid))
    assert await eventually(lambda: log_path.read_text() == "earlier run\nout\nerr\n")


async def test_start_detached_fails_clearly_for_a_missing_program(runner, tmp_path):
    with pytest.raises(CommandError, match="exit status 127"):
        await runner.start_detached(["no-such-engine"], log_path=str(tmp_path / "x.log"))


async def test_start_detached_wants_an_absolute_log_path(runner):
    with pytest.raises(ValueError, match="absolute"):
        await runner.start_detached(["true"], log_path="relative.log")


async def test_signal_to_a_gone_process_is_a_no_op(runner):
    gone = subprocess.run(["sh", "-c", "echo $$"], capture_output=True, text=True, check=True)

    await runner.signal(int(gone.stdout), signal.SIGTERM)


@pytest.mark.parametrize("pid", [0, 1, -5])
async def test_it_refuses_pids_that_would_address_a_group_or_init(runner, pid):
    with pytest.raises(ValueError, match="greater than 1"):
        await runner.signal(pid, signal.SIGTERM)
