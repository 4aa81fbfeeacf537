"""Secrets sealed by the panel open only with the same key material, whether a Fernet key or a derived one."""

import pytest
from cryptography.fernet import Fernet

from workers.remote import open_secret
from workers.sealing import SecretKeyMissing, SecretUnreadable, key_material_from_env, seal, unseal


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


def test_the_agent_reads_the_key_from_a_file_first_then_the_variable_then_secret_key(tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text("from-file\n")
    assert (
        key_material_from_env({"PANEL_SECRETS_KEY_FILE": str(key_file), "PANEL_SECRETS_KEY": "x"})
        == "from-file"
    )
    assert key_material_from_env({"PANEL_SECRETS_KEY": "direct", "SECRET_KEY": "s"}) == "direct"
    assert key_material_from_env({"SECRET_KEY": "s"}) == "s"


def test_the_central_agent_opens_a_nodes_sealed_credentials():
    sealed = seal("shared", '{"password": "pw"}')
    assert open_secret(sealed, "shared") == {"password": "pw"}
