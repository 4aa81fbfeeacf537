"""What each kind of notification channel sends, and sending it: a JSON webhook, e-mail over SMTP, and
the DingTalk, Feishu/Lark and WeCom group bots, each in the body and signing its vendor documents.

DingTalk (custom robot, "加签"): timestamp in ms; sign = urlencode(base64(HMAC-SHA256(key=secret,
msg="timestamp\\nsecret"))), both added to the webhook URL's query. Feishu/Lark (custom bot, "签名校验"):
timestamp in s; sign = base64(HMAC-SHA256(key="timestamp\\nsecret", msg="")), both in the JSON body.
WeCom: the key is in the URL (no signing). All three answer 200 with an error code in the body."""

import base64
import hashlib
import hmac
import smtplib
import time
from dataclasses import dataclass
from urllib.parse import quote_plus

import httpx
from django.core.mail import EmailMessage, get_connection

from panel.core.infra import secrets
from panel.monitoring.models import ChannelKind, NotificationChannel, SmtpSecurity

TIMEOUT_S = 10


class SendFailed(Exception):
    """The channel did not take the notification. `permanent`: trying again will not help (a 4xx, a
    bot's error code, an address refused)."""

    def __init__(self, message: str, code: int | None = None, permanent: bool = False):
        super().__init__(message)
        self.code = code
        self.permanent = permanent


@dataclass(frozen=True)
class Notice:
    """One notification, as every channel words it."""

    title: str
    text: str
    payload: dict  # the generic webhook's JSON body: {"event", "alert"}


def notice_for(payload: dict) -> Notice:
    alert = payload.get("alert") or {}
    event = payload.get("event", "")
    subject = alert.get("deployment") or alert.get("node") or "panel"
    severity = (alert.get("severity") or "").upper()
    if event == "test":
        title = "[TEST] Ascend Panel notification"
        text = "A test notification from Ascend Panel: this channel works."
    else:
        title = f"[{event.upper()}] {severity} {subject}: {alert.get('kind', '')}"
        text = f"{alert.get('message', '')}\nFirst seen: {alert.get('first_seen', '')}"
        if alert.get("resolved_at"):
            text += f"\nResolved: {alert['resolved_at']}"
    return Notice(title=title, text=text, payload=payload)


def dingtalk_sign(secret: str, timestamp_ms: int) -> str:
    digest = hmac.new(secret.encode(), f"{timestamp_ms}\n{secret}".encode(), hashlib.sha256).digest()
    return quote_plus(base64.b64encode(digest).decode())


def feishu_sign(secret: str, timestamp_s: int) -> str:
    digest = hmac.new(f"{timestamp_s}\n{secret}".encode(), b"", hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def http_request(kind: str, url: str, secret: str, notice: Notice, now: float) -> tuple[str, dict, dict]:
    """(url, JSON body, headers) of a webhook-like channel's POST."""
    markdown = f"### {notice.title}\n\n{notice.text}"
    if kind == ChannelKind.DINGTALK:
        body = {"msgtype": "markdown", "markdown": {"title": notice.title, "text": markdown}}
        if secret:
            stamp = int(now * 1000)
            url += f"{'&' if '?' in url else '?'}timestamp={stamp}&sign={dingtalk_sign(secret, stamp)}"
        return url, body, {}
    if kind == ChannelKind.FEISHU:
        body = {"msg_type": "text", "content": {"text": f"{notice.title}\n{notice.text}"}}
        if secret:
            stamp = int(now)
            body = {"timestamp": str(stamp), "sign": feishu_sign(secret, stamp), **body}
        return url, body, {}
    if kind == ChannelKind.WECOM:
        return url, {"msgtype": "markdown", "markdown": {"content": markdown}}, {}
    headers = {"Authorization": f"Bearer {secret}"} if secret else {}
    return url, notice.payload, headers


def send(channel: NotificationChannel, payload: dict) -> int:
    """Send `payload` ({"event", "alert"}) through `channel`. Returns the response code (250 for SMTP);
    raises SendFailed."""
    secret = secrets.decrypt(channel.secret) if channel.secret else ""
    notice = notice_for(payload)
    if channel.kind == ChannelKind.EMAIL:
        return _send_email(channel, secret, notice)
    url, body, headers = http_request(channel.kind, channel.url, secret, notice, time.time())
    try:
        response = httpx.post(url, json=body, headers=headers, timeout=TIMEOUT_S)
    except httpx.HTTPError as error:
        raise SendFailed(f"{type(error).__name__}: {error}") from error
    except (httpx.InvalidURL, ValueError) as error:  # an address no request can be made to: fix the channel
        raise SendFailed(f"{type(error).__name__}: {error}", permanent=True) from error
    if response.status_code >= 400:
        raise SendFailed(
            f"HTTP {response.status_code}: {response.text[:200]}",
            response.status_code,
            permanent=response.status_code < 500 and response.status_code != 429,
        )
    if channel.kind != ChannelKind.WEBHOOK:
        _check_bot_answer(response)
    return response.status_code


def _check_bot_answer(response: httpx.Response) -> None:
    """The bots answer 200 and put their refusal in the body: errcode (DingTalk, WeCom) or code /
    StatusCode (Feishu), 0 when taken."""
    try:
        answer = response.json()
    except ValueError:
        return
    if not isinstance(answer, dict):
        return
    code = next((answer[key] for key in ("errcode", "code", "StatusCode") if key in answer), 0)
    if code:
        message = answer.get("errmsg") or answer.get("msg") or answer.get("StatusMessage") or ""
        raise SendFailed(
            f"the bot refused it: {code} {message}".strip(), response.status_code, permanent=True
        )


def _send_email(channel: NotificationChannel, password: str, notice: Notice) -> int:
    connection = get_connection(
        "django.core.mail.backends.smtp.EmailBackend",
        host=channel.smtp_host,
        port=channel.smtp_port,
        username=channel.smtp_user or None,
        password=password or None,
        use_tls=channel.smtp_security == SmtpSecurity.STARTTLS,
        use_ssl=channel.smtp_security == SmtpSecurity.SSL,
        timeout=TIMEOUT_S,
        fail_silently=False,
    )
    message = EmailMessage(
        notice.title, notice.text, channel.email_from or None, channel.recipients(), connection=connection
    )
    try:
        message.send()
    except (
        smtplib.SMTPRecipientsRefused,
        smtplib.SMTPSenderRefused,
        smtplib.SMTPAuthenticationError,
    ) as error:
        raise SendFailed(f"{type(error).__name__}: {error}", permanent=True) from error
    except smtplib.SMTPResponseException as error:
        raise SendFailed(
            f"SMTP {error.smtp_code}: {error.smtp_error!r}", error.smtp_code, error.smtp_code >= 500
        ) from error
    except (OSError, smtplib.SMTPException) as error:
        raise SendFailed(f"{type(error).__name__}: {error}") from error
    except (ValueError, OverflowError) as error:  # a host or port no socket takes: fix the channel
        raise SendFailed(f"{type(error).__name__}: {error}", permanent=True) from error
    return 250
