"""No-op translation marker for user-facing strings in workers/; the panel translates them."""


def gettext_noop(s):
    return s
