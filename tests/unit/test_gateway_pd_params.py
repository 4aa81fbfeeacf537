"""What the PD proxy passes from a prefill to a decode (panel.gateway.proxy.pd): the prefill's own params for
this prompt, or nothing (a NIXL decode given blocks that do not cover its prompt dies,
docs/engines-on-cpu.md)."""

import pytest

from panel.gateway.instances.pool import Instance
from panel.gateway.proxy.pd import check_params, disaggregated, prefill_body

PREFILL = Instance(id="chat/0", deployment_id=1, deployment="chat", base_url="http://p/v1", sealed_key="",
                   role="prefill")  # fmt: skip
GOOD = {
    "do_remote_prefill": True, "do_remote_decode": False, "remote_engine_id": "chat",
    "remote_block_ids": [[1, 2, 3]], "remote_host": "10.0.0.1", "remote_port": 5610,
    "remote_request_id": "cmpl-1", "remote_num_tokens": 287,
}  # fmt: skip
ANSWER = {"usage": {"prompt_tokens": 287, "completion_tokens": 1}}


def test_the_prefills_own_params_pass():
    assert check_params(GOOD, ANSWER, PREFILL) is None
    flat = {**GOOD, "remote_block_ids": [0, 1, 2], "remote_num_tokens": 50}
    assert check_params(flat, {"usage": {"prompt_tokens": 50}}, PREFILL) is None


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"remote_engine_id": "other"}, "name engine 'other'"),
        ({"do_remote_prefill": False}, "remote prefill"),
        ({"remote_host": ""}, "host and port"),
        ({"remote_port": 70000}, "host and port"),
        ({"remote_block_ids": "1,2"}, "not a list"),
        ({"remote_block_ids": [[1, 2], [1]]}, "not a list"),
        ({"remote_block_ids": [[-1]]}, "not a list"),
        ({"remote_num_tokens": 226}, "226 tokens, the prompt has 287"),
        ({"remote_block_ids": [], "remote_num_tokens": 2000}, "0 blocks cannot hold"),
        ({"remote_block_ids": list(range(400))}, "400 blocks cannot hold"),
    ],
)
def test_params_that_do_not_hold_up_are_refused_with_why(change, says):
    params = {**GOOD, **change}
    answer = ANSWER if "remote_num_tokens" not in change or change["remote_num_tokens"] == 226 else {}
    problem = check_params(params, answer, PREFILL)
    assert problem is not None
    assert says in problem


def test_no_params_is_refused():
    assert "no kv_transfer_params" in check_params(None, ANSWER, PREFILL)


def test_the_prefill_is_asked_for_one_token_unstreamed_with_a_remote_decode():
    asked = prefill_body({"model": "m", "stream": True, "stream_options": {"include_usage": True},
                          "max_tokens": 100, "max_completion_tokens": 100,
                          "kv_transfer_params": {"do_remote_prefill": True}})  # fmt: skip
    assert asked["max_tokens"] == asked["max_completion_tokens"] == 1
    assert asked["stream"] is False
    assert "stream_options" not in asked
    assert asked["kv_transfer_params"]["do_remote_decode"] is True
    assert asked["kv_transfer_params"]["remote_host"] is None


def test_only_instances_with_roles_are_proxied():
    plain = Instance(id="p/0", deployment_id=2, deployment="p", base_url="http://x/v1", sealed_key="")
    assert not disaggregated([plain])
    assert disaggregated([plain, PREFILL])
