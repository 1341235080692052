"""`helm test`: one scrape of the exporter's /metrics through its Service, as Prometheus makes it (TLS verified
against the CA given, basic auth from the Secret given); exits 1 with one line unless the answer is 200 and
holds alnair_exporter_build_info and alnair_node_info."""

import base64
import os
import socket
import ssl
import sys

host, port, path = os.environ["ALNAIR_HOST"], int(os.environ["ALNAIR_PORT"]), os.environ["ALNAIR_PATH"]
scheme = os.environ.get("ALNAIR_SCHEME", "http")
try:
    connection = socket.create_connection((host, port), timeout=10)
    if scheme == "https":
        context = ssl.create_default_context(cafile=os.environ.get("ALNAIR_CA_FILE") or None)
        if os.environ.get("ALNAIR_INSECURE_SKIP_VERIFY") == "true":
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        connection = context.wrap_socket(connection, server_hostname=os.environ.get("ALNAIR_SERVER_NAME") or host)
    head = [f"GET {path} HTTP/1.1", f"Host: {host}:{port}", "Connection: close", "Accept: text/plain"]
    if os.environ.get("ALNAIR_USERNAME"):
        credentials = f"{os.environ['ALNAIR_USERNAME']}:{os.environ.get('ALNAIR_PASSWORD', '')}"
        head.append("Authorization: Basic " + base64.b64encode(credentials.encode()).decode())
    connection.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
    reply = b""
    while chunk := connection.recv(65536):
        reply += chunk
except (OSError, ssl.SSLError) as e:
    sys.exit(f"FAIL {scheme}://{host}:{port}{path}: {e}")
status_line, _, rest = reply.partition(b"\r\n")
body = rest.partition(b"\r\n\r\n")[2]
if status_line.split(b" ")[1:2] != [b"200"]:
    sys.exit(f"FAIL {scheme}://{host}:{port}{path}: {status_line.decode(errors='replace')}")
missing = [
    name for name in ("alnair_exporter_build_info", "alnair_node_info") if f"\n{name}{{".encode() not in b"\n" + body
]
if missing:
    sys.exit(f"FAIL {scheme}://{host}:{port}{path}: no {', '.join(missing)} in {len(body)} bytes")
lines = body.count(b"\n")
print(f"ok {scheme}://{host}:{port}{path}: {lines} lines")
