"""Hub resolution (issue 9): a cached snapshot without weights is not the model, and downloads
prefer safetensors. The HF cache is a real on-disk cache layout in a temp dir; the network calls
(`list_repo_files`, a non-local `snapshot_download`) are replaced by recorders."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from alcheck.errors import AlcheckError
from alcheck.models import hub
from alcheck.models.hub import download_patterns, resolve_checkpoint

REPO = "some-org/some-model"


def cache_snapshot(cache: Path, files: dict[str, str | Path]) -> Path:
    """Lay out the HF cache as huggingface_hub does: refs/main -> snapshots/<commit>/files."""
    repo = cache / f"models--{REPO.replace('/', '--')}"
    snapshot = repo / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    for name, content in files.items():
        if isinstance(content, Path):
            shutil.copy(content, snapshot / name)
        else:
            (snapshot / name).write_text(content)
    return snapshot


@pytest.fixture
def offline_cache(tmp_path, monkeypatch):
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    return cache


@pytest.fixture
def hub_calls(monkeypatch, tmp_path):
    """Replace the network: list_repo_files answers `repo_files`; a download records its patterns."""
    import huggingface_hub

    monkeypatch.setattr(hub, "hub_unreachable", lambda: "")  # the recorders stand in for a reachable hub

    calls = {
        "downloads": [],
        "repo_files": ["config.json", "model.safetensors", "pytorch_model.bin"],
        "result": None,
    }
    real = huggingface_hub.snapshot_download

    def snapshot_download(repo_id, allow_patterns=None, local_files_only=False, **kwargs):
        if local_files_only:
            return real(repo_id, allow_patterns=allow_patterns, local_files_only=True, **kwargs)
        calls["downloads"].append(allow_patterns)
        if calls["result"] is None:
            raise ConnectionError("no network in tests")
        return str(calls["result"])

    monkeypatch.setattr(huggingface_hub, "snapshot_download", snapshot_download)
    monkeypatch.setattr(huggingface_hub, "list_repo_files", lambda repo_id, **kw: list(calls["repo_files"]))
    return calls


def test_partial_snapshot_is_not_the_model(offline_cache, hub_calls, random_dirs):
    """config + tokenizer only (left by an earlier AutoTokenizer): the hub is tried."""
    target = random_dirs[0]
    partial = cache_snapshot(
        offline_cache, {"config.json": target / "config.json", "tokenizer.json": target / "tokenizer.json"}
    )
    hub_calls["result"] = target  # the "download" completes the model
    assert resolve_checkpoint(REPO, "target") == target
    assert len(hub_calls["downloads"]) == 1
    assert partial.is_dir()


def test_partial_snapshot_and_no_hub_is_one_line(offline_cache, hub_calls, random_dirs):
    partial = cache_snapshot(offline_cache, {"config.json": random_dirs[0] / "config.json"})
    with pytest.raises(AlcheckError) as info:
        resolve_checkpoint(REPO, "target")
    message = str(info.value)
    assert (
        "\n" not in message and REPO in message and str(partial) in message and "without weights" in message
    )


def test_complete_snapshot_is_used_without_the_hub(offline_cache, hub_calls, random_dirs):
    target = random_dirs[0]
    snapshot = cache_snapshot(
        offline_cache,
        {"config.json": target / "config.json", "model.safetensors": target / "model.safetensors"},
    )
    assert resolve_checkpoint(REPO, "target") == snapshot
    assert hub_calls["downloads"] == []


def test_snapshot_with_an_index_but_missing_shards_is_partial(offline_cache, hub_calls):
    cache_snapshot(
        offline_cache,
        {
            "config.json": "{}",
            "model.safetensors.index.json": '{"weight_map": {"a": "model-00001-of-00002.safetensors"}}',
        },
    )
    with pytest.raises(AlcheckError):
        resolve_checkpoint(REPO, "target")
    assert len(hub_calls["downloads"]) == 1


def test_download_prefers_safetensors(offline_cache, hub_calls, random_dirs):
    hub_calls["result"] = random_dirs[0]
    resolve_checkpoint(REPO, "target")
    patterns = hub_calls["downloads"][0]
    assert "*.safetensors" in patterns and "*.bin" not in patterns
    assert {"*.json", "*.model"} <= set(patterns)  # configs, index and sentencepiece tokenizers


def test_download_falls_back_to_bin(offline_cache, hub_calls, random_dirs):
    hub_calls["repo_files"] = ["config.json", "pytorch_model.bin"]
    hub_calls["result"] = random_dirs[1]
    assert resolve_checkpoint(REPO, "draft") == random_dirs[1]
    patterns = hub_calls["downloads"][0]
    assert "*.bin" in patterns and "*.safetensors" not in patterns


def test_a_repository_without_weights_is_refused(offline_cache, hub_calls, tmp_path):
    empty = tmp_path / "fetched"
    empty.mkdir()
    (empty / "config.json").write_text("{}")
    hub_calls["repo_files"] = ["config.json", "README.md"]
    hub_calls["result"] = empty
    with pytest.raises(AlcheckError, match="no safetensors or pytorch_model.bin"):
        resolve_checkpoint(REPO, "draft")


@pytest.mark.parametrize(
    "files, weights",
    [
        (["model-00001-of-00002.safetensors", "pytorch_model-00001-of-00002.bin"], "*.safetensors"),
        (["pytorch_model.bin", "config.json"], "*.bin"),
        (["config.json"], "*.bin"),
    ],
)
def test_download_patterns(files, weights):
    patterns = download_patterns(files)
    assert weights in patterns
    assert ({"*.safetensors", "*.bin"} - {weights}).isdisjoint(patterns)
    assert hub.BASE_PATTERNS == patterns[: len(hub.BASE_PATTERNS)]


def test_an_unreachable_hub_fails_in_one_line_without_retrying(offline_cache, monkeypatch):
    """Offline with a hub id: one line at once, not huggingface_hub's retries (27 s, 11 lines)."""
    import socket

    import huggingface_hub

    def no_download(*args, **kwargs):
        if kwargs.get("local_files_only"):
            raise FileNotFoundError("not cached")
        raise AssertionError("no download may be tried when the hub is unreachable")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", no_download)
    monkeypatch.setattr(hub, "_reachability", {})
    monkeypatch.setenv("HF_ENDPOINT", "https://hub.invalid")

    def refused(*args, **kwargs):
        raise socket.gaierror(-2, "Name or service not known")

    monkeypatch.setattr(socket, "create_connection", refused)
    with pytest.raises(
        AlcheckError, match=r"hub is unreachable \(hub.invalid:443: Name or service not known\)"
    ):
        resolve_checkpoint(REPO, "target")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(AlcheckError, match="HF_HUB_OFFLINE is set"):
        resolve_checkpoint(REPO, "draft")
