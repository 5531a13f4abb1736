"""What the roles want probed: module node_state's options, and their union.

Each role that skips work on the probe's word declares what it wants read in
``roles/<role>/meta/probe.yml`` (a mapping of node_state's options). The
lookup ``role_probes`` renders every role's declaration for a host and
gathers the union here; node_state takes that union as its ``wants`` option,
so the probe stays one round trip per node and ``playbooks/packages.yml``
names no role's paths.

Standard library only (the lookup runs it on the control machine, the
module on the node).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

# node_state's options (the module builds its argument_spec from this).
SPEC: dict[str, dict] = {
    "packages": {"type": "bool", "default": True},
    # Only these of the installed packages (the ones the roles ask about); empty: all.
    "package_names": {"type": "list", "elements": "str", "default": []},
    "units": {"type": "list", "elements": "str", "default": []},
    "files": {"type": "list", "elements": "path", "default": []},
    "read": {"type": "list", "elements": "path", "default": []},
    "commands": {"type": "dict", "default": {}},
    "masked": {"type": "list", "elements": "dict", "default": []},
    "slurm_node": {"type": "bool", "default": False},
    "users": {"type": "list", "elements": "dict", "default": []},
    "users_refuse": {"type": "bool", "default": False},
    "users_manage": {"type": "bool", "default": True},
    "users_extra": {"type": "list", "elements": "str", "default": []},
    "shared_root": {"type": "path", "default": "/shared"},
    "shared_dirs": {"type": "list", "elements": "dict", "default": []},
    "shared_reads": {"type": "list", "elements": "path", "default": []},
    "shared_hashes": {"type": "list", "elements": "path", "default": []},
    "shared_list": {"type": "path"},
    # Programs root will run: each must be root's all the way up (below shared_root).
    "trusted": {"type": "list", "elements": "path", "default": []},
}

_TYPES = {"bool": bool, "list": list, "dict": dict, "path": str, "str": str}


class WantsError(ValueError):
    """A declaration that names no option of node_state, or the wrong type."""


def check(where: str, wants: object) -> dict:
    """One declaration, checked: a mapping of node_state's options.

    A value of None means "nothing asked" (a declaration's way to ask only
    on some hosts) and is dropped. ``where`` names the declaration in errors.
    """
    if wants is None:
        return {}
    if not isinstance(wants, Mapping):
        raise WantsError(f"{where}: a mapping of node_state's options, not {type(wants).__name__}")
    out = {}
    for key, value in wants.items():
        if key not in SPEC:
            raise WantsError(
                f"{where}: '{key}' is no option of node_state (it takes: {', '.join(SPEC)})"
            )
        if value is None:
            continue
        kind = SPEC[key]["type"]
        if not isinstance(value, _TYPES[kind]) or (kind != "bool" and isinstance(value, bool)):
            raise WantsError(
                f"{where}: '{key}' must be a {kind}, got {type(value).__name__}: {value!r}"
            )
        if kind == "list" and SPEC[key]["elements"] in ("str", "path"):
            bad = [v for v in value if not isinstance(v, str) or not v]
            if bad:
                raise WantsError(f"{where}: '{key}' must list non-empty strings, got {bad!r}")
        if kind == "list" and SPEC[key]["elements"] == "dict":
            bad = [v for v in value if not isinstance(v, Mapping)]
            if bad:
                raise WantsError(f"{where}: '{key}' must list mappings, got {bad!r}")
        out[key] = value
    return out


def union(declarations: Iterable[tuple[str, object]]) -> dict:
    """Every declaration's wants in one mapping of node_state's options.

    Lists are joined in order without repeats, commands merged by name, and
    a single value (a bool or a path) must be the same wherever it is
    declared. A command or single value declared twice differently raises,
    naming both declarations.
    """
    out: dict = {}
    said: dict[str, str] = {}
    for where, wants in declarations:
        for key, value in check(where, wants).items():
            kind = SPEC[key]["type"]
            if kind == "list":
                have = out.setdefault(key, [])
                have.extend(v for v in value if v not in have)
            elif kind == "dict":
                have = out.setdefault(key, {})
                for name, script in value.items():
                    first = said.setdefault(f"{key}.{name}", where)
                    if name in have and have[name] != script:
                        raise WantsError(
                            f"{where}: {key} '{name}' differs from the one {first} declares; "
                            "give one of them another name"
                        )
                    have[name] = script
            else:
                first = said.setdefault(key, where)
                if key in out and out[key] != value:
                    raise WantsError(
                        f"{where}: {key} is {value!r} here and {out[key]!r} in {first}; "
                        "a single value must agree wherever it is declared"
                    )
                out[key] = value
    return out


def combine(params: Mapping, wants: Mapping) -> dict:
    """node_state's parameters with the roles' wants added.

    Lists and commands are joined as in union(); a single value the task
    sets away from its default wins over the wants, else the wants' value
    applies.
    """
    wants = check("wants", wants)
    out = dict(params)
    for key, value in wants.items():
        kind = SPEC[key]["type"]
        mine = params.get(key)
        if kind == "list":
            mine = list(mine or [])
            out[key] = mine + [v for v in value if v not in mine]
        elif kind == "dict":
            out[key] = {**value, **(mine or {})}
        elif mine is None or mine == SPEC[key].get("default"):
            out[key] = value
    return out
