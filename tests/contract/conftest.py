"""Contract tier: schemathesis against a live panel (tests/live_web.py: the ASGI server `make run` starts,
on the test database and Redis), every operation of /api/schema/ as an admin and as a viewer. Its size is
SCHEMA_FUZZ_EXAMPLES generated cases per operation and role (5 unless set): a few minutes in all."""

from tests.live_web import live_web as live_web  # the live panel the contract runs against
