"""Models from the Hugging Face Hub: ``org/name`` or ``org/name@revision``.

:func:`load_hub_model` downloads what the engines read to size a model, through
``huggingface_hub`` (its cache, ``HF_TOKEN`` or the token ``hf auth login`` saved,
``HF_ENDPOINT``, ``HF_HUB_CACHE``, ``HF_HUB_OFFLINE``): ``config.json`` (with any
``quantization_config`` and a multimodal wrapper's ``text_config`` inside it) and
``hf_quant_config.json`` when the repository has one, into the Hub cache, and reads them
as a local folder is read (:func:`kvbudget.model.load_config_file`). The weights come
from the safetensors headers: ``model.safetensors.index.json`` (downloaded, small) names
the shards, and each shard's header alone is read by HTTP range requests
(``HfApi.parse_safetensors_file_metadata``: the first 100 kB, and the rest of a longer
header), or from the shard itself when the cache holds it whole. The headers of one
commit are kept as one JSON file in the repository's cache folder
(``models--org--name/.kvbudget/safetensors-headers/<commit>.json``: a commit's files
never change, so the commit is the key), so a later run reads nothing again and works
with the Hub out of reach.

``huggingface_hub`` is imported here, in functions, only when a Hub id is resolved:
planning a preset or a local folder never imports it and makes no network request.
The settings are read from the environment at each call (``huggingface_hub`` reads them
once, at its import).

Errors are typed: a missing repository, revision or config is an
:class:`~kvbudget.errors.UnknownModelError`; offline without a cached copy too; a gated
or private repository, a refused token, a rate limit or an unreachable Hub with no cached
copy is a :class:`~kvbudget.errors.HubAccessError`. Each says what to do.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import tempfile
import warnings
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kvbudget.checkpoint import (
    INDEX_FILE,
    SINGLE_FILE,
    Checkpoint,
    Tensor,
    header_tensors,
    index_shards,
    parse_header,
    read_header,
)
from kvbudget.errors import ConfigError, HubAccessError, UnknownModelError
from kvbudget.model_spec import ModelSpec

# a repository id as the Hub allows it (huggingface_hub's validate_repo_id), then an
# optional @revision: a branch, a tag, a commit sha or a ref such as refs/pr/1
_HUB_ID = re.compile(r"(?P<repo>[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96})(?:@(?P<rev>[\w./-]{1,255}))?")
_COMMIT = re.compile(r"[0-9a-f]{40}")
_TRUE = ("1", "ON", "YES", "TRUE")
HEADER_CACHE = Path(".kvbudget") / "safetensors-headers"
_HEADER_FORMAT = "kvbudget safetensors headers 1"
_READERS = 8  # shard headers read at once


def is_hub_id(text: str) -> bool:
    """Whether ``text`` reads as a Hub id: ``org/name`` or ``org/name@revision``."""
    match = _HUB_ID.fullmatch(text)
    if match is None:
        return False
    repo = match["repo"]
    return ".." not in repo and "--" not in repo and not repo.endswith((".", "-"))


def split_hub_id(text: str) -> tuple[str, str | None]:
    """``(repo, revision)`` of a Hub id (revision None when not given)."""
    match = _HUB_ID.fullmatch(text)
    if match is None or not is_hub_id(text):
        raise UnknownModelError(
            f"{text!r} is not a Hugging Face id (org/name or org/name@revision)"
        )
    return match["repo"], match["rev"]


@dataclass(frozen=True, kw_only=True)
class HubSettings:
    """The Hub settings in force: the endpoint, the cache folder and offline mode."""

    endpoint: str
    cache_dir: str
    offline: bool

    @classmethod
    def from_env(cls) -> HubSettings:
        """``HF_ENDPOINT``, ``HF_HUB_CACHE`` (else ``HF_HOME``/hub) and
        ``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) as set now, else
        huggingface_hub's defaults."""
        from huggingface_hub import constants

        env = os.environ
        if env.get("HF_HUB_CACHE"):
            cache = env["HF_HUB_CACHE"]
        elif env.get("HF_HOME"):
            cache = os.path.join(env["HF_HOME"], "hub")
        else:
            cache = constants.HF_HUB_CACHE
        flag = env.get("HF_HUB_OFFLINE") or env.get("TRANSFORMERS_OFFLINE") or ""
        # offline when set now, or when it was at huggingface_hub's import (its HTTP
        # client then refuses every request)
        offline = flag.upper() in _TRUE or bool(constants.HF_HUB_OFFLINE)
        endpoint = (env.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")
        return cls(endpoint=endpoint, cache_dir=os.path.expanduser(cache), offline=offline)


def load_hub_model(text: str) -> ModelSpec:
    """The spec of Hub model ``text`` (``org/name[@revision]``), weights from its
    safetensors headers where it has them.

    Raises UnknownModelError / HubAccessError (module docstring), or what reading a
    config raises (ConfigError, UnsupportedArchitectureError).
    """
    from kvbudget.model import load_config_file, with_checkpoint

    repo, revision = split_hub_id(text)
    settings = HubSettings.from_env()
    with _quiet():
        config = _fetch(repo, "config.json", revision, settings)
        if config is None:
            raise UnknownModelError(
                f"{repo}@{revision or 'main'} has no config.json on {settings.endpoint}; "
                "kvbudget reads a transformers config: pass a local folder holding one"
            )
        folder = config.parent
        commit = folder.name
        if not _COMMIT.fullmatch(commit):  # pragma: no cover - huggingface_hub's layout
            raise ConfigError(f"not in a Hub cache snapshot folder: {folder}", source=text)
        _fetch(repo, "hf_quant_config.json", commit, settings)  # beside config.json
        spec = load_config_file(folder / "config.json", name=repo)
        checkpoint, note = hub_checkpoint(repo, commit, folder, settings)
    source = f"{repo}@{commit[:12]} (Hugging Face Hub)"
    spec = with_checkpoint(replace(spec, source=source, revision=commit, location=None), checkpoint)
    return spec if note is None else replace(spec, assumed=(*spec.assumed, note))


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """huggingface_hub's log lines, warnings and progress bars (for a few kB of JSON)
    held back: kvbudget reports one line."""
    # the modules that log, imported first: each import sets the library logger's level
    import huggingface_hub.file_download
    import huggingface_hub.hf_api  # noqa: F401
    from huggingface_hub.utils.tqdm import (
        are_progress_bars_disabled,
        disable_progress_bars,
        enable_progress_bars,
    )

    logger = logging.getLogger("huggingface_hub")
    level, bars = logger.level, not are_progress_bars_disabled()
    logger.setLevel(logging.CRITICAL + 10)
    disable_progress_bars()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logger.setLevel(level)
        if bars:
            enable_progress_bars()


def _fetch(repo: str, filename: str, revision: str | None, s: HubSettings) -> Path | None:
    """The cached path of ``filename`` (downloaded if needed), None when the repository
    has no such file (or, offline, when its absence cannot be told from a missing copy
    of an optional file)."""
    import huggingface_hub as hf
    from huggingface_hub import errors

    if revision is not None and _COMMIT.fullmatch(revision):
        cached = hf.try_to_load_from_cache(repo, filename, cache_dir=s.cache_dir, revision=revision)
        if isinstance(cached, str):
            return Path(cached)
        if cached is not None:  # huggingface_hub's _CACHED_NO_EXIST: a 404 it remembers
            return None
    try:
        path = hf.hf_hub_download(
            repo,
            filename,
            revision=revision,
            cache_dir=s.cache_dir,
            endpoint=s.endpoint,
            local_files_only=s.offline,
        )
    except errors.LocalEntryNotFoundError as exc:
        if filename != "config.json":
            return None  # offline: an optional file not cached is taken as absent
        raise hub_error(exc, repo, revision, s) from None
    except errors.RemoteEntryNotFoundError:
        return None
    except Exception as exc:  # huggingface_hub's and its HTTP library's errors
        raise hub_error(exc, repo, revision, s) from None
    return Path(str(path))


def _status(exc: BaseException) -> int | None:
    """The HTTP status behind ``exc`` (its cause chain included), None without one."""
    seen: BaseException | None = exc
    while seen is not None:
        response = getattr(seen, "response", None)
        status = getattr(response, "status_code", None)
        if isinstance(status, int):
            return status
        seen = seen.__cause__ or seen.__context__
    return None


_LOGIN = "log in with `hf auth login` (or set HF_TOKEN)"
_ELSE = "or pass a local folder holding its config.json, or pick a preset (`kvbudget models`)"


def hub_error(exc: BaseException, repo: str, revision: str | None, s: HubSettings) -> ConfigError:
    """The typed error, with what to do, for huggingface_hub's ``exc`` about ``repo``."""
    from huggingface_hub import errors

    at, where = repo if revision is None else f"{repo}@{revision}", f"on {s.endpoint}"
    status = _status(exc)
    if isinstance(exc, errors.GatedRepoError):
        return HubAccessError(
            f"{repo} is a gated model {where} (HTTP {status}): accept its terms on its Hub "
            f"page, then {_LOGIN} with an account that has access; {_ELSE}",
            repo_id=repo,
            status=status,
        )
    if isinstance(exc, errors.RepositoryNotFoundError):
        return UnknownModelError(
            f"no model {repo} {where} (HTTP {status}): check the id; a private model reads as "
            f"missing without a token that may see it: {_LOGIN}; {_ELSE}"
        )
    if isinstance(exc, errors.RevisionNotFoundError):
        return UnknownModelError(
            f"{repo} has no revision {revision!r} {where}: pass a branch, tag or commit that "
            f"exists ({repo}@main)"
        )
    if isinstance(exc, errors.HFValidationError):
        return UnknownModelError(f"{at} is not a valid Hugging Face id: {exc}")
    if isinstance(exc, errors.LocalEntryNotFoundError) and s.offline:
        return UnknownModelError(
            f"{at}: its config.json is not in the Hugging Face cache "
            f"({s.cache_dir}), and HF_HUB_OFFLINE=1 forbids downloading it: unset "
            f"HF_HUB_OFFLINE to fetch it once, point HF_HUB_CACHE at a cache that holds it, {_ELSE}"
        )
    return _access_error(status, at, repo, s)


def _access_error(status: int | None, at: str, repo: str, s: HubSettings) -> HubAccessError:
    """A refused, rate-limited or failed request, or an unreachable Hub, for ``at``."""
    where, cached = f"on {s.endpoint}", f"no cached copy is in {s.cache_dir}"
    if status == 401:
        why = (
            f"the Hub {where} refused the token sent for {at} (HTTP 401): {_LOGIN} with a "
            "valid token"
        )
    elif status == 403:
        why = (
            f"the token sent has no access to {at} {where} (HTTP 403): request access on the "
            f"model's page (gated) or ask its owner (private), then {_LOGIN}"
        )
    elif status == 429:
        why = (
            f"the Hub {where} is rate-limiting requests for {at} (HTTP 429) and {cached}: "
            f"wait and run again, or {_LOGIN} (logged-in users get higher limits)"
        )
    elif status is not None:
        why = f"the Hub {where} answered HTTP {status} for {at} and {cached}: run again later"
    else:
        why = (
            f"cannot reach the Hub {where} for {at} and {cached}: check the network and "
            "HF_ENDPOINT, or set HF_HUB_OFFLINE=1 with HF_HUB_CACHE at a cache that holds it"
        )
    return HubAccessError(f"{why}; {_ELSE}", repo_id=repo, status=status)


# --------------------------------------------------------------------------- headers


class _Unavailable(Exception):
    """The headers could not be had; the reason in words."""


def hub_checkpoint(
    repo: str, commit: str, folder: Path, s: HubSettings
) -> tuple[Checkpoint | None, str | None]:
    """The checkpoint of ``repo`` at ``commit`` from its safetensors headers (kept in
    the header cache), or None and a note saying why the weights are counted from the
    config instead. ``folder`` is the commit's snapshot folder."""
    cache = folder.parent.parent / HEADER_CACHE / f"{commit}.json"
    cached = _read_cache(cache, repo, commit)
    if cached is not None:
        return cached, None
    fallback = f"{repo}@{commit[:12]}: weights counted from config.json (the inventory): "
    try:
        index = _fetch(repo, INDEX_FILE, commit, s)
        if index is not None:
            files, total = index_shards(parse_header(index.read_bytes(), str(index)), str(index))
        else:
            files, total = (SINGLE_FILE,), None
        with ThreadPoolExecutor(max_workers=min(_READERS, len(files))) as pool:
            read = pool.map(lambda f: _header(repo, commit, f, folder, s), files)
            headers = dict(zip(files, read, strict=True))
    except (_Unavailable, HubAccessError) as exc:
        return None, fallback + str(exc)
    tensors: list[Tensor] = []
    for name, header in headers.items():
        tensors += header_tensors(header, name, f"{repo}@{commit[:12]}/{name}")
    _write_cache(cache, repo, commit, files, total, headers)
    return Checkpoint(tensors=tuple(tensors), files=files, index_total_bytes=total), None


def _header(repo: str, commit: str, name: str, folder: Path, s: HubSettings) -> Mapping[str, Any]:
    """One shard's header: from the shard when the cache holds it, else by range reads."""
    local = folder / name
    if local.is_file():
        return read_header(local)
    if s.offline:
        raise _Unavailable(f"HF_HUB_OFFLINE=1 and the header of {name} is not cached")
    from huggingface_hub import HfApi, errors

    try:
        meta = HfApi(endpoint=s.endpoint).parse_safetensors_file_metadata(
            repo, name, revision=commit
        )
    except errors.SafetensorsParsingError as exc:
        raise ConfigError(f"not a safetensors header: {exc}", source=f"{repo}/{name}") from None
    except errors.RemoteEntryNotFoundError:
        raise _Unavailable(f"the repository has no {name}") from None
    except Exception as exc:  # huggingface_hub's and its HTTP library's errors
        status = _status(exc)
        raise _Unavailable(
            f"reading the header of {name} failed"
            f"{f' (HTTP {status})' if status else f': {type(exc).__name__}'}"
        ) from None
    header: dict[str, Any] = {
        tensor: {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": list(t.data_offsets)}
        for tensor, t in meta.tensors.items()
    }
    return header


def _read_cache(path: Path, repo: str, commit: str) -> Checkpoint | None:
    """The checkpoint kept at ``path``, None when absent or not one kvbudget wrote."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not (
        isinstance(data, dict)
        and data.get("format") == _HEADER_FORMAT
        and data.get("repo") == repo
        and data.get("revision") == commit
        and isinstance(data.get("headers"), dict)
    ):
        return None
    total = data.get("index_total_bytes")
    tensors: list[Tensor] = []
    for name, header in data["headers"].items():
        if not isinstance(header, dict):
            return None
        tensors += header_tensors(header, name, str(path))
    return Checkpoint(
        tensors=tuple(tensors),
        files=tuple(data["headers"]),
        index_total_bytes=total if isinstance(total, int) else None,
    )


def _write_cache(
    path: Path,
    repo: str,
    commit: str,
    files: tuple[str, ...],
    total: int | None,
    headers: Mapping[str, Mapping[str, Any]],
) -> None:
    """Keep the headers of ``repo`` at ``commit`` at ``path`` (atomically; a cache that
    cannot be written is skipped: the next run reads the headers again)."""
    data = {
        "format": _HEADER_FORMAT,
        "repo": repo,
        "revision": commit,
        "index_total_bytes": total,
        "headers": {name: headers[name] for name in files},
    }
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(tmp, path)


__all__ = [
    "HEADER_CACHE",
    "HubSettings",
    "hub_checkpoint",
    "hub_error",
    "is_hub_id",
    "load_hub_model",
    "split_hub_id",
]
