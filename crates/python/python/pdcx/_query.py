"""Value queries: :class:`Condition` (conditions on objects' elements, combined with & and |),
its wire form for the servers, and :class:`Hits`, what a query found."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from ._native import InvalidArgumentError

if TYPE_CHECKING:  # annotations only: objects import this module to build conditions
    from ._object import Object


class Condition:
    """A condition on objects' elements, built from objects: ``(energy > 1.2) & (x < 100)``
    (``&``, ``|``; ``obj.eq(v)`` for equality). Evaluated by the servers where the data lives
    (:meth:`Client.where`, :meth:`Object.where`); objects of one query must have one shape."""

    def __init__(self, expr: dict, objects: list[Object]):
        self._expr = expr
        self._objects = objects

    @staticmethod
    def _cond(obj: Object, op: str, value: Any) -> Condition:
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise InvalidArgumentError(f"a condition compares elements with a number, got {value!r}")
        if isinstance(value, (int, np.integer)):
            v = int(value)
            if -(2**63) <= v < 2**63:
                scalar = {"Int": v}
            elif 0 <= v < 2**64:
                scalar = {"UInt": v}
            else:
                raise InvalidArgumentError(f"{v} does not fit 64 bits")
        else:
            f = float(value)
            if not np.isfinite(f):
                raise InvalidArgumentError(f"compare elements with a finite number, not {f}")
            scalar = {"Float": f}
        return Condition({"Cond": {"obj": obj.id, "op": op, "value": scalar}}, [obj])

    @staticmethod
    def _parse_on(obj: Object, text: str) -> Condition:
        """``"> 0.95 & < 2"``: conditions on one object, joined by & and |."""
        import re

        ops = {">=": "Ge", "<=": "Le", ">": "Gt", "<": "Lt", "==": "Eq"}
        parts = re.split(r"\s*(&&?|\|\|?)\s*", text.strip())
        cond = None
        join = None
        for i, part in enumerate(parts):
            if i % 2:
                join = part[0]
                continue
            m = re.fullmatch(r"(>=|<=|==|>|<)\s*(\S+)", part)
            if not m:
                raise InvalidArgumentError(f"cannot parse {part!r} in {text!r}; example: '> 0.95 & < 2'")
            num = m.group(2)
            try:
                value = int(num)
            except ValueError:
                try:
                    value = float(num)
                except ValueError:
                    raise InvalidArgumentError(f"{num!r} is not a number in {text!r}") from None
            c = Condition._cond(obj, ops[m.group(1)], value)
            cond = c if cond is None else (cond & c if join == "&" else cond | c)
        if cond is None:
            raise InvalidArgumentError("empty condition")
        return cond

    def _join(self, other: Condition, how: str) -> Condition:
        if not isinstance(other, Condition):
            return NotImplemented
        objs = list(self._objects) + [o for o in other._objects if all(o.id != p.id for p in self._objects)]
        return Condition({how: [self._expr, other._expr]}, objs)

    def __and__(self, other: Condition) -> Condition:
        return self._join(other, "And")

    def __or__(self, other: Condition) -> Condition:
        return self._join(other, "Or")

    def __bool__(self) -> bool:
        raise TypeError("a pdcx Condition has no truth value: combine conditions with & and |, not 'and'/'or'")

    def __repr__(self) -> str:
        names = {o.id: o.name for o in self._objects}

        def show(e: dict) -> str:
            ((k, v),) = e.items()
            if k == "Cond":
                sym = {"Gt": ">", "Ge": ">=", "Lt": "<", "Le": "<=", "Eq": "=="}[v["op"]]
                ((_, val),) = v["value"].items()
                return f"{names.get(v['obj'], v['obj'])} {sym} {val}"
            return f"({show(v[0])} {'&' if k == 'And' else '|'} {show(v[1])})"

        return f"Condition({show(self._expr)})"


def _postfix(expr: dict) -> list:
    """A condition tree as the servers take it: its nodes in postfix order (conditions, then
    "And"/"Or" combining the last two), so decoding never recurses."""
    ((kind, v),) = expr.items()
    if kind == "Cond":
        return [expr]
    return _postfix(v[0]) + _postfix(v[1]) + [kind]


class Hits:
    """What a value query found: ``count``; ``coords`` (an ``(count, ndim)`` uint64 array,
    C order of the hits); ``values`` (the first asked object's values at the hits) and
    ``values_of[name]`` for each asked object; ``min``/``max`` of the first object's hit
    values; ``histogram`` when bins were asked; ``scanned_bytes``/``skipped_bytes``: object
    data the servers read, and skipped thanks to per-extent statistics."""

    def __init__(self, answer: dict, coords: np.ndarray | None, values_of: dict):
        self.count = int(answer["nhits"])
        self.coords = coords
        self.values_of = values_of
        self.values = next(iter(values_of.values())) if values_of else None
        self.min = answer.get("min")
        self.max = answer.get("max")
        self.histogram = list(answer.get("histogram") or [])
        self.scanned_bytes = int(answer.get("scanned_bytes", 0))
        self.skipped_bytes = int(answer.get("skipped_bytes", 0))

    def __len__(self) -> int:
        return self.count

    def __repr__(self) -> str:
        return f"Hits(count={self.count}, min={self.min}, max={self.max})"
