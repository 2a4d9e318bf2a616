"""The kernel command line's copies in a bug report (pure), reduced to the arguments NVIDIA support needs.

Where the command line reaches the archive, and in which shape:

- the kernel's own records, "Kernel command line: ..." and on x86 "Command line: ..." (torvalds/linux
  init/main.c ``start_kernel``, arch/x86/kernel/setup.c ``setup_arch``), and "Unknown kernel command line
  parameters "...", will be passed to user space." (init/main.c ``print_unknown_bootoptions``). Read from
  /dev/kmsg, a record's control characters and backslashes arrive escaped as ``\\xNN`` (kernel/printk/
  printk.c: every byte below 0x20, from 0x7f, and ``\\``), so a tab between two arguments is the four
  characters ``\\x09``. Printed by ``dmesg`` or ``journalctl`` a record with a newline in it goes on in
  lines that start with blanks (their indent of a message's further lines);
- NVIDIA's ``nvidia-bug-report.sh`` appends /proc/cmdline as one section of its log, as for every file it
  copies (its ``append``/``report_file`` functions: nvidia-driver-bin 535.309.01-0+deb12u1 and
  550.163.01-2): a line of underscores, an empty line, ``*** /proc/cmdline``, ``*** ls: <ls -l of it>``,
  the file's bytes, an empty line; the next section starts with the next line of underscores.

The kernel splits its command line at white space outside double quotes (lib/cmdline.c ``next_arg``:
``isspace``, which in lib/ctype.c is tab, newline, vertical tab, form feed, carriage return, space and
0xA0), so the split here does too, with the escaped forms of those bytes: an argument after a ``\\x09``
is an argument of its own, never a part of the NVIDIA argument before it. A kept argument whose quoted
value holds white space keeps its name only.
"""

from __future__ import annotations

import re

REDACTED = b"<redacted>"
# The kernel's copies: the arguments run to the line's end, and on through lines starting with a blank.
KERNEL_RECORD = re.compile(
    rb"(?P<keep>\b(?:Kernel command line: |Command line: |Unknown kernel command line parameters \"))"
    rb"(?P<value>[^\r\n]*(?:\r?\n[ \t][^\r\n]*)*)"
)
_UNKNOWN_TAIL = b'", will be passed to user space.'
# nvidia-bug-report.sh's section header (``*** ls:`` optional: a bare "/proc/cmdline" line as well).
_SECTION_HEAD = re.compile(rb"^(?:\*\*\* )?/proc/cmdline\r?\n(?:\*\*\* ls: [^\r\n]*\r?\n)?", re.MULTILINE)
_SECTION_END = re.compile(rb"^_{20,}\r?$", re.MULTILINE)
# White space as the kernel's isspace() has it, raw or as /dev/kmsg escapes it ("\x5c" is an escaped
# backslash: matched first, so the text "\x09" a command line may hold literally stays one word).
_ESCAPE = re.compile(rb"\\x([0-9A-Fa-f]{2})")
_KERNEL_SPACE = frozenset(b" \t\n\v\f\r\xa0")
_ARGUMENT = re.compile(rb'(?:"[^"]*"?|[^ \t\n\v\f\r\xa0"])+')
_SPACE = re.compile(rb"[ \t\n\v\f\r\xa0]")
# Arguments NVIDIA support needs: the NVIDIA modules' parameters (nvidia.NVreg_*, nvidia-drm.modeset,
# nvidia_uvm.*), a bare NVreg_* (passed on to init), the firmware loader's search path (GSP firmware),
# and nouveau's and the blacklists' (a nouveau bound to the GPU keeps nvidia.ko from loading).
_KEPT_ARGUMENT = re.compile(
    rb"(?:nvidia|nouveau|NVreg)[\w.\-]*(?:=|$)|firmware_class\.[\w\-]+=|(?:module_blacklist|modprobe\.blacklist)="
)


def command_line_facts(arguments: bytes) -> tuple[bytes, int]:
    """The arguments of a kernel command line NVIDIA support needs, the others replaced by one count;
    and how many arguments were left out or had their value replaced."""
    kept: list[bytes] = []
    dropped = redacted = 0
    for argument in split_arguments(arguments):
        if not _KEPT_ARGUMENT.match(argument.lstrip(b'"')):
            dropped += 1
        elif _SPACE.search(argument):
            name, eq, _value = argument.partition(b"=")
            kept.append(name + eq + REDACTED if eq else REDACTED)
            redacted += 1
        else:
            kept.append(argument)
    if dropped:
        kept.append(b"<%d other arguments left out>" % dropped)
    return b" ".join(kept), dropped + redacted


def split_arguments(arguments: bytes) -> list[bytes]:
    """Words as the kernel splits them (lib/cmdline.c ``next_arg``): white space, except inside double
    quotes; ``\\xNN`` escapes of white space split as the bytes they stand for."""
    spaced = _ESCAPE.sub(_space_or_escape, arguments)
    return [m.group(0) for m in _ARGUMENT.finditer(spaced)]


def _space_or_escape(match: re.Match[bytes]) -> bytes:
    return b" " if int(match.group(1), 16) in _KERNEL_SPACE else match.group(0)


def reduce_kernel_record(match: re.Match[bytes]) -> tuple[bytes, int]:
    """A ``KERNEL_RECORD`` match with its arguments reduced (the unknown-parameters line keeps its tail)."""
    arguments = match.group("value")
    tail = _UNKNOWN_TAIL if arguments.endswith(_UNKNOWN_TAIL) else b""
    facts, count = command_line_facts(arguments[: len(arguments) - len(tail)])
    return match.group("keep") + facts + tail, count


def reduce_script_sections(data: bytes) -> tuple[bytes, int]:
    """``data`` with each /proc/cmdline section of nvidia-bug-report.sh's log reduced: the section's
    whole body, up to the next line of underscores or the end (a log cut by the kill), is the command
    line. Linear: each body is scanned once, and a header inside a reduced body is not looked at again."""
    out: list[bytes] = []
    done = total = 0
    for head in _SECTION_HEAD.finditer(data):
        if head.start() < done:
            continue
        end_match = _SECTION_END.search(data, head.end())
        end = end_match.start() if end_match else len(data)
        body = data[head.end() : end]
        arguments = body.rstrip(b" \t\n\v\f\r")
        facts, count = command_line_facts(arguments)
        out += [data[done : head.end()], facts, body[len(arguments) :]]
        done = end
        total += count
    out.append(data[done:])
    return b"".join(out), total
