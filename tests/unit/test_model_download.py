"""Downloads against a local server that answers like the Hugging Face / ModelScope file APIs, with the real
huggingface_hub client pointed at it: listing, transfer, resume, verification, disk check, hub facts."""

import hashlib
from pathlib import Path

import pytest

from tests.hub_server import HubServer
from workers.models import download as download_module
from workers.models.download import DownloadError, download_files
from workers.models.hub import HubError, HubRepo, hub_facts, list_files
from workers.models.inspect import inspect_model
from workers.models.tiny import make_tiny_model

REPO_ID = "tiny-org/tiny-llama"


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("hub") / "model"
    make_tiny_model(folder, arch="llama", shards=2, target_mb=3)
    (folder / "pytorch_model.bin").write_bytes(b"duplicate weights that must not be downloaded")
    (folder / ".gitattributes").write_text("*.safetensors filter=lfs\n")
    return folder


@pytest.fixture
def hub(tiny_model):
    with HubServer(tiny_model, REPO_ID) as server:
        yield server


def digests(folder: Path) -> dict[str, str]:
    return {
        p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.mark.parametrize("source", ["huggingface", "modelscope"])
def test_it_downloads_every_file_with_sizes_and_sha256_checked(hub, tiny_model, tmp_path, source):
    repo = HubRepo.of(source, REPO_ID, endpoint=hub.url)
    files = list_files(repo)
    reports = []
    report = download_files(files, tmp_path / "models" / "tiny", source=source, on_progress=reports.append)

    expected = {
        k: v for k, v in digests(tiny_model).items() if k not in ("pytorch_model.bin", ".gitattributes")
    }
    assert digests(tmp_path / "models" / "tiny") == expected
    assert report["files"] == len(expected)
    assert report["sha256_verified"] == (2 if source == "huggingface" else len(expected))
    assert not (tmp_path / "models" / "tiny.partial").exists()
    assert reports[-1].done_bytes == reports[-1].total_bytes == report["bytes"]
    assert inspect_model(tmp_path / "models" / "tiny")["architecture"] == "LlamaForCausalLM"


def test_the_huggingface_listing_carries_lfs_sha256_and_pins_the_commit(hub):
    files = {f.path: f for f in list_files(HubRepo.of("huggingface", REPO_ID, endpoint=hub.url))}
    shard = next(f for name, f in files.items() if name.endswith(".safetensors"))
    assert shard.sha256
    assert len(shard.sha256) == 64
    assert files["config.json"].sha256 is None
    assert "/resolve/0123456789abcdef" in shard.url  # the listed commit, not "main"
    assert "pytorch_model.bin" not in files
    assert ".gitattributes" not in files


def test_a_dropped_connection_resumes_with_a_range_request(hub, tiny_model, tmp_path):
    repo = HubRepo.of("huggingface", REPO_ID, endpoint=hub.url)
    hub.cut_after = 100_000
    download_files(list_files(repo), tmp_path / "tiny", source="huggingface")
    assert any("bytes=100000-" in seen for seen in hub.ranges_seen)
    assert digests(tmp_path / "tiny")["config.json"] == digests(tiny_model)["config.json"]


def test_a_stopped_download_keeps_its_part_file_and_the_next_run_continues_it(hub, tmp_path):
    files = list_files(HubRepo.of("modelscope", REPO_ID, endpoint=hub.url))
    chunks = []

    def stop_on_the_third_chunk():
        chunks.append(1)
        return len(chunks) >= 3

    with pytest.raises(DownloadError, match="partial file is kept"):
        download_files(files, tmp_path / "tiny", source="modelscope", should_stop=stop_on_the_third_chunk)
    kept = sum(p.stat().st_size for p in (tmp_path / "tiny.partial").rglob("*") if p.is_file())
    assert kept > 0
    assert not (tmp_path / "tiny").exists()

    report = download_files(files, tmp_path / "tiny", source="modelscope")
    assert report["resumed_bytes"] == kept
    assert any("bytes=" in seen for seen in hub.ranges_seen)
    assert inspect_model(tmp_path / "tiny")["params"] > 0


def test_it_refuses_to_start_when_the_disk_is_too_small(hub, tmp_path, monkeypatch):
    files = list_files(HubRepo.of("huggingface", REPO_ID, endpoint=hub.url))
    monkeypatch.setattr(download_module, "DISK_MARGIN_BYTES", 0)
    free = download_module.shutil.disk_usage(tmp_path).free

    class TinyDisk:
        def __init__(self, path):
            self.free = sum(f.size for f in files) - 1

    monkeypatch.setattr(download_module.shutil, "disk_usage", TinyDisk)
    with pytest.raises(DownloadError, match="not enough disk space") as caught:
        download_files(files, tmp_path / "tiny", source="huggingface")
    assert caught.value.hint
    assert not (tmp_path / "tiny.partial").exists()
    assert free > 0
    assert hub.ranges_seen == []


def test_a_corrupted_file_fails_its_sha256_check_and_is_removed(hub, tmp_path):
    files = list_files(HubRepo.of("modelscope", REPO_ID, endpoint=hub.url))
    hub.corrupt.add("config.json")
    with pytest.raises(DownloadError, match="sha256"):
        download_files(files, tmp_path / "tiny", source="modelscope")
    assert not (tmp_path / "tiny").exists()
    assert not list((tmp_path / "tiny.partial").rglob("config.json*"))


def test_a_second_download_of_a_complete_folder_does_nothing(hub, tmp_path):
    files = list_files(HubRepo.of("huggingface", REPO_ID, endpoint=hub.url))
    download_files(files, tmp_path / "tiny", source="huggingface")
    assert download_files(files, tmp_path / "tiny", source="huggingface")["already_present"] is True


def test_hub_facts_come_from_config_and_index_without_the_weights(hub, tiny_model):
    facts = hub_facts(HubRepo.of("modelscope", REPO_ID, endpoint=hub.url))
    local = inspect_model(tiny_model)
    assert facts["architecture"] == local["architecture"]
    assert facts["num_layers"] == local["num_layers"]
    assert facts["num_kv_heads"] == local["num_kv_heads"]
    assert facts["weights_bytes"] >= local["weights_bytes"]  # index total_size or the shard files
    assert facts["has_tokenizer"] is True
    assert facts["download_bytes"] > facts["weights_bytes"]


def test_an_unknown_repository_is_a_hub_error_with_a_hint(hub):
    with pytest.raises(HubError) as caught:
        list_files(HubRepo.of("modelscope", "nobody/nothing", endpoint=hub.url))
    assert "404" in str(caught.value)
    assert caught.value.hint
    with pytest.raises(HubError):
        HubRepo.of("huggingface", "../etc/passwd")
