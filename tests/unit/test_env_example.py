"""Every variable the settings module reads is listed in .env.example (the one place admins look)."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
READ = re.compile(r"""(?:env(?:\.\w+)?|_read_secret)\(\s*["']([A-Z][A-Z0-9_]+)["']""")


def listed_variables() -> set[str]:
    names = set()
    for line in (REPO / ".env.example").read_text().splitlines():
        match = re.match(r"^([A-Z][A-Z0-9_]+)=", line)
        if match:
            names.add(match.group(1))
    return names


def test_every_setting_read_from_the_environment_is_in_env_example():
    read = set(READ.findall((REPO / "panel" / "settings.py").read_text()))
    assert read, "the pattern found no settings: update the test"
    assert sorted(read - listed_variables()) == []


def test_every_agent_variable_is_in_env_example():
    agent = set(re.findall(r'"(ASCEND_PANEL_[A-Z_]+)"', (REPO / "workers" / "agent.py").read_text()))
    assert sorted(agent - listed_variables()) == []
