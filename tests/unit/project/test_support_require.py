"""A missing test dependency is a failure under CI=true, a skip elsewhere (never a silent CI skip)."""

from __future__ import annotations

import pytest
from helpers import support


def test_missing_module_fails_under_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(support, "IN_CI", True)
    with pytest.raises(pytest.fail.Exception, match="no_such_module_for_the_test"):
        support.require_module("no_such_module_for_the_test")


def test_missing_module_skips_on_a_developer_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(support, "IN_CI", False)
    with pytest.raises(pytest.skip.Exception):
        support.require_module("no_such_module_for_the_test")


def test_present_module_is_returned() -> None:
    assert support.require_module("json").dumps([]) == "[]"
