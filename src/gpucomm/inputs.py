"""One way to read what a user hands gpucomm: files, YAML, JSON and numbers.

Every reader checks the cheap things before it does any work sized by the input:

- a file is a regular file within MAX_TEXT_FILE_BYTES, checked with stat before it is opened
  (and opened non-blocking, so a FIFO swapped in between cannot block), then read as UTF-8, or
  as UTF-16 where it starts with UTF-16's byte-order mark (twice the bytes allowed: the limit
  counts the text, and UTF-16 spends two bytes on each character a log or YAML holds);
- YAML is composed by a loader that refuses duplicate keys, more than MAX_YAML_ALIASES aliases,
  nesting deeper than MAX_YAML_DEPTH and more than MAX_YAML_NODES nodes counting what the
  aliases expand to (a "billion laughs" file is refused after a few hundred nodes, not
  expanded);
- JSON is refused past MAX_JSON_DEPTH levels of nesting;
- a number, from a flag or a file, is finite, of the right kind (an int is not a bool, an
  integer is ASCII digits), and inside the range of the quantity it is, which the error names.

Each failure is a ConfigError of one line naming the file or flag, what is wrong, and what is
allowed.

    >>> load_yaml("a: 1\\na: 2", "grid.yaml")
    Traceback (most recent call last):
    ...
    gpucomm.errors.ConfigError: grid.yaml: duplicate key 'a' (line 2); each key may appear once
    >>> parse_int("64", "--leaf-ports", 1, 1 << 16)
    64
"""
from __future__ import annotations

import argparse
import codecs
import json
import math
import os
import re
import stat
from collections.abc import Callable
from typing import Any

from .errors import ConfigError, GpucommError

# A text input (topology YAML, model YAML, grid, log, MSCCL XML, report JSON): the largest real
# ones are a few MB; /dev/zero or a multi-GB file given by mistake must not eat the host.
MAX_TEXT_FILE_BYTES = 64 << 20
# YAML nodes (scalars, lists, mappings) in one document, aliases counted as what they expand
# to: 200,000 is a topology of ~14,000 links, fifty times the largest shipped file, and is
# parsed (or refused) within seconds even on a busy host; a larger cluster is built with
# --nodes, not loaded from a file.
MAX_YAML_NODES = 200_000
# Aliases (*name) in one document: shipped files use none; a hand-written file a few.
MAX_YAML_ALIASES = 100
# Nesting of YAML or JSON: a topology is 4 deep, a grid or a saved result under 10.
MAX_YAML_DEPTH = 64
MAX_JSON_DEPTH = 64


# A file saved on Windows by PowerShell (`> run.log`, Out-File) is UTF-16 (little-endian) and
# starts with this byte-order mark; big-endian has the other.
UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


def read_bytes(path, what: str, limit: int = MAX_TEXT_FILE_BYTES,
               utf16_limit: int | None = None) -> bytes:
    """The bytes of a regular file of at most `limit` bytes (`utf16_limit`, where given, if it
    starts with a UTF-16 byte-order mark), or a one-line ConfigError."""
    name = str(path)
    try:
        st = os.stat(name)
    except OSError as e:
        raise ConfigError(f"cannot read {what} {name!r}: {e.strerror}") from None
    _check_stat(st, name, what, limit, utf16_limit)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise ConfigError(f"cannot read {what} {name!r}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        _check_stat(st, name, what, limit, utf16_limit)  # the file opened is the file checked
        head = os.read(fd, 2)
        if utf16_limit is not None and head in UTF16_BOMS:
            limit = utf16_limit
        else:
            _check_stat(st, name, what, limit)  # only UTF-16 may be larger than `limit`
        chunks, got = [head], len(head)
        while got <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - got))
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
    except OSError as e:
        raise ConfigError(f"cannot read {what} {name!r}: {e.strerror}") from None
    finally:
        os.close(fd)
    if got > limit:
        raise ConfigError(f"{what} {name!r} grew past the limit of {_mib(limit)} while read")
    return b"".join(chunks)


def _check_stat(st: os.stat_result, name: str, what: str, limit: int,
                utf16_limit: int | None = None) -> None:
    if stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"{what} {name!r} is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        kind = "a FIFO (named pipe)" if stat.S_ISFIFO(st.st_mode) else (
            "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else
            "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
        raise ConfigError(f"{what} {name!r} is {kind}: give a regular file")
    if st.st_size > max(limit, utf16_limit or 0):
        raise ConfigError(f"{what} {name!r} is {st.st_size} B, larger than the limit of "
                          f"{_limits(limit, utf16_limit)} for a text input")


