"""Slurm's own authentication key (auth/slurm): the JWKS file and its rotation.

Pure functions (tests/test_slurm_jwks.py), shared by the module slurm_jwks
(which reads and writes the file) and the filters of playbooks/rotate_key.yml
(which decide the rotation's next step from what every host reported).

The file (``slurm.jwks`` beside slurm.conf) is a JSON Web Key Set of HS256
keys: ``{"keys": [{"alg": "HS256", "kty": "oct", "kid": ..., "k": <base64url
of the secret>, "use": "default"}, ...]}``. Every key verifies; the one
marked ``"use": "default"`` (else the only one) signs. Nothing here returns a
key's ``k``: the summaries carry kids, the default kid and a checksum.

A rotation is three steps, each written on every host and then applied by
one ``scontrol reconfigure``: add a new key that does not sign yet, make it
the one that signs, retire the old one. Keys are appended, so the newest key
is the last one; the state of a file says which step it reached.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import time
from collections.abc import Mapping
from typing import Any

# A new key's secret, in bytes (Slurm wants more than 16).
KEY_BYTES = 32
MIN_KEY_BYTES = 17
STEPS = ("add", "default", "retire")


class JwksError(ValueError):
    """A JWKS file or a request on it that Slurm (or this module) refuses, with the fix."""


def _b64decode(text: str) -> bytes:
    pad = "=" * (-len(text) % 4)
    return base64.urlsafe_b64decode(text.replace("+", "-").replace("/", "_") + pad)


def new_secret(random: bytes) -> str:
    """The ``k`` of a key made from ``random`` (base64url without padding, as RFC 7518)."""
    if len(random) < MIN_KEY_BYTES:
        raise JwksError(f"a key needs at least {MIN_KEY_BYTES} random bytes, got {len(random)}")
    return base64.urlsafe_b64encode(random).decode("ascii").rstrip("=")


def parse(text: str, where: str = "slurm.jwks") -> list[dict]:
    """The keys of a JWKS document, checked as auth/slurm reads them; raises JwksError."""
    try:
        doc = json.loads(text)
    except ValueError as exc:
        raise JwksError(
            f"{where} is not JSON ({exc}); fix: restore it from the controller"
        ) from exc
    keys = doc.get("keys") if isinstance(doc, dict) else None
    if not isinstance(keys, list) or not keys:
        raise JwksError(f'{where} has no "keys" list; fix: restore it from the controller')
    seen: set[str] = set()
    defaults = 0
    for index, key in enumerate(keys):
        if not isinstance(key, dict):
            raise JwksError(f"{where}: key {index} is not an object")
        kid = key.get("kid")
        if not isinstance(kid, str) or not kid:
            raise JwksError(f"{where}: key {index} has no kid")
        if kid in seen:
            raise JwksError(f"{where}: kid {kid} appears twice")
        seen.add(kid)
        if key.get("alg") != "HS256" or key.get("kty") != "oct":
            raise JwksError(f"{where}: key {kid} is not alg HS256 / kty oct")
        try:
            size = len(_b64decode(str(key.get("k", ""))))
        except (binascii.Error, ValueError) as exc:
            raise JwksError(f"{where}: key {kid} has a k that is not base64") from exc
        if size < MIN_KEY_BYTES:
            raise JwksError(f"{where}: key {kid} is {size} bytes; Slurm wants more than 16")
        if "use" in key and key["use"] != "default":
            raise JwksError(f'{where}: key {kid} has use {key["use"]!r}; only "default" is known')
        defaults += key.get("use") == "default"
        if "exp" in key and not isinstance(key["exp"], int):
            raise JwksError(f"{where}: key {kid} has an exp that is not a number")
    if defaults > 1:
        raise JwksError(f'{where}: more than one key has "use": "default"')
    return keys


def dump(keys: list[dict]) -> str:
    """The file's text: one stable form, so the same keys give the same checksum."""
    return json.dumps({"keys": keys}, indent=2, sort_keys=True) + "\n"


def default_kid(keys: list[dict]) -> str:
    """The kid that signs: the one marked default, else the only key, else ''."""
    marked = [k["kid"] for k in keys if k.get("use") == "default"]
    if marked:
        return marked[0]
    return keys[0]["kid"] if len(keys) == 1 else ""


def summary(keys: list[dict], text: str) -> dict:
    """What may be shown of a file: kids in order, the default kid, sha256 of the text."""
    return {
        "kids": [k["kid"] for k in keys],
        "default_kid": default_kid(keys),
        "sha256": hashlib.sha256(text.encode()).hexdigest(),
    }


