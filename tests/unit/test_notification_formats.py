"""Each bot's body and signing as its vendor documents it (DingTalk custom robot "加签", Feishu/Lark
custom bot "签名校验", WeCom group bot), checked against the documented algorithm written out here
independently, for a fixed timestamp and secret; and which deployment states raise which alerts."""

import base64
import hashlib
import hmac
import urllib.parse

import pytest

from panel.monitoring.alerting.deployment_alerts import conditions
from panel.monitoring.models import ChannelKind
from panel.monitoring.notifications.channels import dingtalk_sign, feishu_sign, http_request, notice_for

SECRET = "SEC0123456789abcdef"
NOW = 1767225600.25  # 2026-01-01 00:00:00.25 UTC
PAYLOAD = {
    "event": "raised",
    "alert": {
        "deployment": "qwen",
        "node": None,
        "kind": "deployment_failed",
        "severity": "critical",
        "message": "Deployment qwen failed: Gave up after 3 failed restarts.",
        "first_seen": "2026-01-01T00:00:00+00:00",
        "resolved_at": None,
    },
}


def documented_dingtalk_sign(timestamp_ms: str, secret: str) -> str:
    # DingTalk: HmacSHA256 keyed with the secret over "timestamp\nsecret", Base64, then urlEncode (UTF-8).
    code = hmac.new(secret.encode("utf-8"), f"{timestamp_ms}\n{secret}".encode(), hashlib.sha256)
    return urllib.parse.quote_plus(base64.b64encode(code.digest()))


def documented_feishu_sign(timestamp_s: str, secret: str) -> str:
    # Feishu: HmacSHA256 keyed with "timestamp\nsecret" over an empty message, then Base64.
    code = hmac.new(f"{timestamp_s}\n{secret}".encode(), b"", digestmod=hashlib.sha256)
    return base64.b64encode(code.digest()).decode("utf-8")


def test_dingtalk_signs_the_url_with_a_millisecond_timestamp_and_sends_markdown():
    url, body, headers = http_request(
        ChannelKind.DINGTALK,
        "https://oapi.dingtalk.com/robot/send?access_token=T",
        SECRET,
        notice_for(PAYLOAD),
        NOW,
    )
    query = urllib.parse.urlsplit(url).query
    raw = dict(part.split("=", 1) for part in query.split("&"))
    assert raw["access_token"] == "T"
    assert raw["timestamp"] == "1767225600250"
    assert raw["sign"] == documented_dingtalk_sign("1767225600250", SECRET)
    assert dingtalk_sign(SECRET, 1767225600250) == raw["sign"]
    assert body["msgtype"] == "markdown"
    assert set(body["markdown"]) == {"title", "text"}
    assert "Gave up after 3 failed restarts" in body["markdown"]["text"]
    assert headers == {}


def test_dingtalk_without_a_secret_leaves_the_url_alone():
    url, _, _ = http_request(
        ChannelKind.DINGTALK, "https://x/robot/send?access_token=T", "", notice_for(PAYLOAD), NOW
    )
    assert url == "https://x/robot/send?access_token=T"


def test_feishu_puts_a_second_timestamp_and_its_sign_in_the_body():
    url, body, _ = http_request(
        ChannelKind.FEISHU, "https://open.feishu.cn/hook/abc", SECRET, notice_for(PAYLOAD), NOW
    )
    assert url == "https://open.feishu.cn/hook/abc"
    assert body["timestamp"] == "1767225600"
    assert body["sign"] == documented_feishu_sign("1767225600", SECRET)
    assert feishu_sign(SECRET, 1767225600) == body["sign"]
    assert body["msg_type"] == "text"
    assert "qwen" in body["content"]["text"]


def test_wecom_sends_markdown_content_to_the_url_with_its_key():
    url, body, headers = http_request(
        ChannelKind.WECOM,
        "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=K",
        "",
        notice_for(PAYLOAD),
        NOW,
    )
    assert url.endswith("send?key=K")
    assert body == {"msgtype": "markdown", "markdown": {"content": body["markdown"]["content"]}}
    assert "Deployment qwen failed" in body["markdown"]["content"]


def test_the_generic_webhook_posts_the_alert_with_its_token_as_a_bearer():
    _, body, headers = http_request(ChannelKind.WEBHOOK, "http://h/x", "tok", notice_for(PAYLOAD), NOW)
    assert body == PAYLOAD
    assert headers == {"Authorization": "Bearer tok"}


def snap(**fields):
    base = {
        "name": "qwen",
        "observed_state": "running",
        "desired_state": "running",
        "reason": "",
        "failed_restarts": 0,
        "replicas_wanted": 1,
        "replicas_serving": 1,
        "rollout_failed": False,
    }
    return {**base, **fields}


def test_a_serving_deployment_raises_nothing():
    assert conditions(snap()) == {}


def test_a_crash_loop_to_failed_raises_failed_and_crash_loop_and_too_few_replicas():
    found = conditions(
        snap(observed_state="failed", failed_restarts=3, replicas_serving=0, reason="Gave up.")
    )
    assert set(found) == {"deployment_failed", "deployment_crash_loop", "replicas_below_wanted"}
    assert found["deployment_failed"]["severity"] == "critical"
    assert "Gave up." in found["deployment_failed"]["message"]


def test_one_failed_restart_is_unhealthy_not_yet_a_crash_loop():
    found = conditions(snap(observed_state="unhealthy", failed_restarts=1, replicas_serving=0))
    assert set(found) == {"deployment_unhealthy", "replicas_below_wanted"}


def test_replicas_below_wanted_counts_the_serving_ones():
    assert "replicas_below_wanted" in conditions(snap(replicas_wanted=3, replicas_serving=2))
    assert "replicas_below_wanted" not in conditions(snap(replicas_wanted=3, replicas_serving=3))
    assert "replicas_below_wanted" not in conditions(snap(replicas_serving=None))  # a replica's own row


def test_a_failed_rollout_raises_until_the_next_one():
    assert "rollout_failed" in conditions(snap(rollout_failed=True))


def test_a_deployment_stopped_on_purpose_or_deleted_raises_nothing():
    assert conditions(snap(desired_state="stopped", observed_state="stopped", replicas_serving=0)) == {}
    assert conditions({"name": "qwen", "gone": True}) == {}


def test_an_unusable_address_is_a_failed_send_not_a_crash():
    from panel.monitoring.models import NotificationChannel
    from panel.monitoring.notifications.channels import SendFailed, send

    unusable = [
        (NotificationChannel(name="a", kind="webhook", url="http://127.0.0.1:1/"), False),  # refused: retried
        (NotificationChannel(name="b", kind="webhook", url="http://[::1/"), True),  # no request can be made
        (
            NotificationChannel(
                name="c", kind="email", smtp_host="127.0.0.1", smtp_port=1, email_to="a@b.example"
            ),
            False,
        ),
    ]
    for channel, permanent in unusable:
        with pytest.raises(SendFailed) as failure:
            send(channel, {"event": "test", "alert": None})
        assert failure.value.permanent is permanent, (channel.name, failure.value)