def _mib(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 else f"{n} B"


def _limits(limit: int, utf16_limit: int | None) -> str:
    return _mib(limit) + (f" ({_mib(utf16_limit)} in UTF-16)" if utf16_limit else "")


def read_text(path, what: str, limit: int = MAX_TEXT_FILE_BYTES) -> str:
    """A regular file's text, or a one-line ConfigError: UTF-8 of at most `limit` bytes, or
    UTF-16 with its byte-order mark (as Windows saves it) of at most twice that; either may be
    gzip-compressed."""
    name, utf16_limit = str(path), 2 * limit
    data = read_bytes(path, what, limit, utf16_limit)
    if data[:2] == b"\x1f\x8b":  # gzip (a saved log.gz): read, never past the limit unpacked
        data = _gunzip(data, name, what, limit, utf16_limit)
    if data[:2] in UTF16_BOMS:
        try:
            return data.decode("utf-16")  # the mark says which byte order, and is dropped
        except UnicodeDecodeError as e:
            order = "little" if data[:2] == codecs.BOM_UTF16_LE else "big"
            raise ConfigError(f"{what} {name!r} starts with UTF-16's byte-order mark "
                              f"({order}-endian) but is not UTF-16 text (byte {e.start}: "
                              f"{e.reason}): save it again as UTF-8") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{what} {name!r} is not UTF-8 text (byte {e.start}: "
                          f"{data[e.start:e.start + 1]!r}; a binary file?)") from None


def _gunzip(data: bytes, name: str, what: str, limit: int, utf16_limit: int) -> bytes:
    """`data` unpacked: at most `limit` bytes, `utf16_limit` for UTF-16."""
    import gzip
    import io
    import zlib
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as f:
            out = f.read(limit + 1)
            if len(out) > limit and out[:2] in UTF16_BOMS:
                limit = utf16_limit
                out += f.read(limit + 1 - len(out))
    except (OSError, EOFError, zlib.error) as e:
        raise ConfigError(f"{what} {name!r} is gzip-compressed but cannot be unpacked ({e}): "
                          "gunzip it and give the text") from None
    if len(out) > limit:
        raise ConfigError(f"{what} {name!r} unpacks to more than the limit of {_mib(limit)}")
    return out


# ---- YAML ---------------------------------------------------------------------------------
def _guard_class():
    import yaml
    from yaml.nodes import ScalarNode
    Composer: Any = yaml.composer.Composer   # check_event & co. come from the parser mixed in

    class _Guard(Composer):
        """The pure-Python composer (over libyaml's events where present) with budgets."""

        def __init__(self):
            Composer.__init__(self)
            self.g_nodes = self.g_aliases = self.g_depth = 0
            self.g_sizes: dict[int, int] = {}   # id(anchored node) -> nodes it expands to

        def compose_node(self, parent, index):
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                self.g_aliases += 1
                if self.g_aliases > MAX_YAML_ALIASES:
                    raise _refuse(event, f"more than {MAX_YAML_ALIASES} aliases (*name)")
                target = self.anchors.get(event.anchor)
                self._count(event, self.g_sizes.get(id(target), 1))
                return Composer.compose_node(self, parent, index)
            event = self.peek_event()
            self.g_depth += 1
            if self.g_depth > MAX_YAML_DEPTH:
                raise _refuse(event, f"nesting deeper than {MAX_YAML_DEPTH} levels")
            before = self.g_nodes
            self._count(event, 1)
            node = Composer.compose_node(self, parent, index)
            self.g_depth -= 1
            if getattr(event, "anchor", None):
                self.g_sizes[id(node)] = self.g_nodes - before
            return node

        def _count(self, event, n: int) -> None:
            self.g_nodes += n
            if self.g_nodes > MAX_YAML_NODES:
                raise _refuse(event, f"more than {MAX_YAML_NODES} values (aliases expanded)")

        def compose_mapping_node(self, anchor):
            node = Composer.compose_mapping_node(self, anchor)
            seen: set = set()
            for key, _ in node.value:
                if isinstance(key, ScalarNode) and key.value != "<<":
                    k = (key.tag, key.value)
                    if k in seen:
                        raise _refuse(key, f"duplicate key {key.value!r}", key.start_mark,
                                      "; each key may appear once")
                    seen.add(k)
            return node

    return _Guard


def _loader_class():
    import yaml
    _Guard = _guard_class()
    parser: Any = None
    if getattr(yaml, "__with_libyaml__", False):   # libyaml's C scanner and parser
        from yaml import cyaml
        parser = getattr(cyaml, "CParser", None)
    bases: tuple = ((_Guard, parser) if parser is not None else
                    (yaml.reader.Reader, yaml.scanner.Scanner, yaml.parser.Parser, _Guard))

    class Loader(*bases, yaml.constructor.SafeConstructor, yaml.resolver.Resolver):  # type: ignore
        def __init__(self, stream):
            if parser is not None:
                parser.__init__(self, stream)
            else:
                yaml.reader.Reader.__init__(self, stream)
                yaml.scanner.Scanner.__init__(self)
                yaml.parser.Parser.__init__(self)
            _Guard.__init__(self)
            yaml.constructor.SafeConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)

    return Loader


