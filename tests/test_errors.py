"""The exception tree of kvbudget.errors and its re-export from the package."""

from __future__ import annotations

import inspect

import pytest

import kvbudget
from kvbudget import errors
from kvbudget.errors import (
    CacheError,
    ConfigError,
    InfeasibleBudgetError,
    InvalidArgumentError,
    InvalidCacheOperationError,
    KvBudgetError,
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
    (InvalidArgumentError, KvBudgetError, ValueError),
    (InfeasibleBudgetError, KvBudgetError, ValueError),
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
