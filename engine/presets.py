"""TOML presets: load, search path, extends, diff, export/import, atomic writes.

File format (schema_version 1)::

    # header comment: purpose, hardware, `ppodeck run NAME`
    schema_version = 1
    name = "qwen3-4b-ppo"
    description = "..."
    extends = "other-preset"          # optional; a name on the search path or a relative path
    unset = ["save", "load"]          # optional; flags of the parent to drop
    passthrough = ["--foo", "1"]      # optional; argv tokens PPO Deck does not model
    engines = ["ppodeck", "miles"]    # optional; the engines it runs on (default both; a
                                      # child without the key runs where its parent does)
    [provenance]                      # author, created, tested_hardware, gpus
    [flags]                           # flag name without "--" = typed value
    advantage-estimator = "ppo"
    offload-train = true              # tristates: true -> --offload-train, false -> --no-...

Search path (first match wins, so a name always means the same file for everybody in a team):
built-ins (the repo's presets/, shipped in the package), then the user's dir
($PPODECK_CONFIG_DIR/presets, default platformdirs' user_config_dir("ppodeck")/presets), then
each dir of $PPODECK_PRESET_PATH
(colon-separated). list_presets() reports which file wins when a name is shadowed.

Reading uses tomllib; tomlkit is imported only where a file is written or edited, so user
comments survive "save".
"""

from __future__ import annotations

import difflib
import os
import tomllib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from .config.issues import Issue
from .config.model import RunConfig, coerce
from .config.schema import BY_DEST, BY_NAME, FLAGS, GROUP_TITLES, Flag
from .host.files import atomic_write

SCHEMA_VERSION = 1
# engine/builtin_presets links to the repository's presets/ in a checkout and is a plain
# directory inside the wheel (package data), so an installed PPO Deck finds its built-ins too
BUILTIN_DIR = Path(__file__).resolve().parent / "builtin_presets"
TOP_KEYS = ("schema_version", "name", "description", "extends", "unset", "passthrough",
            "engines", "provenance", "flags", "health")
ENGINES = ("ppodeck", "miles")  # what `engines = [...]` may name: `--engine`'s values
Source = Literal["built-in", "user", "team", "file"]


class PresetError(Exception):
    """A preset problem; str() is the user-facing message (file, line or flag, and a fix)."""


class UnknownPresetError(PresetError):
    """No preset of that name on the search path (or no such file): a usage error."""


@dataclass(frozen=True)
class Preset:
    name: str
    description: str
    source: Source
    path: Path
    extends: str | None = None
    provenance: Mapping[str, Any] = field(default_factory=dict)
    flags: Mapping[str, Any] = field(default_factory=dict)  # dest -> typed value, as written
    passthrough: tuple[str, ...] = ()
    unset: tuple[str, ...] = ()  # dests dropped from the parent (extends)
    shadows: tuple[Path, ...] = ()  # same-name files further down the search path
    error: str | None = None  # set by list_presets(): every error of a file that does not load
    # set by list_presets() when the file's `name` is another preset's name: which file opens
    clash: str = ""
    # [health]: thresholds of the run's health rules (engine/config/health.py), never flags
    health: Mapping[str, Any] = field(default_factory=dict)
    engines: tuple[str, ...] | None = None  # as written; None: the parent's, else both


# --- search path -----------------------------------------------------------------------------

def user_config_dir() -> Path:
    override = os.environ.get("PPODECK_CONFIG_DIR")
    if override:
        return Path(override).expanduser()
    import platformdirs

    return Path(platformdirs.user_config_dir("ppodeck"))


def user_preset_dir() -> Path:
    return user_config_dir() / "presets"


def search_path() -> list[tuple[Source, Path]]:
    dirs: list[tuple[Source, Path]] = [("built-in", BUILTIN_DIR), ("user", user_preset_dir())]
    for entry in os.environ.get("PPODECK_PRESET_PATH", "").split(os.pathsep):
        if entry.strip():
            dirs.append(("team", Path(entry.strip()).expanduser()))
    return dirs


