"""Hyper-parameter merging shared by every stage's config (pre-training, fine-tuning).

The original builds a config in four steps (docs/fidelity.md#hparams-merging): defaults, the user's values, derived and
per-size / per-task / debug values, then the user's values again, so an explicit value always
beats a preset. `HParams.merge` runs the same steps on a plain dict and only then constructs the
dataclass, whose `__post_init__` computes the derived fields and validates. Derived values are
therefore always computed from the final inputs (the original computed them before the last
update, which was harmless only because it applied the small preset alone).

`--hparams` is a JSON object string or a path ending in `.json`, as in the original.
"""

import dataclasses
import difflib
import json
import math
import os
import typing
from pathlib import Path
from typing import Any, ClassVar, Mapping, Optional, Union

from electra_tf import atomic_files
from electra_tf.errors import InputError

HParamsSource = Union[None, str, os.PathLike, Mapping[str, Any]]


def load_hparams(source: HParamsSource, kind: str = "hparams") -> tuple[dict, str]:
    """The user's values as a dict, and how to name their origin in messages.

    `source` is a mapping, a JSON object string, or a path ending in `.json`; None means {}.
    `kind` names a file in messages ("hparams file x.json").
    """
    if source is None:
        return {}, "hparams"
    if isinstance(source, Mapping):
        return dict(source), "hparams"
    if isinstance(source, os.PathLike) or str(source).strip().endswith(".json"):
        path = Path(str(source).strip())
        where = f"{kind} file {path}"
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise InputError(f"{where} cannot be read: {err}") from None
        try:
            values = json.loads(text)
        except json.JSONDecodeError as err:
            raise InputError(f"{where} is not valid JSON: {err.msg} at line {err.lineno} "
                             f"column {err.colno}") from None
    else:
        where = "--hparams"
        try:
            values = json.loads(source)
        except json.JSONDecodeError as err:
            raise InputError(f"--hparams is not valid JSON ({err.msg} at line {err.lineno} "
                             f"column {err.colno}); pass a JSON object or a path ending in "
                             f".json") from None
    if not isinstance(values, dict):
        raise InputError(f"{where} must be a JSON object of name: value pairs, "
                         f"got a {type(values).__name__}")
    return values, where


def closest(name: str, valid) -> str:
    """The valid name most similar to `name` (difflib), for "did you mean" hints."""
    return difflib.get_close_matches(name, sorted(valid), n=1, cutoff=0.0)[0]


def _coerce(name: str, value: Any, hint: Any, where: str, fields: Any = None) -> Any:
    """`value` checked against the field's type; JSON's 1e6 is accepted for an int field.

    The check reaches inside containers as it does at the top level, so a mistake there gets the
    same one-line error naming it (`model_hparam_overrides.hidden_size in --hparams must be int`)
    instead of a TypeError where it is first used: a list's elements against its element type
    (`List[str]`), and a dict whose field declares `metadata={"fields": SomeDataclass}` key by key
    against that dataclass's fields (`model_hparam_overrides` against `BertConfig`)."""
    if typing.get_origin(hint) is Union:
        if value is None and type(None) in typing.get_args(hint):
            return None
        hint = next(arg for arg in typing.get_args(hint) if arg is not type(None))
    base = typing.get_origin(hint) or hint
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if base is bool and isinstance(value, bool):
        return value
    if base is int and is_number and float(value).is_integer():
        return int(value)
    if base is float and is_number:
        if not math.isfinite(value):  # JSON's NaN / Infinity: every later bound check would pass or fail silently
            raise InputError(f"{name} in {where} must be a finite number, got {value!r}")
        return float(value)
    if base is str and isinstance(value, str):
        return value
    if base is dict and isinstance(value, Mapping):
        return _coerce_fields(name, dict(value), fields, where) if fields is not None else dict(value)
    if base is list and isinstance(value, list):
        element = (typing.get_args(hint) or (Any,))[0]
        return [_coerce(f"{name}[{index}]", item, element, where) for index, item in enumerate(value)]
    if base not in (bool, int, float, str, dict, list):
        return value
    raise InputError(f"{name} in {where} must be {getattr(base, '__name__', base)}, got {value!r}")


def _coerce_fields(name: str, values: dict, schema: Any, where: str) -> dict:
    """`values` checked key by key against the fields of the dataclass `schema`."""
    hints = typing.get_type_hints(schema)
    valid = {f.name for f in dataclasses.fields(schema)}
    unknown = [key for key in values if key not in valid]
    if unknown:
        hints_text = ", ".join(f"{key!r} (did you mean {closest(key, valid)!r}?)" for key in unknown)
        raise InputError(f"unknown field(s) of {name} in {where}: {hints_text}")
    return {key: _coerce(f"{name}.{key}", value, hints[key], where) for key, value in values.items()}


