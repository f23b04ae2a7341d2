"""The exception tree of kvbudget.errors and its re-export from the package."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

import kvbudget
from kvbudget import errors
from kvbudget.errors import (
    CacheError,
    ConfigError,
    EngineRefusedError,
    HubAccessError,
    InfeasibleBudgetError,
    InvalidArgumentError,
    InvalidCacheOperationError,
    KvBudgetError,
    ModelOutputError,
    OutOfBlocksError,
    UnknownModelError,
    UnknownRequestError,
    UnsupportedArchitectureError,
)

PUBLIC_ERRORS = [
    obj
    for name, obj in vars(errors).items()
    if inspect.isclass(obj) and issubclass(obj, BaseException) and not name.startswith("_")
]

# (error, its direct kvbudget parent, the builtin it must also be)
TREE = [
    (ConfigError, KvBudgetError, ValueError),
    (UnknownModelError, ConfigError, ValueError),
    (UnsupportedArchitectureError, ConfigError, ValueError),
    (HubAccessError, ConfigError, ValueError),
    (InvalidArgumentError, KvBudgetError, ValueError),
    (InfeasibleBudgetError, KvBudgetError, ValueError),
    (EngineRefusedError, InfeasibleBudgetError, ValueError),
    (ModelOutputError, KvBudgetError, ArithmeticError),
    (CacheError, KvBudgetError, Exception),
    (OutOfBlocksError, CacheError, Exception),
    (UnknownRequestError, CacheError, KeyError),
    (InvalidCacheOperationError, CacheError, ValueError),
]


def test_every_public_error_is_in_the_tree() -> None:
    assert {cls for cls, _, _ in TREE} | {KvBudgetError} == set(PUBLIC_ERRORS)


@pytest.mark.parametrize(("cls", "parent", "builtin"), TREE)
def test_tree(cls: type[Exception], parent: type[Exception], builtin: type[Exception]) -> None:
    assert issubclass(cls, KvBudgetError)
    assert issubclass(cls, parent)
    assert issubclass(cls, builtin)


def test_base_is_a_plain_exception() -> None:
    assert issubclass(KvBudgetError, Exception)
    assert not issubclass(KvBudgetError, ValueError)


def test_cache_errors_are_not_value_errors_unless_documented() -> None:
    assert not issubclass(CacheError, ValueError)
    assert not issubclass(OutOfBlocksError, ValueError)


@pytest.mark.parametrize("cls", PUBLIC_ERRORS, ids=lambda c: c.__name__)
def test_reexported_from_package(cls: type[Exception]) -> None:
    assert getattr(kvbudget, cls.__name__) is cls
    assert cls.__name__ in kvbudget.__all__


def test_docstring_draws_every_error() -> None:
    doc = errors.__doc__ or ""
    for cls in PUBLIC_ERRORS:
        assert cls.__name__ in doc


def test_config_error_names_source_and_field() -> None:
    exc = ConfigError("required but missing", source="/x/config.json", field="hidden_size")
    assert exc.source == "/x/config.json"
    assert exc.field == "hidden_size"
    assert str(exc) == "/x/config.json: field 'hidden_size': required but missing"


def test_config_error_without_source_or_field() -> None:
    exc = ConfigError("bad")
    assert (exc.source, exc.field, str(exc)) == ("", "", "bad")


def test_unknown_request_error_message_is_not_quoted() -> None:
    assert str(UnknownRequestError("no request 'r1'")) == "no request 'r1'"
    assert str(UnknownRequestError()) == ""
    with pytest.raises(KeyError):
        raise UnknownRequestError("r1")


# Caller mistakes in the public API raise a kvbudget error, never a bare
# AttributeError / TypeError from deep inside.
def _small_plan() -> kvbudget.Plan:
    return kvbudget.plan(kv_budget="2GiB", host_budget="4GiB", max_seq_len=4096, max_batch_size=8)


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [
        (lambda: kvbudget.get_gpu(None), InvalidArgumentError, "gpu must be a GPU name"),
        (lambda: kvbudget.plan(gpu=1), InvalidArgumentError, "gpu must be a GPU name"),
        (lambda: kvbudget.plan(state_dtype=None), InvalidArgumentError, "unknown state_dtype"),
        (lambda: kvbudget.cache_cost(None), InvalidArgumentError, "model must be a ModelSpec"),
        (
            lambda: kvbudget.cache_cost_detail("meta-llama/Llama-3.1-8B-Instruct"),
            InvalidArgumentError,
            "model must be a ModelSpec",
        ),
        (lambda: kvbudget.count_params(None), InvalidArgumentError, "model must be a ModelSpec"),
        (lambda: kvbudget.weights_bytes("x"), InvalidArgumentError, "model must be a ModelSpec"),
        (lambda: kvbudget.emit(None, "vllm"), InvalidArgumentError, "plan must be a Plan"),
        (lambda: kvbudget.emit(_small_plan(), 3), InvalidArgumentError, "unknown engine 3"),  # type: ignore[arg-type]
        (lambda: kvbudget.emit(_small_plan()), InvalidArgumentError, "no settings to emit"),
        (
            lambda: kvbudget.parse_config([], source="x.json", name="x"),  # type: ignore[arg-type]
            ConfigError,
            "x.json: expected a JSON object",
        ),
        (
            lambda: kvbudget.SpecDecodeCache.from_plan(None),  # type: ignore[arg-type]
            InvalidArgumentError,
            "plan must be a Plan",
        ),
    ],
)
def test_api_type_mistakes_are_typed_errors(
    call: object, error: type[Exception], words: str
) -> None:
    assert callable(call)
    with pytest.raises(error, match=words):
        call()


def test_cache_operation_type_mistakes_are_typed_and_change_nothing() -> None:
    cache = kvbudget.SpecDecodeCache.from_plan(_small_plan())
    rid = kvbudget.RequestId("r")
    bad_prompts: list[object] = [None, 5, "abc", [1.5], [None]]
    for prompt in bad_prompts:
        with pytest.raises(InvalidCacheOperationError, match="int token ids"):
            cache.admit(rid, prompt)  # type: ignore[arg-type]
    with pytest.raises(InvalidCacheOperationError, match="hashable"):
        cache.admit([1], [1, 2])  # type: ignore[arg-type]
    with pytest.raises(InvalidCacheOperationError, match="extra_keys"):
        cache.admit(rid, [1, 2], extra_keys=([1],))
    assert len(cache) == 0
    cache.check_invariants()

    cache.admit(rid, list(range(100)))
    cache.reserve(rid, 4)
    for accepted in (None, 3, "ab", (t for t in (1, 2))):
        with pytest.raises(InvalidCacheOperationError, match="int token ids"):
            cache.commit(rid, accepted)  # type: ignore[arg-type]
    assert (cache.num_tokens(rid), cache.num_reserved(rid)) == (100, 4)
    with pytest.raises(UnknownRequestError):
        cache.reserve([1], 1)  # type: ignore[arg-type]
    with pytest.raises(UnknownRequestError):
        cache.block_table([1], "target")  # type: ignore[arg-type]
    cache.check_invariants()


@pytest.mark.parametrize(
    ("patch", "match"),
    [
        ({"num_hidden_layers": 2**40}, "more than any real model has"),
        ({"num_hidden_layers": 2**70}, "more than any real model has"),
        ({"hidden_size": 10**9}, "more than any real model has"),
    ],
)
def test_absurd_config_counts_are_config_errors(
    tmp_path: Any, patch: dict[str, int], match: str
) -> None:
    import json

    from kvbudget import ConfigError, load_model

    path = tmp_path / "config.json"
    config = {
        "model_type": "llama",
        "hidden_size": 1024,
        "num_hidden_layers": 4,
        "num_attention_heads": 16,
        "num_key_value_heads": 4,
        "max_position_embeddings": 4096,
        "vocab_size": 32000,
        "intermediate_size": 2816,
        **patch,
    }
    path.write_text(json.dumps(config))
    with pytest.raises(ConfigError, match=match):
        load_model(str(path))


def test_deeply_nested_and_mistyped_configs_are_config_errors(tmp_path: Any) -> None:
    import json

    from kvbudget import ConfigError, load_model, plan

    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ConfigError, match="nested too deeply"):
        load_model(str(deep))
    qwen = json.loads(
        (
            __import__("importlib.resources", fromlist=["files"]).files("kvbudget")
            / "data/models/Qwen--Qwen3-235B-A22B.json"
        ).read_text()
    )
    qwen["mlp_only_layers"] = 3
    path = tmp_path / "config.json"
    path.write_text(json.dumps(qwen))
    with pytest.raises(ConfigError, match="mlp_only_layers"):
        plan(str(path), spec="none", max_seq_len=4096)  # weights are counted: --gpu H200
