"""The Alnair exporter: collector registry, background sampling and the HTTP endpoint."""