class HParams:
    """Mixin for a config dataclass: the original's merge, type checks and JSON save/load.

    A subclass declares:
    - `FIXED`: fields that come from constructor arguments (`--model-name`, `--data-dir`);
    - `ALIASES`: extra accepted keys (the original's flags) and their types, mapped to fields
      by `_translate`;
    - `_presets(values)`: per-size / per-task / debug values for the merged inputs;
    - derived fields as `dataclasses.field(init=False, metadata={"derived": "<formula>"})`,
      computed in `__post_init__`, which also validates;
    - `ADDED_FIELDS`: fields added after configs were saved, with the value a saved config that
      lacks one was run with (read back, and compared with a run's, as if it had it).
    """

    FIXED: ClassVar[tuple[str, ...]] = ()
    ALIASES: ClassVar[dict] = {}
    ADDED_FIELDS: ClassVar[dict] = {}

    @classmethod
    def as_saved_today(cls, saved: dict) -> dict:
        """A saved config's values (`to_dict`'s JSON) as this version would save that run."""
        return {**cls.ADDED_FIELDS, **saved}

    @classmethod
    def _translate(cls, user: dict, where: str) -> dict:
        """User values with the alias keys replaced by the fields they stand for."""
        return user

    @classmethod
    def _presets(cls, values: dict) -> dict:
        """Preset values (size, task, debug) chosen by the merged `values`."""
        return {}

    @classmethod
    def merge(cls, fixed: dict, source: HParamsSource):
        """defaults -> user values -> presets -> user values again -> derived fields, validated."""
        user, where = load_hparams(source)
        user = cls._translate(cls._checked(user, where, settable=cls._settable()), where)
        values = {**cls._defaults(), **fixed, **user}
        values.update(cls._presets(values))
        values.update(user)
        return cls(**values)

    @classmethod
    def from_json_file(cls, path: Union[str, os.PathLike]):
        """A config written by `save`; its derived fields must match what the inputs give."""
        values, where = load_hparams(Path(path), kind="config")
        values = cls.as_saved_today(values)
        derived = {name: values.pop(name) for name in cls._derived() if name in values}
        values = cls._translate(cls._checked(values, where, settable=cls._init_fields()), where)
        missing = [name for name in cls.FIXED if name not in values]
        if missing:
            raise InputError(f"{where} lacks {', '.join(missing)}")
        config = cls(**values)
        for name, stored in derived.items():
            if getattr(config, name) != stored:
                raise InputError(f"{name} in {where} is {stored!r}, but it is derived "
                                 f"({cls._derived()[name]}) and the file's fields give "
                                 f"{getattr(config, name)!r}")
        return config

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def save(self, path: Union[str, os.PathLike]) -> None:
        """Writes `to_json()` atomically: a temporary file in the same folder, then a rename,
        so a reader never sees half a file."""
        atomic_files.write_text(path, self.to_json())

    @classmethod
    def _checked(cls, user: dict, where: str, settable: set) -> dict:
        """`user` with every key known and every value of its field's type, else an InputError."""
        for name in user:
            if name in cls._derived():
                raise InputError(f"{name} in {where} is derived ({cls._derived()[name]}) and "
                                 f"cannot be set; set the fields it is computed from")
            if name in cls.FIXED and name not in settable:
                raise InputError(f"{name} cannot be set in {where}: it comes from the "
                                 f"--{name.replace('_', '-')} argument")
        valid = settable | set(cls.ALIASES)
        unknown = [name for name in user if name not in valid]
        if unknown:
            hints = ", ".join(f"{name!r} (did you mean {closest(name, valid)!r}?)"
                              for name in unknown)
            raise InputError(f"unknown hparam(s) in {where}: {hints}")
        hints = {**typing.get_type_hints(cls), **cls.ALIASES}
        schemas = {f.name: f.metadata.get("fields") for f in dataclasses.fields(cls)}
        return {name: _coerce(name, value, hints[name], where, schemas.get(name)) for name, value in user.items()}

    @classmethod
    def _init_fields(cls) -> set:
        return {f.name for f in dataclasses.fields(cls) if f.init}

    @classmethod
    def _settable(cls) -> set:
        return cls._init_fields() - set(cls.FIXED)

    @classmethod
    def _derived(cls) -> dict:
        return {f.name: f.metadata.get("derived", "derived") for f in dataclasses.fields(cls)
                if not f.init}

    @classmethod
    def _defaults(cls) -> dict:
        defaults = {}
        for f in dataclasses.fields(cls):
            if f.init and f.default is not dataclasses.MISSING:
                defaults[f.name] = f.default
            elif f.init and f.default_factory is not dataclasses.MISSING:
                defaults[f.name] = f.default_factory()
        return defaults


def json_object(path: Union[str, os.PathLike]) -> dict:
    """The JSON object a tool wrote to `path` (a config.json, tokenizer_config.json, a build's
    stats.json, ...); {} where there is no such file, it is damaged or holds no object: whoever
    reads the file in full names that."""
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return document if isinstance(document, dict) else {}


def flags_of(document: Mapping, names, default: Optional[bool] = None) -> dict:
    """{name: value} of `names` that a JSON object a tool wrote holds as true or false (`default`
    where absent); a name with another value (null, a string) gives nothing."""
    values = {name: document.get(name, default) for name in names}
    return {name: value for name, value in values.items() if isinstance(value, bool)}


def recorded_flags(path: Union[str, os.PathLike], names, default: Optional[bool] = None) -> dict:
    """`flags_of` the JSON object in `path`, read once."""
    return flags_of(json_object(path), names, default)
