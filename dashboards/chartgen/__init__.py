"""The Helm chart's generated part: templates/_rules.tpl, the rules of dashboards/rules written as Helm templates
from dashboards/dashgen, so the chart's PrometheusRule and the committed rules files come from one source."""