def _preset_files() -> list[tuple[Source, Path]]:
    found: list[tuple[Source, Path]] = []
    for source, directory in search_path():
        try:
            files = sorted(directory.glob("*.toml"))
        except OSError:
            continue
        found.extend((source, path) for path in files)
    return found


def list_presets() -> list[Preset]:
    """Every preset on the search path, winners first by name. A file that does not load (its
    own errors, or its extends chain) carries `error`; one whose `name` is another file's name
    carries `clash`, saying which file that name opens."""
    by_name: dict[str, list[tuple[Source, Path]]] = {}
    for source, path in _preset_files():
        by_name.setdefault(path.stem, []).append((source, path))
    presets = []
    for name in sorted(by_name):
        (source, path), *shadowed = by_name[name]
        presets.append(_with(_listed(name, source, path), shadows=tuple(p for _, p in shadowed)))
    return [_with(p, clash=_clash(p, by_name)) for p in presets]


def _listed(stem: str, source: Source, path: Path) -> Preset:
    try:
        preset = read_preset_file(path, source)
    except PresetError as exc:
        return Preset(stem, "", source, path, error=str(exc))
    if preset.extends:
        try:
            extends_chain(preset)
        except PresetError as exc:  # unknown parent, a cycle, a parent that does not load
            return _with(preset, error=str(exc))
    return preset


def _clash(preset: Preset, by_name: Mapping[str, list[tuple[Source, Path]]]) -> str:
    """A file whose declared name is another file's name opens under its own file name only."""
    if preset.name == preset.path.stem or preset.name not in by_name:
        return ""
    winner = by_name[preset.name][0][1]
    return (f"{preset.path.name} says name = {preset.name!r}, but `{preset.name}` opens "
            f"{winner}; this file opens as `{preset.path.stem}`. Fix: give it a name of its "
            f"own (name = \"{preset.path.stem}\"), or rename the file.")


def _with(preset: Preset, **changes: Any) -> Preset:
    from dataclasses import replace

    return replace(preset, **changes)


def find_preset_path(name: str) -> tuple[Source, Path] | None:
    for source, path in _preset_files():
        if path.stem == name:
            return source, path
    return None


def preset_names() -> list[str]:
    return sorted({path.stem for _, path in _preset_files()})


