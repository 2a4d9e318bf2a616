"""Every parser survives arbitrary and mutated input: only DriverContainerError subclasses escape.

Bounded so it runs in the normal suite (~200 examples per target, no deadline: CI machines are shared).
The longer, coverage-guided run of the same targets is bench/fuzz.py.
"""

from __future__ import annotations

import pytest
from helpers.fuzz_mutate import mutated
from helpers.fuzz_targets import TARGETS, Target
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from driver_container.base.errors import DriverContainerError

BOUNDED = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NAMES = sorted(TARGETS)


def _survives(target: Target, data: bytes) -> None:
    try:
        target.run(data)
    except DriverContainerError as exc:
        assert exc.message, f"{type(exc).__name__} without a message"  # errors must say what was found


@pytest.mark.parametrize("name", NAMES)
def test_real_samples_parse(name: str) -> None:
    target = TARGETS[name]
    seeds = target.seeds()
    assert seeds, f"{name}: no sample to mutate"
    for seed in seeds:
        target.run(seed)  # the unmutated samples are valid: any exception here is a parser bug


@pytest.mark.parametrize("name", NAMES)
@BOUNDED
@given(data=st.binary(max_size=4096))
def test_arbitrary_bytes(name: str, data: bytes) -> None:
    _survives(TARGETS[name], data)


@pytest.mark.parametrize("name", NAMES)
@BOUNDED
@given(choice=st.data())
def test_mutated_samples(name: str, choice: st.DataObject) -> None:
    target = TARGETS[name]
    seed = choice.draw(st.sampled_from(target.seeds()))
    _survives(target, choice.draw(mutated(seed)))


TEXT_NAMES = [n for n in NAMES if n not in ("module", "ld_cache", "elf_deps")]


@pytest.mark.parametrize("name", TEXT_NAMES)
@BOUNDED
@given(text=st.text(max_size=2000))
def test_arbitrary_text(name: str, text: str) -> None:
    # Unicode corner cases (surrogate-free, NUL, \x85, \u2028 line separators that str.splitlines splits on).
    _survives(TARGETS[name], text.encode("utf-8", errors="surrogatepass"))


# Characters for which str.isdigit() is true (or int() accepts them) but that no kernel or server writes:
# superscript, Arabic-Indic, fullwidth, mathematical bold, Devanagari; plus digit-adjacent oddities.
UNICODE_DIGITS = ("²", "٣", "３", "𝟗", "७", "\u00a0", "_")


def _with_unicode_digits(seed: bytes, replacement: str, every: int) -> bytes:
    text = seed.decode("utf-8", errors="replace")
    count = 0
    out = []
    for ch in text:
        if ch.isascii() and ch.isdigit():
            count += 1
            if count % every == 0:
                out.append(replacement)
                continue
        out.append(ch)
    return "".join(out).encode()


@pytest.mark.parametrize("name", TEXT_NAMES)
@pytest.mark.parametrize("replacement", UNICODE_DIGITS)
def test_unicode_digits_in_every_numeric_field(name: str, replacement: str) -> None:
    """ "²".isdigit() is true and int("²") raises; every parser must refuse or skip."""
    for seed in TARGETS[name].seeds():
        for every in (1, 2, 3):
            _survives(TARGETS[name], _with_unicode_digits(seed, replacement, every))


@pytest.mark.parametrize("name", TEXT_NAMES)
@BOUNDED
@given(choice=st.data())
def test_random_unicode_digits(name: str, choice: st.DataObject) -> None:
    seed = choice.draw(st.sampled_from(TARGETS[name].seeds()))
    digit = st.characters(categories=["Nd", "No"]) | st.sampled_from(UNICODE_DIGITS)
    _survives(TARGETS[name], _with_unicode_digits(seed, choice.draw(digit), choice.draw(st.integers(1, 5))))


# Plain lines, shell syntax and every whitespace Python knows but shlex does not (\x0b, \x1c, \xa0...).
_CONF_CHARS = st.sampled_from(list("NVreg_=1a. \t'\"\\#\x0b\x0c\x1c\x85\xa0\u2028-"))


@BOUNDED
@given(line=st.text(_CONF_CHARS, max_size=40))
def test_conf_word_split_is_shlex(line: str) -> None:
    """modconf.shell_words skips importing shlex on plain lines: it must split exactly as shlex does."""
    import shlex

    from driver_container.formats.modconf import shell_words

    try:
        expected: list[str] | None = shlex.split(line, comments=True)
    except ValueError:
        expected = None
    if expected is None:
        with pytest.raises(ValueError):
            shell_words(line)
    else:
        assert shell_words(line) == expected


# ASCII names and what str.isidentifier also accepts (letters and digits of other scripts, combining marks).
_NAME_CHARS = st.sampled_from(list("aZ_09.-= ÉªℕΣ٣\u0300"))


@BOUNDED
@given(text=st.text(_NAME_CHARS, max_size=8))
def test_ascii_name_is_the_c_identifier_pattern(text: str) -> None:
    """numbers.is_ascii_name replaced the regex in settings, fabricmanager.cfg and os-release parsing."""
    import re

    from driver_container.formats.numbers import is_ascii_name

    assert is_ascii_name(text) == bool(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text))
