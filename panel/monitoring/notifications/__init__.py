"""Notifications: routes and silences, the delivery task, and what each kind of channel (webhook, e-mail,
DingTalk, Feishu, WeCom) sends."""
