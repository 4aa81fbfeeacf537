"""The web edge of every request: middleware, security headers, the client's address, threads for long-lived
requests, the template context and the dashboard's first paint."""
