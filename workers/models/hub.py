"""What a model repository on Hugging Face or ModelScope holds, without downloading its weights.

Both hubs are reached through an endpoint that can be an internal mirror (air-gapped sites):
- Hugging Face: the huggingface_hub client's model_info (GET {endpoint}/api/models/{id}/revision/{rev}
  ?blobs=true: every file with its size and, for LFS files, its sha256); files from
  {endpoint}/{id}/resolve/{rev}/{file}.
- ModelScope: GET {endpoint}/api/v1/models/{id}/repo/files?Revision={rev}&Recursive=true (Data.Files with
  Path, Size, Type blob|tree, Sha256); files from GET {endpoint}/api/v1/models/{id}/repo?Revision={rev}
  &FilePath={file}, which redirects to the file and honours Range.
Tokens come from the agent's environment (HF_TOKEN, MODELSCOPE_API_TOKEN), never from the panel.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlencode

import httpx

from workers.i18n import gettext_noop as _
from workers.models.inspect import INDEX_NAMES, TOKENIZER_FILES, NotAModelError, inspect_model

HUGGINGFACE = "huggingface"
MODELSCOPE = "modelscope"
DEFAULT_ENDPOINTS = {HUGGINGFACE: "https://huggingface.co", MODELSCOPE: "https://www.modelscope.cn"}
DEFAULT_REVISIONS = {HUGGINGFACE: "main", MODELSCOPE: "master"}
# Repositories often ship the same weights twice (PyTorch .bin next to safetensors); vLLM reads the
# safetensors, so the others are not downloaded when safetensors are there.
DUPLICATE_WEIGHT_SUFFIXES = (".bin", ".pt", ".pth", ".h5", ".msgpack", ".ckpt", ".gguf")
SMALL_METADATA_FILES = ("config.json", "tokenizer_config.json", "generation_config.json", *INDEX_NAMES)
TIMEOUT = httpx.Timeout(30.0, read=120.0)


class HubError(Exception):
    """The hub (or mirror) could not list the repository; the message names the URL and the answer."""

    hint = _(
        "Check the repository id and revision, and that the node reaches the hub endpoint "
        "(PANEL_HF_ENDPOINT / PANEL_MODELSCOPE_ENDPOINT for an internal mirror)."
    )


@dataclass(frozen=True)
class HubFile:
    path: str
    size: int
    url: str
    sha256: str | None = None


@dataclass(frozen=True)
class HubRepo:
    source: str
    repo_id: str
    revision: str
    endpoint: str

    @classmethod
    def of(cls, source: str, repo_id: str, revision: str = "", endpoint: str = "") -> HubRepo:
        if source not in DEFAULT_ENDPOINTS:
            raise HubError(f"source must be {HUGGINGFACE} or {MODELSCOPE}, not {source!r}")
        if not repo_id or repo_id.count("/") != 1 or repo_id.startswith("/") or ".." in repo_id:
            raise HubError(f"{repo_id!r} is not a repository id of the form owner/name")
        return cls(
            source,
            repo_id,
            revision or DEFAULT_REVISIONS[source],
            (endpoint or DEFAULT_ENDPOINTS[source]).rstrip("/"),
        )


def auth_headers(source: str) -> dict[str, str]:
    token = os.environ.get("HF_TOKEN" if source == HUGGINGFACE else "MODELSCOPE_API_TOKEN", "")
    return {"Authorization": f"Bearer {token}"} if token else {}


def list_files(repo: HubRepo, client: httpx.Client | None = None) -> list[HubFile]:
    """Every file of the repository (sizes, sha256 where the hub gives it), duplicate weights left out."""
    files = _list_huggingface(repo) if repo.source == HUGGINGFACE else _list_modelscope(repo, client)
    files = [f for f in files if not Path(f.path).name.startswith(".git")]
    if any(f.path.endswith(".safetensors") for f in files):
        files = [f for f in files if not f.path.endswith(DUPLICATE_WEIGHT_SUFFIXES)]
    if not files:
        raise HubError(f"{repo.repo_id}@{repo.revision} on {repo.endpoint} lists no files")
    return files


def _list_huggingface(repo: HubRepo) -> list[HubFile]:
    from huggingface_hub import HfApi, hf_hub_url
    from huggingface_hub.errors import HfHubHTTPError

    token = os.environ.get("HF_TOKEN") or False
    try:
        info = HfApi(endpoint=repo.endpoint, token=token).model_info(
            repo.repo_id, revision=repo.revision, files_metadata=True
        )
    except (HfHubHTTPError, httpx.HTTPError) as error:
        raise HubError(f"{repo.endpoint} could not list {repo.repo_id}@{repo.revision}: {error}") from error
    # Files are fetched at the commit the listing described, so a push during the download changes nothing.
    revision = info.sha or repo.revision
    return [
        HubFile(
            path=sibling.rfilename,
            size=int(sibling.lfs.size if sibling.lfs else sibling.size or 0),
            url=hf_hub_url(repo.repo_id, sibling.rfilename, revision=revision, endpoint=repo.endpoint),
            sha256=sibling.lfs.sha256 if sibling.lfs else None,
        )
        for sibling in info.siblings or []
    ]


def modelscope_file_url(repo: HubRepo, path: str) -> str:
    query = urlencode({"Revision": repo.revision, "FilePath": path})
    return f"{repo.endpoint}/api/v1/models/{quote(repo.repo_id)}/repo?{query}"


def _list_modelscope(repo: HubRepo, client: httpx.Client | None) -> list[HubFile]:
    url = f"{repo.endpoint}/api/v1/models/{quote(repo.repo_id)}/repo/files"
    params = {"Revision": repo.revision, "Recursive": "true"}
    owned = client is None
    client = client or httpx.Client(timeout=TIMEOUT, follow_redirects=True)
    try:
        response = client.get(url, params=params, headers=auth_headers(MODELSCOPE))
        body = (
            response.json() if response.headers.get("content-type", "").startswith("application/json") else {}
        )
    except (httpx.HTTPError, ValueError) as error:
        raise HubError(f"{url} did not answer: {error}") from error
    finally:
        if owned:
            client.close()
    data = body.get("Data") if isinstance(body, dict) else None
    if response.status_code != 200 or not isinstance(data, dict) or body.get("Success") is False:
        message = body.get("Message") if isinstance(body, dict) else ""
        raise HubError(f"{url} answered {response.status_code}: {message or response.text[:200]}")
    return [
        HubFile(
            path=entry["Path"],
            size=int(entry.get("Size") or 0),
            url=modelscope_file_url(repo, entry["Path"]),
            sha256=entry.get("Sha256") or None,
        )
        for entry in data.get("Files") or []
        if entry.get("Type") != "tree"
    ]


def hub_facts(repo: HubRepo, client: httpx.Client | None = None) -> dict:
    """inspect_model's facts for a hub repository, from its config, index and file listing only.

    params stays None unless the index says so; weights_bytes is the index's total_size, else the sum of
    the safetensors files. download_bytes is what a download would transfer."""
    files = list_files(repo, client)
    by_path = {f.path: f for f in files}
    owned = client is None
    client = client or httpx.Client(timeout=TIMEOUT, follow_redirects=True)
    try:
        with tempfile.TemporaryDirectory(prefix="hub-facts-") as folder:
            for name in SMALL_METADATA_FILES:
                if name in by_path:
                    response = client.get(by_path[name].url, headers=auth_headers(repo.source))
                    if response.status_code != 200:
                        raise HubError(f"{by_path[name].url} answered {response.status_code}")
                    (Path(folder) / name).write_bytes(response.content)
            try:
                facts = inspect_model(folder)
            except NotAModelError as error:
                raise HubError(f"{repo.repo_id}: {error}") from error
    except httpx.HTTPError as error:
        raise HubError(f"{repo.endpoint} did not answer: {error}") from error
    finally:
        if owned:
            client.close()
    if facts["weights_bytes"] is None:
        facts["weights_bytes"] = sum(f.size for f in files if f.path.endswith(".safetensors")) or None
    facts["has_tokenizer"] = any(Path(f.path).name in TOKENIZER_FILES for f in files)
    facts["has_chat_template"] = facts["has_chat_template"] or any(
        Path(f.path).name.startswith("chat_template") for f in files
    )
    facts["download_bytes"] = sum(f.size for f in files)
    facts["files"] = len(files)
    return facts
