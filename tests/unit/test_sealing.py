"""Secrets sealed by the panel open only with the same key material, whether a Fernet key or a derived one;
what a task carries for the central agent opens with the central key only, and the central agent refuses
to start beside the panel's key material."""

import pytest
from cryptography.fernet import Fernet

from workers.agent import check_central_environment
from workers.identity import central_key
from workers.remote import open_secret
from workers.sealing import SecretKeyMissing, SecretUnreadable, seal, seal_for_node, unseal


def test_a_sealed_secret_opens_with_the_same_fernet_key_and_hides_the_plaintext():
    key = Fernet.generate_key().decode()
    sealed = seal(key, "hunter2-password")
    assert "hunter2" not in sealed
    assert unseal(key, sealed) == "hunter2-password"


def test_any_secret_string_is_turned_into_a_key_with_hkdf():
    sealed = seal("django-secret-key-that-is-not-a-fernet-key", "text")
    assert unseal("django-secret-key-that-is-not-a-fernet-key", sealed) == "text"


def test_another_key_cannot_open_it_and_says_which_setting_to_share():
    sealed = seal("key-one", "text")
    with pytest.raises(SecretUnreadable, match="PANEL_SECRETS_KEY"):
        unseal("key-two", sealed)


def test_sealing_without_a_key_is_refused_with_how_to_make_one():
    with pytest.raises(SecretKeyMissing, match="Fernet.generate_key"):
        seal("", "text")


def test_the_central_agent_opens_a_nodes_secret_sealed_for_its_key_and_not_the_one_at_rest():
    at_rest = seal("panel-material", '{"password": "pw"}')
    on_the_way = seal_for_node(central_key("panel-material"), '{"password": "pw"}')
    assert open_secret(on_the_way, central_key("panel-material")) == {"password": "pw"}
    with pytest.raises(SecretUnreadable):
        open_secret(on_the_way, central_key("other-panel"))
    with pytest.raises(SecretUnreadable):
        open_secret(at_rest, central_key("panel-material"))


@pytest.mark.parametrize("variable", ["PANEL_SECRETS_KEY", "PANEL_SECRETS_KEY_FILE", "SECRET_KEY"])
def test_the_central_agent_refuses_to_start_beside_the_panels_key_material_and_says_what_to_set(variable):
    with pytest.raises(SystemExit, match="agent_credential --central") as refused:
        check_central_environment({variable: "x", "ASCEND_PANEL_AGENT_KEY": "k"})
    assert variable in str(refused.value)
    check_central_environment({"ASCEND_PANEL_AGENT_KEY": "k", "SECRET_KEY": " "})  # empty counts as unset
