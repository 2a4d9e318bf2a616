"""records.NamedRecord: the same class ``typing.NamedTuple`` would build, made without evaluating the
annotations (base/records.py); each test compares with what ``typing.NamedTuple`` does."""

from __future__ import annotations

import pickle
from typing import NamedTuple, get_type_hints

import pytest

from driver_container.base.records import NamedRecord


class Point(NamedRecord):
    """A point."""

    x: int
    label: str | None = None
    tags: tuple[str, ...] = ()

    @property
    def shown(self) -> str:
        return f"{self.label or '?'}@{self.x}"

    def moved(self, by: int) -> Point:
        return self._replace(x=self.x + by)


class TypedPoint(NamedTuple):
    x: int
    label: str | None = None
    tags: tuple[str, ...] = ()


def test_fields_defaults_and_methods_match_typing_namedtuple() -> None:
    p = Point(3)
    assert (Point._fields, Point._field_defaults) == (TypedPoint._fields, TypedPoint._field_defaults)
    assert tuple(p) == tuple(TypedPoint(3)) == (3, None, ())
    assert isinstance(p, tuple)
    assert repr(p) == "Point(x=3, label=None, tags=())"
    assert (p.shown, p.moved(2)) == ("?@3", Point(5))
    assert p._asdict() == {"x": 3, "label": None, "tags": ()}
    assert (Point.__doc__, Point.__module__, Point.__qualname__) == ("A point.", __name__, "Point")
    with pytest.raises(AttributeError):
        p.x = 4  # type: ignore[misc]


def test_pickles_as_the_forked_children_need() -> None:
    p = Point(1, "a", ("t",))
    assert pickle.loads(pickle.dumps(p)) == p


def test_annotations_stay_strings_and_still_resolve() -> None:
    assert Point.__annotations__ == {"x": "int", "label": "str | None", "tags": "tuple[str, ...]"}
    assert get_type_hints(Point) == get_type_hints(TypedPoint)


def test_a_field_without_default_after_one_with_is_refused_as_by_typing() -> None:
    with pytest.raises(TypeError):

        class Bad(NamedTuple):
            a: int = 0
            b: int  # type: ignore[misc]

    with pytest.raises(TypeError, match="follows one with a default"):

        class AlsoBad(NamedRecord):
            a: int = 0
            b: int  # type: ignore[misc]


def test_other_bases_are_refused() -> None:
    class Mixin:
        pass

    with pytest.raises(TypeError, match="no other base"):

        class Mixed(NamedRecord, Mixin):  # type: ignore[misc]
            a: int
