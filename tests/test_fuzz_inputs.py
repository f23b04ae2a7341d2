"""Fuzzing the inputs beyond the plan's: traces, checkpoints and the engine's inputs.

As ``test_fuzz.py`` does for the plan: whatever the input, the result is a typed error
from kvbudget's tree (or an OSError naming a file) or a consistent result, never another
exception. Each input family mixes well-formed values with the shapes that broke before
(long fields, huge numbers, deep nesting, wrong JSON types, garbage bytes).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kvbudget.errors import KvBudgetError
from kvbudget.sim.trace import PrefixSynthesis, read_trace

torch = pytest.importorskip("torch")

FUZZ = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

numbers = st.one_of(
    st.integers(min_value=-10, max_value=10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
)
HUGE = "9" * 4400  # an integer past Python's 4,300-digit string conversion limit
json_value = st.recursive(
    st.one_of(st.none(), st.booleans(), numbers),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=10,
)  # fmt: skip


@st.composite
def jsonl_traces(draw: st.DrawFn) -> str:
    lines = []
    for _ in range(draw(st.integers(0, 6))):
        row: Any = {
            "arrival_s": draw(numbers),
            "prompt_tokens": draw(numbers),
            "output_tokens": draw(numbers),
        }
        if draw(st.booleans()):
            row["prefix_group"] = draw(json_value)
        if draw(st.integers(0, 9)) == 0:
            row = draw(json_value)  # any JSON at all
        line = json.dumps(row)
        if draw(st.integers(0, 9)) == 0:
            line = f'{{"arrival_s": 0, "prompt_tokens": {HUGE}, "output_tokens": 1}}'
        lines.append(line)
    if draw(st.integers(0, 9)) == 0:
        lines.append("[" * 5000 + "]" * 5000)  # nesting past the JSON parser's depth
    return draw(st.sampled_from(["", "\n", "\n\n"])) + "\n".join(lines)


@st.composite
def csv_traces(draw: st.DrawFn) -> str:
    head = draw(st.sampled_from([
        "TIMESTAMP,ContextTokens,GeneratedTokens", "arrival_s,prompt_tokens,output_tokens",
        "arrival_s,prompt_tokens,output_tokens,prefix_group", "x,y",
    ]))  # fmt: skip
    cells = st.one_of(numbers.map(str), st.text(max_size=12), st.just("9" * 200_000))
    rows = [",".join(draw(st.lists(cells, max_size=5))) for _ in range(draw(st.integers(0, 5)))]
    return "\n".join([head, *rows])


@FUZZ
@given(text=st.one_of(jsonl_traces(), csv_traces(), st.binary(max_size=64).map(repr)))
def test_a_trace_is_a_typed_error_or_requests(tmp_path: Path, text: str) -> None:
    path = tmp_path / "trace.txt"
    path.write_text(text, encoding="utf-8")
    try:
        requests = list(read_trace(path, prefixes=PrefixSynthesis(share=0.0), limit=20))
    except KvBudgetError:
        return
    last = 0.0
    for r in requests:
        assert r.prompt_tokens >= 1 and r.output_tokens >= 0
        assert r.arrival_s >= last  # in arrival order, as the replay needs
        last = r.arrival_s


def _safetensors(header: dict[str, Any], payload: bytes) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + payload


@st.composite
def checkpoints(draw: st.DrawFn) -> dict[str, bytes]:
    """A folder's files: shards with real or broken headers, and maybe an index."""
    files: dict[str, bytes] = {}
    for i in range(draw(st.integers(0, 2))):
        dtype = draw(st.sampled_from(["F32", "BF16", "I8", "BOOL", "F64", "XX"]))
        shape = draw(st.lists(st.integers(0, 3), max_size=2))
        count = 1
        for n in shape:
            count *= n
        width = {"F32": 4, "BF16": 2, "I8": 1, "BOOL": 1, "F64": 8}.get(dtype, 4)
        size = count * width
        end = draw(st.sampled_from([size, size + 1, max(size - 1, 0)]))
        header = {"w": {"dtype": dtype, "shape": shape, "data_offsets": [0, end]}}
        payload = draw(st.binary(min_size=end, max_size=end))
        blob = _safetensors(header, payload)
        if draw(st.integers(0, 5)) == 0:
            blob = draw(st.binary(max_size=40))  # not safetensors at all
        files[f"model-{i}.safetensors"] = blob
    if draw(st.booleans()):
        weight_map = draw(st.one_of(
            st.dictionaries(st.sampled_from(["w", "v"]), st.sampled_from(
                [*files, "../x.safetensors", "/etc/passwd", "missing.safetensors"]), max_size=2),
            json_value,
        ))  # fmt: skip
        files["model.safetensors.index.json"] = json.dumps({"weight_map": weight_map}).encode()
    return files


@FUZZ
@given(files=checkpoints())
def test_a_checkpoint_is_a_typed_error_or_tensors(tmp_path: Path, files: dict[str, bytes]) -> None:
    from kvbudget.engine.checkpoint import read_tensors

    folder = tmp_path / "ckpt"
    folder.mkdir(exist_ok=True)
    for old in folder.iterdir():
        old.unlink()
    for name, blob in files.items():
        (folder / name).write_bytes(blob)
    try:
        tensors = read_tensors(folder)
    except KvBudgetError:
        return
    assert all(isinstance(t, torch.Tensor) for t in tensors.values())


@pytest.fixture(scope="module")
def engine() -> Any:
    import tempfile

    import kvbudget
    from kvbudget.engine import Engine, write_demo_models

    models = write_demo_models(tempfile.mkdtemp(), seed=0)
    plan = kvbudget.plan(
        target=models.target, draft=models.draft, spec="draft-target", kv_budget="256KiB",
        tokens_per_block=4, max_batch_size=4, max_seq_len=64,
    )  # fmt: skip
    return Engine(plan, target=models.target, draft=models.draft, device="cpu", seed=0)


token = st.one_of(
    st.integers(min_value=-3, max_value=300), st.booleans(), st.floats(), st.text(max_size=2)
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    prompts=st.one_of(
        st.lists(st.lists(st.integers(0, 255), min_size=1, max_size=12), min_size=1, max_size=3),
        st.lists(st.lists(token, max_size=12), max_size=3),
    ),
    max_new=st.one_of(st.integers(1, 8), st.integers(-1, 8), st.floats(), st.booleans()),
    temperature=st.one_of(
        st.floats(0, 2), st.floats(), st.integers(-1, 3), st.just(1e-45), st.just(1e308)
    ),
)
def test_engine_inputs_are_a_typed_error_or_tokens(
    engine: Any, prompts: list[list[Any]], max_new: Any, temperature: Any
) -> None:
    from kvbudget.engine import SamplingParams

    try:
        params = SamplingParams(max_new_tokens=max_new, temperature=temperature)
        outputs = engine.generate(prompts, params)
    except KvBudgetError:
        return
    assert len(outputs) == len(prompts)
    event(f"generated for {len(outputs)} prompt(s)")
    for prompt, out in zip(prompts, outputs, strict=True):
        assert 1 <= len(out.token_ids) <= max_new and len(prompt) + len(out.token_ids) <= 64
        assert all(type(t) is int for t in out.token_ids)
