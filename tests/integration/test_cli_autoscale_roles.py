"""Autoscaling per role through the CLI as it runs (main(), in this process) against a real web server
(tests/live_web.py): `apply -f` of a disaggregated spec whose decode role carries `autoscale:` (its dry run
names the role on each line), `describe` saying what the autoscaler owns, `scale --role` refused for the
role it owns and allowed for the other, and a target that does not fit the role refused with the field."""

import pytest
import yaml

from panel.cli.main import main
from tests.integration.test_deployment_apply import npu_node, tiny
from tests.integration.test_deployment_roles import split, versions
from tests.live_web import point_cli_at

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]

__all__ = ["npu_node", "tiny", "versions"]  # fixtures used by name

NAME = "pd-chat"
DECODE = {"min": 1, "max": 3, "target": {"kv_usage": 0.8}, "up_after_s": 30, "down_after_s": 300}


@pytest.fixture
def cli(live_web, bob, monkeypatch, tmp_path):
    point_cli_at(live_web, bob, monkeypatch, tmp_path)


def spec_file(tmp_path, decode: dict | None) -> str:
    body = {"name": NAME, **split()}
    if decode is not None:
        body["roles"]["decode"]["autoscale"] = decode
        del body["roles"]["decode"]["replicas"]  # the autoscaler's
    path = tmp_path / f"{NAME}.yaml"
    path.write_text(yaml.safe_dump(body))
    return str(path)


def test_apply_describe_and_scale_a_role_the_autoscaler_owns(cli, tiny, versions, tmp_path, capsys):
    assert main(["apply", "-f", spec_file(tmp_path, None)]) == 0
    capsys.readouterr()

    assert main(["apply", "-f", spec_file(tmp_path, DECODE), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{NAME}: changed: decode autoscale, decode replicas (autoscaler) (none) (dry run)")
    assert "  decode autoscale: None -> {" in out
    assert main(["apply", "-f", spec_file(tmp_path, DECODE)]) == 0
    capsys.readouterr()

    assert main(["describe", "deployment", NAME]) == 0
    lines = [line.split(None, 1) for line in capsys.readouterr().out.splitlines()]
    assert ["Autoscaling:", "decode 1-3 replicas on kv_usage 0.8 (up after 30 s, down after 300 s)"] in lines

    assert main(["scale", NAME, "--role", "decode", "2"]) == 1
    said = capsys.readouterr().err
    assert f"{NAME}'s decode engines scale with the load between 1 and 3" in said
    assert main(["scale", NAME, "--role", "prefill", "2", "--dry-run"]) == 0
    assert capsys.readouterr().out.startswith(f"{NAME}: changed: prefill replicas (scale) (dry run)")


def test_a_target_that_does_not_fit_the_role_is_refused_with_its_field(cli, tiny, versions, tmp_path, capsys):
    assert main(["apply", "-f", spec_file(tmp_path, {**DECODE, "target": {"ttft_p90_ms": 500}})]) == 1
    err = capsys.readouterr().err
    assert "roles.decode.autoscale.target" in err
    assert "decode scales on waiting_per_replica or kv_usage, not ttft_p90_ms" in err
