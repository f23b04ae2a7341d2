"""A Hugging Face Hub played on 127.0.0.1 for tests, and safetensors files written by hand.

:class:`FakeHub` serves what ``huggingface_hub``'s client asks of the Hub when it
downloads a file or reads a safetensors header: ``HEAD`` and ``GET`` of
``/{org}/{name}/resolve/{revision}/{filename}`` with ``X-Repo-Commit``, ``ETag``,
``Content-Length`` and ``Accept-Ranges``, ``206 Partial Content`` for a ``Range``, and
the Hub's error answers (``X-Error-Code`` ``RepoNotFound``, ``RevisionNotFound``,
``EntryNotFound``, ``GatedRepo``; 429 with ``Retry-After``). It records every request.

:func:`safetensors_bytes` writes a real safetensors file (8-byte little-endian header
length, the JSON header, zeroed data) without the safetensors library.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import struct
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

WIDTH = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "I64": 8, "I32": 4, "U8": 1}

Spec = Mapping[str, tuple[str, tuple[int, ...]]]  # tensor name -> (dtype, shape)


def tensor_nbytes(dtype: str, shape: tuple[int, ...]) -> int:
    return math.prod(shape) * WIDTH[dtype]


def safetensors_bytes(tensors: Spec) -> bytes:
    """A safetensors file holding ``tensors`` (zeros), its header as the format says."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = tensor_nbytes(dtype, shape)
        header[name] = {
            "dtype": dtype,
            "shape": list(shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)  # the format pads the header to 8 bytes with spaces
    return struct.pack("<Q", len(raw)) + raw + bytes(offset)


def sharded(shards: Mapping[str, Spec]) -> dict[str, bytes]:
    """Shard files and their ``model.safetensors.index.json``."""
    files = {name: safetensors_bytes(spec) for name, spec in shards.items()}
    total = sum(tensor_nbytes(*t) for spec in shards.values() for t in spec.values())
    weight_map = {tensor: name for name, spec in shards.items() for tensor in spec}
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    files["model.safetensors.index.json"] = json.dumps(index).encode()
    return files


@dataclass
class Repo:
    """One repository: its commits' files, its refs, and how it answers."""

    commits: dict[str, dict[str, bytes]]
    refs: dict[str, str]
    gated: bool = False  # answers 401 GatedRepo, as the Hub does without a token
    status: dict[str, int] = field(default_factory=dict)  # filename -> forced status


_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")


class FakeHub:
    """The Hub on a loopback port; ``url`` is its endpoint, ``requests`` what it got."""

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.requests: list[tuple[str, str, str | None]] = []  # method, path, Range
        self.rate_limited = False  # every request answered 429
        self._lock = threading.Lock()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def do_HEAD(self) -> None:
                hub._answer(self, body=False)

            def do_GET(self) -> None:
                hub._answer(self, body=True)

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FakeHub:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def add(self, repo: str, files: dict[str, bytes], *, ref: str = "main", **kw: Any) -> str:
        """Add a commit of ``files`` to ``repo`` under ``ref``; returns its sha."""
        sha = hashlib.sha1(repr((repo, ref, sorted(files))).encode()).hexdigest()
        entry = self.repos.setdefault(repo, Repo(commits={}, refs={}, **kw))
        entry.commits[sha] = files
        entry.refs[ref] = sha
        return sha

    def _answer(self, h: BaseHTTPRequestHandler, *, body: bool) -> None:
        with self._lock:
            self.requests.append((h.command, h.path, h.headers.get("Range")))
        match = _RESOLVE.match(h.path.split("?")[0])
        if self.rate_limited:
            return _error(h, 429, "", {"Retry-After": "0"})
        repo = self.repos.get(match["repo"]) if match else None
        if match is None or repo is None:
            return _error(h, 404, "RepoNotFound")
        if repo.gated:
            return _error(h, 401, "GatedRepo")
        sha = repo.refs.get(match["rev"], match["rev"])
        if sha not in repo.commits:
            return _error(h, 404, "RevisionNotFound")
        name = match["file"]
        if name in repo.status:
            return _error(h, repo.status[name], "", {"X-Repo-Commit": sha})
        data = repo.commits[sha].get(name)
        if data is None:
            return _error(h, 404, "EntryNotFound", {"X-Repo-Commit": sha})
        _send_file(h, data, sha, body=body)


def _send_file(h: BaseHTTPRequestHandler, data: bytes, sha: str, *, body: bool) -> None:
    start, end, status = 0, len(data) - 1, 200
    wanted = re.fullmatch(r"bytes=(\d+)-(\d*)", h.headers.get("Range") or "")
    if wanted is not None:
        start = int(wanted[1])
        end = min(int(wanted[2]) if wanted[2] else end, len(data) - 1)
        status = 206
    h.send_response(status)
    h.send_header("X-Repo-Commit", sha)
    h.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
    h.send_header("Accept-Ranges", "bytes")
    h.send_header("Content-Length", str(end - start + 1))
    if status == 206:
        h.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
    h.end_headers()
    if body:
        h.wfile.write(data[start : end + 1])


def _error(
    h: BaseHTTPRequestHandler, status: int, code: str, extra: dict[str, str] | None = None
) -> None:
    payload = json.dumps({"error": code or f"HTTP {status}"}).encode()
    h.send_response(status)
    if code:
        h.send_header("X-Error-Code", code)
        h.send_header("X-Error-Message", code)
    for key, value in (extra or {}).items():
        h.send_header(key, value)
    h.send_header("Content-Type", "application/json")
    h.send_header("Content-Length", str(len(payload)))
    h.end_headers()
    if h.command != "HEAD":
        h.wfile.write(payload)


# ---------------------------------------------------------------- a tiny Llama checkpoint

# hidden 64, 2 layers, 4 heads of 16 (2 KV heads), MLP 128, vocabulary 256 (a multiple of
# vLLM's 64-row padding), untied lm_head, bf16
TINY_CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "vocab_size": 256,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


def tiny_layer(i: int, norm: str = "F32") -> dict[str, tuple[str, tuple[int, ...]]]:
    """Decoder layer ``i``'s tensors as a Hugging Face Llama checkpoint names them."""
    p = f"model.layers.{i}"
    return {
        f"{p}.self_attn.q_proj.weight": ("BF16", (64, 64)),  # 8,192 B
        f"{p}.self_attn.k_proj.weight": ("BF16", (32, 64)),  # 4,096 B
        f"{p}.self_attn.v_proj.weight": ("BF16", (32, 64)),  # 4,096 B
        f"{p}.self_attn.o_proj.weight": ("BF16", (64, 64)),  # 8,192 B
        f"{p}.mlp.gate_proj.weight": ("BF16", (128, 64)),  # 16,384 B
        f"{p}.mlp.up_proj.weight": ("BF16", (128, 64)),  # 16,384 B
        f"{p}.mlp.down_proj.weight": ("BF16", (64, 128)),  # 16,384 B
        f"{p}.input_layernorm.weight": (norm, (64,)),  # 256 B as F32
        f"{p}.post_attention_layernorm.weight": (norm, (64,)),  # 256 B as F32
    }


def tiny_shards(norm: str = "F32", head: str = "BF16") -> dict[str, Spec]:
    """The tiny Llama in two shards: embeddings and layer 0, then layer 1 and the head."""
    return {
        "model-00001-of-00002.safetensors": {
            "model.embed_tokens.weight": ("BF16", (256, 64)),  # 32,768 B
            **tiny_layer(0, norm),
        },
        "model-00002-of-00002.safetensors": {
            **tiny_layer(1, norm),
            "model.norm.weight": (norm, (64,)),  # 256 B as F32
            "lm_head.weight": (head, (256, 64)),  # 32,768 B as BF16
        },
    }


def tiny_files(**kw: str) -> dict[str, bytes]:
    """config.json, the two shards and their index."""
    return {"config.json": json.dumps(TINY_CONFIG).encode(), **sharded(tiny_shards(**kw))}


def header_sum(shards: Mapping[str, Spec]) -> int:
    """The sum of product(shape) x dtype width over every tensor of ``shards``."""
    return sum(tensor_nbytes(*t) for spec in shards.values() for t in spec.values())
