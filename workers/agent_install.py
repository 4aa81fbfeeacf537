"""Install the agent onto an SSH node: run the panel's install script there, fed on stdin.

The script (deploy/install-agent.sh, as the panel serves it) downloads the agent package from the panel
and checks its pinned sha256, trades the join token for the node's credential, writes
/etc/ascend-panel/agent.env, creates the venv and enables the systemd unit; the agent's first heartbeat,
signed with the node's own credential, makes it an agent node that no longer needs SSH.

The join token arrives sealed for the central agent (workers.sealing.seal_for_node: only the central key
opens it) and goes
to the script as an exported variable at the top of the script text on stdin: never on a command line.
"""

import asyncio
import shlex
from urllib.parse import urlsplit

from workers.hosts import CommandError
from workers.i18n import gettext_noop as _
from workers.identity import CENTRAL, signing_key
from workers.sealing import open_for_node

INSTALL_TIMEOUT_S = 1800


class AgentInstallFailed(Exception):
    def __init__(self, message: str, hint: str):
        super().__init__(message)
        self.hint = hint


def with_token(script: str, token: str) -> str:
    """The script text with the join token exported first, for `bash -s` on stdin."""
    return f"export ASCEND_PANEL_JOIN_TOKEN={shlex.quote(token)}\n{script}"


def secrets_in(script_args: list[str]) -> list[str]:
    """What must never reach the operation's log or error (both are stored and shown to viewers): the join
    token and the broker's password, which the command line and the script's own messages carry."""
    found = []
    for option, value in zip(script_args, script_args[1:], strict=False):
        if option == "--token" and value:
            found.append(value)
        elif option == "--broker":
            try:
                password = urlsplit(value).password
            except ValueError:  # not a URL at all: the script refuses it and echoes it, so hide it whole
                password = value
            if password:
                found.append(password)
    return found


def redact(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


def install_argv(username: str, script_args: list[str]) -> list[str]:
    # `bash -s` reads the script from stdin; a non-root login needs passwordless sudo to install a unit.
    command = ["bash", "-s", "--", *script_args]
    return command if username == "root" else ["sudo", "-n", "--", *command]


def run_install_agent(
    emitter, config, *, script: str, script_args: list[str], sealed_token: str = ""
) -> dict:
    if config.ssh_target is None:
        raise AgentInstallFailed(
            "install_agent runs on the central agent for SSH nodes only",
            _("An agent node installs or upgrades its agent with the one-line command on its host."),
        )
    username = config.ssh_target["username"]
    argv = install_argv(username, script_args)
    hidden = secrets_in(script_args)
    if sealed_token:
        token = open_for_node(signing_key(CENTRAL), sealed_token)
        hidden.append(token)
        script = with_token(script, token)
    emitter.progress(5, _("Running the install script on the node"))

    def on_line(stream, line):
        emitter.log(redact(line, hidden), stream=stream)

    async def install():
        runner = config.runner()
        try:
            return await runner.run(
                argv, stdin=script.encode(), timeout=INSTALL_TIMEOUT_S, on_line=on_line, check=True
            )
        finally:
            await runner.close()

    try:
        asyncio.run(install())
    except CommandError as error:
        # from None: the original error quotes the whole command line, token and broker password included.
        raise AgentInstallFailed(
            redact(str(error), hidden),
            _(
                "Read the log above for the step that failed. A non-root SSH user needs passwordless sudo "
                "(sudo -n); the node must reach the panel's URL and the broker."
            ),
        ) from None
    emitter.progress(100, _("Agent installed; waiting for its first heartbeat"))
    return {"installed": True}
