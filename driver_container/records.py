"""``NamedRecord``: the project's immutable records, ``typing.NamedTuple`` to mypy, cheaper to create at run time.

On CPython 3.11 ``class X(typing.NamedTuple)`` runs ``typing._type_check`` on every field's annotation;
under ``from __future__ import annotations`` each one is a string, turned into a ``ForwardRef`` and
compiled (Lib/typing.py, ``_make_nmtuple``). That is ~0.07 ms a class, ~3% of the instructions of an
unchanged ``init`` restart, which creates ~43 records (callgrind, bench/startup.py). ``NamedRecord``
builds the same class from ``collections.namedtuple`` - fields, defaults, methods, properties, docstring,
module and qualified name, so pickling and ``_replace``/``_asdict`` work as before - and keeps the
annotations as the strings they are (``typing.get_type_hints`` resolves them on demand). To mypy it is
``typing.NamedTuple`` itself, so every check of the fields stays.

Not supported, and refused: other bases (``class X(NamedRecord, Other)``). A field without a default after
one with a default is refused as ``typing.NamedTuple`` refuses it.
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING, Any

__all__ = ["NamedRecord"]

if TYPE_CHECKING:
    from typing import NamedTuple as NamedRecord
else:
    # What the class statement puts in the namespace that is not the record's own; collections.namedtuple
    # sets its own module.
    _NOT_COPIED = frozenset({"__module__", "__annotations__", "__classcell__"})

    class _RecordMeta(type):
        def __new__(mcs, typename: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> type:
            if not bases:  # ``NamedRecord`` itself
                return super().__new__(mcs, typename, bases, namespace)
            if len(bases) != 1:
                raise TypeError(f"{typename}: a NamedRecord has no other base")
            annotations: dict[str, Any] = namespace.get("__annotations__", {})
            fields = list(annotations)
            with_default = [name for name in fields if name in namespace]
            if with_default != fields[len(fields) - len(with_default):]:
                raise TypeError(f"{typename}: a field without a default follows one with a default")
            cls = collections.namedtuple(
                typename, fields, defaults=[namespace[name] for name in with_default], module=namespace["__module__"]
            )
            cls.__annotations__ = dict(annotations)
            for key, value in namespace.items():
                if key not in _NOT_COPIED and key not in annotations:
                    setattr(cls, key, value)
            return cls

    class NamedRecord(metaclass=_RecordMeta):
        """Base of the project's records (see the module doc)."""