class _Refused(Exception):
    def __init__(self, message: str):
        super().__init__(message)


def _refuse(obj, what: str, mark=None, tail: str = "") -> _Refused:
    return _Refused(f"{what}{_line(mark or getattr(obj, 'start_mark', None))}{tail}")


def _line(mark) -> str:
    return f" (line {mark.line + 1})" if mark is not None else ""


_LOADER = None


def load_yaml(text: str, where: str, error: type[GpucommError] = ConfigError) -> Any:
    """The value of one YAML document, composed under the budgets above; `error` (a
    GpucommError subclass) names `where` and the first thing wrong."""
    global _LOADER
    import yaml
    if _LOADER is None:
        _LOADER = _loader_class()
    _count_events(text, where, error)
    loader = _LOADER(text)
    try:
        return loader.get_single_data()
    except _Refused as e:
        raise error(f"{where}: {e}") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        why = (getattr(e, "problem", None) or str(e).splitlines()[0] or type(e).__name__)
        line = f", line {mark.line + 1}" if mark is not None else ""
        raise error(f"{where}: not valid YAML ({why}{line})") from None
    except (RecursionError, MemoryError):
        raise error(f"{where}: YAML too deeply nested or too large") from None
    except (ValueError, OverflowError) as e:   # a timestamp or number libyaml reads, Python not
        raise error(f"{where}: a value YAML cannot represent ({e})") from None
    finally:
        loader.dispose()


def _count_events(text: str, where: str, error: type[GpucommError]) -> None:
    """Refuse a document of more than MAX_YAML_NODES nodes from libyaml's event stream alone
    (a few microseconds an event, ~40x cheaper than composing): a 27 MB file of 10^6 devices
    is refused in about a second instead of half a minute. Aliases count once here; the
    composer counts what they expand to."""
    import yaml
    if not getattr(yaml, "__with_libyaml__", False):
        return
    from yaml import cyaml
    parser: Any = cyaml.CParser(text)  # type: ignore[attr-defined]
    starts = (yaml.ScalarEvent, yaml.SequenceStartEvent, yaml.MappingStartEvent,
              yaml.AliasEvent)
    nodes = 0
    try:
        while True:
            event = parser.get_event()
            if event is None or isinstance(event, yaml.StreamEndEvent):
                return
            if isinstance(event, starts):
                nodes += 1
                if nodes > MAX_YAML_NODES:
                    raise error(f"{where}: more than {MAX_YAML_NODES} values"
                                + _line(event.start_mark))
    except yaml.YAMLError:
        return   # the composing pass reports it, with its line
    finally:
        parser.dispose()


def load_yaml_file(path, what: str, error: type[GpucommError] = ConfigError) -> Any:
    """read_text + load_yaml, errors naming the file."""
    return load_yaml(read_text(path, what), f"{what} {str(path)!r}", error)


# ---- JSON ---------------------------------------------------------------------------------
def load_json(text: str, where: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """The value of a JSON text nested at most `max_depth` deep, or a one-line ConfigError."""
    depth = _bracket_depth(text)
    if depth > max_depth:
        raise ConfigError(f"{where}: JSON nested {depth} levels deep, more than the limit of "
                          f"{max_depth}")
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"{where} is not JSON ({e.msg}, line {e.lineno})") from None
    except RecursionError:
        raise ConfigError(f"{where}: JSON nested too deeply") from None


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACKETS = re.compile(r"[\[\]{}]")


