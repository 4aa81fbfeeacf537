"""The security headers every answer of the panel carries, beside Django's own (SecurityMiddleware:
nosniff, Referrer-Policy, Cross-Origin-Opener-Policy; XFrameOptionsMiddleware: DENY).

Content-Security-Policy: scripts only from the panel's own origin, never inline (theme_init.js, page.js
and the API docs' split script replaced the inline ones; json_script data blocks are not scripts), no
eval, no plugins, no framing, forms and <base> to the panel only, connections (fetch, the websocket) to the
panel only. Inline styles stay allowed: the progress bars' widths are style attributes, and a style cannot
run code. So text an agent, an engine or a user wrote that slipped into a page unescaped still runs nothing.
"""

from panel.core.web.middleware import SyncAndAsyncMiddleware

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self' 'unsafe-inline'",
        "img-src 'self' data: blob:",
        "font-src 'self' data:",
        "connect-src 'self'",
        "worker-src 'self' blob:",
        "object-src 'none'",
        "base-uri 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
    ]
)
PERMISSIONS_POLICY = "camera=(), microphone=(), geolocation=(), payment=(), usb=(), serial=()"
HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "Permissions-Policy": PERMISSIONS_POLICY,
    "Cross-Origin-Resource-Policy": "same-origin",
    # XFrameOptionsMiddleware sets it on what passes through it; an answer made outside it (an API error
    # the outer middleware shapes) gets it here.
    "X-Frame-Options": "DENY",
}


class SecurityHeadersMiddleware(SyncAndAsyncMiddleware):
    def handle(self, request):
        return _with_headers(self.get_response(request))

    async def __acall__(self, request):
        return _with_headers(await self.get_response(request))


def _with_headers(response):
    for name, value in HEADERS.items():
        if name not in response:
            response[name] = value
    return response