def load_preset(name_or_path: str) -> Preset:
    """A preset by name (search path) or by file path; PresetError names what went wrong."""
    candidate = Path(name_or_path).expanduser()
    looks_like_path = name_or_path.endswith(".toml") or os.sep in name_or_path
    if looks_like_path:
        if not candidate.is_file():
            raise UnknownPresetError(f"{name_or_path}: no such preset file. Fix: check the "
                                     "path, or use a name from `ppodeck presets ls`.")
        return read_preset_file(candidate, "file")
    found = find_preset_path(name_or_path)
    if found is None:
        names = preset_names()
        close = difflib.get_close_matches(name_or_path, names, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise UnknownPresetError(f"unknown preset {name_or_path!r}. Fix: {hint}available: "
                          f"{', '.join(names) or '(none)'} (see `ppodeck presets ls`).")
    return read_preset_file(found[1], found[0])


# --- reading ---------------------------------------------------------------------------------

def read_preset_file(path: Path, source: Source = "file") -> Preset:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PresetError(f"{path}: cannot read the file ({exc}). Fix: check that it exists "
                          "and is readable UTF-8 text.") from None
    return parse_preset_text(text, path, source)


def _toml_loads(text: str, path: Path | str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise PresetError(f"{path}: invalid TOML: {exc}. Fix: correct the syntax at that line "
                          "(strings need quotes, tables are [name]).") from None


def _line_of(text: str, key: str, section: str | None) -> int | None:
    """1-based line where `key = ...` appears inside [section] (None: top level)."""
    current: str | None = None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("["):
            current = stripped.strip("[] ")
            continue
        if current != section:
            continue
        name = stripped.split("=", 1)[0].strip().strip("\"'")
        if "=" in stripped and name == key:
            return number
    return None


def _where(path: Path | str, text: str, key: str, section: str | None) -> str:
    line = _line_of(text, key, section)
    return f"{path}:{line}" if line else str(path)


class _Errors:
    """Every problem of one preset file, so a reader fixes them all in one pass."""

    def __init__(self) -> None:
        self.messages: list[str] = []

    def check(self, read: Callable[[], Any], fallback: Any = None) -> Any:
        try:
            return read()
        except PresetError as exc:
            self.messages.append(str(exc))
            return fallback

    def raise_any(self) -> None:
        if self.messages:
            raise PresetError("\n".join(self.messages))


def parse_preset_text(text: str, path: Path, source: Source = "file") -> Preset:
    """The preset in `text`; PresetError lists every error of the file, one per line."""
    data = _toml_loads(text, path)
    errors = _Errors()
    for key in data:
        errors.check(partial(_top_key, key, path, text))
    version = data.get("schema_version", SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        errors.messages.append(f"{_where(path, text, 'schema_version', None)}: schema_version "
                               f"{version!r} is not supported. Fix: set schema_version = 1.")
    name = errors.check(partial(_opt_str, data, "name", path, text)) or path.stem
    description = errors.check(partial(_opt_str, data, "description", path, text)) or ""
    extends = errors.check(partial(_opt_str, data, "extends", path, text))
    provenance = errors.check(partial(_table, data, "provenance", path, text), {})
    flags_table = errors.check(partial(_table, data, "flags", path, text), {})
    flags = {}
    for key, value in flags_table.items():
        flag = errors.check(partial(_flag_for_key, key, path, text))
        if flag is not None:
            # the line is looked up only for an error message: once per flag was quadratic
            where = partial(_where, path, text, key, "flags")
            flags[flag.dest] = errors.check(partial(_typed, flag, value, where))
    health = errors.check(partial(_health_table, data, path, text), {})
    passthrough = errors.check(partial(_str_list, data, "passthrough", path, text), ())
    unset_keys = errors.check(partial(_str_list, data, "unset", path, text), ())
    unset = [errors.check(partial(_flag_for_key, k, path, text, "unset")) for k in unset_keys]
    engines = errors.check(partial(_engines, data, path, text))
    errors.raise_any()
    return Preset(name=name, description=description, source=source, path=path,
                  extends=extends, provenance=MappingProxyType(dict(provenance)),
                  flags=MappingProxyType(flags), health=health, passthrough=passthrough,
                  unset=tuple(flag.dest for flag in unset if flag is not None), engines=engines)


TABLE_FIX = {"provenance": "write it as [provenance] with author, created, tested_hardware, gpus",
             "flags": "write the values under a [flags] header"}


def _top_key(key: str, path: Path, text: str) -> None:
    if key not in TOP_KEYS:
        close = difflib.get_close_matches(key, TOP_KEYS, n=1)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise PresetError(f"{_where(path, text, key, None)}: unknown top-level key {key!r}. "
                          f"Fix: {hint}allowed keys: {', '.join(TOP_KEYS)}.")


def _table(data: dict, key: str, path: Path, text: str) -> dict:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise PresetError(f"{_where(path, text, key, None)}: {key} must be a table. Fix: "
                          f"{TABLE_FIX[key]}.")
    return value


def _health_table(data: dict, path: Path, text: str) -> Mapping[str, Any]:
    table = data.get("health", {})
    if table == {}:  # most presets: engine.run.health (slow to import) is not needed to list them
        return MappingProxyType({})
    from .config.health import HealthConfigError, parse_health_table

    if not isinstance(table, dict):
        raise PresetError(f"{_where(path, text, 'health', None)}: health must be a table. "
                          "Fix: write the thresholds under a [health] header.")
    try:
        return MappingProxyType(parse_health_table(table, f"{path} [health]"))
    except HealthConfigError as exc:
        raise PresetError(str(exc)) from None


def _opt_str(data: dict, key: str, path: Path, text: str) -> str | None:
    value = data.get(key)
    if value is not None and not isinstance(value, str):
        raise PresetError(f"{_where(path, text, key, None)}: {key} must be a string, got "
                          f"{value!r}. Fix: quote it: {key} = \"...\".")
    return value


def _str_list(data: dict, key: str, path: Path, text: str) -> tuple[str, ...]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise PresetError(f"{_where(path, text, key, None)}: {key} must be a list of strings. "
                          f"Fix: {key} = [\"--flag\", \"value\"].")
    return tuple(value)


def _engines(data: dict, path: Path, text: str) -> tuple[str, ...] | None:
    if "engines" not in data:
        return None
    value = data["engines"]
    if not isinstance(value, list) or not value or not all(v in ENGINES for v in value):
        raise PresetError(f"{_where(path, text, 'engines', None)}: engines must be a non-empty "
                          f"list of {', '.join(ENGINES)}; got {value!r}. Fix: engines = "
                          "[\"ppodeck\", \"miles\"], or leave the key out (both).")
    return tuple(dict.fromkeys(value))


def preset_engines(preset: Preset) -> tuple[str, ...]:
    """The engines the preset runs on: its own `engines`, else its nearest parent's, else
    both."""
    return _engines_declared(preset)[0]


def _engines_declared(preset: Preset) -> tuple[tuple[str, ...], Preset | None]:
    """(engines, the link of the extends chain that writes them; None: nobody, both)."""
    for link in reversed(extends_chain(preset)):
        if link.engines is not None:
            return link.engines, link
    return ENGINES, None


def engine_refusal(preset: Preset, engine: str, config: RunConfig) -> Issue | None:
    """An error when the preset says it does not run on `engine` (`validate`/`run --engine`):
    why, from the config where it shows, and what to use instead."""
    engines, declared = _engines_declared(preset)
    if engine in engines or declared is None:
        return None
    others = [p.name for p in list_presets() if not p.error and engine in _engines_or_none(p)]
    why = _why_not_miles(config) if engine == "miles" else ""
    how = "--engine miles --miles-root DIR" if engines[0] == "miles" else "--engine ppodeck"
    instead = (f"run it on {' or '.join(engines)} (`{how}`)"
               + (f", or pick a preset that runs on {engine}: {', '.join(others)}"
                  if others else ""))
    written = ", ".join(f'"{e}"' for e in engines)
    return Issue("error", "preset.engines", (),
                 f"preset {preset.name} runs on {', '.join(engines)} only, not {engine} "
                 f"(engines = [{written}] in {declared.path.name}){why}.", instead)


def _engines_or_none(preset: Preset) -> tuple[str, ...]:
    try:
        return preset_engines(preset)
    except PresetError:
        return ()


def _why_not_miles(config: RunConfig) -> str:
    """What in the config miles cannot run, where it shows."""
    hf = str(config.get("hf_checkpoint") or "")
    reasons = [f"{BY_DEST[d].name} is PPO Deck's own (miles' train.py has no such flag)"
               for d in ("synthetic_task", "model_init") if config.is_set(d)]
    if hf.startswith("pypi:") or hf.lower().endswith(".gguf"):
        reasons.append("--hf-checkpoint is a single GGUF file (miles reads an HF checkpoint "
                       "directory)")
    return f": {'; '.join(reasons)}" if reasons else ""


def _flag_for_key(key: str, path: Path, text: str, section: str = "flags") -> Flag:
    name = key if key.startswith("--") else "--" + key
    flag = BY_NAME.get(name)
    if flag is None or name != flag.name:
        where = _where(path, text, key, section if section == "flags" else None)
        if flag is not None:  # "no-offload-train": the negative form
            raise PresetError(f"{where}: flag key {key!r} is the negative form. Fix: write "
                              f"{flag.name[2:]} = false.")
        from .config.argv import suggest

        guess = suggest(name)
        hint = f"did you mean {guess[2:]!r}? Or " if guess else ""
        raise PresetError(f"{where}: unknown flag {name}. Fix: {hint}put flags PPO Deck does "
                          f"not model in passthrough = [\"{name}\", \"VALUE\"].")
    return flag


def _typed(flag: Flag, value: Any, where: Callable[[], str]) -> Any:
    """A TOML value checked against the flag's kind (strings are coerced like argv text);
    `where()` names the file and line for an error."""
    kind = flag.kind
    ok = (
        (kind == "int" and type(value) is int)
        or (kind == "float" and type(value) in (int, float))
        or (kind in ("bool", "tristate") and type(value) is bool)
        or (kind == "str" and isinstance(value, str))
        or (kind == "choice" and value in flag.choices)
        or (kind == "list" and isinstance(value, list) and all(isinstance(v, str) for v in value))
    )
    if ok:
        if kind == "float":
            return float(value)
        return tuple(value) if kind == "list" else value
    if isinstance(value, str) and kind not in ("str", "choice"):
        try:
            return coerce(flag, value)
        except ValueError as exc:
            raise PresetError(f"{where()}: {exc}. Fix: {_example(flag)}.") from None
    got = "a table" if isinstance(value, dict) else repr(value)[:60]
    expects = (f"one of {', '.join(flag.choices)}" if kind == "choice"
               else {"int": "an integer", "float": "a number", "bool": "true or false",
                     "tristate": "true or false", "str": "a string",
                     "list": "a list of strings"}[kind])
    raise PresetError(f"{where()}: {flag.name} expects {expects}, got {got}. "
                      f"Fix: {_example(flag)}.")


def _example(flag: Flag) -> str:
    key = flag.name[2:]
    sample = {"int": "8", "float": "1e-6", "bool": "true", "tristate": "true",
              "str": '"..."', "list": '["a", "b"]'}.get(flag.kind)
    if flag.kind == "choice":
        sample = f'"{flag.choices[0]}"'
    return f"write {key} = {sample}"


# --- extends ---------------------------------------------------------------------------------

def _parent_of(preset: Preset) -> Preset:
    assert preset.extends is not None
    target = preset.extends
    relative = preset.path.parent / target
    if target.endswith(".toml") and relative.is_file():
        return read_preset_file(relative, "file")
    try:
        return load_preset(target)
    except PresetError as exc:
        raise PresetError(f"{preset.path}: extends {target!r}: {exc}") from None


def extends_chain(preset: Preset) -> list[Preset]:
    """[root, ..., preset]; PresetError on a cycle (naming the chain) or a missing parent."""
    chain = [preset]
    seen = {preset.path.resolve()}
    while chain[-1].extends:
        parent = _parent_of(chain[-1])
        key = parent.path.resolve()
        if key in seen:
            names = " -> ".join(p.name for p in chain) + f" -> {parent.name}"
            raise PresetError(f"{preset.path}: extends cycle: {names}. Fix: remove one of the "
                              "extends keys.")
        seen.add(key)
        chain.append(parent)
    return chain[::-1]


def merged_flags(presets: Iterable[Preset]) -> tuple[dict[str, Any], tuple[str, ...]]:
    flags: dict[str, Any] = {}
    passthrough: list[str] = []
    for preset in presets:
        for dest in preset.unset:
            flags.pop(dest, None)
        flags.update(preset.flags)
        passthrough.extend(preset.passthrough)
    return flags, tuple(passthrough)


def _config_from_flags(flags: Mapping[str, Any], passthrough: tuple[str, ...]) -> RunConfig:
    # A store_true flag written as false means "not set" (it cannot appear on a command line);
    # keeping it only matters inside an extends chain, where it overrides the parent's true.
    values = {d: v for d, v in flags.items()
              if not (BY_DEST[d].kind == "bool" and v is False)}
    return RunConfig(MappingProxyType(values), passthrough)


def resolve_preset(preset: Preset) -> RunConfig:
    """The preset's RunConfig with its extends chain applied (parents first)."""
    flags, passthrough = merged_flags(extends_chain(preset))
    return _config_from_flags(flags, passthrough)


def config_from_toml(text: str, path: Path) -> RunConfig:
    return resolve_preset(parse_preset_text(text, Path(path), "file"))


# --- writing ---------------------------------------------------------------------------------

def _toml_value(flag: Flag, value: Any) -> Any:
    return list(value) if flag.kind == "list" else value


def config_to_toml(config: RunConfig, *, name: str, description: str,
                   header_comment: str = "", extends: str | None = None,
                   provenance: Mapping[str, Any] | None = None,
                   unset: Iterable[str] = (), engines: tuple[str, ...] | None = None) -> str:
    """A preset file for `config`: its explicitly set values, grouped, secrets left out."""
    import tomlkit

    doc = tomlkit.document()
    for line in header_comment.strip("\n").splitlines():
        doc.add(tomlkit.comment(line.lstrip("# ").rstrip()) if line.strip() else tomlkit.nl())
    if header_comment.strip():
        doc.add(tomlkit.nl())
    doc["schema_version"] = SCHEMA_VERSION
    doc["name"] = name
    doc["description"] = description
    if extends:
        doc["extends"] = extends
    unset_keys = [BY_DEST[d].name[2:] for d in unset]
    if unset_keys:
        doc["unset"] = unset_keys
    if config.passthrough:
        doc["passthrough"] = list(config.passthrough)
    if engines is not None and engines != ENGINES:
        doc["engines"] = list(engines)
    if provenance:
        table = tomlkit.table()
        for key, value in provenance.items():
            table[key] = value
        doc["provenance"] = table
    doc["flags"] = _flags_table(config.values)
    return tomlkit.dumps(doc)


def _flags_table(values: Mapping[str, Any]) -> Any:
    import tomlkit

    table = tomlkit.table()
    group = None
    for flag in FLAGS:
        value = values.get(flag.dest)
        if value is None or flag.secret:
            continue
        if flag.group != group:
            group = flag.group
            table.add(tomlkit.comment(f"-- {GROUP_TITLES[group]} --"))
        table.add(flag.name[2:], _toml_value(flag, value))
    return table


def update_toml(text: str, config: RunConfig, *, description: str | None = None) -> str:
    """Rewrite the [flags] (and passthrough) of an existing preset, keeping its comments.

    Only flags whose value changed are touched; new flags are appended at the end of [flags].
    The extends key is kept, so `config` should hold the values this file itself sets.
    """
    import tomlkit

    doc = tomlkit.parse(text)
    if description is not None:
        doc["description"] = description
    if "flags" not in doc:
        doc["flags"] = tomlkit.table()
    table = doc["flags"]
    wanted = {BY_DEST[d].name[2:]: _toml_value(BY_DEST[d], v)
              for d, v in config.values.items() if v is not None and not BY_DEST[d].secret}
    for key in [k for k in table if k not in wanted]:
        del table[key]
    for key, value in wanted.items():
        if key not in table or table[key] != value:
            table[key] = value
    if config.passthrough:
        doc["passthrough"] = list(config.passthrough)
    elif "passthrough" in doc:
        del doc["passthrough"]
    return tomlkit.dumps(doc)


def with_flag_comments(text: str, comment_for: Callable[[str], str | None]) -> str:
    """`text` (a preset) with a trailing comment on each [flags] key that `comment_for` (given
    the flag name, "--lr") answers: where an imported launch script set that flag."""
    import tomlkit

    doc = tomlkit.parse(text)
    flags = doc.get("flags")
    if flags is None:
        return text
    for key in list(flags.keys()):
        comment = comment_for(f"--{key}")
        if comment is not None:
            flags.item(key).comment(comment)
    return tomlkit.dumps(doc)


def save_preset(path: Path, text: str) -> None:
    """Atomic and durable: readers never see half a preset, and a crash keeps it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(path, text, fsync=True)


# --- sharing ---------------------------------------------------------------------------------

def export_preset(preset: Preset, *, keep_extends: bool = False) -> str:
    """A standalone file: extends resolved into [flags], or kept as is with keep_extends."""
    if keep_extends:
        if preset.path.is_file():
            return preset.path.read_text(encoding="utf-8")
        config = RunConfig(MappingProxyType(dict(preset.flags)), preset.passthrough)
        return config_to_toml(config, name=preset.name, description=preset.description,
                              extends=preset.extends, provenance=preset.provenance,
                              unset=preset.unset, engines=preset.engines)
    header = (f"Exported from preset {preset.name!r} ({preset.source}: {preset.path}).\n"
              f"Launch: ppodeck run {preset.name}")
    text = config_to_toml(resolve_preset(preset), name=preset.name,
                          description=preset.description, header_comment=header,
                          provenance=preset.provenance, engines=preset_engines(preset))
    health: dict[str, Any] = {}
    for link in extends_chain(preset):  # [health] resolved along extends, like [flags]
        health.update(link.health)
    if health:
        from .config.health import health_toml

        text += "\n" + health_toml(health)
    return text


@dataclass(frozen=True)
class FlagDiff:
    flag: str  # "--kl-coef" (or "passthrough")
    a: Any
    b: Any


def diff_configs(a: RunConfig, b: RunConfig) -> list[FlagDiff]:
    """Flags whose effective value (set value, else default) differs, in schema order."""
    out = []
    for flag in FLAGS:
        if flag.dest not in a.values and flag.dest not in b.values:
            continue
        va, vb = a.get(flag.dest), b.get(flag.dest)
        if va != vb:
            out.append(FlagDiff(flag.name, va, vb))
    if tuple(a.passthrough) != tuple(b.passthrough):
        out.append(FlagDiff("passthrough", list(a.passthrough), list(b.passthrough)))
    return out


def import_preset(source: Path, *, name: str | None = None, force: bool = False,
                  dest_dir: Path | None = None) -> tuple[Path, list[FlagDiff]]:
    """Copy a preset file into the user dir. Returns (written path, diff vs the old one).

    Refuses (PresetError) to overwrite a preset of the same name unless `force`; the message
    carries the diff so the user sees what would change.
    """
    incoming = read_preset_file(Path(source), "file")
    incoming_config = resolve_preset(incoming)
    target_name = name or incoming.name
    if not target_name or any(c in target_name for c in "/\\") or target_name.startswith("."):
        raise PresetError(f"{source}: {target_name!r} is not a usable preset name. Fix: pass "
                          "--name NAME (letters, digits, dashes).")
    target = (dest_dir or user_preset_dir()) / f"{target_name}.toml"
    changes: list[FlagDiff] = []
    existing = find_preset_path(target_name)
    if existing is not None:
        old = read_preset_file(existing[1], existing[0])
        changes = diff_configs(resolve_preset(old), incoming_config)
        if existing[0] == "built-in":
            raise PresetError(f"{source}: {target_name!r} is a built-in preset name and "
                              "built-ins win on the search path. Fix: pass --name to import "
                              "under another name.")
        if not force:
            lines = "\n".join(f"  {d.flag}: {d.a!r} -> {d.b!r}" for d in changes) or \
                "  (no flag differs)"
            raise PresetError(f"{existing[1]}: a preset named {target_name!r} already exists "
                              f"({existing[0]}). Changes:\n{lines}\nFix: pass --force to "
                              "overwrite, or --name to import under another name.")
    text = Path(source).read_text(encoding="utf-8")
    if incoming.name != target_name:
        import tomlkit

        doc = tomlkit.parse(text)
        doc["name"] = target_name
        text = tomlkit.dumps(doc)
    save_preset(target, text)
    return target, changes