def _bracket_depth(text: str) -> int:
    """Deepest nesting of [ and { outside strings (an upper bound on a bad text's depth)."""
    depth = deepest = 0
    for m in _BRACKETS.finditer(_STRING.sub("", text)):
        if m.group() in "[{":
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def json_file(path, what: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """read_text + load_json, errors naming the file."""
    return load_json(read_text(path, what), f"{what} {str(path)!r}", max_depth)


# ---- numbers ------------------------------------------------------------------------------
_INT = re.compile(r"[+-]?[0-9]{1,30}", re.ASCII)
_FLOAT = re.compile(r"[+-]?([0-9]{1,30}(\.[0-9]{0,30})?|\.[0-9]{1,30})([eE][+-]?[0-9]{1,4})?",
                    re.ASCII)


def _range(lo, hi) -> str:
    return f"{lo:g}..{hi:g}" if isinstance(lo, float) or isinstance(hi, float) else f"{lo}..{hi}"


def parse_int(text: str, what: str, lo: int, hi: int) -> int:
    """An integer written in ASCII digits, lo <= value <= hi; ConfigError naming the range."""
    t = str(text).strip()
    if not _INT.fullmatch(t):
        shown = t if len(t) <= 24 else t[:21] + "..."
        raise ConfigError(f"{what}: {shown!r} is not an integer (allowed: {_range(lo, hi)})")
    return check_number(int(t), what, lo, hi, integer=True)


def parse_float(text: str, what: str, lo: float, hi: float) -> float:
    """A finite decimal number, lo <= value <= hi; ConfigError naming the range."""
    t = str(text).strip()
    if not _FLOAT.fullmatch(t):
        shown = t if len(t) <= 24 else t[:21] + "..."
        raise ConfigError(f"{what}: {shown!r} is not a finite number (allowed: "
                          f"{_range(lo, hi)})")
    return check_number(float(t), what, lo, hi)


def check_number(value: object, what: str, lo: float, hi: float, *,
                 integer: bool = False) -> Any:
    """`value` (from YAML/JSON: any type) if it is a finite number (an integer when
    `integer`) with lo <= value <= hi; else a ConfigError naming `what` and the range."""
    kind = "an integer" if integer else "a number"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (
            integer and not isinstance(value, int)):
        shown = repr(value) if len(repr(value)) <= 24 else repr(value)[:21] + "..."
        hint = (" (YAML 1.1 reads a number like 1.0e6 as text: write 1.0e+6)"
                if isinstance(value, str) and _FLOAT.fullmatch(value.strip()) else "")
        raise ConfigError(f"{what} must be {kind} in {_range(lo, hi)}, got {shown}{hint}")
    if isinstance(value, int) and not lo <= value <= hi:   # exact: no float overflow
        digits = len(str(value)) if value.bit_length() >= 100 else 0
        shown = f"an integer of {digits} digits" if digits else str(value)
        raise ConfigError(f"{what} {shown} is out of range (allowed: {_range(lo, hi)})")
    if isinstance(value, float) and not (math.isfinite(value) and lo <= value <= hi):
        raise ConfigError(f"{what} {value:g} is out of range (allowed: {_range(lo, hi)}, "
                          "finite)")
    return value


def _flag(number: Callable[..., Any], lo: Any, hi: Any, name: str) -> Callable[[str], Any]:
    """argparse `type=` reading `number(text, what, lo, hi)`; its range is in the error."""
    def parse(text: str) -> Any:
        try:
            return number(text, "value", lo, hi)
        except ConfigError as e:
            raise argparse.ArgumentTypeError(str(e).removeprefix("value: ")
                                             .removeprefix("value ")) from None
    parse.__name__ = name
    return parse


def int_flag(lo: int, hi: int) -> Callable[[str], int]:
    """argparse `type=` for an integer in lo..hi (the range is in the error message)."""
    return _flag(parse_int, lo, hi, f"integer in {lo}..{hi}")


def float_flag(lo: float, hi: float) -> Callable[[str], float]:
    """argparse `type=` for a finite number in lo..hi (the range is in the error message)."""
    return _flag(parse_float, lo, hi, f"number in {lo:g}..{hi:g}")
