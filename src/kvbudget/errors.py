"""Every error kvbudget raises on purpose.

One small tree, so a caller can catch exactly what it can handle::

    KvBudgetError                     base of everything below
    ├── ConfigError (ValueError)      a model config cannot be read: names the file and field
    │   ├── UnknownModelError         no preset, no file and no Hub repo by that name (or
    │   │                             offline without a cached copy)
    │   ├── UnsupportedArchitectureError
    │   └── HubAccessError            the Hugging Face Hub would not serve a model: gated or
    │                                 private (401/403), rate-limited (429), unreachable
    ├── InvalidArgumentError (ValueError)
    │                                 a value passed by the caller is out of range: a dtype,
    │                                 a size, tp/pp, a GPU name, a tier
    ├── InfeasibleBudgetError (ValueError)
    │   │                             the budget cannot hold the fixed costs (or the
    │   │                             requested batch / length); says what would fit
    │   └── EngineRefusedError        the engine would refuse to start; carries the plan
    ├── ModelOutputError (ArithmeticError)
    │                                 a model's forward pass gave logits that cannot be
    │                                 decoded (NaN, infinite, overflowing / temperature)
    └── CacheError                    the paged cache refused an operation; state unchanged
        ├── OutOfBlocksError          not enough free or evictable blocks in some pool
        ├── UnknownRequestError (KeyError)
        └── InvalidCacheOperationError (ValueError)
                                      e.g. admitting a request twice, committing more
                                      tokens than were reserved

Messages say what was needed, what was available and which setting to change.
"""

from __future__ import annotations


class KvBudgetError(Exception):
    """Base class of every error kvbudget raises on purpose."""


class ConfigError(KvBudgetError, ValueError):
    """A model config is malformed, incomplete or inconsistent.

    ``source`` names the file (or preset) and ``field`` the offending key, when known.
    """

    def __init__(self, message: str, *, source: str = "", field: str = "") -> None:
        self.source = source
        self.field = field
        where = f"{source}: " if source else ""
        what = f"field '{field}': " if field else ""
        super().__init__(f"{where}{what}{message}")


class UnknownModelError(ConfigError):
    """Neither a built-in preset nor a readable config file matches the given name."""


class UnsupportedArchitectureError(ConfigError):
    """The config describes an architecture kvbudget does not model."""


class HubAccessError(ConfigError):
    """The Hugging Face Hub would not serve a model's files and no cached copy holds them.

    ``repo_id`` names the repository and ``status`` the HTTP status the Hub answered
    (401, 403, 429, 5xx), None when it could not be reached at all.
    """

    def __init__(
        self, message: str, *, repo_id: str, status: int | None = None, source: str = ""
    ) -> None:
        self.repo_id = repo_id
        self.status = status
        super().__init__(message, source=source)


class InvalidArgumentError(KvBudgetError, ValueError):
    """A value passed by the caller is invalid (unknown dtype, negative size, bad tp...)."""


class InfeasibleBudgetError(KvBudgetError, ValueError):
    """A budget cannot cover what is asked of it (fixed costs, batch, sequence length)."""


class EngineRefusedError(InfeasibleBudgetError):
    """The engine would refuse to start with the plan's settings.

    ``plan`` is the whole plan, whose ``engine.refusals`` say why in the engine's words
    (a caller comparing deployments lists it with its reason instead of dropping it).
    ``warnings``: what the plan says besides, about the deployment itself (its budget,
    models and tiers; not the engine's figures for pools it will not build), which a
    user fixing the refusal needs as well.
    """

    def __init__(
        self, message: str, *, plan: object = None, warnings: tuple[str, ...] = ()
    ) -> None:
        self.plan = plan
        self.warnings = warnings
        super().__init__(message)


class ModelOutputError(KvBudgetError, ArithmeticError):
    """A model produced logits the engine cannot decode: NaN or infinite values, or ones
    that overflow float32 once divided by the temperature. Names the role."""


class CacheError(KvBudgetError):
    """The paged cache refused an operation; the cache state is unchanged."""


class OutOfBlocksError(CacheError):
    """Not enough free or evictable blocks for an operation, in some role and tier.

    Besides the message it carries what a scheduler needs to decide how much to preempt:
    ``role`` ("target"/"draft"), ``tier`` ("gpu"/"host"/"disk"), ``pool`` ("kv",
    "window<N>" or "state"), ``needed`` blocks (or slots) and ``available`` ones (free or
    evictable); None/0 when raised without them.
    """

    def __init__(
        self,
        message: str,
        *,
        role: str | None = None,
        tier: str | None = None,
        pool: str | None = None,
        needed: int = 0,
        available: int = 0,
    ) -> None:
        super().__init__(message)
        self.role = role
        self.tier = tier
        self.pool = pool
        self.needed = needed
        self.available = available


class UnknownRequestError(CacheError, KeyError):
    """An operation named a request id the cache does not hold."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the message readable
        return str(self.args[0]) if self.args else ""


class InvalidCacheOperationError(CacheError, ValueError):
    """An operation that is not valid in the request's current state."""
