"""A command's options generated from its configuration dataclass: one option per field, named for it
(`max_steps` -> `--max-steps`), typed by its annotation, defaulting to its default, with the field's own comment
as its help. A new field is one line in the dataclass; the command line cannot drift from the config.

Generated argparse, not tyro or jsonargparse: those spell optional fields and booleans their own way (`--flag
{None}|INT`, `--no-flag`), which would change the project's fixed command lines, and add a dependency to the
lock for what is forty lines here."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import io
import tokenize
import types
import typing
from typing import Any, Callable


def field_comments(cls: type) -> dict[str, str]:
    """Each field's comment in the class source: the comment on its line and those on the lines under it before
    the next field, joined."""
    comments: dict[str, list[str]] = {}
    current = None
    names = {f.name for f in dataclasses.fields(cls)}
    line_start = True
    for tok in tokenize.generate_tokens(io.StringIO(inspect.getsource(cls)).readline):
        if tok.type == tokenize.NAME and line_start and tok.string in names:
            current = tok.string
        elif tok.type == tokenize.NAME and line_start and tok.string in ("def", "class", "@"):
            current = None
        if tok.type == tokenize.COMMENT and current is not None:
            comments.setdefault(current, []).append(tok.string.lstrip("# ").rstrip())
        line_start = tok.type in (tokenize.NEWLINE, tokenize.NL, tokenize.INDENT, tokenize.DEDENT)
    return {name: " ".join(parts) for name, parts in comments.items()}


def _base_type(hint: Any) -> type:
    """`int | None` -> int; `str` -> str."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        hint = next(a for a in typing.get_args(hint) if a is not type(None))
    return hint


def add_config_arguments(p: argparse.ArgumentParser, cls: type, skip: tuple[str, ...] = (),
                         options: dict[str, dict[str, Any]] | None = None, unset: bool = False) -> None:
    """One option per field of `cls` but `skip`; `options[field]` changes what is generated (`flag`, `type`,
    `default`, `help`, `choices`, ...: argparse's keywords). `unset`: every option defaults to None, "not given"
    (for a command that lays the given options over a base config), its help naming the field's default."""
    comments, hints = field_comments(cls), typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        kind = _base_type(hints[f.name])
        default = f.default if f.default is not dataclasses.MISSING else None
        spec: dict[str, Any] = {"dest": f.name, "help": comments.get(f.name)}
        if unset:
            spec["help"] = f"{spec['help'] or f.name.replace('_', ' ')} (default: {default})"
            default = None
        if kind is bool:
            spec.update(action=argparse.BooleanOptionalAction, default=default)
        else:
            spec.update(type=kind, default=default, required=f.default is dataclasses.MISSING)
        spec.update((options or {}).get(f.name, {}))
        if spec["help"]:
            spec["help"] = spec["help"].replace("%", "%%")   # argparse formats help with %
        flag = spec.pop("flag", "--" + f.name.replace("_", "-"))
        if spec.get("default") is not None and spec.get("required"):
            spec["required"] = False
        p.add_argument(flag, **spec)


def config_from_args(cls: type, args: argparse.Namespace, convert: dict[str, Callable[[Any], Any]] | None = None,
                     base: Any = None):
    """`cls` from the parsed options its fields generated (`convert[field]` turns an option's text into the field's
    value, e.g. a duration into seconds); fields that had no option keep their defaults. With `base` (options made
    with `unset`), the options given are laid over `base`."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)}
    for name, fn in (convert or {}).items():
        if values.get(name) is not None:
            values[name] = fn(values[name])
    if base is not None:
        return dataclasses.replace(base, **{k: v for k, v in values.items() if v is not None})
    return cls(**values)


def config_to_argv(cfg: Any, options: dict[str, dict[str, Any]] | None = None, skip: tuple[str, ...] = ()) -> list[str]:
    """The command line that `add_config_arguments(p, type(cfg), skip, options)` parses back into `cfg`: every field
    but `skip` whose value is not its default (a required field always), under the flag that function generates
    (`options[field]["flag"]` where given); booleans as `--flag` / `--no-flag`. A new field reaches the launcher's
    command line without a line here."""
    argv: list[str] = []
    for f in dataclasses.fields(cfg):
        value = getattr(cfg, f.name)
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        if f.name in skip or value is None or (not required and value == f.default):
            continue
        flag = (options or {}).get(f.name, {}).get("flag", "--" + f.name.replace("_", "-"))
        if isinstance(value, bool):
            argv.append(flag if value else "--no-" + flag[2:])
        else:
            argv += [flag, str(value)]
    return argv
