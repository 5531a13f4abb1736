"""Alertmanager's configuration from the monitoring role's values.

Pure function (tests/test_monitoring.py renders it and checks it with amtool):
one receiver, "lab", with a webhook and e-mail to each address given, both
sending "resolved"; alerts grouped per alert, node and check.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

GROUP_BY = ["alertname", "instance", "node", "check"]


def alertmanager_config(values: Mapping[str, Any]) -> dict:
    """The document of /etc/prometheus/alertmanager.yml.

    ``values``: the role's monitoring_alert_* values without the prefix
    (webhook_url, email_to, email_from, smarthost, smtp_username,
    smtp_password, smtp_require_tls, group_wait, group_interval,
    repeat_interval).
    """
    receiver: dict[str, Any] = {"name": "lab"}
    if values.get("webhook_url"):
        receiver["webhook_configs"] = [{"url": str(values["webhook_url"]), "send_resolved": True}]
    emails = [str(to) for to in values.get("email_to") or []]
    if emails:
        receiver["email_configs"] = [{"to": to, "send_resolved": True} for to in emails]
    glob: dict[str, Any] = {"resolve_timeout": "5m"}
    if values.get("smarthost"):
        glob.update(
            smtp_smarthost=str(values["smarthost"]),
            smtp_from=str(values.get("email_from") or ""),
            smtp_require_tls=bool(values.get("smtp_require_tls", True)),
        )
        if values.get("smtp_username"):
            glob.update(
                smtp_auth_username=str(values["smtp_username"]),
                smtp_auth_password=str(values.get("smtp_password") or ""),
            )
    return {
        "global": glob,
        "route": {
            "receiver": "lab",
            "group_by": list(GROUP_BY),
            "group_wait": str(values.get("group_wait") or "30s"),
            "group_interval": str(values.get("group_interval") or "1m"),
            "repeat_interval": str(values.get("repeat_interval") or "4h"),
        },
        "receivers": [receiver],
    }


class FilterModule:
    def filters(self) -> dict:
        return {"alertmanager_config": alertmanager_config}
