"""The doctor's exchange of munge credentials and token files between nodes.

Standard library only. The module cluster_probe runs it: on the controller
(phase cross), and on every other node within its own probe (phase local).
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.node_base import as_user, run

# Run as the job user: one line per token file, "ok NAME VALUE" or "err NAME WHY".
READ_TOKENS = (
    'while [ $# -gt 0 ]; do if v=$(head -c 4096 -- "$2" 2>&1); '
    'then printf "ok %s %s\\n" "$1" "$v"; else printf "err %s %s\\n" "$1" "${v##*: }"; fi; '
    "shift 2; done"
)


def parse_unmunge(text: str) -> dict:
    """unmunge's metadata: STATUS text and code, ENCODE/DECODE_TIME as epoch seconds."""
    fields = dict(
        (k.strip(), v.strip())
        for k, v in (ln.split(":", 1) for ln in text.splitlines() if ":" in ln)
    )
    out: dict = {}
    m = re.match(r"(.*?)\s*\((\d+)\)$", fields.get("STATUS", ""))
    if m:
        out["status"], out["code"] = m.group(1), int(m.group(2))
    for key in ("ENCODE_TIME", "DECODE_TIME"):
        t = re.search(r"\((\d+)\)$", fields.get(key, ""))
        if t:
            out[key.lower()] = int(t.group(1))
    if "ENCODE_HOST" in fields:
        out["encode_host"] = fields["ENCODE_HOST"]
    return out


def decode(cred: str) -> dict:
    if not cred:
        return {"status": "no credential", "code": -1}
    res = run(["unmunge"], stdin=cred)
    out = parse_unmunge(res["out"])
    if "status" not in out:
        out.update(status=(res["err"] or res["out"]).strip() or f"exit {res['rc']}", code=-1)
    if res["rc"] != 0 and res["err"].strip():
        out["error"] = res["err"].strip()
    return out


def cross(p: dict) -> dict:
    """Credentials decoded here, and the other nodes' token files read as the job user."""
    tokens: dict = {}
    if p["read_tokens"]:
        pairs = [str(x) for item in p["read_tokens"].items() for x in item]
        res = as_user(p["job_user"], ["sh", "-c", READ_TOKENS, "sh", *pairs])
        for line in res["out"].splitlines():
            status, _sep, rest = line.partition(" ")
            name, _sep, value = rest.partition(" ")
            tokens[name] = (
                {"ok": True, "value": value.strip()}
                if status == "ok"
                else {"ok": False, "error": value.strip()}
            )
        error = (res["err"].strip().splitlines() or ["no answer"])[-1]
        for name in p["read_tokens"]:
            tokens.setdefault(name, {"ok": False, "error": error})
    with ThreadPoolExecutor(max_workers=8) as pool:
        decoded = dict(zip(p["decode"], pool.map(decode, p["decode"].values()), strict=True))
    return {"decoded": decoded, "tokens": tokens}
