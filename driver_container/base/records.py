"""``NamedRecord``: a light immutable record for the measured start-up paths; everywhere else records are
``@dataclass(frozen=True, slots=True)``.

The paths are an unchanged ``init`` restart, the peermem probe and ``status`` (bench/README.md: their rows,
floors and targets). On CPython 3.11 a frozen dataclass compiles its generated methods with ``exec`` when
the class is created (Lib/dataclasses.py, ``_create_fn``), and ``class X(typing.NamedTuple)`` turns each
string annotation into a ``ForwardRef`` (Lib/typing.py, ``_make_nmtuple``). ``NamedRecord`` builds the
class from ``collections.namedtuple`` (its methods come from one template) and keeps the annotations as
the strings they are (``typing.get_type_hints`` resolves them on demand); to mypy it is
``typing.NamedTuple`` itself, so every check of the fields stays.

Measured (bench/records.py): ~0.05 ms a class, against ~0.5 ms a frozen slotted dataclass and ~7 ms to
import ``dataclasses``. An unchanged restart creates 48 records and imports no ``dataclasses``
(tests/integration/test_startup_imports.py): as dataclasses they would add ~30 ms to a ~100 ms process
whose target (1.5x ``import typer``) leaves ~40 ms for all of ``init``. ``status`` imports
``dataclasses`` anyway, but its own three records (the verdict's two, the toolkit feature) as dataclasses
cost ~3% of its CPU time, on a row near its target.

So ``NamedRecord`` is used exactly in the modules that an unchanged restart, the probe or ``status``
imports, listed in tests/unit/project/test_layout.py (``LIGHT_RECORD_MODULES``), which fails on any other use
and on a listed module that no longer uses it. Fields, defaults, methods, properties, docstring, module
and qualified name are the class's, so pickling and ``_replace``/``_asdict`` work as for
``typing.NamedTuple``.

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
            if with_default != fields[len(fields) - len(with_default) :]:
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
