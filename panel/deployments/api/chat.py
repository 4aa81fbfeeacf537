"""The playground: POST /api/v1/deployments/<id or name>/chat/ proxies an OpenAI chat body to the engine.

An async view so a streamed answer (SSE) passes through chunk by chunk without holding a thread. Operators
and admins only; API tokens or a browser session (with its CSRF token) authenticate. Not a DRF view (DRF
has no async views), so drf-spectacular does not see it: `document_chat` writes its operation into the
schema, and the view holds itself to it (undocumented query parameters are refused as everywhere).
"""

import json
import logging

import httpx
from asgiref.sync import sync_to_async
from django.conf import settings
from django.http import HttpResponse, JsonResponse, StreamingHttpResponse
from django.middleware.csrf import CsrfViewMiddleware
from django.utils.decorators import method_decorator
from django.utils.translation import gettext as _
from django.views import View
from django.views.decorators.csrf import csrf_exempt

from panel.accounts.authentication import user_for_token
from panel.accounts.models import SCOPE_DEPLOY
from panel.accounts.roles import OPERATOR, has_role
from panel.core.domain.choices import DeploymentState
from panel.core.rest import strict
from panel.core.rest.api import is_id
from panel.core.rest.exceptions import InputError, flat_errors, not_found_text
from panel.core.rest.schema import ERROR_DESCRIPTIONS
from panel.deployments.launch.engine_keys import auth_headers
from panel.deployments.models import Deployment
from panel.deployments.services import engine_url, served_name_of
from panel.gateway.proxy.transport import EngineTransport

log = logging.getLogger(__name__)

ENGINE_TIMEOUT = httpx.Timeout(600.0, connect=5.0)


def _engine_client() -> httpx.AsyncClient:
    # The engine is an input like any other (docs/trust-model.md): the gateway's transport refuses a status
    # outside 100-599, a Content-Length that is not a number and an answer past the gateway's bound, so a
    # hostile answer fails this request instead of growing the web process.
    transport = EngineTransport(max_idle_per_engine=0, max_body_bytes=settings.PANEL_GATEWAY_MAX_ANSWER_BYTES)
    return httpx.AsyncClient(timeout=ENGINE_TIMEOUT, trust_env=False, transport=transport)


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
    try:
        strict.check_request(request)  # the query only: the body is the engine's to read
    except InputError as refused:
        return None, JsonResponse(
            {"detail": refused.summary, "errors": flat_errors(refused.detail)}, status=400
        )
    lookup = {"pk": ref} if is_id(ref) else {"name": ref}
    deployment = Deployment.objects.visible_to(user).filter(**lookup).first()
    if deployment is None:
        return None, _error(404, not_found_text(request))
    if deployment.observed_state != DeploymentState.RUNNING:
        return None, _error(409, _("The deployment is not running."))
    return (deployment, engine_url(deployment) + "/chat/completions", auth_headers(deployment)), None


@method_decorator(csrf_exempt, name="dispatch")  # a session's CSRF token is checked in _authenticate
class DeploymentChatView(View):
    """POST only: another method is a 405 with Allow: POST (in JSON, panel.core.web.middleware)."""

    async def post(self, request, pk: str):  # an id or a name, as every deployment route's <pk>
        return await chat(request, pk)


async def chat(request, ref: str):
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
    client = _engine_client()
    try:
        upstream = await client.send(
            client.build_request("POST", url, json=body, headers=headers), stream=True
        )
    except httpx.HTTPError as exc:
        await client.aclose()
        return _error(502, _("The engine did not answer: {error}").format(error=exc))
    content_type = upstream.headers.get("content-type", "application/json")
    if not body.get("stream"):
        try:
            content = await upstream.aread()
        except httpx.HTTPError as exc:
            return _error(502, _("The engine did not answer: {error}").format(error=exc))
        finally:
            await upstream.aclose()
            await client.aclose()
        return HttpResponse(content, status=upstream.status_code, content_type=content_type)

    async def relay():
        try:
            async for chunk in upstream.aiter_raw():
                yield chunk
        except httpx.HTTPError as exc:  # past the bound mid-stream: this stream ends, nothing else does
            log.warning("playground stream of %s ended: %s", deployment.name, exc)
        finally:
            await upstream.aclose()
            await client.aclose()

    response = StreamingHttpResponse(relay(), status=upstream.status_code, content_type=content_type)
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


CHAT_PATH = "/api/v1/deployments/{id}/chat/"


def document_chat(result, generator, request, public):
    """drf-spectacular postprocessing hook: the playground's operation, which the generator cannot see (a
    plain async view). Its error answers are the API's (panel.core.rest.schema); 429 is not among them, as
    DRF's throttles do not run here."""
    error = {"$ref": "#/components/schemas/Error"}

    def answer(code: str, text=None) -> dict:
        return {
            "description": str(text or ERROR_DESCRIPTIONS[code]),
            "content": {"application/json": {"schema": error}},
        }

    operation = {
        "operationId": "v1_deployments_chat",
        "description": "The playground: an OpenAI chat completion request, sent to the deployment's engine "
        "as it is; `model` defaults to the deployment's served name. Operators and admins; an API token "
        "needs the deploy scope (applications use the /v1 gateway with an inference key), a browser session "
        "its CSRF token (X-CSRFToken). An error of the engine's own comes back with the engine's status and "
        "body.",
        "tags": ["v1"],
        "parameters": [
            {
                "in": "path",
                "name": "id",
                "required": True,
                "schema": {"type": "string", "pattern": r"^[^/]+$"},
                "description": "The id or the name of the deployment: digits only are an id, anything else "
                "a name.",
            }
        ],
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {
                        "type": "object",
                        "description": "OpenAI's chat completion request; fields beyond these go to the "
                        "engine unchanged.",
                        "properties": {
                            "messages": {"type": "array", "items": {"type": "object"}},
                            "model": {"type": "string"},
                            "stream": {"type": "boolean", "default": False},
                        },
                        "required": ["messages"],
                        "additionalProperties": True,
                    }
                }
            },
        },
        "security": [{"apiToken": []}, {"cookieAuth": []}],
        "responses": {
            "200": {
                "description": "The engine's chat completion; with `stream: true`, its Server-Sent Events.",
                "content": {
                    "application/json": {"schema": {"type": "object", "additionalProperties": True}},
                    "text/event-stream": {"schema": {"type": "string"}},
                },
            },
            "400": answer(
                "400", _("The body is not a JSON object, or a query parameter was sent (none is taken).")
            ),
            "401": answer("401"),
            "403": answer("403", _("Not an operator, a token without the deploy scope, or no CSRF token.")),
            "404": answer("404"),
            "409": answer("409", _("The deployment is not running.")),
            "413": answer("413"),
            "502": answer("502", _("The engine did not answer.")),
        },
    }
    paths = result.setdefault("paths", {})
    paths[CHAT_PATH] = {"post": operation}
    result["paths"] = dict(sorted(paths.items()))
    return result
