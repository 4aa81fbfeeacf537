"""Host-wide locks by kind (workers.host_locks): a second install on one host fails at once naming the
first, while work of another kind, or on another node, goes ahead; the lock goes with its holder."""

import pytest

from workers.host_locks import CONVERSION, INSTALL, HostBusy, host_lock


@pytest.fixture(autouse=True)
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("ASCEND_PANEL_STATE_DIR", str(tmp_path))
    return tmp_path


def test_a_second_install_on_one_host_fails_naming_the_first():
    busy_message = "another install runs on this host \\(operation op-first\\)"
    with (
        host_lock(INSTALL, "op-first", "node-a"),
        pytest.raises(HostBusy, match=busy_message) as busy,
        host_lock(INSTALL, "op-second", "node-a"),
    ):
        pytest.fail("two installs ran at once")
    assert busy.value.hint


def test_other_kinds_and_other_nodes_are_not_held_up():
    with (
        host_lock(INSTALL, "op-install", "node-a"),
        host_lock(CONVERSION, "op-convert", "node-a"),
        host_lock(INSTALL, "op-other", "node-b"),
    ):
        pass


def test_the_lock_is_free_again_once_its_holder_ended():
    with host_lock(INSTALL, "op-first", "node-a"):
        pass
    with host_lock(INSTALL, "op-second", "node-a"):
        pass
