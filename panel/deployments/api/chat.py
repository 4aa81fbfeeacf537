"""The playground: POST /api/v1/deployments/<id or name>/chat/ proxies an OpenAI chat body to the engine.

An async view so a streamed answer (SSE) passes through chunk by chunk without holding a thread. Operators
and admins only; API tokens or a browser session (with its CSRF token) authenticate.
"""

import json

import httpx
from asgiref.sync import sync_to_async
from django.http import HttpResponse, JsonResponse, StreamingHttpResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.utils.translation import gettext as _
from django.views.decorators.csrf import csrf_exempt

from panel.accounts.authentication import user_for_token
from panel.accounts.models import SCOPE_DEPLOY
from panel.accounts.roles import OPERATOR, has_role
from panel.core.api import is_id
from panel.core.choices import DeploymentState
from panel.core.exceptions import not_found_text
from panel.deployments.engine_keys import auth_headers
from panel.deployments.models import Deployment
from panel.deployments.services import engine_url, served_name_of

ENGINE_TIMEOUT = httpx.Timeout(600.0, connect=5.0)


def _error(status: int, detail: str) -> JsonResponse:
    return JsonResponse({"detail": detail}, status=status)


def _authenticate(request):
    """(user, error response): a Bearer token, else the session user with a valid CSRF token."""
    header = request.headers.get("Authorization", "").split()
    if header and header[0].lower() in ("bearer", "token"):
        user, token = user_for_token(header[1]) if len(header) == 2 else (None, None)
        if user is None:
            return None, _error(401, _("Invalid, expired or revoked API token."))
        if not token.covers(SCOPE_DEPLOY):
            return None, _error(403, _("The playground needs a token with the deploy scope; use /v1."))
        return user, None
    user = request.user
    if not user.is_authenticated:
        return None, _error(401, _("Sign in or send an API token."))
    rejected = CsrfViewMiddleware(lambda r: None).process_view(request, None, (), {})
    if rejected is not None:
        return None, _error(403, _("CSRF check failed: send the X-CSRFToken header."))
    return user, None


def _target(request, ref: str):
    user, error = _authenticate(request)
    if error is not None:
        return None, error
    if not has_role(user, OPERATOR):
        return None, _error(403, _("The playground needs the operator role."))
    lookup = {"pk": ref} if is_id(ref) else {"name": ref}
    deployment = Deployment.objects.visible_to(user).filter(**lookup).first()
    if deployment is None:
        return None, _error(404, not_found_text(request))
    if deployment.observed_state != DeploymentState.RUNNING:
        return None, _error(409, _("The deployment is not running."))
    return (deployment, engine_url(deployment) + "/chat/completions", auth_headers(deployment)), None


@csrf_exempt
async def chat(request, ref: str):
    if request.method != "POST":
        return _error(405, _("Use POST."))
    found, error = await sync_to_async(_target)(request, ref)
    if error is not None:
        return error
    deployment, url, headers = found
    try:
        body = json.loads(request.body or b"{}")
    except ValueError:
        return _error(400, _("The body is not JSON."))
    if not isinstance(body, dict):
        return _error(400, _("The body must be a JSON object."))
    body.setdefault("model", served_name_of(deployment))
    client = httpx.AsyncClient(timeout=ENGINE_TIMEOUT, trust_env=False)
    try:
        upstream = await client.send(
            client.build_request("POST", url, json=body, headers=headers), stream=True
        )
    except httpx.HTTPError as exc:
        await client.aclose()
        return _error(502, _("The engine did not answer: {error}").format(error=exc))
    content_type = upstream.headers.get("content-type", "application/json")
    if not body.get("stream"):
        content = await upstream.aread()
        await upstream.aclose()
        await client.aclose()
        return HttpResponse(content, status=upstream.status_code, content_type=content_type)

    async def relay():
        try:
            async for chunk in upstream.aiter_raw():
                yield chunk
        finally:
            await upstream.aclose()
            await client.aclose()

    response = StreamingHttpResponse(relay(), status=upstream.status_code, content_type=content_type)
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response
