"""HTTP serving that the exporter and alnair-injector share, on aiohttp's low-level server: a listening socket,
bounded connections that never starve priority peers, TLS set up per connection, replies written within a
deadline, and a shutdown that ends within a bound under load (docs/architecture.md says why aiohttp)."""
