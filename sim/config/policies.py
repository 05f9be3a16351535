"""Families of policies (schedulers, routers, autoscalers, cost models).

Each family lives in its own package and registers its members there: a config model
(whose ``type:`` names it in YAML) and what that config builds (a class or a builder).
The scenario accepts, for each family's field, the union of the registered configs, so
adding a policy touches only its package; one registered later (a plugin, a test's toy
policy) is added to the scenario's fields at once.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Callable, Union

from pydantic import BaseModel, Field


class Family(Mapping):
    """The members of one family: config model -> what it builds (a mapping)."""

    def __init__(self, name: str, members: dict[type[BaseModel], Any],
                 base: type[BaseModel]) -> None:
        """``base``: the config every member extends, which declares what callers may ask
        of a member without naming it (the family's contract)."""
        self.name = name
        self.base = base
        for config in members:
            self._check_base(config)
        self._members = dict(members)
        # (model, field, wrap): the scenario fields that accept this family's union
        self._fields: list[tuple[type[BaseModel], str, Callable[[Any], Any]]] = []
        self._dependents: list[type[BaseModel]] = []

    # a read-only mapping config model -> what it builds (and a swap of what an existing
    # member builds, for tests that put a reference implementation in its place)
    def __getitem__(self, config: type[BaseModel]) -> Any:
        return self._members[config]

    def __setitem__(self, config: type[BaseModel], built: Any) -> None:
        if config not in self._members:
            raise KeyError(f"{config.__name__} is not a {self.name}; register it")
        self._members[config] = built

    def __iter__(self):
        return iter(self._members)

    def __len__(self) -> int:
        return len(self._members)

    def union(self) -> Any:
        """The configs as one discriminated union (on ``type``)."""
        configs = tuple(self._members)
        return Annotated[Union[configs], Field(discriminator="type")]   # noqa: UP007

    def configs(self) -> tuple[type[BaseModel], ...]:
        return tuple(self._members)

    def built_by(self, cfg: BaseModel) -> Any:
        """What ``cfg``'s policy builds (its class or builder)."""
        try:
            return self._members[type(cfg)]
        except KeyError:
            raise TypeError(f"not a {self.name} config: {type(cfg).__name__}") from None

    def accepted_by(self, model: type[BaseModel], field: str,
                    wrap: Callable[[Any], Any] = lambda union: union,
                    dependents: tuple[type[BaseModel], ...] = ()) -> None:
        """Note that ``model.field`` takes this family's union (``wrap`` adds, say,
        ``| None``), and which models hold ``model`` (rebuilt after it)."""
        self._fields.append((model, field, wrap))
        self._dependents.extend(dependents)

    def register(self, config: type[BaseModel], built: Any) -> None:
        """Add a policy: ``config`` (with a ``type: Literal[...]`` field no other member
        uses) and what it builds; the scenario's fields accept it from now on."""
        self._check_base(config)
        kind = config.model_fields["type"].default
        taken = {c.model_fields["type"].default: c for c in self._members}
        if kind in taken and taken[kind] is not config:
            raise ValueError(f"{self.name} type '{kind}' is taken by {taken[kind].__name__}")
        self._members[config] = built
        self._rebuild()

    def _check_base(self, config: type[BaseModel]) -> None:
        if not (isinstance(config, type) and issubclass(config, self.base)):
            raise TypeError(f"a {self.name} config extends {self.base.__module__}."
                            f"{self.base.__name__} (what callers may ask of a {self.name}); "
                            f"{getattr(config, '__name__', config)!s} does not")

    def unregister(self, config: type[BaseModel]) -> None:
        """Take a registered policy out again (a plugin unloaded, a test's toy)."""
        del self._members[config]
        self._rebuild()

    def _rebuild(self) -> None:
        for model, field, wrap in self._fields:
            info = model.model_fields[field]
            info.annotation = wrap(self.union())
            info.discriminator = None          # the union carries it
            model.model_rebuild(force=True)
        for model in self._dependents:
            model.model_rebuild(force=True)
