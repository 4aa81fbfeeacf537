"""The API machinery every app's REST API stands on: base viewsets and strict requests, the error bodies,
pagination, filters, throttles, bounded request bodies and YAML, the OpenAPI schema and its docs page,
Idempotency-Key, and ?wait= / ?watch=true streams."""
