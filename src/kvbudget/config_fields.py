"""Typed reads of a Hugging Face config: the one reader every architecture uses.

:class:`ConfigFields` wraps the (text) config mapping of one file. Every read checks the
value's type and range and, on failure, raises a :class:`~kvbudget.errors.ConfigError`
that names the file and the field (with its ``text_config.`` / ``vision_config.``
prefix when nested).
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from typing import Any

from kvbudget.errors import ConfigError

# No count in a real config comes near this (vocabularies are ~10^5-10^6, hidden sizes
# ~10^4, layers ~10^2, contexts up to Llama-4 Scout's 10,485,760 positions); a larger one
# is a mistake that would otherwise make the planner build billions of layer objects.
MAX_CONFIG_COUNT = 100_000_000


class ConfigFields:
    """Typed access to one config mapping; every failure names the source and field.

    ``missing`` is the message for a required field that is absent (the weight counter
    says what it needed the field for).
    """

    def __init__(
        self,
        cfg: Mapping[str, Any],
        source: str,
        prefix: str = "",
        *,
        missing: str = "required but missing",
    ) -> None:
        self.cfg = cfg
        self.source = source
        self.prefix = prefix
        self.missing = missing

    def error(self, key: str, message: str) -> ConfigError:
        """A ConfigError about field ``key`` of this config."""
        return ConfigError(message, source=self.source, field=self.prefix + key)

    def has(self, key: str) -> bool:
        """Whether ``key`` is present and not null."""
        return self.cfg.get(key) is not None

    def get(self, key: str, default: Any = None) -> Any:
        """The raw value of ``key`` (unchecked)."""
        return self.cfg.get(key, default)

    def int(
        self, key: str, default: builtins.int | None = None, *, minimum: builtins.int = 1
    ) -> builtins.int:
        """An integer ``>= minimum`` (``default`` when absent; required when None)."""
        value = self.cfg.get(key)
        if value is None:
            if default is None:
                raise self.error(key, self.missing)
            return default
        if isinstance(value, bool) or not isinstance(value, builtins.int):
            raise self.error(key, f"expected an integer, got {value!r}")
        if value < minimum:
            raise self.error(key, f"must be >= {minimum}, got {value}")
        if value > MAX_CONFIG_COUNT:
            raise self.error(
                key,
                f"{value} is more than any real model has (kvbudget reads counts up to "
                f"{MAX_CONFIG_COUNT:,})",
            )
        return value

    def flag(self, key: str, default: bool) -> bool:
        """A boolean (``default`` when absent)."""
        value = self.cfg.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {value!r}")
        return value

    def head_dim(self, key: str = "head_dim") -> builtins.int:
        """``key`` when given, else ``hidden_size / num_attention_heads`` (exact)."""
        if self.has(key):
            return self.int(key)
        hidden = self.int("hidden_size")
        heads = self.int("num_attention_heads")
        if hidden % heads:
            raise self.error(
                key,
                f"missing, and hidden_size {hidden} is not divisible by "
                f"num_attention_heads {heads}",
            )
        return hidden // heads

    def str_list(self, key: str, length: builtins.int) -> list[str]:
        """A list of ``length`` strings (one per layer)."""
        value = self.cfg.get(key)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(key, f"expected a list of strings, got {value!r}")
        if len(value) != length:
            raise self.error(key, f"has {len(value)} entries but the model has {length} layers")
        return value

    def nested(self, key: str) -> ConfigFields:
        """The fields of the nested mapping ``key`` (``vision_config``), same source."""
        value = self.cfg.get(key)
        if not isinstance(value, Mapping):
            raise self.error(key, self.missing)
        return ConfigFields(value, self.source, f"{self.prefix}{key}.", missing=self.missing)


__all__ = ["MAX_CONFIG_COUNT", "ConfigFields"]
