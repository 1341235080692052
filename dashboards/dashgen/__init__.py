"""Alnair's Grafana dashboards, alert rules and recording rules as code: `python -m dashgen` (with
dashboards/ on the path; `make dashboards`) writes dashboards/json, dashboards/rules and docs/dashboards.md."""
