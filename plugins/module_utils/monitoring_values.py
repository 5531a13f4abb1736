"""The monitoring role's values: their full-string rules for the one inventory check.

plugins/filter/inventory_check.py merges MONITORING_CHECKS into its CHECKS;
tests/test_inventory_values.py proves each refusal.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from ansible_collections.gpulab.slurm_cluster.plugins.module_utils.inventory_values import (
    _Check,
    _float,
    _int_range,
    _path,
    _pattern,
)

# The monitoring values' shapes (full-string rules).
PORT_RE = r"([1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
HOST_PORT = r"(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]*):" + PORT_RE
EMAIL = r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*"
DURATION = r"([0-9]+(ms|y|w|d|h|m|s))+"


def _alert_email_to(c: _Check, host: str, value: Any) -> None:
    var = "monitoring_alert_email_to"
    if not isinstance(value, list) or any(
        not isinstance(to, str) or not re.fullmatch(EMAIL, to) for to in value
    ):
        c.bad(
            host,
            var,
            value,
            "is not a list of e-mail addresses",
            f"e.g. {var}: [admin@lab.example]",
        )
        return
    if not value:
        return
    for other, example in (
        ("monitoring_alert_smarthost", "smtp.lab.example:587"),
        ("monitoring_alert_email_from", "slurm@lab.example"),
    ):
        if not c.hv[host].get(other, c.defaults.get(other)):
            c.bad(
                host,
                var,
                value,
                f"needs {other} (Alertmanager sends the mail through the lab's relay)",
                f"set {other}, e.g. {other}: {example}",
            )


def _alert_minutes(var: str, example: str) -> Callable[[_Check, str, Any], None]:
    """A rule's for: in minutes, > 0; a fraction must come to whole seconds (0.25 = 15 s)."""

    def check(c: _Check, host: str, value: Any) -> None:
        minutes = _float(value)
        seconds = minutes * 60 if minutes is not None and math.isfinite(minutes) else 0.0
        if seconds < 1 or abs(seconds - round(seconds)) > 1e-6:
            c.bad(
                host,
                var,
                value,
                "is not a number of minutes above 0 that comes to whole seconds",
                f"e.g. {var}: {example} (0.5 is 30 s)",
            )

    return check


MONITORING_CHECKS: dict[str, Callable[[_Check, str, Any], None]] = {
    "monitoring_prometheus_listen_address": _pattern(
        "monitoring_prometheus_listen_address",
        "|" + HOST_PORT,
        "empty (the cluster address, port 9090) or host:port (port 1-65535)",
        "0.0.0.0:9090",
    ),
    "monitoring_alertmanager_listen_address": _pattern(
        "monitoring_alertmanager_listen_address",
        "|" + HOST_PORT,
        "empty (the cluster address, port 9093) or host:port (port 1-65535)",
        "0.0.0.0:9093",
    ),
    "monitoring_alertmanager": _pattern(
        "monitoring_alertmanager",
        r"|(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):" + PORT_RE,
        "empty or host:port (port 1-65535)",
        "am.lab.example:9093",
    ),
    "monitoring_listen_host": _pattern(
        "monitoring_listen_host",
        r"|[A-Za-z0-9][A-Za-z0-9.-]*|[0-9A-Fa-f]*:[0-9A-Fa-f:.]+",
        "empty, a host name or an address (IPv6 without brackets)",
        "10.0.0.1",
    ),
    "monitoring_auth_user": _pattern(
        "monitoring_auth_user",
        r"[A-Za-z0-9_.-]{1,64}",
        "a user name (letters, digits, _ . -)",
        "metrics",
    ),
    "monitoring_auth_dir": _path("monitoring_auth_dir"),
    "monitoring_alert_webhook_url": _pattern(
        "monitoring_alert_webhook_url",
        r"|https?://[A-Za-z0-9.\[\]:-]+(:" + PORT_RE + r")?(/[!#-~]*)?",
        "empty or an http:// or https:// URL (no spaces or quotes)",
        "https://chat.example.org/hooks/TOKEN",
    ),
    "monitoring_alert_email_to": _alert_email_to,
    "monitoring_alert_email_from": _pattern(
        "monitoring_alert_email_from",
        "|" + EMAIL,
        "empty or an e-mail address",
        "slurm@lab.example",
    ),
    "monitoring_alert_smarthost": _pattern(
        "monitoring_alert_smarthost",
        r"|[A-Za-z0-9.-]+:" + PORT_RE,
        "empty or the SMTP relay's host:port",
        "smtp.lab.example:587",
    ),
    "monitoring_alert_group_wait": _pattern(
        "monitoring_alert_group_wait", DURATION, "a Prometheus duration", "30s"
    ),
    "monitoring_alert_group_interval": _pattern(
        "monitoring_alert_group_interval", DURATION, "a Prometheus duration", "1m"
    ),
    "monitoring_alert_repeat_interval": _pattern(
        "monitoring_alert_repeat_interval", DURATION, "a Prometheus duration", "4h"
    ),
    "monitoring_node_exporter_port": _int_range("monitoring_node_exporter_port", 1, 65535, 9100),
    "monitoring_collector_interval_s": _int_range("monitoring_collector_interval_s", 1, None, 15),
    "monitoring_alert_node_minutes": _alert_minutes("monitoring_alert_node_minutes", "10"),
    "monitoring_alert_daemon_minutes": _alert_minutes("monitoring_alert_daemon_minutes", "2"),
    "monitoring_textfile_dir": _path("monitoring_textfile_dir"),
    "monitoring_prometheus_retention": _pattern(
        "monitoring_prometheus_retention",
        DURATION,
        "a Prometheus duration",
        "15d",
    ),
    "monitoring_scrape_interval": _pattern(
        "monitoring_scrape_interval", DURATION, "a Prometheus duration", "15s"
    ),
}
