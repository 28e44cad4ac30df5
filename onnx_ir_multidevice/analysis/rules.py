"""Registries of per-operator rules: one small function per op (or op family), found by key.

What the analysis knows about an operator (how to compute its small integer outputs, how many
FLOPs it costs...) is written as a small function and registered under its op type and domain,
as onnxscript's rewriter and optimizer register theirs: adding an operator is one rule in one
place, not an edit of a central ``if``/``elif`` chain. Each kind of rule has one
:class:`RuleRegistry`, beside the code that applies it (``shape_data.RULES``,
``planner.flops.RULES``)::

    RULES: RuleRegistry[Callable[[ir.Node], int]] = RuleRegistry("example")

    @RULES.register("Add", "Sub")
    def _binary(node: ir.Node) -> int: ...

    rule = RULES.get(node.domain, node.op_type)  # None: no rule for this op

The ONNX default domain is spelled ``""`` or ``"ai.onnx"``; a rule registered for one is found
under both. A rule registered for :data:`ANY_DOMAIN` matches its op type in every domain that has
no rule of its own (``com.microsoft`` fuses many standard ops under their own names).

.. versionadded:: 0.1
"""

from __future__ import annotations

__all__ = ["ANY_DOMAIN", "RuleRegistry"]

from collections.abc import Callable, Iterator
from typing import Final, Generic, TypeVar

T = TypeVar("T")

ANY_DOMAIN: Final = "*"
"""The domain of a rule that matches its op type in every domain without a rule of its own."""

_DEFAULT_DOMAINS = ("", "ai.onnx")
_MISSING: Final = object()


class RuleRegistry(Generic[T]):
    """Rules of one kind by ``(domain, op_type)``; a lookup is one dictionary access.

    Args:
        name: What the rules compute, for messages (``"FLOPs"``, ``"shape data"``).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        """What the rules compute, for messages."""
        self._rules: dict[tuple[str, str], T] = {}
        self._any_domain: dict[str, T] = {}
        self._op_types: frozenset[str] = frozenset()
        # What get answers, by key: filled on first use, emptied when a rule is added.
        self._resolved: dict[tuple[str, str], T | None] = {}

    def register(self, op_type: str, *more_op_types: str, domain: str = "") -> Callable[[T], T]:
        """A decorator registering its argument as the rule of ``op_type`` (and the others).

        Args:
            op_type: The op type the rule computes.
            more_op_types: Further op types the same rule computes (an op family).
            domain: Their domain: ``""`` (also ``"ai.onnx"``), another domain, or
                :data:`ANY_DOMAIN`.

        Returns:
            The decorator; it returns the rule unchanged.

        Raises:
            ValueError: An op type of the domain already has a rule in this registry.
        """

        def decorator(rule: T) -> T:
            self.add(rule, op_type, *more_op_types, domain=domain)
            return rule

        return decorator

    def add(self, rule: T, *op_types: str, domain: str = "") -> None:
        """Register ``rule`` for each of ``op_types`` (what :meth:`register` does).

        Raises:
            ValueError: An op type of the domain already has a rule in this registry.
        """
        for op_type in op_types:
            if domain == ANY_DOMAIN:
                if op_type in self._any_domain:
                    raise ValueError(f"two {self.name} rules for {op_type!r} in any domain")
                self._any_domain[op_type] = rule
            else:
                domains = _DEFAULT_DOMAINS if domain in _DEFAULT_DOMAINS else (domain,)
                keys = [(d, op_type) for d in domains]
                if any(key in self._rules for key in keys):
                    raise ValueError(f"two {self.name} rules for {op_type!r} in {domain!r}")
                self._rules.update(dict.fromkeys(keys, rule))
            self._op_types |= {op_type}
        self._resolved.clear()

    def get(self, domain: str, op_type: str) -> T | None:
        """The rule of ``op_type`` in ``domain`` (an :data:`ANY_DOMAIN` one otherwise), or None.

        One dictionary access once a key has been asked for (answers are remembered).
        """
        key = (domain, op_type)
        found = self._resolved.get(key, _MISSING)
        if found is _MISSING:
            found = self._rules.get(key)
            if found is None:
                found = self._any_domain.get(op_type)
            self._resolved[key] = found
        return found  # type: ignore[return-value]  # a T or None, not _MISSING any more

    def op_types(self) -> frozenset[str]:
        """Every op type with a rule, in any domain (a quick filter before :meth:`get`)."""
        return self._op_types

    def __contains__(self, key: object) -> bool:
        """Whether a ``(domain, op_type)`` pair has a rule (as :meth:`get` finds it)."""
        return isinstance(key, tuple) and len(key) == 2 and self.get(*key) is not None

    def __iter__(self) -> Iterator[tuple[str, str]]:
        """Every registered ``(domain, op_type)``, the default domain once (as ``""``).

        Rules of every domain come as ``(ANY_DOMAIN, op_type)``.
        """
        for domain, op_type in self._rules:
            if domain != "ai.onnx":
                yield domain, op_type
        for op_type in self._any_domain:
            yield ANY_DOMAIN, op_type

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"RuleRegistry({self.name!r}, {len(self)} rules)"