def new_kid(keys: list[dict], now: float | None = None) -> str:
    """A kid from the UTC time (k20261203T195801Z), made unique among ``keys``."""
    stamp = time.strftime("k%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    taken = {k["kid"] for k in keys}
    kid, n = stamp, 1
    while kid in taken:
        n += 1
        kid = f"{stamp}-{n}"
    return kid


def make_key(kid: str, secret: str, default: bool) -> dict:
    key = {"alg": "HS256", "kty": "oct", "kid": kid, "k": secret}
    if default:
        key["use"] = "default"
    return key


def add(keys: list[dict], secret: str, kid: str) -> list[dict]:
    """The keys with a new one appended that verifies but does not sign yet."""
    if any(k["kid"] == kid for k in keys):
        raise JwksError(f"kid {kid} is already in the file; fix: choose another kid")
    return [*(dict(k) for k in keys), make_key(kid, secret, default=False)]


def make_default(keys: list[dict], kid: str) -> list[dict]:
    """The keys with ``kid`` the only one that signs."""
    if not any(k["kid"] == kid for k in keys):
        known = ", ".join(k["kid"] for k in keys)
        raise JwksError(f"kid {kid} is not in the file (it has {known}); fix: add it first")
    out = []
    for key in keys:
        key = {n: v for n, v in key.items() if n != "use"}
        if key["kid"] == kid:
            key["use"] = "default"
        out.append(key)
    return out


def retire(keys: list[dict], kid: str) -> list[dict]:
    """The keys without ``kid``; refuses the key that signs and the last key."""
    if not any(k["kid"] == kid for k in keys):
        return [dict(k) for k in keys]
    if len(keys) == 1:
        raise JwksError(
            f"kid {kid} is the only key; fix: add a new key and make it the default first"
        )
    if default_kid(keys) == kid:
        raise JwksError(
            f"kid {kid} is the default key (it signs); fix: make another key the default first"
        )
    return [dict(k) for k in keys if k["kid"] != kid]


def reached(kids: list[str], default: str) -> str:
    """Which step of a rotation a file's keys show: '' (one key, none under way), 'add'
    (the newest key does not sign yet) or 'default' (the newest signs, older ones remain)."""
    if len(kids) <= 1:
        return ""
    return "default" if kids[-1] == default else "add"


def rotation_plan(ctl: Mapping[str, Any], hosts: Mapping[str, Mapping[str, Any]]) -> dict:
    """What playbooks/rotate_key.yml does with auth/slurm, from every host's summary.

    ctl: the controller's summary; hosts: ``{host: summary}`` of every host
    (the controller too). Returns ``{problems: [text], reached, steps: [step],
    resume: bool}``: problems when two hosts cannot authenticate each other
    (then nothing is changed: site.yml puts the controller's file everywhere);
    reached: the step the controller's file shows; steps: those still to run
    ('add', 'default', 'retire', and 'sync' first where hosts lag behind the
    controller's file).
    """
    problems = []
    ctl_kids = list(ctl.get("kids") or [])
    ctl_default = str(ctl.get("default_kid") or "")
    if not ctl_kids or not ctl_default:
        problems.append(
            "the controller has no slurm.jwks with a default key; fix: run site.yml first"
        )
        return {"problems": problems, "reached": "", "steps": [], "resume": False}
    behind = []
    for host, seen in sorted(hosts.items()):
        kids = list(seen.get("kids") or [])
        default = str(seen.get("default_kid") or "")
        if not kids:
            problems.append(f"{host}: no slurm.jwks; fix: run site.yml first")
            continue
        # Two hosts authenticate each other when each knows the key the other signs with.
        if default not in ctl_kids or ctl_default not in kids:
            problems.append(
                f"{host}: its slurm.jwks (kids {', '.join(kids)}, default {default or 'none'}) "
                f"and the controller's (kids {', '.join(ctl_kids)}, default {ctl_default}) do not "
                "authenticate each other; fix: run site.yml first (it installs the controller's)"
            )
        elif seen.get("sha256") != ctl.get("sha256"):
            behind.append(host)
    step = reached(ctl_kids, ctl_default)
    todo = {"": ["add", "default", "retire"], "add": ["default", "retire"], "default": ["retire"]}[
        step
    ]
    if behind:
        todo = ["sync", *todo] if step else ["sync"]
    return {"problems": problems, "reached": step, "steps": todo, "resume": bool(step or behind)}
